"""Issue 23: a key that nothing takes is one line naming the keys that are taken, before anything is
built or read; too few training windows; a resume on an edited text says so."""

import inspect
import logging
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, TINY_MODEL, TINY_TEXT, compose

from tinylm.errors import TinyLMError
from tinylm.runs.job import main as train_main
from tinylm.runs.resume import check_resume
from tinylm.tasks.text.data import TextDataModule
from tinylm.tasks.translation.data import PairDataModule
from tinylm.training.config_checks import RULES, config_problems, validate
from tinylm.training.config_keys import SET_BY_TRAIN

GPT_KEYS = ("arch, block_size, n_embd, num_heads, num_layers, dropout, pos_encoding, attn_impl, norm, activation, "
            "qk_norm, logit_softcap, tied_head")
PAIRS = ("tinylm.tasks.translation.data.PairDataModule takes path, demo, demo_pairs, demo_max, batch_size, "
         "val_fraction, val_batches, encoding, max_mib")

# overrides -> the one line for the key nothing takes (each was a TypeError traceback from a constructor)
UNKNOWN = {
    "+model.n_emb=32": f"model.n_emb is unknown: did you mean model.n_embd? (model.arch=gpt takes {GPT_KEYS})",
    "model=lstm +model.num_heads=2": "model.num_heads is unknown: remove it (model.arch=lstm takes arch, block_size, "
                                     "n_embd, hidden_size, num_layers, dropout)",
    "+model.vocab_size=5": "model.vocab_size is not a setting: train.py sets it from the data's vocabulary; remove it",
    "+callbacks.sample_text.foo=1": "callbacks.sample_text.foo is unknown: remove it ("
                                    "tinylm.tasks.text.samples.SampleText "
                                    "takes every_n_steps, prompts, prompt_chars, max_new_tokens, temperature, top_k, "
                                    "top_p, seed)",
    "+callbacks.sampel_text.every_n_steps=5": "callbacks.sampel_text is unknown: did you mean callbacks.sample_text? "
                                              "(callbacks (conf/callbacks/) has model_checkpoint, last_checkpoint, "
                                              "early_stopping, learning_rate_monitor, progress_bar, sample_text, "
                                              "attention_maps, next_token_probes, head_scores, translation_samples, "
                                              "translation_maps, embedding_projector)",
    "callbacks.progress_bar._target_=tinylm.nothing.Bar": "callbacks.progress_bar._target_='tinylm.nothing.Bar' is "
                                                          "not a class or function Python can import: check its "
                                                          "spelling",
    "debug=profile +trainer.profiler.foo=1": "trainer.profiler.foo is unknown: remove it (lightning.pytorch.profilers."
                                             "SimpleProfiler takes dirpath, filename, extended)",
    "+data.errros=replace": "data.errros is unknown: did you mean data.errors? ("
                            "tinylm.tasks.text.data.TextDataModule takes path, tokenizer, batch_size, val_fraction, "
                            "val_batches, repeat, encoding, errors, url, sha256, "
                            "bpe_vocab_size, max_mib, cache_dir)",
    # item 10: what only text data takes, with data=pairs (checked against the data module chosen)
    "model=seq2seq data=pairs +data.errors=replace": f"data.errors is unknown: remove it ({PAIRS})",
    "model=seq2seq data=pairs +data.repeat=2": f"data.repeat is unknown: remove it ({PAIRS})",
    "model=seq2seq data=pairs +data.tokenizer=byte": f"data.tokenizer is unknown: remove it ({PAIRS})",
    "model=seq2seq data=pairs +data.repeat=0": f"data.repeat is unknown: remove it ({PAIRS})",  # not also its value
    "model=gpt data=pairs +data.errors=replace": f"data.errors is unknown: remove it ({PAIRS})",
    "+data.seed=3": "data.seed is not a setting: train.py sets it from seed; remove it",
    # the top level: what conf/train.yaml has (a key there is read by nothing: a typo, or a group's key)
    "+sed=3": "sed is unknown: did you mean seed? (the training config (conf/train.yaml) has seed, ckpt_path, "
              "threads, compile, data, model, optim, trainer, callbacks, logger, paths)",
    "+max_steps=3": "max_steps is unknown: remove it (the training config (conf/train.yaml) has seed, ckpt_path, "
                    "threads, compile, data, model, optim, trainer, callbacks, logger, paths)",
}


@pytest.mark.parametrize("overrides", list(UNKNOWN))
def test_a_key_nothing_takes_is_one_line_naming_the_keys_taken(tmp_path, overrides):
    assert config_problems(compose(*overrides.split(), output_dir=tmp_path)) == [UNKNOWN[overrides]]


def test_the_loggers_keys_include_those_it_passes_on_to_tensorboard(tmp_path):
    """RunTensorBoardLogger's **kwargs go through Lightning's loggers to SummaryWriter (less log_dir, set by them)."""
    (line,) = config_problems(compose("+logger.tensorboard.x=1", output_dir=tmp_path))
    assert line.startswith("logger.tensorboard.x is unknown: remove it ("
                           "tinylm.training.tensorboard_logger.RunTensorBoardLogger takes save_dir, name, version, ")
    taken = line.split(" takes ")[1].rstrip(")").split(", ")
    assert {"default_hp_metric", "flush_secs", "max_queue"} <= set(taken) and "log_dir" not in taken


@pytest.mark.parametrize("overrides", [
    "+logger.tensorboard.flush_secs=5", "+callbacks.model_checkpoint.every_n_train_steps=5",
    "+callbacks.sample_text._partial_=false",  # Hydra's own keys
    "trainer=ddp_sim +trainer.strategy.find_unused_parameters=true",  # DDPStrategy passes **kwargs on: unchecked
    "debug=shapes", "debug=profile", "model=seq2seq data=pairs data.val_fraction=0.2", "callbacks=translation",
    "callbacks=none", "logger=none", "callbacks.early_stopping=null",
])
def test_keys_that_are_taken_pass(tmp_path, overrides):
    assert config_problems(compose(*overrides.split(), output_dir=tmp_path)) == []


@pytest.mark.parametrize("module", [TextDataModule, PairDataModule])
def test_every_argument_of_a_data_module_has_a_rule(module):
    """Keys come from the data module's signature, values are checked by RULES: neither may miss one."""
    taken = set(inspect.signature(module).parameters) - set(SET_BY_TRAIN["data"])
    assert {f"data.{key}" for key in taken} <= set(RULES)


def test_validate_refuses_before_reading_anything(tmp_path):
    cfg = compose("+model.n_emb=32", f"data.path={tmp_path / 'missing.txt'}", output_dir=tmp_path / "run")
    with pytest.raises(TinyLMError, match="^invalid config: data file not found: .*missing.txt .*; "
                                          "model.n_emb is unknown: did you mean model.n_embd"):
        validate(cfg)


@pytest.mark.slow  # a whole process (or several) from start to end
def test_train_py_says_it_in_one_error_line(tmp_path):
    """CLI wiring: the line reaches the user from train.py, and no traceback."""
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "+model.n_emb=32", f"hydra.run.dir={tmp_path}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"error: invalid config: {UNKNOWN['+model.n_emb=32']}"]


# --------------------------------------------------------------------------------------------
# Low items: data.val_fraction, a resume on an edited text


@pytest.mark.parametrize(("text", "val_fraction", "block_size", "left"), [
    (None, 0.999, 32, " for training"),  # the embedded corpus: was "-27 training windows"
    ("abcdefghij" * 10, 0.92, 8, "leaving 8 for training"),  # no window at all: was "0 training windows"
])
def test_too_few_training_windows_says_lower_val_fraction(tmp_path, text, val_fraction, block_size, left):
    path = None
    if text:
        path = tmp_path / "t.txt"
        path.write_text(text, encoding="utf-8")
    data = TextDataModule(path=path, val_fraction=val_fraction, block_size=block_size)
    with pytest.raises(TinyLMError) as info:
        data.prepare()
    message = str(info.value)
    assert message.startswith(f"too few training windows remain: data.val_fraction={val_fraction:g} holds out ")
    assert left in message and f"fewer than block_size+1={block_size + 1}" in message
    assert "lower data.val_fraction" in message and " -" not in message


RUN = [*TINY_MODEL, "trainer.val_check_interval=2", "callbacks=minimal", "logger=none"]


@pytest.fixture
def tiny_run(tmp_path):
    """A 2-step run (in-process) on a repeated text; returns its text file and its last checkpoint."""
    text = tmp_path / "tiny.txt"
    text.write_text(TINY_TEXT * 30, encoding="utf-8")
    train_main(compose(*RUN, f"data.path={text}", "trainer.max_steps=2", output_dir=tmp_path / "run"))
    return text, tmp_path / "run" / "checkpoints" / "last.ckpt"


def resume_warnings(text, ckpt, caplog) -> list[str]:
    """Resume the run in-process for 2 more steps, as train.py ckpt_path=... does; its warnings about the data."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tinylm.runs.resume"):
        train_main(compose(*RUN, f"data.path={text}", "trainer.max_steps=4", f"ckpt_path={ckpt}",
                           output_dir=ckpt.parent.parent))
    return [r.getMessage() for r in caplog.records if r.name == "tinylm.runs.resume"]


def test_a_checkpoint_records_its_data_as_plain_data(tiny_run):
    _, ckpt = tiny_run
    recorded = torch.load(ckpt, map_location="cpu", weights_only=True)["data"]
    assert set(recorded) == {"tokens", "sha256"}  # not the path: a shared checkpoint keeps it private
    assert recorded["tokens"] == len(TINY_TEXT) * 30 and len(recorded["sha256"]) == 64


def test_pairs_record_their_data_too(tmp_path):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{n}\t{n * 2}\n" for n in range(40)), encoding="utf-8")
    data = PairDataModule(path=str(pairs), block_size=8, seed=1)
    data.prepare()
    again = PairDataModule(path=str(pairs), block_size=8, seed=2)  # another seed: another split of the same pairs
    again.prepare()
    assert data.identity["tokens"] == sum(len(s) + len(t) + 2 for s, t in data.train_examples + data.val_examples)
    assert data.identity["sha256"] != again.identity["sha256"]


def test_a_resume_on_an_edited_text_of_the_same_vocabulary_warns_once(tiny_run, caplog):
    text, ckpt = tiny_run
    assert resume_warnings(text, ckpt, caplog) == []  # the same text: nothing to say
    text.write_text(TINY_TEXT * 31, encoding="utf-8")  # longer, the same characters
    (warning,) = resume_warnings(text, ckpt, caplog)
    tokens = len(TINY_TEXT)
    assert warning == (f"the data is not the text checkpoint {ckpt} was trained on ({tokens * 31} tokens now, "
                       f"{tokens * 30} then; the same vocabulary): the validation split and the training windows "
                       "differ from the checkpoint's data, so loss/val before and after this resume are not "
                       "comparable; resume with the run's own data.path to continue it exactly")


@pytest.mark.parametrize("name", ["release-0.1-gpt-rope.ckpt", "release-0.1-lstm.ckpt"])
def test_a_checkpoint_without_a_data_record_loads_without_a_warning(caplog, name):
    ckpt = ROOT / "tests" / "fixtures" / name
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)
    identity = {"tokens": 1, "sha256": "0" * 64}
    with caplog.at_level(logging.WARNING, logger="tinylm.runs.resume"):
        assert check_resume(ckpt, {"arch": "gpt", **saved["model_config"]}, saved["tokenizer"], identity) == \
            saved["global_step"]
    assert [r for r in caplog.records if r.name == "tinylm.runs.resume"] == []


@pytest.mark.parametrize("arch", ["lstm", "gru"])
def test_muon_with_a_model_without_residual_blocks_is_refused_by_the_config_check(tmp_path, arch):
    """Before the Trainer starts (it was refused by the optimizer, after Lightning's start-up lines), naming the
    models Muon trains: those with residual blocks."""
    cfg = compose("optim=muon", "model=lstm", f"model.arch={arch}", output_dir=tmp_path)
    assert config_problems(cfg) == [
        f"optim=muon trains the weight matrices of residual blocks, and model.arch={arch} has none: use optim=adamw, "
        "or a model with them (model=gpt or model=seq2seq)"]
    assert config_problems(compose("optim=muon", output_dir=tmp_path)) == []
    assert config_problems(compose("optim=muon", "model=seq2seq", "data=pairs", output_dir=tmp_path)) == []
