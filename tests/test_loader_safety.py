"""Model sizes before anything is built (tinylm.models.sizes), crafted checkpoints refused by every loader
without allocating their model, what ckpt_path names when it is not a file, and half-written checkpoints."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from dataclasses import asdict

import pytest
import torch
from conftest import compose, compose_config, entry_point
from test_checkpoint import one_line_error

from tinylm.checkpoint import load_model
from tinylm.models import build_model, sizes
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.run_folder import MARKER, choose_checkpoint, latest_checkpoint, latest_last_checkpoint, run_checkpoints
from tinylm.runs.resume import check_resume
from tinylm.tokenizer import CharTokenizer
from tinylm.training.config_checks import config_problems
from tinylm.training.safety import AtomicCheckpointIO

ITOS = list("\nabcd")
HUGE = {"arch": "gpt", "vocab_size": len(ITOS), "block_size": 32, "n_embd": 100_000, "num_heads": 4, "num_layers": 4,
        "dropout": 0.1, "pos_encoding": "learned", "attn_impl": "sdpa"}


@pytest.fixture
def nothing_built(monkeypatch):
    """Any nn.Module made from here on fails the test: no model (and so no parameter tensor) is allocated."""
    def refuse(self, *args, **kwargs):
        raise AssertionError(f"a {type(self).__name__} was built")

    monkeypatch.setattr(torch.nn.Module, "__init__", refuse)


def crafted(path, config: dict, weights: dict):
    """A checkpoint of a few KB like a real one: a config asking for a huge model, and few or no weights."""
    torch.save({"state_dict": {f"model.{k}": v for k, v in weights.items()}, "model_config": config,
                "tokenizer": CharTokenizer(ITOS).state(), "global_step": 3}, path)
    return path


def tiny_weights() -> dict:
    """A tiny GPT's weights with as many tensors as HUGE's: all but their shapes fit it."""
    cfg = GPTConfig(vocab_size=len(ITOS), block_size=8, n_embd=8, num_heads=2, num_layers=4)
    return GPT(cfg).state_dict()


# --------------------------------------------------------------------------------------------
# The layouts are the models': names, shapes, parameter counts and buffers


CONFIGS = [
    *({"arch": "gpt", "vocab_size": 7, "block_size": 5, "n_embd": 8, "num_heads": 2, "num_layers": 3,
       "pos_encoding": pos, "norm": norm, "tied_head": tied}
      for pos, norm, tied in itertools.product(["learned", "sinusoidal", "rope"], ["layernorm", "rmsnorm"],
                                               [False, True])),
    *({"arch": arch, "vocab_size": 7, "block_size": 5, "n_embd": 6, "hidden_size": 10, "num_layers": layers}
      for arch, layers in itertools.product(["lstm", "gru"], [1, 3])),
    *({"arch": "seq2seq", "vocab_size": 7, "block_size": 5, "n_embd": 8, "num_heads": 2, "encoder_layers": 2,
       "decoder_layers": 3, "pos_encoding": pos} for pos in ["learned", "sinusoidal", "rope"]),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_a_layout_is_its_model(config):
    model = build_model(config)
    layout = sizes.layout_of({**asdict(model.config), "_target_": f"{type(model).__module__}.{type(model).__name__}"})
    assert dict(layout.shapes()) == {name: tuple(t.shape) for name, t in model.state_dict().items()}
    assert layout.parameters() == model.num_params()
    assert layout.buffer_bytes() == sum(b.numel() * b.element_size() for b in model.buffers())


def test_the_default_model_counts_210761_parameters():
    cfg = compose_config("train").model
    layout = sizes.layout_of({**cfg, "vocab_size": 73})
    assert layout.parameters() == 210_761


# --------------------------------------------------------------------------------------------
# Too big for this machine: one line with the numbers, before anything is built


def test_a_model_too_big_for_memory_is_refused_before_it_is_built(monkeypatch, nothing_built):
    monkeypatch.setattr(sizes, "available_memory", lambda: 8 * 2**30)
    message = one_line_error(build_model, HUGE)
    c = 100_000  # embeddings (V = 5, T = 32), 4 blocks, the final LayerNorm, lm_head
    params = 5 * c + 32 * c + 4 * (12 * c * c + 10 * c) + 2 * c + 5 * c + 5
    assert message == (f"the model is too big for this machine's memory: model.n_embd=100000, model.num_layers=4, "
                       f"model.block_size=32 make {params:,} parameters (1.7 TiB as float32), but 8.0 GiB of memory "
                       f"is available: choose smaller model sizes")


@pytest.mark.parametrize(("override", "shown"), [
    ("model.n_embd=100000", "model.n_embd=100000, model.num_layers=4, model.block_size=32 make at least "
                            "480,007,600,001 parameters"),
    ("model.num_layers=1000000000", "model.n_embd=64, model.num_layers=1000000000, model.block_size=32 make at "
                                    "least 49,792,000,002,305 parameters"),
    ("model.hidden_size=1000000", "model.n_embd=64, model.hidden_size=1000000, model.num_layers=2 make at least "),
])
def test_the_config_check_refuses_a_model_too_big_before_torch_is_needed(tmp_path, override, shown):
    extra = ["model=lstm"] if "hidden_size" in override else []
    problems = config_problems(compose(*extra, override, output_dir=tmp_path), quick=True)
    assert len(problems) == 1 and problems[0].startswith("the model is too big for this machine's memory: " + shown)
    assert "of memory is available: choose smaller model sizes" in problems[0]


def test_available_memory_is_known_on_linux():
    available = sizes.available_memory()
    assert isinstance(available, int) and 0 < available


# --------------------------------------------------------------------------------------------
# Crafted checkpoints: refused by every loader before their model is built


@pytest.fixture(params=["no weights", "a tiny model's weights"])
def crafted_checkpoint(request, tmp_path):
    weights = {} if request.param == "no weights" else tiny_weights()
    path = crafted(tmp_path / "crafted.ckpt", HUGE, weights)
    assert path.stat().st_size < 32_000  # a few KB: torch.save spends about 500 bytes on each tensor
    return path, len(weights)


def test_load_model_checks_the_config_against_the_weights_first(crafted_checkpoint, nothing_built):
    path, held = crafted_checkpoint
    message = one_line_error(load_model, path)
    assert message.startswith(f"checkpoint {path} is not a valid tinylm checkpoint: ")
    if held:
        assert "size mismatch for token_embedding.weight: its state_dict holds (5, 8), its model_config " \
               "describes (5, 100000)" in message
    else:
        assert "its model_config describes 50 weight tensors but its state_dict holds 0" in message


@pytest.mark.parametrize("script", ["generate.py", "analyze.py", "evaluate.py", "export.py"])
def test_every_command_refuses_a_crafted_checkpoint_without_building_it(crafted_checkpoint, tmp_path, script,
                                                                        nothing_built):
    path, _ = crafted_checkpoint
    cfg = compose_config(script.removesuffix(".py"), f"ckpt_path={path}", f"paths.log_dir={tmp_path}")
    message = one_line_error(entry_point(script).run, cfg)
    assert message.startswith(f"checkpoint {path} is not a valid tinylm checkpoint: ")


def test_a_resume_refuses_a_crafted_checkpoint_whose_config_it_would_train(crafted_checkpoint, nothing_built):
    path, _ = crafted_checkpoint
    message = one_line_error(check_resume, path, HUGE, CharTokenizer(ITOS).state())
    assert message.startswith(f"checkpoint {path} is not a valid tinylm checkpoint: ")


def test_a_checkpoint_too_big_for_memory_names_itself(tmp_path, monkeypatch):
    model = GPT(GPTConfig(vocab_size=len(ITOS), block_size=8, n_embd=8, num_heads=2, num_layers=1))
    path = crafted(tmp_path / "real.ckpt", asdict(model.config), model.state_dict())
    monkeypatch.setattr(sizes, "available_memory", lambda: 1000)
    message = one_line_error(load_model, path)
    assert message.startswith(f"checkpoint {path}: the model is too big for this machine's memory: ")
    monkeypatch.undo()
    assert load_model(path).model.num_params() == model.num_params()


# --------------------------------------------------------------------------------------------
# ckpt_path that is not a file


def test_ckpt_path_and_run_dir_say_what_they_name_when_not_what_they_take(tmp_path):
    folder = tmp_path / "a_folder"
    folder.mkdir()
    assert one_line_error(choose_checkpoint, ckpt_path=folder) == (
        f"checkpoint file {folder} is a folder: pass a .ckpt file as ckpt_path=..., or a run folder as run_dir=...")
    fifo = tmp_path / "pipe.ckpt"
    os.mkfifo(fifo)
    assert one_line_error(choose_checkpoint, ckpt_path=fifo) == (
        f"checkpoint file {fifo} is a FIFO (named pipe): check ckpt_path=...")
    assert "does not exist" in one_line_error(choose_checkpoint, ckpt_path=tmp_path / "nope.ckpt")
    assert one_line_error(choose_checkpoint, run_dir=fifo) == (
        f"run folder {fifo} is a FIFO (named pipe): check run_dir=...")
    (tmp_path / "last.ckpt").write_bytes(b"")
    assert one_line_error(choose_checkpoint, run_dir=tmp_path / "last.ckpt") == (
        f"run folder {tmp_path / 'last.ckpt'} is a file: pass a checkpoint file as ckpt_path=...")


# --------------------------------------------------------------------------------------------
# Half-written checkpoints (<name>.ckpt.tmp) and what listers take


def gone_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def killed_run(log_dir, pid: int | None):
    """A run killed (kill -9) while it wrote its first checkpoint: its claim left, a .tmp, no checkpoint."""
    import socket
    import time

    run = log_dir / "runs" / "2026-01-01_00-00-00"
    (run / "checkpoints").mkdir(parents=True)
    if pid is not None:
        (run / MARKER).write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "started": time.time() - 5}))
    tmp = run / "checkpoints" / "best-step000002.ckpt.tmp"
    tmp.write_bytes(b"half a checkpoint")
    return run, tmp


def test_a_killed_runs_half_written_checkpoint_is_removed_when_its_runs_are_listed(tmp_path):
    run, tmp = killed_run(tmp_path, gone_pid())
    assert "no run with checkpoints" in one_line_error(latest_checkpoint, tmp_path)
    assert not tmp.exists()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == []


@pytest.mark.parametrize("holder", ["running", "no claim"])
def test_a_checkpoint_being_written_is_left_alone(tmp_path, holder):
    run, tmp = killed_run(tmp_path, os.getpid() if holder == "running" else None)
    assert run_checkpoints(run) == []
    assert tmp.exists()


def test_listers_take_regular_checkpoint_files_only(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "best-step000004.ckpt.tmp").write_bytes(b"half")
    os.mkfifo(run / "checkpoints" / "best-step000006.ckpt")
    (run / "checkpoints" / "best-step000008.ckpt").mkdir()
    (run / "checkpoints" / "best-step000002.ckpt").write_bytes(b"whole")
    assert run_checkpoints(run) == [run / "checkpoints" / "best-step000002.ckpt"]


def test_ckpt_path_last_takes_a_regular_file_only(tmp_path):
    for name in ("older", "newer"):
        (tmp_path / "runs" / name / "checkpoints").mkdir(parents=True)
    (tmp_path / "runs" / "older" / "checkpoints" / "last.ckpt").write_bytes(b"whole")
    os.mkfifo(tmp_path / "runs" / "newer" / "checkpoints" / "last.ckpt")
    for name, seconds in (("older", 1e9), ("newer", 2e9)):
        os.utime(tmp_path / "runs" / name / "checkpoints" / "last.ckpt", (seconds, seconds))
    assert latest_last_checkpoint(tmp_path)[0] == tmp_path / "runs" / "older" / "checkpoints" / "last.ckpt"


def test_writing_a_checkpoint_removes_what_a_killed_writer_left(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    stale = folder / "best-step000002.ckpt.tmp"
    stale.write_bytes(b"half a checkpoint")
    AtomicCheckpointIO().save_checkpoint({"global_step": 4}, folder / "last.ckpt")
    assert sorted(p.name for p in folder.iterdir()) == ["last.ckpt"]
    assert torch.load(folder / "last.ckpt", weights_only=True) == {"global_step": 4}
