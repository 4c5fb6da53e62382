"""A parallel sweep's jobs in workers that start warm, and in this process where parallel would not pay.

Hydra's joblib launcher starts each worker as a fresh Python (loky): before its first job, each one
imports torch and Lightning again, seconds that the sequential launcher pays once, and tears them down
at the end. On a sweep of short jobs that ate the gain of running them side by side. Here:

- ``start_warm_workers``: as soon as a sweep on the joblib launcher is set up, a fork server starts
  importing the training stack (``PRELOAD``), side by side with the sweep's own process still
  planning. The launcher's workers are forked from it, ready in a fraction of a second, each takes
  job after job, and exits without tearing its interpreter down. On Linux only: elsewhere (macOS, where
  forking after importing torch is not safe, and Windows) the workers start as loky starts them.
- ``launch_jobs``: the jobs on the joblib launcher, in the order given (``tinylm.runs.sweep_launch`` hands
  them out largest first). A worker runs its job in the environment of the process that launches
  it and is told how many jobs run at once (``AT_ONCE_ENV``), for its share of the cores
  (``tinylm.runs.job.thread_share``). When no more than one job would run at a time (one job to
  launch, or ``hydra.launcher.n_jobs`` coming to 1), a worker would only add its start-up and take
  threads from the job: the jobs run in this process one after the other with every core's threads,
  as Hydra's basic launcher runs them, and one log line says so.
- ``JoblibJobs``: Hydra's joblib launcher with its ``launch`` done by ``launch_jobs`` (a sweep in the
  grid's order, ``hydra.sweeper.largest_first=false``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from hydra.core.utils import JobReturn

log = logging.getLogger(__name__)

# what the fork server imports once for every worker, in this order: the server's own set-up
# (sweep_fork_server), the training job and what Hydra's joblib launcher unpickles in a worker (its
# execute_job, train.py's task function)
PRELOAD = ["tinylm.runs.sweep_fork_server", "tinylm.runs.job", "tinylm.commands.train",
           "hydra_plugins.hydra_joblib_launcher._core"]
AT_ONCE_ENV = "TINYLM_SWEEP_JOBS_AT_ONCE"  # how many jobs of the sweep run side by side, for each job's threads


def start_warm_workers() -> bool:
    """Start the fork server that the joblib launcher's workers (loky) are forked from, importing
    ``PRELOAD`` from now on; False where the platform has none."""
    import multiprocessing
    import multiprocessing.forkserver

    from joblib.externals.loky.backend.context import set_start_method

    from tinylm.runs.sweep_fork_server import SERVER_ENV

    if sys.platform != "linux" or "forkserver" not in multiprocessing.get_all_start_methods():
        return False  # elsewhere forking after importing torch is not safe (macOS) or possible (Windows)
    set_start_method("forkserver", force=True)  # loky's workers: forked from the fork server
    multiprocessing.set_forkserver_preload(PRELOAD)
    # the server's own setting (its workers run in the sweep's environment: job_in_worker)
    with environment({SERVER_ENV: str(os.getpid())}):
        multiprocessing.forkserver.ensure_running()  # returns at once: the server imports meanwhile
    return True


def several_at_once(launcher) -> bool:
    """Whether Hydra's joblib ``launcher`` may run more than one job at a time (``hydra.launcher.n_jobs``)."""
    from joblib import effective_n_jobs

    return effective_n_jobs(launcher.joblib.get("n_jobs", -1)) > 1


class JoblibJobs:
    """Hydra's joblib ``launcher`` whose ``launch`` is ``launch_jobs``; everything else is the launcher's."""

    def __init__(self, launcher):
        self.launcher = launcher

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
        return launch_jobs(self.launcher, list(enumerate(job_overrides, initial_job_idx)))

    def __getattr__(self, name: str):
        if name == "launcher":  # not set yet
            raise AttributeError(name)
        return getattr(self.launcher, name)


def launch_jobs(launcher, jobs: Sequence[tuple[int, Sequence[str]]], order: str = "") -> list[JobReturn]:
    """Launch ``jobs`` (number, overrides) on Hydra's joblib ``launcher`` as its own ``launch`` does, in
    the order given (``order`` says which, in its log line), each with its own number; return their
    results in that order. One job at a time: in this process."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import configure_log, filter_overrides, setup_globals
    from hydra_plugins.hydra_joblib_launcher._core import execute_job, process_joblib_cfg
    from joblib import Parallel, delayed, effective_n_jobs

    setup_globals()
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    joblib_cfg = {**launcher.joblib, "backend": "loky"}  # as the launcher: loky, threads do not work with Hydra
    process_joblib_cfg(joblib_cfg)
    at_once = min(effective_n_jobs(joblib_cfg["n_jobs"]), len(jobs))
    args = (launcher.hydra_context, launcher.config, launcher.task_function, Singleton.get_state())
    if at_once <= 1:
        log.info("hydra.launcher.n_jobs=%s and %d job(s) to launch: one at a time, so %s in this process with "
                 "all %d cores' threads (a worker process would only add its start-up)", joblib_cfg["n_jobs"],
                 len(jobs), "it runs" if len(jobs) == 1 else "they run one after the other", usable_cores())
        log_jobs(jobs, filter_overrides)
        with environment({AT_ONCE_ENV: "1"}):
            return [execute_job(num, list(overrides), *args) for num, overrides in jobs]
    log.info("Joblib.Parallel(%s) is launching %d jobs%s, %d at a time",
             ",".join(f"{k}={v}" for k, v in joblib_cfg.items()), len(jobs), order, at_once)
    log_jobs(jobs, filter_overrides)
    environ = {**os.environ, AT_ONCE_ENV: str(at_once)}
    return Parallel(**joblib_cfg)(delayed(job_in_worker)(environ, num, list(overrides), *args)
                                  for num, overrides in jobs)


def usable_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def log_jobs(jobs: Sequence[tuple[int, Sequence[str]]], filter_overrides) -> None:
    for num, overrides in jobs:
        log.info("\t#%d : %s", num, " ".join(filter_overrides(overrides)))


def job_in_worker(environ: dict[str, str], *args) -> JobReturn:
    """In a worker: Hydra's ``execute_job(*args)`` in the environment of the process that launched it (a
    worker forked from the fork server has the server's, from when the sweep was set up), with Ctrl-C's and
    SIGTERM's default actions as in a process of its own (a worker of the fork server ignores both between
    jobs: ``tinylm.runs.sweep_fork_server``)."""
    from hydra_plugins.hydra_joblib_launcher._core import execute_job

    os.environ.clear()
    os.environ.update(environ)
    between_jobs = {signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
                    signal.SIGTERM: signal.signal(signal.SIGTERM, signal.SIG_DFL)}
    try:
        return execute_job(*args)
    finally:
        for signum, handler in between_jobs.items():
            signal.signal(signum, handler)


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's environment for the block; what was there before, afterwards."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
