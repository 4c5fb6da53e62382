"""The job wrapper: one training run as the run manager runs it, around ``tinylm.training.fit``.

``train.py``'s Hydra task is ``main``. It calls the training job's steps (``prepare``, ``build``,
``fit``) and owns what the run folder records and what a sweep needs of a job:

- the run folder is claimed first (rank 0, ``tinylm.runs.lock``): while one process trains a run,
  its claim (``MARKER``) in its folder says so (``tinylm.runs.job_files``) and a second one is refused; a
  run refused before training leaves no folder it made (``tinylm.runs.folder.discard_new_folder``);
- a SLURM job requeued after pre-emption continues from its own last checkpoint (``continue_requeued``);
- a resume is checked against the run's model config and data (``tinylm.runs.resume``) before the model
  is built, and recorded; a run already trained to ``trainer.max_steps`` is not trained again;
- what an earlier attempt left goes: its error file, its half-written checkpoints;
- its metrics file when training ends, its error file when a sweep job fails, exit 130 or 143 after
  Ctrl-C or SIGTERM; a parallel sweep job gets an even share of the cores (``thread_share``), and any
  other run on a machine already busier than its cores is told that ``threads=1`` may train faster
  (``warn_if_busy``).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
from contextlib import nullcontext
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from tinylm.cli import resolve_path
from tinylm.errors import TinyLMError
from tinylm.run_folder import CHECKPOINTS_DIR, ERROR, LAST_CHECKPOINT, METRICS, remove_partial_checkpoints
from tinylm.runs.folder import discard_new_folder, keep_folder
from tinylm.runs.job_files import read_metrics, write_json
from tinylm.runs.lock import FolderInUse, holding
from tinylm.runs.ranks import leave_files_to_rank_zero
from tinylm.runs.resume import check_resume, record_resume
from tinylm.runs.sweep_stop import job_stopped_by, sweep_dir_of_job, sweep_stopped
from tinylm.runs.sweep_workers import AT_ONCE_ENV, usable_cores
from tinylm.training.fit import build_datamodule, build_module, fit, prepare
from tinylm.training.logs import held_file_logs, log_error_to_files
from tinylm.training.stop_signals import exit_code
from tinylm.values import one_line

log = logging.getLogger(__name__)


def main(cfg: DictConfig) -> float:
    """Hydra task: train, turning bad input into one ``error:`` line and a non-zero exit. Returns the
    run's best val loss: what an Optuna search minimises.

    In a sweep (``-m``), a job with bad input (a config refused, a loss that diverged) reports its
    error line, writes it to its error file (``ERROR``) and returns +inf, so the other jobs of the
    sweep still run and Optuna records the trial as the worst one (a NaN would stop its search). A job
    that crashes (a bug, out of memory) writes its error file too, then stops the sweep as before.
    A run writes the line into its ``train.log`` too; a failed resume leaves the run's files as they were.
    A job refused because another process trains in its folder writes nothing there.

    Ctrl-C or SIGTERM: the run saves its last checkpoint and exits 130 or 143; in a sweep the job returns
    and the sweep stops (``tinylm.runs.sweep_stop.job_stopped_by``).
    """
    leave_files_to_rank_zero()
    in_sweep = sweep_dir_of_job() is not None
    if in_sweep and sweep_stopped():  # Ctrl-C or SIGTERM stopped the sweep before this job started
        print(f"job {HydraConfig.get().job.num}: not started, the sweep was stopped", file=sys.stderr, flush=True)
        return math.nan
    try:
        metrics = run(cfg)
    except SIGTERMException:  # Lightning's own handler: SIGTERM while the Trainer set up, before training
        print("SIGTERM before training started: nothing was trained or saved", file=sys.stderr, flush=True)
        stopped_by_signal(signal.SIGTERM, in_sweep)
        return math.nan
    except TinyLMError as e:
        if in_sweep:
            output_dir = Path(cfg.paths.output_dir) if isinstance(e, FolderInUse) else record_failure(cfg, str(e))
            print(f"error: job {HydraConfig.get().job.num} ({output_dir}): {e}", file=sys.stderr, flush=True)
            return math.inf
        raise SystemExit(f"error: {e}") from None
    except Exception as e:
        if in_sweep:  # the job's folder says that it failed; Hydra's report of the exception says where
            record_failure(cfg, f"{type(e).__name__}: {one_line(str(e))}")
        raise
    if metrics.get("interrupted_by"):  # its last checkpoint is saved
        stopped_by_signal(signal.Signals[metrics["interrupted_by"]], in_sweep)
    best = metrics.get("best_val_loss", metrics.get("val_loss"))  # the run may predate best_val_loss
    return math.inf if best is None else best


def run(cfg: DictConfig) -> dict:
    """Train as the config says, in the claimed run folder; return the final metrics (also written
    to its metrics file).

    A resume writes nothing, not even a log line to the run's ``train.log``, until the checkpoint
    is known to fit the config and to have steps left to train. From then on an error is written
    into ``train.log`` too (in a new run: from the start). A run refused or interrupted before training
    starts leaves no folder this process made for it, a resume's into a new folder included
    (``discard_new_folder``); a folder that was there before stays; once training has started, the
    folder keeps its log, its error and its checkpoints.
    """
    in_the_run = not cfg.ckpt_path  # whether an error belongs in the run's train.log
    started = []  # one item once Trainer.fit is called

    def starting() -> None:  # from here on the folder holds the run, whatever happens
        started.append(True)
        keep_folder(cfg.paths.output_dir)

    try:
        share = thread_share()
        resolved = prepare(cfg, share)
        if share and not cfg.threads:
            log.info("sweep job: %d thread(s), an even share of the cores for the %d jobs running at once "
                     "(hydra.launcher.n_jobs=%s; set threads= to choose)", share, jobs_at_once(),
                     HydraConfig.get().launcher.n_jobs)
        output_dir = Path(cfg.paths.output_dir)
        ckpt_path = resolve_path(continue_requeued(cfg))
        in_the_run = not ckpt_path
        with holding(output_dir) if rank_zero_only.rank == 0 else nullcontext():
            with held_file_logs(hold=bool(ckpt_path)):
                datamodule = build_datamodule(resolved)
                datamodule.prepare()
                if ckpt_path:  # checked before the model is built: a checkpoint that cannot be it costs none
                    vocabulary = datamodule.tokenizer
                    step = check_resume(ckpt_path, {**OmegaConf.to_container(cfg.model, resolve=True),
                                                    "vocab_size": vocabulary.vocab_size},
                                        vocabulary.state(), datamodule.identity)
                    if step >= cfg.trainer.max_steps:
                        return already_finished(output_dir, ckpt_path, step, cfg.trainer.max_steps)
                module = build_module(resolved, datamodule)
                if ckpt_path:  # recorded once the model is built too (by rank 0: the others write nothing)
                    if HydraConfig.initialized() and rank_zero_only.rank == 0:
                        record_resume(output_dir, Path(ckpt_path), step, list(HydraConfig.get().overrides.task))
                    log.info("resuming from step %d of %s, training to trainer.max_steps=%d",
                             step, ckpt_path, cfg.trainer.max_steps)
            in_the_run = True
            if not (share or cfg.threads) and rank_zero_only.rank == 0:  # after a resume's checks: none is logged
                warn_if_busy()
            if rank_zero_only.rank == 0:  # what an earlier attempt left: its error, half-written checkpoints
                (output_dir / ERROR).unlink(missing_ok=True)
                for tmp in remove_partial_checkpoints(output_dir / CHECKPOINTS_DIR):
                    log.info("removed %s, a checkpoint half written when the run was killed", tmp)
            metrics = fit(resolved, datamodule, module, output_dir, ckpt_path, starting=starting)
            if rank_zero_only.rank == 0:
                output_dir.mkdir(parents=True, exist_ok=True)
                write_json(output_dir / METRICS, metrics)
            return metrics
    except (TinyLMError, KeyboardInterrupt, SIGTERMException) as e:
        # refused before training: a folder this process made goes, a new run's or a resume's into a new folder
        # (discard_new_folder); one that was there before (a resume in place) stays
        if not started and rank_zero_only.rank == 0 and discard_new_folder(cfg.paths.output_dir):
            raise
        if in_the_run and isinstance(e, TinyLMError):
            log_error_to_files(f"error: {e}")
        raise


def continue_requeued(cfg: DictConfig) -> str | None:
    """A SLURM job requeued after pre-emption (SLURM_RESTART_COUNT > 0) continues from its own last checkpoint."""
    if cfg.ckpt_path or int(os.environ.get("SLURM_RESTART_COUNT") or 0) < 1 or sweep_dir_of_job() is None:
        return cfg.ckpt_path
    last = Path(cfg.paths.output_dir) / LAST_CHECKPOINT
    return str(last) if last.is_file() else None


def thread_share() -> int | None:
    """In a sweep under the joblib launcher, an even share of the cores for each of the jobs that run at
    once (at least 1); None for a job that runs alone (PyTorch's default threads, one per core)."""
    if sweep_dir_of_job() is None or "Joblib" not in str(HydraConfig.get().launcher.get("_target_", "")):
        return None
    at_once = jobs_at_once()
    return None if at_once == 1 else max(1, usable_cores() // at_once)


def jobs_at_once() -> int:
    """How many jobs of this joblib sweep run side by side: as its launcher told the job
    (``tinylm.runs.sweep_workers``), else ``hydra.launcher.n_jobs`` (a sweeper of its own, e.g. Optuna's)."""
    from joblib import effective_n_jobs

    return int(os.environ.get(AT_ONCE_ENV) or effective_n_jobs(HydraConfig.get().launcher.n_jobs))


def warn_if_busy() -> None:
    """One warning line when the machine is already busier than its cores (the 1-minute load average
    above them): PyTorch's threads then wait for each other (on a busy 2-core machine 2 threads trained
    4-8x slower than 1), and ``threads=1`` is the fix. The default number of threads stays as it is."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this system (Windows)
        return
    cores = usable_cores()
    if load > cores:
        log.warning("this machine is busy: its load average over the last minute is %.1f for %d usable core(s), "
                    "and PyTorch's threads wait for each other on busy cores: if training is slow, train "
                    "with threads=1", load, cores)


def already_finished(output_dir: Path, ckpt_path: str, step: int, max_steps: int) -> dict:
    """Say that the run is done and how to train it further; return its saved metrics untouched (none,
    and one line saying so, when its metrics file cannot be read: nothing is written either way)."""
    print(f"run {output_dir} is already finished: {ckpt_path} is at step {step} and trainer.max_steps={max_steps}, "
          f"so nothing was trained or written. To train it further, resume with more steps, e.g. "
          f"`python train.py ckpt_path={ckpt_path} trainer.max_steps={max(step, max_steps) * 2}`", flush=True)
    try:
        return read_metrics(output_dir) or {}
    except ValueError as e:
        print(f"its {output_dir / METRICS} cannot be read ({e}), so its results are not reported: restore that "
              "file (its checkpoints and train.log are untouched)", flush=True)
        return {}


def stopped_by_signal(signum: signal.Signals, in_sweep: bool) -> None:
    """After Ctrl-C or SIGTERM a run exits 130 or 143, as any program stopped by that signal; a sweep
    job returns, and the sweep stops (``tinylm.runs.sweep_stop.job_stopped_by``)."""
    if not in_sweep:
        raise SystemExit(exit_code(signum))
    job_stopped_by(signum)


def record_failure(cfg: DictConfig, message: str) -> Path:
    """Write a failed sweep job's line into its error file (``ERROR``); return the folder."""
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / ERROR).write_text(f"{message}\n")
    return output_dir
