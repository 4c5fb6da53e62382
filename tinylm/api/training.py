"""``tinylm.train(overrides) -> Run``: ``python train.py OVERRIDES`` in this Python process (docs/python.md).

It runs the train command itself (``tinylm.commands.train.run_command_line``) on ``overrides``, so the checks,
the composed config and the run folder (``outputs/runs/<time>_<settings>/`` under the project folder) are
exactly the command's. Around it, this process is left as it was: ``sys.argv``, the logging handlers Hydra's
job logging installs (closed, so a second run logs once, into its own ``train.log``), the signal handlers, torch's
thread count and Hydra's global state (so it can run again). What the command would end with:

- an ``error: ...`` line (a misspelled key, a bad value, a refused resume): ``TinyLMError`` with that very line as
  its message, nothing trained;
- Ctrl-C (before training: nothing saved; during it: its last checkpoint saved): ``KeyboardInterrupt``;
- an exception of Hydra or of training itself: that exception (``HYDRA_FULL_ERROR``), not a summary of it.

One run at a time: a sweep (``-m``, ``hparams_search=...``) and Hydra's own flags are ``python train.py``'s.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tinylm.errors import EXIT_INTERRUPTED, TinyLMError
from tinylm.run_folder import METRICS, shown_path

SWEEPS = ("hparams_search", "hydra.mode", "hydra/sweeper", "hydra/launcher")  # keys that make a run a sweep


@dataclass
class Run:
    """A finished training run: its folder, its final metrics (its ``metrics.json``), and ``load()`` for an ``LM``."""

    run_dir: Path
    metrics: dict = field(default_factory=dict)

    def load(self):
        """The run's best checkpoint (else its last) as ``tinylm.LM``."""
        from tinylm.api.lm import load

        return load(self.run_dir)

    def __repr__(self) -> str:
        return f"Run({shown_path(self.run_dir)!r}, metrics={self.metrics!r})"


def train(overrides: Iterable[str] = ()) -> Run:
    """Train as ``python train.py *overrides`` does (e.g. ``["model.num_layers=2", "trainer.max_steps=200"]``)
    and return the ``Run``; a bad override: one ``TinyLMError`` whose message is the command's ``error:`` line."""
    overrides = [str(o) for o in overrides] if not isinstance(overrides, str) else [overrides]
    refuse_sweeps(overrides)
    if in_notebook() and not any(o.lstrip("+").startswith("trainer.enable_progress_bar=") for o in overrides):
        # the progress bar redraws itself with terminal escapes, which a notebook cell prints as they come
        overrides.append("trainer.enable_progress_bar=false")
    from tinylm.run_folder import use_project_root

    use_project_root()  # as the command: run folders under the project folder
    from tinylm.commands import train as command
    from tinylm.runs import folder

    # a run folder's name resolves to the same folder within a process (claim_unique_dir): within one run, as the
    # command is one process a run; a second run here, started in the same second with the same settings, claims
    # its own folder (-2_...)
    folder._claimed.clear()
    with command_process(overrides) as seen:
        try:
            command.run_command_line(resumed_check=resumed_sweep)
        except SystemExit as e:
            ending(e)
    if not seen:  # the command ended without training and without an error: nothing to return
        raise TinyLMError(f"python train.py {' '.join(overrides)} trained nothing")
    return Run(seen[-1], read_metrics(seen[-1]))


def in_notebook() -> bool:
    """Whether this Python runs in a Jupyter kernel."""
    return "ipykernel" in sys.modules


def makes_sweep(override: str) -> bool:
    """Whether an override sets one of the keys that make a run a sweep (``SWEEPS``)."""
    return override.lstrip("+~").partition("=")[0] in SWEEPS


def refuse_sweeps(overrides: list[str]) -> None:
    """One line for what ``python train.py`` runs but one ``Run`` cannot hold: a sweep, Hydra's own flags."""
    for override in overrides:
        if override.startswith("-"):
            raise TinyLMError(f"tinylm.train takes overrides, not {override}: sweeps and Hydra's flags are "
                              f"`python train.py {override} ...`'s")
        if makes_sweep(override):
            raise TinyLMError(f"{override} makes a sweep of several runs, and tinylm.train trains one: run the sweep "
                              f"with `python train.py -m ... {override}`, then tinylm.load each job's folder")


def resumed_sweep(argv: list[str]) -> None:
    """One line if a resume brought back a sweep's settings (``ckpt_path=last`` of a job of an optuna sweep)."""
    sweep = [arg for arg in argv if arg in ("-m", "--multirun") or makes_sweep(arg)]
    if sweep:
        raise TinyLMError(f"this resume continues a sweep ({' '.join(sweep)}), and tinylm.train trains one run: "
                          "resume the sweep with `python train.py` as it was started, then tinylm.load each job")


def ending(exit: SystemExit) -> None:
    """The command's exit as Python sees it from a library call (see the module's docstring)."""
    code = exit.code
    if isinstance(code, str) and code.startswith("error: "):
        raise TinyLMError(code) from None  # the line itself, "error: ..." as the command prints it
    if code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt from None
    if code not in (None, 0):
        raise exit


def read_metrics(run_dir: Path) -> dict:
    """The run's ``metrics.json`` ({} without one)."""
    try:
        return json.loads((run_dir / METRICS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


@contextmanager
def command_process(overrides: list[str]) -> Iterator[list[Path]]:
    """The train command's process state for one run (``sys.argv``, Hydra's full errors), and this process's own
    back afterwards (torch's thread count: ``watching_job``); yields the list the run's folder is added to once its
    job starts (``watching_job``)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    argv, full_error = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    signals = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    loggers = logging_state()
    sys.argv = ["train.py", *overrides]
    os.environ["HYDRA_FULL_ERROR"] = "1"  # an exception in the job is raised, not summed up and exit(1)
    try:
        with watching_job() as seen:
            yield seen
    finally:
        sys.argv = argv
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error
        restore_logging(loggers)
        for signum, handler in signals.items():
            signal.signal(signum, handler)
        HydraConfig.instance().cfg = None  # nothing later runs "inside" that Hydra job
        GlobalHydra.instance().clear()


@contextmanager
def watching_job() -> Iterator[list[Path]]:
    """The train command noting its run's folder in the list yielded, for this ``with`` block: once the command
    line has passed its checks and Hydra's app starts (``main``), the training job (``tinylm.runs.job.main``,
    which the app's task imports then) is wrapped to note the folder Hydra made for it."""
    from tinylm.commands import train as command

    seen: list[Path] = []
    app = command.main

    def noting_app():
        from hydra.core.hydra_config import HydraConfig

        from tinylm.cli import few_collections

        with few_collections():  # torch and Lightning, as the task imports them
            import torch

            from tinylm.runs import job
        original, threads = job.main, torch.get_num_threads()  # a run's threads=N sets the whole process's

        def noting(cfg):
            seen.append(Path(HydraConfig.get().runtime.output_dir))
            return original(cfg)

        job.main = noting
        try:
            return app()
        finally:
            job.main = original
            torch.set_num_threads(threads)

    command.main = noting_app
    try:
        yield seen
    finally:
        command.main = app


def logging_state() -> dict:
    """Each logger's (disabled, level, propagate, handlers), to restore after Hydra's job logging changed them."""
    return {logger: (logger.disabled, logger.level, logger.propagate, logger.handlers[:]) for logger in all_loggers()}


def all_loggers() -> list[logging.Logger]:
    return [logging.getLogger(), *(logger for logger in logging.Logger.manager.loggerDict.values()
                                   if isinstance(logger, logging.Logger))]


def restore_logging(state: dict) -> None:
    """The loggers as ``state`` had them: the handlers added since closed (a run's ``train.log`` included), the
    loggers Hydra's logging config disabled enabled again; a logger made since (Lightning's) keeps its own."""
    for logger in all_loggers():
        disabled, level, propagate, handlers = state.get(logger, (False, logger.level, logger.propagate,
                                                                  logger.handlers[:]))
        for handler in logger.handlers:
            if handler not in handlers:
                handler.close()
        logger.handlers[:], logger.disabled, logger.propagate = handlers, disabled, propagate
        logger.setLevel(level)
