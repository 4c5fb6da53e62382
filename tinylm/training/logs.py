"""A run's log: each line once, no noise, the error in the run folder, nothing before a resume is checked.

Hydra gives every run a console handler and a file handler (``<run folder>/train.log``) on the
root logger. Lightning adds a console handler of its own to the ``lightning`` logger, which also
propagates to the root, so each of its lines was printed twice; it also prints tips for cloud
products and a deprecation warning from inside its own code on every run.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from logging.handlers import MemoryHandler
from pathlib import Path

NOISE = ("💡 Tip:",)  # Lightning's advertisements, printed on every run


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(NOISE)


def quiet_lightning() -> None:
    """One copy of each Lightning line (through Hydra's handlers), without its tips and internal warnings."""
    lightning = logging.getLogger("lightning")
    for handler in list(lightning.handlers):
        if not isinstance(handler, logging.FileHandler):
            lightning.removeHandler(handler)
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropNoise) for f in rank_zero.filters):
        rank_zero.addFilter(_DropNoise())
    # raised by Lightning's own use of torch's pytree API (torch 2.13), not by anything a user wrote
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")
    if "SLURM_JOB_ID" not in os.environ:  # a run outside any SLURM job on a machine with SLURM (a login node)
        warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")


def _file_handlers() -> list[logging.FileHandler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]


@contextmanager
def held_file_logs(hold: bool = True) -> Iterator[None]:
    """Keep log lines out of the log files until the block succeeds; drop them if it fails.

    A resume writes nothing into the run folder (its ``train.log`` included) before every check
    has passed. The console shows every line at once either way.
    """
    root = logging.getLogger()
    held = [(h, MemoryHandler(capacity=100_000, flushLevel=logging.CRITICAL + 1, target=h))
            for h in (_file_handlers() if hold else [])]
    for handler, memory in held:
        root.removeHandler(handler)
        root.addHandler(memory)
    try:
        yield
    except BaseException:
        for _, memory in held:
            memory.buffer.clear()
        raise
    finally:
        for handler, memory in held:
            root.removeHandler(memory)
            memory.flush()  # nothing left after a failure
            root.addHandler(handler)


def log_error_to_files(message: str) -> None:
    """Write an ``error:`` line into the log files only: the console has already shown it."""
    record = logging.makeLogRecord({"name": "tinylm", "levelno": logging.ERROR, "levelname": "ERROR",
                                    "msg": "%s", "args": (message,)})
    for handler in _file_handlers():
        handler.handle(record)


@contextmanager
def expected_checkpoints(dirpath: Path) -> Iterator[None]:
    """Without Lightning's warning that ``dirpath`` "exists and is not empty": a resume into its own
    folder finds its own checkpoints there, as it should. Other folders still get the warning."""
    message = f"Checkpoint directory {os.path.realpath(dirpath)} exists and is not empty"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=re.escape(message))
        yield
