"""The fork server of a parallel sweep (``tinylm.runs.sweep_workers``): set up before its imports, and its end.

Imported first by the server, started with ``SERVER_ENV`` set (imported anywhere else, this module
does nothing):

- the root logger gets a handler before Lightning is imported. Lightning, imported into a root logger
  without one, prints its lines itself and keeps them from the root's handlers; a worker's job would
  then miss them in its ``train.log`` (Hydra's file handler on the root), unlike a job in a worker that
  imported Lightning itself, after Hydra had set up the job's logging.
- the server ends at once. When the sweep's process ends, so does the server, and tearing down the
  torch and Lightning it imported would take it a second or more (1.3 s on 2 cores) after the sweep
  is done; as it holds the sweep's stdout and stderr (its workers write there), a caller that reads
  them (a pipe, ``subprocess.run``) would wait for it. It owns nothing that needs an orderly end, so it
  ends with ``os._exit``. Its workers end with ``os._exit`` anyway (multiprocessing's fork server does so).
"""

import atexit
import logging
import os

SERVER_ENV = "TINYLM_SWEEP_FORK_SERVER"

if os.environ.get(SERVER_ENV) == "1":
    logging.getLogger().addHandler(logging.NullHandler())
    atexit.register(os._exit, 0)
