"""Sweeps that survive interruption, and that share the machine when their jobs run in parallel.

Re-running a sweep's command with ``hydra.sweep.dir=<that sweep>`` (or ``hydra.sweep.dir=last``,
the newest sweep) finishes it. Before each batch of jobs is launched, ``ResumingLauncher`` looks
at every job's folder (``tinylm.runs.job_files.job_status``):

- finished: not launched at all; its folder stays untouched and its result is reported;
- interrupted (Ctrl-C, or killed: it left its last checkpoint): launched with
  ``ckpt_path=<its last checkpoint>``, continuing exactly as a resumed run does, its Hydra record kept;
- failed, not started, or no folder yet: launched as in a new sweep.

Every job is planned, and each one to launch is claimed (``CLAIM``, see ``tinylm.runs.job_files``),
before Hydra writes the sweep's ``multirun.yaml``. A folder that holds a run of other settings than
the job's (another command was run into this sweep folder; overrides that compose the same config
are the same settings), a job that is still running or claimed by another run of the sweep, or a
job record that cannot be read stops the re-run with one line, and nothing is written.

Ctrl-C or SIGTERM stops a sweep cleanly (``tinylm.runs.sweep_stop``); re-running it finishes it.

On SLURM a pre-empted job that submitit requeues runs the same job again; it continues from its
own last checkpoint too (``tinylm.runs.job.continue_requeued``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from tinylm.cli import quote_values
from tinylm.errors import TinyLMError
from tinylm.run_folder import CLAIM, LAST_CHECKPOINT, LAST_NAME, MARKER, METRICS, read_marker
from tinylm.runs.folder import composed_log_dir, newest_sweep_dir, original_overrides
from tinylm.runs.job_files import (
    UNREADABLE,
    claim_job,
    describe,
    job_status,
    planning_lock,
    read_metrics,
    release_claim,
)
from tinylm.runs.sweep_launch import job_work, launch_largest_first, runs_in_parallel
from tinylm.runs.sweep_stop import STOP_FILE, interrupt_stops_the_sweep

# --------------------------------------------------------------------------------------------
# Before Hydra starts: hydra.sweep.dir=last


def newest_sweep(argv: list[str], conf_dir: Path) -> list[str]:
    """``argv`` with ``hydra.sweep.dir=last`` replaced by the newest sweep folder under ``paths.log_dir``."""
    last = ("hydra.sweep.dir=last", "hydra.sweep.dir='last'")  # as typed, or as quote_values quoted it
    if not set(last) & set(argv):
        return argv
    locators = [a for a in argv[1:] if a.lstrip("+").startswith(("paths.", "paths/"))]
    try:
        newest = newest_sweep_dir(composed_log_dir(conf_dir, locators))
    except TinyLMError as e:
        raise TinyLMError(f"hydra.sweep.dir=last: {e}") from None
    print(f"hydra.sweep.dir=last: {newest}", flush=True)
    return [quote_values([f"hydra.sweep.dir={newest}"], ("hydra.sweep.dir",))[0] if a in last else a for a in argv]


# --------------------------------------------------------------------------------------------
# In the sweep's process: which jobs to launch, and how


class ResumingLauncher:
    """Wraps the sweep's launcher (basic, joblib, SLURM): keeps finished jobs, continues interrupted ones;
    on the joblib launcher (``largest_first``) starts the largest jobs first (``tinylm.runs.sweep_launch``)."""

    def __init__(self, launcher, hydra_context, config: DictConfig, largest_first: bool = True):
        self.launcher = launcher
        self.hydra_context = hydra_context
        self.config = config
        self.largest_first = largest_first and runs_in_parallel(launcher)  # jobs in parallel: the largest first
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        self.planned: list[tuple[str, Path]] = []  # for every job of the sweep, by number

    def job_config(self, overrides: Sequence[str], num: int) -> DictConfig:
        """Job number ``num``'s config, composed with these overrides as Hydra composes it."""
        job = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(job):
            job.hydra.job.num = num
        return job

    @contextmanager
    def claimed(self, job_overrides: Sequence[Sequence[str]]) -> Iterator[None]:
        """Plan every job of the sweep and claim each one to launch (``job_files.claim_job``), before
        anything else is written: a re-run that is refused leaves the sweep folder as it was. The
        claims still held when the block ends are removed."""
        jobs = [self.job_config(overrides, num) for num, overrides in enumerate(job_overrides)]
        rerun = self.sweep_dir.is_dir() and any(p.is_dir() for p in self.sweep_dir.iterdir())
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        claims: list[tuple[Path, dict]] = []
        try:
            with planning_lock(self.sweep_dir):
                self.planned = self.plan(job_overrides, jobs)
                for num, (action, folder) in enumerate(self.planned):
                    claim = claim_job(folder) if action != "keep" else None
                    if action != "keep" and claim is None:
                        raise SystemExit(self.refusal([(f"job {num} ({folder}) was claimed just now by another "
                                                        "run of this sweep", "Let that one finish it.")]))
                    if claim is not None:
                        claims.append((folder, claim))
            if rerun:
                counts = {k: sum(1 for p, _ in self.planned if p == k) for k in ("keep", "continue", "new")}
                print(f"finishing sweep {self.sweep_dir}: {counts['keep']} job(s) finished (kept as they are), "
                      f"{counts['continue']} interrupted (continue from their {LAST_NAME}), {counts['new']} to run",
                      flush=True)
            yield
        finally:
            for folder, claim in claims:
                release_claim(folder, claim)

    def plan(self, job_overrides: Sequence[Sequence[str]], jobs: Sequence[DictConfig]) -> list[tuple[str, Path]]:
        """For each job: ("new" | "keep" | "continue", its folder); a SystemExit naming every job that
        stops the re-run (other settings, running or queued elsewhere, a record that cannot be read)."""
        plan, problems = [], []
        for num, (overrides, job) in enumerate(zip(job_overrides, jobs, strict=True)):
            folder = self.sweep_dir / str(job.hydra.sweep.subdir)
            status = job_status(folder)
            plan.append(({"finished": "keep", "interrupted": "continue"}.get(status, "new"), folder))
            try:
                saved = original_overrides(folder)
                if status == "interrupted":  # the continued job reads its resumes.yaml too: refused here if damaged
                    from tinylm.runs.resume import saved_overrides  # with the checkpoint reader (torch): only here

                    saved_overrides(folder)
            except TinyLMError as e:
                problems.append((f"job {num}: {e}", "Then run this again."))
                continue
            other = self.other_settings(saved, overrides, num) if status != "not started" else None
            if other is not None:
                problems.append((f"job {num} ({folder}) holds a run of other settings: it has {other[0]} where "
                                 f"this command gives {other[1]}", "Re-run a sweep with its own command line only; "
                                 "for other settings use a new hydra.sweep.dir."))
            elif status in ("running", "queued"):
                name = MARKER if status == "running" else CLAIM
                what = "is still running" if status == "running" else "is claimed by another run of this sweep"
                problems.append((f"job {num} ({folder}) {what} ({describe(read_marker(folder, name))}); if it is "
                                 "no longer running (a process on another host cannot be checked from here), delete "
                                 f"{folder / name}", "Run this again once it has stopped."))
            elif status == UNREADABLE:
                try:
                    read_metrics(folder)
                except ValueError as e:
                    problems.append((f"job {num} ({folder}): its {METRICS} cannot be read ({e}); restore that file, "
                                     f"or delete the folder {folder} to train the job again", "Then run this again."))
        if problems:
            raise SystemExit(self.refusal(problems))
        return plan

    def refusal(self, problems: Sequence[tuple[str, str]]) -> str:
        """The one error line of a refused re-run: every problem, then what to do about them."""
        fixes = " ".join(dict.fromkeys(fix for _, fix in problems))
        return f"error: cannot finish sweep {self.sweep_dir}: {'; '.join(text for text, _ in problems)}. {fixes}"

    def other_settings(self, saved: Sequence[str] | None, overrides: Sequence[str], num: int) -> tuple[str, str] | None:
        """(what the folder's run has, what this command gives) where they train different settings; None
        where they are the same: the same overrides, or overrides that compose the same config (an
        override equal to the default is the same setting as none)."""
        if saved is None:
            return None
        theirs, ours = settings(saved) - settings(overrides), settings(overrides) - settings(saved)
        if not (theirs or ours) or self.same_config(saved, overrides, num):
            return None
        return " ".join(sorted(theirs)) or "(none)", " ".join(sorted(ours)) or "(none)"

    def same_config(self, saved: Sequence[str], overrides: Sequence[str], num: int) -> bool:
        """Whether both lists of overrides compose the same training config (``paths`` aside)."""

        def trained(overrides: Sequence[str]) -> dict:
            job = OmegaConf.to_container(self.job_config(overrides, num), resolve=False)
            return {key: value for key, value in job.items() if key not in ("hydra", "paths")}

        try:
            return trained(saved) == trained(overrides)
        except (HydraException, OmegaConfBaseException):  # the run's overrides do not compose any more
            return False

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        if (self.sweep_dir / STOP_FILE).is_file():  # stopped by Ctrl-C in an earlier batch of this command
            return [skipped_job(overrides) for overrides in job_overrides]
        plan = self.planned[initial_job_idx:initial_job_idx + len(job_overrides)]
        returns: list[JobReturn | None] = [None] * len(job_overrides)
        segment: list[int] = []  # jobs to launch together (consecutive ones, unless each keeps its number anyway)

        def launch_segment() -> None:
            if segment:
                batch = [launch_overrides(job_overrides[i], *plan[i]) for i in segment]
                with interrupt_stops_the_sweep(self.sweep_dir):
                    if self.largest_first:
                        jobs = [(initial_job_idx + i, overrides, job_work(self.job_config(job_overrides[i], 0)))
                                for i, overrides in zip(segment, batch, strict=True)]
                        launched = launch_largest_first(self.launcher, jobs)
                    else:
                        launched = self.launcher.launch(batch, initial_job_idx + segment[0])
                    for i, ret in zip(segment, launched, strict=True):
                        returns[i] = ret
                segment.clear()

        for i, (action, folder) in enumerate(plan):
            if action == "keep":
                if not self.largest_first:
                    launch_segment()
                returns[i] = kept_job(job_overrides[i], folder)
            else:
                segment.append(i)
        launch_segment()
        return returns


def settings(overrides: Sequence[str]) -> set[str]:
    """What a job's overrides train: all but ``paths.*``, which only say where the folders are."""
    return {o for o in overrides if not o.lstrip("+~").startswith(("paths.", "paths/", "paths="))}


def launch_overrides(overrides: Sequence[str], action: str, folder: Path) -> list[str]:
    """A job's overrides as launched: an interrupted job continues from its last checkpoint, its record kept."""
    if action != "continue":
        return list(overrides)
    ckpt = quote_values([f"ckpt_path={folder / LAST_CHECKPOINT}"], ("ckpt_path",))
    return [*overrides, *ckpt, "hydra.output_subdir=null"]


def kept_job(overrides: Sequence[str], folder: Path) -> JobReturn:
    """A finished job's result, read from its metrics file and nothing else: what the job returned
    when it ran (its best val loss, as ``tinylm.runs.job.main`` returns)."""
    metrics = read_metrics(folder) or {}
    best = metrics.get("best_val_loss", metrics.get("val_loss"))
    print(f"job {folder.name} finished before, kept as it is: best val loss "
          f"{'n/a' if best is None else f'{best:.4f}'} ({' '.join(overrides)})", flush=True)
    return JobReturn(overrides=list(overrides), working_dir=str(folder), status=JobStatus.COMPLETED,
                     _return_value=math.inf if best is None else float(best))


def skipped_job(overrides: Sequence[str]) -> JobReturn:
    return JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED, _return_value=math.nan)
