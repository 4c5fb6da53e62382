"""Shared test helpers: tiny texts and a way to run the real train.py into a temporary folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The tiny repeated text of the reference experiment: the model must learn to reproduce it.
TINY_TEXT = "自注意力可以让序列中的每个位置看到前面的所有位置。Attention is all you need.\n"

# Keep tests small: a tiny model, a few steps, no progress bar.
TINY_MODEL = [
    "model.n_embd=16",
    "model.num_heads=2",
    "model.num_layers=1",
    "model.block_size=16",
    "data.batch_size=8",
    "data.val_batches=2",
    "trainer.enable_progress_bar=false",
]


def run_train(run_dir: Path, *overrides: str, timeout: int = 300, check: bool = True):
    """Run `python train.py` with Hydra's run folder set to ``run_dir``; return the process."""
    flags = [o for o in overrides if o.startswith("-")]  # e.g. -m must precede the overrides
    overrides = [o for o in overrides if not o.startswith("-")]
    cmd = [sys.executable, str(ROOT / "train.py"), *flags, f"hydra.run.dir={run_dir}", *overrides]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"train.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def one_thread():
    """Tiny models decode fastest on one thread, and do not fight other processes for cores
    (on a busy machine extra threads spin). Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny_text_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.txt"
    path.write_text(TINY_TEXT, encoding="utf-8")
    return path


def compose(*overrides: str, output_dir: Path):
    """The real composed train config (as `python train.py ...` would see it), outside Hydra's app."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("train", overrides=[f"paths.output_dir={output_dir}", *overrides])
