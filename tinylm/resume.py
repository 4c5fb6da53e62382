"""Never lose a run: atomic checkpoint writes, a checkpoint on Ctrl-C, safe and checked resumes.

- ``AtomicCheckpointIO`` writes ``<name>.tmp`` next to the target, fsyncs it and renames it over
  the target, so ``kill -9`` at any moment leaves either the old good file or the new one.
- ``GracefulInterrupt`` turns Ctrl-C (SIGINT) into: finish the step, save ``last.ckpt``, stop.
- ``resolve_resume_argv`` turns ``ckpt_path=last`` into the newest run's ``last.ckpt`` and makes the
  resumed run write into that same run folder (same TensorBoard run, same checkpoints folder).
- ``check_resume`` refuses, with one line, a checkpoint that is unreadable, unsafe, or made for a
  different model or vocabulary than the current config.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from tinylm.checkpoint import RUN_PATTERNS, find_checkpoint, read_checkpoint
from tinylm.errors import TinyLMError

log = logging.getLogger(__name__)

# the model settings a checkpoint's weights depend on (dropout and attn_impl may change on resume);
# a key an architecture lacks reads as None on both sides
SHAPE_KEYS = ("arch", "vocab_size", "block_size", "n_embd", "num_heads", "num_layers", "pos_encoding", "hidden_size")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write each checkpoint to a temporary file in the same folder, then rename it into place."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one


class GracefulInterrupt(L.Callback):
    """First Ctrl-C: finish the current step, validate and save ``last.ckpt``, then stop.

    Stopping between steps keeps the saved loop state consistent, so the run resumes exactly.
    A second Ctrl-C interrupts at once (Python's default behaviour is restored after the first).
    """

    def __init__(self):
        self.interrupted_at: int | None = None
        self._previous = None

    def on_train_start(self, trainer, pl_module):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, lambda *_: self._request_stop(trainer))

    def _request_stop(self, trainer):
        signal.signal(signal.SIGINT, self._previous or signal.default_int_handler)
        self.interrupted_at = trainer.global_step
        trainer.should_stop = True
        print("\nCtrl-C: stopping after this step and saving last.ckpt (Ctrl-C again to abort)", flush=True)

    def on_train_end(self, trainer, pl_module):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        if self.interrupted_at is not None and trainer.is_global_zero:
            saved = f"saved {trainer.checkpoint_callback.dirpath}/last.ckpt; " if trainer.checkpoint_callback else ""
            print(f"interrupted at step {trainer.global_step}: {saved}"
                  "resume with `python train.py ckpt_path=last`", flush=True)


def latest_last_checkpoint(log_dir: str | Path) -> Path:
    """The newest ``checkpoints/last.ckpt`` of any run or sweep job under ``log_dir``."""
    found = [p for pattern in RUN_PATTERNS for p in Path(log_dir).glob(f"{pattern}/checkpoints/last.ckpt")]
    if not found:
        raise TinyLMError(
            f"ckpt_path=last: no run under {log_dir} has checkpoints/last.ckpt; "
            "train first with `python train.py`, or pass ckpt_path=FILE"
        )
    return max(found, key=lambda p: p.stat().st_mtime)


def resolve_resume_argv(argv: list[str], default_log_dir: Path) -> list[str]:
    """Rewrite ``ckpt_path=last`` into a real path, resuming inside that run's folder."""
    if "ckpt_path=last" not in argv:
        return argv
    log_dir = next((a.split("=", 1)[1] for a in argv if a.startswith("paths.log_dir=")), default_log_dir)
    try:
        last = latest_last_checkpoint(log_dir)
    except TinyLMError as e:
        raise SystemExit(f"error: {e}") from None
    argv = [f"ckpt_path={last}" if a == "ckpt_path=last" else a for a in argv]
    if not any(a.startswith("hydra.run.dir=") for a in argv):
        argv.append(f"hydra.run.dir={last.parent.parent}")
    print(f"resuming {last}", flush=True)
    return argv


def check_resume(path: str | Path, model_config: dict, tokenizer_state: dict) -> None:
    """Raise a one-line TinyLMError unless ``path`` can continue the configured training."""
    checkpoint = read_checkpoint(find_checkpoint(ckpt_path=path))
    saved = checkpoint["model_config"]
    different = [f"{k}={saved.get(k)!r} (config: {model_config.get(k)!r})"
                 for k in SHAPE_KEYS if saved.get(k) != model_config.get(k)]
    if different:
        raise TinyLMError(
            f"checkpoint {path} was trained with a different model: {', '.join(different)}; "
            "use the same model.* settings to resume, or start a new run without ckpt_path"
        )
    if checkpoint["tokenizer"] != tokenizer_state:
        raise TinyLMError(
            f"checkpoint {path} was trained on a different vocabulary than data.path gives: "
            "resume with the same text and data.tokenizer, or start a new run without ckpt_path"
        )
