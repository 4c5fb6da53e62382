"""The ranks of one training job started from outside, on one node or several: by ``torchrun`` on each
node, or by SLURM (``srun``, a ``sbatch`` script's ``srun``, a submitit job of several tasks).

Every rank runs ``train.py`` with the same command line, so each would name its own run folder:
Hydra resolves the time stamp in ``hydra.run.dir`` (``${now:...}``) in each process from its own clock
(Hydra #2070) and ``unique_dir`` gives a second rank that finds the name taken a ``-2`` folder. So rank 0
(the job's global rank 0) alone names and claims the folder, and tells the other ranks (``agree``):

- torchrun: through the job's own rendezvous store, the TCPStore torchrun's agent on the master node serves
  at MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE), under a key of this attempt
  (TORCHELASTIC_RESTART_COUNT): nothing is left behind, and no clock is read;
- SLURM: through a small file of this job step and attempt, ``<paths.log_dir>/.ranks/slurm-<job>.<step>-<restart>``,
  in the outputs folder, which every node must share anyway (the run folder is there).

The other ranks then run with ``hydra.run.dir`` set to rank 0's folder and write nothing into it: no
``.hydra`` record (``hydra.output_subdir=null``), no ``train.log`` (their log goes to their console only).
Rank 0 writes the lock, ``running.json``, the checkpoints, the TensorBoard events, ``metrics.json`` and
``train.log``. A rank 0 that stops before it chose a folder (a refused config) says so to the others, who
end with one line too instead of waiting.

``tinylm.runs.layout.check_layout`` checks the layout SLURM or torchrun started against ``trainer.devices`` x
``trainer.num_nodes`` before anything is built.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

from tinylm.errors import TinyLMError

WAIT_SECONDS = 600  # how long a rank waits for rank 0 to name the run folder (it may build a token cache first)
FAILED = ""  # what rank 0 publishes when it stopped before naming a folder
RANKS_DIR = ".ranks"  # under paths.log_dir: the SLURM job steps' folder names
KEEP_SECONDS = 7 * 24 * 3600  # a job step's file older than this is removed when rank 0 writes a new one
# for the ranks but 0: no .hydra record and no train.log in rank 0's folder (Hydra's file handler is deleted)
QUIET_RANK = ["hydra.output_subdir=null", "hydra.job_logging.root.handlers=[console]",
              "~hydra.job_logging.handlers.file"]


class Launch(NamedTuple):
    """This process's place in a job whose ranks were started from outside."""

    rank: int  # global rank
    world: int  # how many ranks the job has
    how: str  # "torchrun" or "slurm"


def slurm_interactive() -> bool:
    """``srun --job-name=bash|interactive``: Lightning ignores SLURM for such a job, so does this module."""
    return os.environ.get("SLURM_JOB_NAME") in ("bash", "interactive")


def launch() -> Launch | None:
    """The job this process is one rank of, when its ranks were started from outside (torchrun or SLURM) and
    there are several; None for one process, or for a rank Lightning itself started (it is told the folder)."""
    env = os.environ
    if "TORCHELASTIC_RUN_ID" in env and "RANK" in env:
        world = int(env.get("WORLD_SIZE", "1"))
        return Launch(int(env["RANK"]), world, "torchrun") if world > 1 else None
    if "SLURM_PROCID" in env and "SLURM_JOB_ID" in env and not slurm_interactive():  # one task too: a requeue finds it
        return Launch(int(env["SLURM_PROCID"]), int(env.get("SLURM_NTASKS", "1")), "slurm")
    return None


def _store():
    """The torchrun job's rendezvous store (its agent's TCPStore), as a client."""
    from torch.distributed import TCPStore

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true":
        raise TinyLMError("this torchrun has no agent store (TORCHELASTIC_USE_AGENT_STORE is not True) to share "
                          "the run folder through: start the ranks with torchrun 2.x, or name the folder on every "
                          "node with hydra.run.dir=...")
    return TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                    timeout=timedelta(seconds=WAIT_SECONDS))


def _torchrun_key(attempt: int | None = None) -> str:
    """The store's key of the run folder of this attempt (or of ``attempt``: torchrun's restarts count them)."""
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) if attempt is None else attempt
    return f"tinylm/run_dir/{os.environ.get('TORCHELASTIC_RUN_ID')}/{attempt}"


def slurm_file(log_dir: str | Path) -> Path:
    """The file through which this SLURM job step's rank 0 names the run folder."""
    env = os.environ
    step = f"{env.get('SLURM_JOB_ID')}.{env.get('SLURM_STEP_ID', 'batch')}-{env.get('SLURM_RESTART_COUNT') or 0}"
    return Path(log_dir) / RANKS_DIR / f"slurm-{step}"


def publish(job: Launch, run_dir: str, log_dir: str | Path) -> None:
    """Rank 0: tell the other ranks the run folder (``FAILED``: that rank 0 stopped before naming one)."""
    if job.how == "torchrun":
        _store().set(_torchrun_key(), run_dir.encode())
        return
    path = slurm_file(log_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.glob("slurm-*"):
        try:
            if time.time() - old.stat().st_mtime > KEEP_SECONDS:
                old.unlink()
        except OSError:
            pass
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(run_dir, encoding="utf-8")
    os.replace(tmp, path)


def _received(job: Launch, log_dir: str | Path) -> str:
    """The run folder rank 0 published; TinyLMError when none came in ``WAIT_SECONDS``."""
    waited = f"rank {job.rank} waited {WAIT_SECONDS} s for rank 0 to name the run folder"
    if job.how == "torchrun":
        try:
            return _store().get(_torchrun_key()).decode()
        except Exception as e:  # the store's timeout, or its agent gone with rank 0's node
            raise TinyLMError(f"{waited} through torchrun's store at {os.environ.get('MASTER_ADDR')}:"
                              f"{os.environ.get('MASTER_PORT')} and got none ({type(e).__name__}): see rank 0's "
                              "output on the master node, and start the job again on every node") from None
    path = slurm_file(log_dir)
    deadline = time.monotonic() + WAIT_SECONDS
    while not path.is_file():
        if time.monotonic() > deadline:
            raise TinyLMError(f"{waited} in {path} and got none: paths.log_dir must be a folder every node "
                              "shares; see rank 0's output (SLURM task 0)")
        time.sleep(0.2)
    return path.read_text(encoding="utf-8")


def follow_rank_zero(job: Launch, log_dir: str | Path) -> list[str]:
    """A rank but 0: the overrides that put it in rank 0's run folder, writing nothing there."""
    run_dir = _received(job, log_dir)
    if run_dir == FAILED:
        raise TinyLMError(f"rank 0 stopped before training (see its error line), so rank {job.rank} stops too")
    from tinylm.cli import quote_values

    return [*quote_values([f"hydra.run.dir={run_dir}"], ("hydra.run.dir",), literal=True), *QUIET_RANK]


_naming: dict = {}  # rank 0, until it named its run folder: its job and outputs folder


@contextmanager
def shared_run_folder(job: Launch | None, argv: list[str], conf_dir: Path) -> Iterator[None]:
    """Around ``train.py``'s Hydra app: a rank but 0 of ``job`` gets rank 0's run folder (``argv`` is extended
    in place, before Hydra reads it); rank 0 names its folder inside (``folder_named``), or, when it stops
    before, tells the others that it stopped."""
    if job is None:
        yield
        return
    log_dir = ""
    if job.how == "slurm":
        from tinylm.runs.folder import composed_log_dir

        log_dir = composed_log_dir(conf_dir, [a for a in argv[1:] if not a.startswith(("-", "hydra."))])
    if job.rank != 0:
        argv.extend(follow_rank_zero(job, log_dir))
        yield
        return
    _naming.update(job=job, log_dir=log_dir)
    try:
        yield
    finally:
        if _naming.pop("job", None) is not None:
            try:
                publish(job, FAILED, log_dir)
            except (OSError, RuntimeError, TinyLMError):  # the others then wait out WAIT_SECONDS
                pass


def folder_named(run_dir: str | Path) -> None:
    """Rank 0 has its run folder (Hydra made it): tell the other ranks. Nothing outside such a job."""
    job = _naming.pop("job", None)
    if job is not None:
        publish(job, str(Path(run_dir).resolve()), _naming["log_dir"])


def slurm_requeued() -> bool:
    """Whether SLURM is ending this job to run it again (``scontrol requeue``, a pre-emption that requeues):
    its record then counts more restarts than this attempt's SLURM_RESTART_COUNT. A job cancelled for good,
    or no SLURM: False."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return False
    try:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    restarts = re.search(r"\bRestarts=(\d+)", shown.stdout)
    return restarts is not None and int(restarts.group(1)) > int(os.environ.get("SLURM_RESTART_COUNT") or 0)


def requeued_run(argv: list[str], conf_dir: Path) -> list[str]:
    """``argv`` of a SLURM job that SLURM requeued (SLURM_RESTART_COUNT > 0; not a sweep job, which
    ``tinylm.runs.job.continue_requeued`` continues), or of a torchrun job whose workers torchrun restarted
    (TORCHELASTIC_RESTART_COUNT > 0, ``--max-restarts``): ``ckpt_path=`` the last checkpoint of the run folder
    its earlier attempt named, so that it continues that run; unchanged when the command line names a
    checkpoint or no earlier attempt saved one."""
    env = os.environ
    if any(a.lstrip("+").startswith("ckpt_path=") for a in argv[1:]):
        return argv
    from tinylm.cli import quote_values
    from tinylm.run_folder import LAST_CHECKPOINT
    from tinylm.runs.folder import composed_log_dir

    job = launch()
    if job is not None and job.how == "torchrun" and int(env.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0:
        restart = int(env["TORCHELASTIC_RESTART_COUNT"])
        store = _store()
        for attempt in range(restart - 1, -1, -1):  # torchrun restarted its workers (--max-restarts)
            key = _torchrun_key(attempt)
            last = Path(store.get(key).decode()) / LAST_CHECKPOINT if store.check([key]) else None
            if last is not None and last.is_file():
                print(f"torchrun restarted the job's workers (attempt {restart + 1}): continuing {last}", flush=True)
                return [*argv, *quote_values([f"ckpt_path={last}"], ("ckpt_path",))]
        return argv
    restart = int(env.get("SLURM_RESTART_COUNT") or 0)
    if restart < 1 or "SLURM_JOB_ID" not in env or slurm_interactive():
        return argv

    log_dir = composed_log_dir(conf_dir, [a for a in argv[1:] if not a.startswith(("-", "hydra."))])
    earlier = []
    for path in (Path(log_dir) / RANKS_DIR).glob(f"slurm-{env['SLURM_JOB_ID']}.*-*"):
        attempt = path.name.rpartition("-")[2]
        if attempt.isdigit() and int(attempt) < restart:
            earlier.append((int(attempt), path))
    for _, path in sorted(earlier, reverse=True):
        last = Path(path.read_text(encoding="utf-8")) / LAST_CHECKPOINT
        if last.is_file():
            print(f"SLURM requeued job {env['SLURM_JOB_ID']} (attempt {restart + 1}): continuing {last}", flush=True)
            return [*argv, *quote_values([f"ckpt_path={last}"], ("ckpt_path",))]
    return argv


def leave_files_to_rank_zero() -> None:
    """A rank but 0 of such a job logs to its console only: no line of it in rank 0's ``train.log`` (a sweep job
    that SLURM runs as several tasks, where Hydra opened the file in every task)."""
    job = launch()
    if job is None or job.rank == 0:
        return
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)
        handler.close()
