"""Never lose a run: atomic checkpoint writes and a Ctrl-C that saves before it stops.

- ``AtomicCheckpointIO`` writes ``<name>.tmp`` next to the target, fsyncs it and renames it over
  the target, so ``kill -9`` at any moment leaves either the old good file or the new one.
- ``GracefulInterrupt`` turns Ctrl-C (SIGINT) into: finish the step, save ``last.ckpt``, stop.
"""

from __future__ import annotations

import os
import shlex
import signal
import threading
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO


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
            if trainer.checkpoint_callback:
                last = Path(trainer.checkpoint_callback.dirpath) / "last.ckpt"
                hint = f"saved {last}; resume with `python train.py {shlex.quote(f'ckpt_path={last}')}`"
            else:
                hint = "no checkpoint callback, so nothing was saved"
            print(f"interrupted at step {trainer.global_step}: {hint}", flush=True)
