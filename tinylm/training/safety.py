"""Never lose a run: atomic checkpoint writes, and a Ctrl-C or SIGTERM that saves before it stops.

- ``AtomicCheckpointIO`` writes ``<name>.tmp`` next to the target, fsyncs it and renames it over
  the target, so ``kill -9`` at any moment leaves either the old good file or the new one (and a
  ``.tmp`` that the next checkpoint written there, the run's next start or the next listing of its
  checkpoints removes: ``tinylm.run_folder``). A write that fails (a full disk) removes its
  ``.tmp``, keeps the old file and is one ``error:`` line.
- ``GracefulInterrupt`` turns Ctrl-C (SIGINT) and SIGTERM (``kill``, ``docker stop``, a SLURM
  pre-emption) into: finish the step, save its last checkpoint, stop. ``train.py`` then exits 130 after
  Ctrl-C and 143 after SIGTERM (128 + the signal's number, as a shell reports a killed program).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import threading
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from tinylm.errors import TinyLMError
from tinylm.models.sizes import human
from tinylm.run_folder import LAST_NAME, TMP_SUFFIX, remove_partial_checkpoints
from tinylm.training.stop_signals import STOP_SIGNALS, restore_signals, stop_at_once_next, take_stop_signals


def write_failed(path: Path, error: OSError) -> TinyLMError:
    """One line for a checkpoint that could not be written: why, the free space, what was kept."""
    reason = f"{error.strerror or error} (errno {error.errno})" if error.errno else str(error)
    try:
        free = f"{human(shutil.disk_usage(path.parent).free)} free on that disk"
    except OSError:
        free = "free space unknown"
    kept = f"the previous {path.name} is kept unchanged" if path.is_file() else "earlier checkpoints are kept"
    last = path.parent / LAST_NAME
    resume = (f", then resume with `python train.py {shlex.quote(f'ckpt_path={last}')}`" if last.is_file()
              else ", then train again")
    return TinyLMError(f"could not write checkpoint {path}: {reason}, {free}; {kept}. Free some space{resume}")


def os_error(error: BaseException | None) -> OSError | None:
    """The OSError (a full disk, a quota, an I/O error) behind ``error``: torch.save reports a failed
    write as a RuntimeError raised while handling the OSError ("unexpected pos ...")."""
    while error is not None and not isinstance(error, OSError):
        error = error.__cause__ or error.__context__
    return error


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write each checkpoint to a temporary file in the same folder, then rename it into place."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + TMP_SUFFIX)
        remove_partial_checkpoints(path.parent, keep=tmp)  # what a killed writer left: this is the folder's writer
        try:
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one
        except BaseException as e:  # the old file stays, the partial one goes
            tmp.unlink(missing_ok=True)
            cause = os_error(e)
            if cause is None:
                raise
            raise write_failed(path, cause) from None


class GracefulInterrupt(L.Callback):
    """First Ctrl-C or SIGTERM: finish the current step, validate and save its last checkpoint, then stop.

    Stopping between steps keeps the saved loop state consistent, so the run resumes exactly. A
    second signal stops at once. While training, these handlers replace Lightning's own SIGTERM
    handler (its SignalConnector makes the loop raise SIGTERMException: exit 0 and nothing saved);
    Lightning's handlers come back when training ends. Its SLURM requeue signal (SIGUSR1) is left
    alone. With several processes (DDP), a signal to any rank stops every rank after the same step.
    """

    def __init__(self):
        self.signal: int | None = None  # what stopped training
        self.interrupted_at: int | None = None
        self._requested: int | None = None  # a signal that came, not acted on yet
        self._previous: dict[int, object] = {}

    def on_train_start(self, trainer, pl_module):
        if threading.current_thread() is threading.main_thread():
            self._previous = take_stop_signals(self._request_stop)

    def _request_stop(self, signum, frame):
        stop_at_once_next()
        self._requested = signum
        name = STOP_SIGNALS[signal.Signals(signum)]
        print(f"\n{name}: stopping after this step and saving {LAST_NAME} ({name} again to stop at once)", flush=True)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        requested = self._requested or 0
        if trainer.world_size > 1:  # every rank stops after the same step, whichever rank got the signal
            mine = torch.tensor(requested, device=trainer.strategy.root_device)
            requested = int(trainer.strategy.reduce(mine, reduce_op="max"))
        if requested and self.signal is None:
            self.signal, self.interrupted_at = requested, trainer.global_step
            trainer.should_stop = True

    def _restore(self):
        restore_signals(self._previous)
        self._previous = {}

    def on_exception(self, trainer, pl_module, exception):
        self._restore()

    def on_train_end(self, trainer, pl_module):
        self._restore()
        if self.interrupted_at is not None and trainer.is_global_zero:
            if trainer.checkpoint_callback:
                last = Path(trainer.checkpoint_callback.dirpath) / LAST_NAME
                hint = f"saved {last}; resume with `python train.py {shlex.quote(f'ckpt_path={last}')}`"
            else:
                hint = "no checkpoint callback, so nothing was saved"
            print(f"interrupted at step {trainer.global_step}: {hint}", flush=True)
