"""What the callbacks share: the TensorBoard writer, failure-proof calls, the training text's
opening as a default, and ``PeriodicInspector``, the base of the periodic ones."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.tensorboard import SummaryWriter

from tinylm.errors import TinyLMError
from tinylm.tasks.probe_text import text_opening
from tinylm.tokenizer import Tokenizer
from tinylm.values import POSITIVE_INT, check_value, nullable

log = logging.getLogger(__package__)  # "tinylm.callbacks" for every callback


def tensorboard_writer(trainer: L.Trainer) -> SummaryWriter | None:
    """The SummaryWriter of the trainer's TensorBoard logger, if it has one."""
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            return logger.experiment
    return None


def guarded(what: str, step: int, action: Callable[[], None]) -> None:
    """Run ``action``; if it raises, log one warning and carry on (training must not stop)."""
    try:
        action()
    except Exception as e:  # any failure of an observer is survivable
        log.warning("%s failed at step %d and was skipped (%s: %s); training continues",
                    what, step, type(e).__name__, e)


def without_unknown(tokenizer: Tokenizer, text: str, what: str) -> str:
    """``text`` minus the characters the vocabulary lacks, with a warning naming them."""
    missing = tokenizer.unknown(text)
    if missing:
        log.warning("%s %r: skipping %d character(s) not in the vocabulary: %s",
                    what, text, len(missing), " ".join(repr(c) for c in missing))
    return "".join(ch for ch in text if ch not in missing)


def training_text_opening(trainer: L.Trainer, tokenizer: Tokenizer, max_chars: int) -> str:
    """The first ``max_chars`` characters of the first non-empty line of the training text."""
    ids = getattr(trainer.datamodule, "train_ids", None)
    if ids is None:
        raise TinyLMError("no training text to take a default from: set the text in the config")
    return text_opening(tokenizer.decode(ids[: 4 * max_chars + 256].tolist()), max_chars)  # 4: longest UTF-8 char


def validate_interval(owner: str, every_n_steps) -> int | None:
    when = ", or null to run only when training ends"
    check_value(f"{owner}.every_n_steps", every_n_steps, nullable(POSITIVE_INT, when))
    return every_n_steps


class PeriodicInspector(L.Callback):
    """Calls ``inspect`` every ``every_n_steps`` steps and at the end of training, on rank 0.

    Subclasses implement ``inspect(trainer, module)``. Time spent is added up in ``seconds`` and
    reported when training ends, so the cost of watching is visible next to the cost of training.
    Which of them a run builds is its task's choice (``tinylm.tasks``).
    """

    def __init__(self, every_n_steps: int | None):
        self.every_n_steps = validate_interval(type(self).__name__, every_n_steps)
        self.seconds = 0.0
        self.calls = 0
        self._last_step: int | None = None

    def inspect(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        raise NotImplementedError

    def run_metrics(self) -> dict:
        """What it adds to the run's metrics when training ends ({}: nothing)."""
        return {}

    def timed(self, what: str, step: int, action: Callable[[], None]) -> None:
        """``guarded(action)`` on one thread, its time added to ``seconds``.

        One thread: a view's forward passes are a few short texts (batch 1 to 4, at most block_size
        long), too small to share between threads; with two, every op waits for the other thread, a
        few microseconds on an idle machine and milliseconds on a busy one (SampleText's 64 tokens took
        3.0 s with 2 threads and 0.22 s with 1 on the 2-core VM shared with other jobs). The training
        steps keep the run's thread count: it is restored before the next one."""
        started = time.perf_counter()
        threads = torch.get_num_threads()
        if threads > 1:
            torch.set_num_threads(1)
        try:
            guarded(what, step, action)
        finally:
            if threads > 1:
                torch.set_num_threads(threads)
        self.seconds += time.perf_counter() - started
        self.calls += 1

    def run(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        """Inspect now (once per step at most), never raising."""
        step = trainer.global_step
        if not trainer.is_global_zero or step == self._last_step:
            return
        self._last_step = step
        self.timed(type(self).__name__, step, lambda: self.inspect(trainer, module))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.every_n_steps and trainer.global_step % self.every_n_steps == 0:
            self.run(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        self.run(trainer, pl_module)
        if self.calls:
            log.info("%s: %d call(s), %.2f s in total", type(self).__name__, self.calls,
                     self.seconds)
