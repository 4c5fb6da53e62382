"""Translation pairs as a user meets them (issue 23): bad bytes, extra columns, CRLF files, blank source
lines, symbols a translation must never print, and a decoder-only GPT that generate.py translates with."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from test_generation import compose_generate, generate_cli
from test_onnx import compose_quoted, export_cli

from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.models import build_model
from tinylm.models.seq2seq import BEGIN_ID, END_ID, PAD_ID
from tinylm.plots import figures as plotting
from tinylm.tasks import get_task, is_encoder_decoder
from tinylm.tasks.translation.batches import collate_decoder_only
from tinylm.tasks.translation.data import PairDataModule
from tinylm.tasks.translation.decoding import beam_search, continue_sources, translate, translate_lines
from tinylm.tasks.translation.figures import translation_figures
from tinylm.tokenizer import CharTokenizer
from tinylm.training.module import LitLanguageModel

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

PAIRS = [("三千零五", "3005"), ("十二", "12"), ("一百一十", "110"), ("九万", "90000"), ("二十", "20")]


def pairs_file(tmp_path, pairs=PAIRS, newline="\n"):
    path = tmp_path / "pairs.tsv"
    path.write_bytes("".join(f"{s}\t{t}{newline}" for s, t in pairs).encode("utf-8"))
    return path


# --------------------------------------------------------------------------------------------
# Reading the pairs file


def test_undecodable_bytes_name_the_line_and_fixes_that_pairs_have(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_bytes("一\t1\n二\t2\n三\t3\n".encode("gbk"))  # GBK bytes read as UTF-8: 一 (d2 bb) happens to decode
    with pytest.raises(TinyLMError, match=r"^[^\n]+$") as info:
        PairDataModule(str(path)).prepare()
    message = str(info.value)
    assert message.startswith(f"{path} is not valid utf-8: byte 5 (b'\\xb6', line 2) cannot be decoded")
    assert "data.encoding=" in message and "convert the file to UTF-8" in message
    assert "data.errors" not in message  # pairs have no such option
    path.write_bytes("一\t1\n二\t2\n三\t3\n".encode() + "四\t4\n".encode("gbk"))
    with pytest.raises(TinyLMError, match=r"byte 18 \(b'\\xcb', line 4\)"):
        PairDataModule(str(path)).prepare()
    path.write_bytes("一\t1\n二\t2\n三\t3\n".encode("gbk"))
    data = PairDataModule(str(path), encoding="gbk")  # the fix the message names works
    data.prepare()
    assert {"一", "二", "三"} <= set(data.tokenizer.itos)


def test_a_third_column_is_one_warning_naming_the_first_line(tmp_path, caplog):
    path = tmp_path / "pairs.tsv"
    path.write_text("一\t1\n二\t2\ttwo\n三\t3\n四\t4\tfour\tIV\n五\t5\n", encoding="utf-8")
    data = PairDataModule(str(path), block_size=16)
    with caplog.at_level(logging.WARNING):
        data.prepare()
    warnings_ = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings_) == 1
    assert "2 line(s) have more than one tab (the first: line 2)" in warnings_[0]
    assert "source<TAB>target" in warnings_[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        PairDataModule(str(pairs_file(tmp_path)), block_size=16).prepare()
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_crlf_pairs_keep_no_carriage_return(tmp_path):
    data = PairDataModule(str(pairs_file(tmp_path, newline="\r\n")), block_size=16, val_fraction=0.2)
    data.prepare()
    assert "\r" not in data.tokenizer.itos
    targets = {data.tokenizer.decode(t) for _, t in data.train_examples + data.val_examples}
    assert targets == {t for _, t in PAIRS}


def test_control_character_labels_draw_without_missing_glyphs():
    assert [plotting.visible(c) for c in "\r\x1b"] == ["\\r", "U+001B"]
    assert plotting.visible("a\r\n") == "a\\r↵"  # a BPE piece: each control character shown
    torch.manual_seed(0)
    model = build_model({"arch": "seq2seq", "vocab_size": 6, "block_size": 6, "n_embd": 16, "num_heads": 2,
                         "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.0})

    chars = CharTokenizer(["\x00", "\x02", "\x03", "\r", "a", "b"])  # pairs with a lone CR in a source
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _, figure in translation_figures(model, chars, [4, 3, 5]):
            plotting.render_rgb(figure)
            texts = [t.get_text() for t in figure.findobj(lambda a: hasattr(a, "get_text"))]
            assert any("\\r" in text for text in texts) and not any("\r" in text for text in texts)
    assert [str(w.message) for w in caught if "missing from font" in str(w.message)] == []


# --------------------------------------------------------------------------------------------
# What a translation prints


def tiny(arch: str, **sizes):
    torch.manual_seed(0)
    return build_model({"arch": arch, "vocab_size": 9, "block_size": 8, "n_embd": 16, "num_heads": 2,
                        "dropout": 0.0, **sizes}).eval()


def written(seq2seq, gpt) -> list[list[int]]:
    """What each decoding loop writes for a few sources: sampled, greedy and beam, with either kind of model."""
    src, prompts = torch.tensor([[3, 4, 5], [6, 7, 8]]), [[3, 4, BEGIN_ID], [5, BEGIN_ID]]
    return [*translate(seq2seq, src, temperature=1.0, generator=torch.Generator().manual_seed(0)),
            *translate(seq2seq, src), beam_search(seq2seq, src[:1], 3),
            *continue_sources(gpt, prompts, temperature=1.0, generator=torch.Generator().manual_seed(0)),
            *continue_sources(gpt, prompts), beam_search(gpt, torch.tensor([[3, 4]]), 3)]


def test_no_translation_contains_begin_or_pad():
    """Heads that all but always pick BEGIN (then PAD) write exactly what the same models write without
    that bias: neither symbol is ever written, sampled, greedy or in a beam."""
    seq2seq, gpt = tiny("seq2seq", encoder_layers=1, decoder_layers=1), tiny("gpt", num_layers=1)
    plain = written(seq2seq, gpt)
    with torch.no_grad():
        for model in (seq2seq, gpt):
            model.lm_head.bias[BEGIN_ID] += 30.0
            model.lm_head.bias[PAD_ID] += 20.0
    assert written(seq2seq, gpt) == plain
    assert all(not {PAD_ID, BEGIN_ID, END_ID} & set(row) and len(row) <= 8 for row in plain)


# --------------------------------------------------------------------------------------------
# generate.py: one line out per line in, for an encoder-decoder and a decoder-only model


def save(path, module: LitLanguageModel, steps: int, hparams: bool = True):
    """A checkpoint with the keys Lightning and LitLanguageModel write (``hyper_parameters``: optional,
    as in checkpoints from before decoder-only translation)."""
    checkpoint = {"state_dict": module.state_dict(), "global_step": steps}
    if hparams:
        checkpoint["hyper_parameters"] = dict(module.hparams)
    module.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, path)
    return path


def translated(capsys, *overrides: str) -> list[str]:
    generate_cli.run(compose_generate(*overrides))
    out = capsys.readouterr().out
    assert out.endswith("\n") and not set(out) & {"\x00", "\x02", "\x03"} and "\\x0" not in out
    return out[:-1].split("\n")


def test_a_blank_source_line_gives_a_blank_translation(tmp_path, capsys):
    data = PairDataModule(str(pairs_file(tmp_path)), block_size=8)
    data.prepare()
    net = build_model({"arch": "seq2seq", "vocab_size": data.tokenizer.vocab_size, "block_size": 8,
                       "n_embd": 16, "num_heads": 2, "encoder_layers": 1, "decoder_layers": 1})
    module = LitLanguageModel(net=net, tokenizer=data.tokenizer.state(), task=get_task("translation"))
    ckpt = save(tmp_path / "seq2seq.ckpt", module, 0)
    sources = tmp_path / "sources.txt"
    sources.write_text("十二\n\n二十\n", encoding="utf-8")
    lines = translated(capsys, f"ckpt_path={ckpt}", f"prompt_file={sources}", "temperature=0")
    loaded = load_model(ckpt)
    expected = list(translate_lines(loaded.model, loaded.tokenizer, ["十二", "二十"], temperature=0))
    assert lines == [expected[0], "", expected[1]]
    assert list(translate_lines(loaded.model, loaded.tokenizer, ["", "十X"], unknown="skip", temperature=0)) == [
        "", *translate_lines(loaded.model, loaded.tokenizer, ["十"], temperature=0)]
    with pytest.raises(TinyLMError, match="^nothing to translate: pass prompt=SOURCE, or prompt_file=FILE"):
        generate_cli.run(compose_generate(f"ckpt_path={ckpt}"))


def overfitted_decoder_only_gpt(tmp_path) -> tuple[LitLanguageModel, int]:
    """A tiny GPT trained on every pair of PAIRS (source + BEGIN + target) until its loss is near 0."""
    data = PairDataModule(str(pairs_file(tmp_path)), block_size=10, decoder_only=True)
    data.prepare()
    torch.manual_seed(0)
    net = build_model({"arch": "gpt", "vocab_size": data.tokenizer.vocab_size, "block_size": 10,
                       "n_embd": 32, "num_heads": 2, "num_layers": 2, "dropout": 0.0})
    module = LitLanguageModel(net=net, tokenizer=data.tokenizer.state(), task=get_task("translation"))
    batch = collate_decoder_only(data.train_examples + data.val_examples)
    optimizer = torch.optim.AdamW(module.model.parameters(), lr=3e-3)
    for step in range(1, 801):  # noqa: B007 (the steps taken are returned)
        loss = module.model.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.005:
            break
    assert loss.item() < 0.005
    return module, step


def test_generate_translates_with_a_decoder_only_gpt_trained_on_pairs(tmp_path, capsys):
    module, steps = overfitted_decoder_only_gpt(tmp_path)
    ckpt = save(tmp_path / "gpt-pairs.ckpt", module, steps)
    assert load_model(ckpt).task == "translation" and not is_encoder_decoder(module.model)
    sources = tmp_path / "sources.txt"
    sources.write_text("".join(f"{s}\n" for s, _ in PAIRS) + "\n十二\n", encoding="utf-8")
    targets = [t for _, t in PAIRS] + ["", "12"]
    for options in (["temperature=0"], ["temperature=0", "use_cache=false"], ["beam_size=3"]):
        assert translated(capsys, f"ckpt_path={ckpt}", f"prompt_file={sources}", *options) == targets
    assert translated(capsys, f"ckpt_path={ckpt}", "prompt='九万'", "temperature=0") == ["90000"]
    sampled = translated(capsys, f"ckpt_path={ckpt}", f"prompt_file={sources}", "temperature=1", "seed=3")
    assert len(sampled) == len(targets) and sampled[len(PAIRS)] == ""
    with pytest.raises(TinyLMError, match="source line 1 is 9 characters long but the model translates sources "
                                          "of at most 8 characters"):
        generate_cli.run(compose_generate(f"ckpt_path={ckpt}", "prompt='九万九万九万九万九'"))

    # its ONNX export would continue text: refused in one line, before anything is traced or written
    with pytest.raises(TinyLMError, match=r"^[^\n]*trained on translation pairs \(data=pairs\), and an ONNX export "
                                          r"only continues text: translate with `python generate.py"):
        export_cli.run(compose_quoted("export", f"ckpt_path={ckpt}"))
    assert not list(tmp_path.glob("*.onnx*"))
    older = save(tmp_path / "older.ckpt", module, steps, hparams=False)  # no record of pairs: plain text
    assert load_model(older).task == "text"
    generate_cli.run(compose_generate(f"ckpt_path={older}", "prompt='九万'", "temperature=0", "max_new_tokens=3"))
    assert capsys.readouterr().out.startswith("九万")
