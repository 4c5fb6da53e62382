"""Characters outside a checkpoint's vocabulary: one message (tinylm.tokenizer.unknown_characters) that names the
checkpoint and its run's data and shows characters it knows, advice that fits each command, and what
unknown=skip leaves out, said on stderr."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT, TINY_TEXT, compose_config, entry_point
from test_checkpoint import one_line_error

from tinylm.analysis.translation import pairs_of
from tinylm.checkpoint import load_model, vocabulary_origin
from tinylm.explorer import views
from tinylm.generation.prompting import encode_prompt
from tinylm.models.seq2seq import Seq2Seq, Seq2SeqConfig
from tinylm.run_folder import run_checkpoints, shown_path
from tinylm.tasks.translation.decoding import translate_lines
from tinylm.tokenizer import CharTokenizer

KNOWN = "".join(c for c in sorted(set(TINY_TEXT)) if c.isalnum())[:10]  # what the message shows of the vocabulary


def whose(run: Path) -> str:
    """How every message names the shared GPT run's checkpoint: the file, the run's data, its vocabulary."""
    checkpoint = run_checkpoints(run)[0]
    data = run.parent.parent.parent / "tiny.txt"  # shared_run's text, deleted after training
    return (f"checkpoint {shown_path(checkpoint)} (trained on data.path={data}) has a vocabulary of "
            f"{len(set(TINY_TEXT))} symbols, e.g. \"{KNOWN}\"")


def test_generate_names_the_checkpoint_its_data_and_characters_it_knows(gpt_run):
    cfg = compose_config("generate", f"run_dir={gpt_run.path}", "prompt='Hello☃'")
    message = one_line_error(entry_point("generate.py").run, cfg)
    assert message == (f"the prompt has 2 character(s) outside the checkpoint's vocabulary: 'H' '☃'; "
                       f"{whose(gpt_run.path)}: remove them or pass unknown=skip")


def test_analyze_and_visualize_name_the_checkpoint_too(gpt_run, tmp_path):
    for script in ("analyze.py", "visualize.py"):
        cfg = compose_config(script.removesuffix(".py"), f"run_dir={gpt_run.path}", "text='自注意☃'",
                             f"out_dir={tmp_path / script}")
        assert one_line_error(entry_point(script).run, cfg) == (
            f"text has 1 character(s) outside the checkpoint's vocabulary: '☃'; {whose(gpt_run.path)}: "
            "use characters of the training text")


def test_evaluate_names_the_checkpoint_too(gpt_run, tmp_path):
    foreign = tmp_path / "foreign.txt"
    foreign.write_text("xqz" * 40, encoding="utf-8")
    cfg = compose_config("evaluate", f"run_dir={gpt_run.path}", f"data.path={foreign}", "split=all")
    message = one_line_error(entry_point("evaluate.py").run, cfg)
    assert message.endswith(f"has 3 character(s) outside the checkpoint's vocabulary: 'x' 'q' 'z'; "
                            f"{whose(gpt_run.path)}: score a text in the language it was trained on, or remove them")


def test_the_tab_names_the_checkpoint_too(gpt_run):
    loaded = load_model(run_checkpoints(gpt_run.path)[0])
    message = one_line_error(views.predict, loaded, "Fzz", [], 3)
    assert message == (f"text has 2 character(s) outside the checkpoint's vocabulary: 'F' 'z'; {whose(gpt_run.path)}: "
                       "type characters of the run's training text")


def test_one_function_words_every_vocabulary_error():
    """The words of the message are in tinylm/tokenizer.py alone: every caller asks unknown_characters."""
    wording = re.compile(r"outside the (checkpoint's|run's) vocabulary|characters not in the vocabulary")
    found = [path.relative_to(ROOT).as_posix() for path in sorted((ROOT / "tinylm").rglob("*.py"))
             if wording.search(path.read_text(encoding="utf-8"))]
    assert found == ["tinylm/tokenizer.py"]


def test_a_long_list_of_unknown_characters_is_cut():
    tokenizer = CharTokenizer(list("\nab"))
    message = one_line_error(encode_prompt, tokenizer, "cdefghijklmnop")
    assert "'c' 'd' 'e' 'f' 'g' 'h' 'i' 'j' 'k' 'l' ...; the checkpoint has a vocabulary of 3 symbols, " \
           "e.g. \"ab\": remove them or pass unknown=skip" in message


# --------------------------------------------------------------------------------------------
# unknown=skip says what it left out


def test_skipping_says_how_many_and_which_on_stderr(capsys):
    tokenizer = CharTokenizer(list("\nabc"))
    tokenizer.origin = "checkpoint x.ckpt"
    assert encode_prompt(tokenizer, "a仔bz", unknown="skip") == [1, 2]
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("unknown=skip: left out 2 character(s) of the prompt outside the vocabulary of "
                            "checkpoint x.ckpt: '仔' 'z'\n")
    assert encode_prompt(tokenizer, "abc", unknown="skip") == [1, 2, 3]
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------------------------------
# An encoder-decoder: advice that fits the command, and the line that has the character


@pytest.fixture
def translator():
    tokenizer = CharTokenizer(["\x00", "\x02", "\x03", *" acdgot猫狗"])
    tokenizer.origin = "checkpoint pairs.ckpt"
    model = Seq2Seq(Seq2SeqConfig(vocab_size=tokenizer.vocab_size, block_size=8, n_embd=8, num_heads=2,
                                  encoder_layers=1, decoder_layers=1)).eval()
    return SimpleNamespace(model=model, tokenizer=tokenizer, task="translation")


def test_analyze_on_an_encoder_decoder_names_the_target_line_and_advises_what_it_takes(translator):
    message = one_line_error(pairs_of, translator, "cat dog", "猫狗x")
    assert message.startswith("target line 1 has 1 character(s) outside the checkpoint's vocabulary: 'x'; "
                              "checkpoint pairs.ckpt has a vocabulary of 12 symbols")
    assert message.endswith(": remove them: analyze.py reads every character of text= and target=")
    message = one_line_error(pairs_of, translator, "cat\\nbird", None)
    assert message.startswith("source line 2 has 3 character(s) outside the checkpoint's vocabulary: 'b' 'i' 'r'")
    assert "unknown=skip" not in message


def test_the_tabs_translate_route_advises_what_it_takes(translator):
    message = one_line_error(views.translation, translator, "bat")
    assert message.startswith("source line 1 has 1 character(s) outside the checkpoint's vocabulary: 'b'")
    assert message.endswith(": type characters of the run's training text") and "unknown=skip" not in message


def test_generate_on_an_encoder_decoder_advises_skipping_and_says_what_it_skipped(translator, capsys):
    message = one_line_error(lambda: list(translate_lines(translator.model, translator.tokenizer, ["cab"])))
    assert message.endswith("'b'; checkpoint pairs.ckpt has a vocabulary of 12 symbols, e.g. \"acdgot猫狗\": "
                            "remove them or pass unknown=skip")
    assert len(list(translate_lines(translator.model, translator.tokenizer, ["cab", "dog"], unknown="skip"))) == 2
    assert capsys.readouterr().err == ("unknown=skip: left out 1 character(s) of source line 1 outside the "
                                       "vocabulary of checkpoint pairs.ckpt: 'b'\n")


@pytest.mark.parametrize("record", ["fifo", "huge"])
def test_a_run_whose_config_cannot_be_read_is_said_to_have_trained_on_unknown_data(tmp_path, record):
    """Not the data group of hydra.yaml, a guess: the run's data is unknown when its config.yaml is a FIFO or
    larger than a record is read."""
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "hydra.yaml").write_text("hydra:\n  runtime:\n    choices:\n      data: corpus\n")
    config = run / ".hydra" / "config.yaml"
    if record == "fifo":
        os.mkfifo(config)
    else:
        with open(config, "wb") as f:
            f.truncate(64 << 30)  # sparse: 64 GiB that take no disk
    assert vocabulary_origin(run / "checkpoints" / "last.ckpt") == (
        f"checkpoint {shown_path(run / 'checkpoints' / 'last.ckpt')} (trained on unknown data: its run's "
        ".hydra/config.yaml cannot be read)")
    config.unlink()
    config.write_text("data:\n  path: mine.txt\n")
    assert vocabulary_origin(run / "checkpoints" / "last.ckpt").endswith("(trained on data.path=mine.txt)")
