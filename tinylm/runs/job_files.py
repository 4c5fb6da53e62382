"""What a job folder says about its job: finished, running, interrupted, failed or not started.

A training job leaves these files in its folder (``tinylm.runs.job`` writes them, the Trainer its checkpoints;
``tinylm.run_folder`` names them):

- its claim (``MARKER``) while it trains: its process id, host and start time. It is removed when the
  job ends in any way Python sees (done, an error, Ctrl-C); ``kill -9`` or a power cut leave it, and
  a marker whose process is gone on this host is how a killed job is told from a running one.
- its metrics (``METRICS``) when training ends (``"interrupted": true`` after a Ctrl-C);
- its error file (``ERROR``) when a sweep job fails (its one ``error:`` line);
- its last checkpoint (``LAST_CHECKPOINT``) from its first validation on: what an interrupted job resumes from.

A sweep claims each job it is about to launch (``claim_job``): ``CLAIM``, created exclusively,
names the sweep's process. A second run of the same sweep sees the job as queued and leaves it
alone. The job takes the claim over when it starts (``tinylm.runs.lock.claim`` makes its ``MARKER``,
then removes the ``CLAIM``); the sweep removes the claims still left when it ends
(``release_claim``). A training run never reads a ``CLAIM``; a claim whose process is gone
(``kill -9``) counts for nothing and is replaced by the next run of the sweep.

``job_status`` reads them; the sweep report and the sweeps that continue an interrupted sweep
both ask it. ``expected_jobs`` lists the jobs a grid sweep defines, so that the jobs it has not
reached yet can be listed too.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.utils import get_class
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from tinylm.run_folder import CLAIM, ERROR, LAST_CHECKPOINT, METRICS, alive, read_marker
from tinylm.values import is_number

UNREADABLE = f"unreadable {METRICS}"  # a job_status: its metrics are there but cannot be used

# the metrics' fields that are numbers (or null), and those that are true or false
NUMBERS = ("val_loss", "val_bpc", "best_val_loss", "best_step", "num_params", "tokens_per_second",
           "wall_seconds", "steps")
FLAGS = ("interrupted", "stopped_early")
JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
              float: "a number", type(None): "null"}


def write_json(path: Path, data: dict) -> None:
    """Strict JSON (no NaN), written to a temporary file and renamed: a reader sees all of it or none."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def this_process() -> dict:
    """What a ``MARKER`` and a ``CLAIM`` record: this process's id, host and the time now."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}


def parse_metrics(text: str) -> dict:
    """The metrics' object; ValueError saying what is wrong with it. A missing val loss (null,
    or the bare NaN of older files) is allowed."""
    try:
        metrics = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(metrics, dict):
        raise ValueError(f"{JSON_TYPES[type(metrics)]} instead of an object")
    for name in NUMBERS:
        value = metrics.get(name)
        if value is not None and not is_number(value, finite=False):
            raise ValueError(f"{name} is {JSON_TYPES[type(value)]}, not a number")
    for name in FLAGS:
        value = metrics.get(name)
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"{name} is {JSON_TYPES[type(value)]}, not true or false")
    return metrics


def read_metrics(folder: Path) -> dict | None:
    """A job's metrics (None when there is none); ValueError saying why it cannot be used."""
    path = folder / METRICS
    if not path.exists():
        return None
    try:
        return parse_metrics(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except OSError as e:
        raise ValueError(e.strerror or str(e)) from None


def since(marker: dict) -> str:
    """When the process of a ``MARKER`` or ``CLAIM`` started, as local time: '2026-11-29 08:00:00'."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(marker["started"]))


def describe(marker: dict | None) -> str:
    """'pid 123 on node7, since 2026-11-29 08:00:00': who wrote a ``MARKER`` or ``CLAIM``."""
    if marker is None:  # removed (or damaged) since its status was read
        return "a process that has just ended"
    return f"pid {marker['pid']} on {marker['host']}, since {since(marker)}"


def job_status(folder: Path) -> str:
    """finished, running, queued, interrupted, failed, not started or ``UNREADABLE``, from the
    files the job left in ``folder``:

    - running: its ``MARKER`` names a process that still runs;
    - queued: a sweep that still runs has claimed it (``CLAIM``) and not started it yet;
    - ``UNREADABLE``: its metrics are there but cannot be used (they are written whole or not
      at all, so it was damaged afterwards): nothing may train over it until it is restored or removed;
    - interrupted: stopped by Ctrl-C (its metrics say so), or killed (a marker left behind) after
      it saved its last checkpoint: resume it from there;
    - failed: its error file, or killed before its first checkpoint;
    - finished: its metrics, not interrupted (an early stop is finished too);
    - not started: none of these files (Hydra's record, a log, a claim whose sweep is gone).
    """
    marker = read_marker(folder)
    if marker is not None and alive(marker):
        return "running"
    claim = read_marker(folder, CLAIM)
    if claim is not None and alive(claim):
        return "queued"
    try:
        metrics = read_metrics(folder)
    except ValueError:
        return UNREADABLE
    checkpoint = (folder / LAST_CHECKPOINT).is_file()
    if marker is not None:  # its process died without cleaning up: killed
        return "interrupted" if checkpoint else "failed"
    if (folder / ERROR).is_file():
        return "failed"
    if metrics is not None:
        return "interrupted" if metrics.get("interrupted") else "finished"
    return "interrupted" if checkpoint else "not started"


@contextmanager
def planning_lock(sweep_dir: Path) -> Iterator[None]:
    """An exclusive lock on the sweep folder for the block, so that two runs of one sweep look at its
    jobs and claim them one after the other. It is ``flock`` on the folder itself (nothing is
    written), and the kernel drops it when the process ends, even by ``kill -9``. Where the file
    system has no ``flock`` (some network file systems) the claims alone, created exclusively,
    keep two runs apart; only replacing a claim left by a killed sweep is then unguarded."""
    fd = os.open(sweep_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # and with it the lock


def claim_job(folder: Path) -> dict | None:
    """Claim the job of ``folder`` for this process: ``CLAIM`` created exclusively (O_CREAT|O_EXCL),
    after a claim whose process is gone (or a damaged one) is removed. Returns the claim; None
    when a live process holds it. Call it inside ``planning_lock``."""
    held = read_marker(folder, CLAIM)
    if held is not None and alive(held):
        return None
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CLAIM).unlink(missing_ok=True)
    claim = this_process()
    try:
        fd = os.open(folder / CLAIM, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:  # another run claimed it just now (a file system without flock)
        return None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(claim, f)
    return claim


def release_claim(folder: Path, claim: dict) -> None:
    """Remove ``claim`` from ``folder``, unless its job has taken it over (then it is gone already)."""
    if read_marker(folder, CLAIM) == claim:
        (folder / CLAIM).unlink(missing_ok=True)


def expected_jobs(sweep_dir: Path) -> dict[str, list[str]] | None:
    """The jobs a grid sweep defines: folder name (the job number) -> that job's overrides.

    Read from the sweep's ``multirun.yaml`` and expanded as Hydra's BasicSweeper (or a sweeper built
    on it) expands the command line. None when there is no fixed list: an Optuna search (which
    writes no multirun.yaml), job folders not named by job number, or a sweep this cannot expand
    (e.g. ``glob(...)`` over config groups).
    """
    try:
        hydra_cfg = OmegaConf.to_container(OmegaConf.load(sweep_dir / "multirun.yaml").hydra, resolve=False)
        if hydra_cfg["sweep"]["subdir"] != "${hydra.job.num}":
            return None
        # by name: Hydra's plugin scan may load basic_sweeper again, making a second BasicSweeper class
        sweeper = get_class(hydra_cfg["sweeper"]["_target_"])
        basic = f"{BasicSweeper.__module__}.{BasicSweeper.__qualname__}"
        if basic not in {f"{c.__module__}.{c.__qualname__}" for c in sweeper.__mro__}:
            return None
        params = [f"{key}={value}" for key, value in (hydra_cfg["sweeper"].get("params") or {}).items()]
        overrides = OverridesParser.create().parse_overrides(params + list(hydra_cfg["overrides"]["task"]))
        (jobs,) = BasicSweeper.split_arguments(overrides, None)
    except (OSError, KeyError, TypeError, ValueError, ImportError, yaml.YAMLError, HydraException,
            OmegaConfBaseException):
        return None
    return {str(number): overrides for number, overrides in enumerate(jobs)}
