"""The fork server of a parallel sweep (``tinylm.runs.sweep_workers``): set up before its imports, and its end.

Imported first by the server, which is started with ``SERVER_ENV`` set to the sweep's process id
(imported anywhere else, this module does nothing):

- the root logger gets a handler before Lightning is imported. Lightning, imported into a root logger
  without one, prints its lines itself and keeps them from the root's handlers; a worker's job would
  then miss them in its ``train.log`` (Hydra's file handler on the root), unlike a job in a worker that
  imported Lightning itself, after Hydra had set up the job's logging.
- the server ends with the sweep's process, at once. Tearing down the torch and Lightning it imported
  would take it a second or more (1.3 s on 2 cores) after the sweep is done, and a sweep that ends
  before its server has imported them (a re-run refused, every job finished before) would leave it
  importing for seconds; as it holds the sweep's stdout and stderr (its workers write there), a caller
  that reads them (a pipe, ``subprocess.run``) would wait for it. It owns nothing that needs an orderly
  end: on Linux the kernel kills it when the sweep's process ends (``PR_SET_PDEATHSIG``), elsewhere it
  ends with ``os._exit``. Its workers, forked from it, end with ``os._exit`` anyway (multiprocessing's
  fork server does so); the kernel's setting does not carry over to them.
- it ignores SIGTERM and Ctrl-C, and so do its workers between jobs (a worker forked by multiprocessing's
  fork server gets the handlers the server had after these imports): a Ctrl-C that found a worker waiting
  for its next job raised KeyboardInterrupt there and broke the launcher, and the job still running in the
  other worker lost its save. SIGTERM to the sweep's
  process group is how a parallel sweep is stopped at once, and the launcher learns of its workers' ends
  through the server, so it would take the server's end for theirs (a ``TerminatedWorkerError``
  instead of the jobs saving). Its workers inherit that while they wait for a job; each job gets the
  default back while it runs (``tinylm.runs.sweep_workers.job_in_worker``).
"""

import atexit
import logging
import os
import signal
import sys

SERVER_ENV = "TINYLM_SWEEP_FORK_SERVER"
PR_SET_PDEATHSIG = 1  # prctl(2)

if os.environ.get(SERVER_ENV):
    logging.getLogger().addHandler(logging.NullHandler())
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what the forked workers keep between jobs (job_in_worker)
    atexit.register(os._exit, 0)
    if sys.platform == "linux":
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != int(os.environ[SERVER_ENV]):  # the sweep's process ended before that took effect
            os._exit(0)
