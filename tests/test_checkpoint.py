"""Finding checkpoints (file, run folder, newest run) and loading them safely (tinylm.checkpoint)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from tinylm.checkpoint import load_model, read_checkpoint
from tinylm.errors import TinyLMError
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.run_folder import find_checkpoint
from tinylm.tokenizer import CharTokenizer


def tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=5, block_size=8, n_embd=8, num_heads=2, num_layers=1)).eval()


def save_checkpoint(path: Path, model: GPT | None = None, **extra) -> Path:
    """What Lightning + LitLanguageModel write, reduced to the keys a checkpoint needs to generate."""
    model = model or tiny_gpt()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "model_config": asdict(model.config),
        "tokenizer": CharTokenizer(list("\nabcd")).state(),
        "global_step": 12,
        **extra,
    }, path)
    return path


def make_run(root: Path, name: str, files: dict[str, float]) -> Path:
    """A run folder whose checkpoints/<file> were last written at the given times (seconds)."""
    run = root / name
    for file, mtime in files.items():
        path = save_checkpoint(run / "checkpoints" / file)
        os.utime(path, (mtime, mtime))
    run.mkdir(parents=True, exist_ok=True)
    return run


def one_line_error(call, *args, **kwargs) -> str:
    with pytest.raises(TinyLMError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------------------------
# which checkpoint


def test_run_dir_prefers_best_then_last(tmp_path):
    both = make_run(tmp_path, "both", {"last.ckpt": 200, "best-step000010.ckpt": 100})
    assert find_checkpoint(run_dir=both).name == "best-step000010.ckpt"
    only_last = make_run(tmp_path, "only_last", {"last.ckpt": 100})
    assert find_checkpoint(run_dir=only_last).name == "last.ckpt"
    several = make_run(tmp_path, "several", {"best-step000010.ckpt": 300,
                                             "best-step000020.ckpt": 400, "last.ckpt": 500})
    assert find_checkpoint(run_dir=several).name == "best-step000020.ckpt"  # newest best


def test_latest_run_is_the_newest_with_checkpoints_among_runs_and_sweep_jobs(tmp_path):
    make_run(tmp_path, "runs/2026-01-01_00-00-00", {"best-step000100.ckpt": 1_000})
    sweep_job = make_run(tmp_path, "multirun/2026-01-02_00-00-00/1",
                         {"best-step000050.ckpt": 2_000, "last.ckpt": 2_100})
    make_run(tmp_path, "multirun/2026-01-02_00-00-00/0", {"last.ckpt": 1_500})
    (tmp_path / "runs" / "2026-01-03_00-00-00").mkdir()  # newer, but without checkpoints
    latest = find_checkpoint(log_dir=tmp_path)
    assert latest == sweep_job / "checkpoints" / "best-step000050.ckpt"

    newer = make_run(tmp_path, "runs/2026-01-04_00-00-00", {"last.ckpt": 3_000})
    assert find_checkpoint(log_dir=tmp_path) == newer / "checkpoints" / "last.ckpt"
    assert find_checkpoint(ckpt_path=latest, log_dir=tmp_path) == latest  # a named file wins


def test_missing_things_are_one_line_errors(tmp_path):
    message = one_line_error(find_checkpoint, ckpt_path=tmp_path / "nope.ckpt")
    assert f"checkpoint file {tmp_path / 'nope.ckpt'} does not exist" in message

    assert "does not exist" in one_line_error(find_checkpoint, run_dir=tmp_path / "no_run")

    empty_run = tmp_path / "runs" / "empty"
    (empty_run / "checkpoints").mkdir(parents=True)
    (empty_run / "checkpoints" / "epoch=0.ckpt.tmp").write_text("")
    message = one_line_error(find_checkpoint, run_dir=empty_run)
    assert f"run folder {empty_run} has no checkpoints" in message and "ckpt_path=" in message

    for log_dir in (tmp_path, tmp_path / "no_outputs_yet"):  # runs without checkpoints / nothing
        message = one_line_error(find_checkpoint, log_dir=log_dir)
        assert f"no run with checkpoints under {log_dir}" in message
        assert "python train.py" in message

    message = one_line_error(find_checkpoint, ckpt_path="a.ckpt", run_dir="b")
    assert message == "both ckpt_path and run_dir are set: pass only one of them"


# --------------------------------------------------------------------------------------------
# loading


def test_load_model_rebuilds_the_same_model_and_tokenizer(tmp_path):
    model = tiny_gpt()
    path = save_checkpoint(tmp_path / "model.ckpt", model)
    loaded = load_model(path)
    assert not loaded.model.training
    assert loaded.global_step == 12 and loaded.path == path
    assert loaded.tokenizer.decode(loaded.tokenizer.encode("bad\n")) == "bad\n"
    idx = torch.tensor([[1, 2, 3, 0, 4]])
    with torch.no_grad():
        assert torch.equal(loaded.model(idx)[0], model(idx)[0])


class Payload:
    """A custom class: unpickling an instance of it needs arbitrary code."""

    def __init__(self):
        self.note = "hello"


class Trap:
    """Unpickling this calls os.mkdir(marker): proof of whether anything in the file ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_pickled_objects_are_refused_and_never_run(tmp_path):
    path = save_checkpoint(tmp_path / "custom.ckpt", hyper_parameters={"extra": Payload()})
    message = one_line_error(load_model, path)
    assert "contains a pickled Python object" in message and "Payload" in message
    assert "refused without running it" in message

    marker = tmp_path / "the_trap_ran"
    trap = save_checkpoint(tmp_path / "trap.ckpt", callbacks=Trap(marker))
    message = one_line_error(read_checkpoint, trap)
    assert "posix.mkdir" in message or "os.mkdir" in message
    assert not marker.exists()
    torch.load(trap, weights_only=False)  # the trap is real: an unsafe load would have run it
    assert marker.is_dir()


def test_corrupted_truncated_and_foreign_files_are_refused(tmp_path):
    good = save_checkpoint(tmp_path / "good.ckpt").read_bytes()
    cases = {
        "truncated.ckpt": good[: len(good) // 2],
        "tail_cut.ckpt": good[:-10],
        "garbage.ckpt": b"this is not a checkpoint at all",
        "empty.ckpt": b"",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        message = one_line_error(load_model, tmp_path / name)
        assert f"checkpoint {tmp_path / name} could not be read" in message
        assert "corrupted or truncated" in message

    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.ckpt")
    message = one_line_error(load_model, tmp_path / "foreign.ckpt")
    assert "is not a tinylm checkpoint (missing state_dict, model_config, tokenizer)" in message

    torch.save([1, 2, 3], tmp_path / "list.ckpt")
    assert "is not a tinylm checkpoint" in one_line_error(load_model, tmp_path / "list.ckpt")


def test_inconsistent_checkpoints_are_refused(tmp_path):
    model = tiny_gpt()
    bad_config = save_checkpoint(tmp_path / "bad_config.ckpt", model,
                                 model_config={**asdict(model.config), "num_heads": 3})
    message = one_line_error(load_model, bad_config)
    assert f"checkpoint {bad_config} is not a valid tinylm checkpoint: " in message and "num_heads=3" in message

    wrong_size = save_checkpoint(tmp_path / "wrong_size.ckpt", model,
                                 model_config={**asdict(model.config), "n_embd": 16})
    message = one_line_error(load_model, wrong_size)
    assert "is not a valid tinylm checkpoint: " in message and "size mismatch" in message


def bpe_json(vocab: dict[str, int]) -> str:
    """A tokenizers JSON whose model has this vocabulary (a word-level one: parses, but is not ours)."""
    return json.dumps({"version": "1.0", "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "a"}})


@pytest.mark.parametrize(("tokenizer", "reason"), [
    ({"kind": "bpe", "json": "{not json"}, "the BPE tokenizer's json cannot be read (key must be a string"),
    ({"kind": "bpe", "json": "{}"}, "the BPE tokenizer's json cannot be read (Model missing."),
    ({"kind": "bpe", "json": 5}, "the BPE tokenizer's json must be a string, not int"),
    ({"kind": "bpe", "json": bpe_json({"a": 0, "b": 7})}, "the BPE tokenizer's ids are not 0 .. vocab_size - 1"),
    ({"kind": "bpe", "json": bpe_json({"a": 0, "€": 1})}, "token '€' is not spelled in byte-level symbols"),
    ({"kind": "char", "itos": "\nabcd"}, "the char tokenizer's itos is not a list of single characters"),
    ({"kind": "char", "itos": [0, 1, 2, 3, 4]}, "the char tokenizer's itos is not a list of single characters"),
    ({"kind": "char", "itos": ["ab", "c", "d", "e", "f"]}, "itos is not a list of single characters"),
    ({"kind": "char"}, "the char tokenizer's itos is not a list of single characters"),
    ({"kind": "char", "itos": ["a", "b"]}, "the tokenizer has 2 symbols but the model's vocab_size is 5"),
    ({"kind": "byte"}, "the tokenizer has 256 symbols but the model's vocab_size is 5"),
    ("char", "the tokenizer must be a dict, not str"),
    ({"kind": "wordpiece"}, "unknown tokenizer kind 'wordpiece': expected one of char, byte, bpe"),
    ({"itos": list("\nabcd")}, "unknown tokenizer kind None"),
], ids=["bpe-not-json", "bpe-not-a-tokenizer", "bpe-json-int", "bpe-ids-gap", "bpe-not-byte-level",
        "itos-string", "itos-ints", "itos-words", "itos-missing", "itos-short", "byte-vs-5", "tokenizer-string",
        "unknown-kind", "no-kind"])
def test_damaged_tokenizers_are_one_line(tmp_path, tokenizer, reason):
    path = save_checkpoint(tmp_path / "damaged.ckpt", tokenizer=tokenizer)  # the real tiny model's weights
    message = one_line_error(load_model, path)
    assert message.startswith(f"checkpoint {path} is not a valid tinylm checkpoint: ")
    assert reason in message and message.endswith("use a checkpoint saved by tinylm's train.py")


def test_damaged_model_parts_are_one_line(tmp_path):
    good = torch.load(save_checkpoint(tmp_path / "good.ckpt"), weights_only=True)
    for name in ("state_dict", "model_config"):
        path = tmp_path / f"bad_{name}.ckpt"
        torch.save({**good, name: "gpt"}, path)
        message = one_line_error(load_model, path)
        assert f"checkpoint {path} is not a valid tinylm checkpoint: the {name} must be a dict, not str" in message
    path = tmp_path / "bad_weight.ckpt"
    torch.save({**good, "state_dict": {**good["state_dict"], "model.lm_head.bias": "zeros"}}, path)
    assert "is not a valid tinylm checkpoint: " in one_line_error(load_model, path)
