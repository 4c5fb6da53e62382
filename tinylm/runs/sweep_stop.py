"""A sweep that Ctrl-C or SIGTERM stops: every running job saves, no new job starts, and it says how to finish.

With any launcher, the first Ctrl-C (SIGINT) or SIGTERM (``kill``, ``docker stop``) stops a sweep
cleanly: each running job saves its last checkpoint (``tinylm.training.safety.GracefulInterrupt``), the sweep
records the stop and its signal in ``interrupted.txt``, jobs not started yet are skipped, and the
command exits 130 (Ctrl-C) or 143 (SIGTERM) naming the command that finishes the sweep
(``tinylm.runs.sweep_resume``). A second signal aborts at once.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from tinylm.run_folder import LAST_NAME
from tinylm.runs.ranks import slurm_requeued
from tinylm.training.stop_signals import STOP_SIGNALS, exit_code, restore_signals, stop_at_once_next, take_stop_signals

STOP_FILE = "interrupted.txt"  # in the sweep folder: Ctrl-C or SIGTERM stopped this sweep


@contextmanager
def interrupt_stops_the_sweep(sweep_dir: Path) -> Iterator[None]:
    """While jobs run: the first Ctrl-C or SIGTERM records the stop and lets every running job save
    its last checkpoint and return (a job in this process gets the signal itself: its own handler takes it
    while it trains; so do jobs in other processes that a terminal's Ctrl-C reaches); a second one aborts."""

    def first(signum, frame) -> None:
        mark_stopped(sweep_dir, signum)
        name = STOP_SIGNALS[signal.Signals(signum)]
        print(f"\n{name}: the running jobs save their {LAST_NAME} and stop; no new job starts "
              f"({name} again to abort)", file=sys.stderr, flush=True)
        stop_at_once_next()

    previous = take_stop_signals(first)
    try:
        yield
    finally:
        restore_signals(previous)


def mark_stopped(sweep_dir: Path, signum: int) -> None:
    """Record in the sweep folder that ``signum`` (Ctrl-C or SIGTERM) stopped the sweep."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / STOP_FILE).write_text(
        f"This sweep was stopped by {signal.Signals(signum).name}"
        f"{' (Ctrl-C)' if signum == signal.SIGINT else ''}. "
        f"Run its command again with hydra.sweep.dir={sweep_dir} to finish it.\n", encoding="utf-8")


def stopped_by(sweep_dir: Path) -> signal.Signals | None:
    """The signal that stopped this sweep (its ``interrupted.txt``), None if none did."""
    try:
        text = (sweep_dir / STOP_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return signal.SIGINT
    found = re.match(r"This sweep was stopped by (SIGINT|SIGTERM)", text)
    return signal.Signals[found.group(1)] if found else signal.SIGINT  # as written before SIGTERM stopped sweeps


def sweep_dir_of_job() -> Path | None:
    """The sweep folder of the running job, None outside a sweep."""
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return Path(HydraConfig.get().sweep.dir)
    return None


def sweep_stopped() -> bool:
    """Inside a sweep job: True once Ctrl-C or SIGTERM has stopped the sweep (a job not started yet then skips)."""
    sweep_dir = sweep_dir_of_job()
    return sweep_dir is not None and (sweep_dir / STOP_FILE).is_file()


def job_stopped_by(signum: int) -> None:
    """A sweep job that a signal stopped (it saved its last checkpoint) stops the sweep: no new job starts.

    Not for SIGTERM to a job that SLURM runs on its own (``hydra/launcher=slurm``): SLURM sends it to
    a job it pre-empts or requeues, and the requeued job continues from its last checkpoint
    (``tinylm.runs.job.continue_requeued``); the sweep goes on. Stopped for good, the job reads as interrupted, and a
    re-run of the sweep continues it.
    """
    on_slurm = "submitit" in str(HydraConfig.get().launcher.get("_target_", "")).lower()
    if not (signum == signal.SIGTERM and on_slurm):
        mark_stopped(Path(HydraConfig.get().sweep.dir), signum)
    elif slurm_requeued():  # no result for this attempt: submitit waits for the one SLURM runs next
        print(f"job {HydraConfig.get().job.num}: SLURM requeued it; its last checkpoint is saved and the next "
              "attempt continues from it", file=sys.stderr, flush=True)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(exit_code(signum))


def start_sweep(config: DictConfig) -> None:
    """A sweep that Ctrl-C or SIGTERM stopped is being finished: its stop record goes."""
    (Path(str(config.hydra.sweep.dir)) / STOP_FILE).unlink(missing_ok=True)


def stop_after_interrupt(config: DictConfig) -> None:
    """After the sweep: if Ctrl-C or SIGTERM stopped it, exit 130 or 143 with the command that finishes it."""
    sweep_dir = Path(str(config.hydra.sweep.dir))
    signum = stopped_by(sweep_dir)
    if signum is not None:
        print(f"sweep {sweep_dir} stopped by {signum.name}: finish it by running the same command with "
              f"hydra.sweep.dir={sweep_dir} (or hydra.sweep.dir=last)", file=sys.stderr, flush=True)
        raise SystemExit(exit_code(signum))
