"""One process trains a run folder: a second one (two resumes of one run at once) is refused.

The claim is the run's ``tinylm.run_folder.MARKER`` file (its pid, host and start time, as ``read_marker``
reads it), made atomically: the marker is written whole into a file of this process's own, then
hard-linked to ``MARKER``, which fails when that name exists. Once made, it replaces the
claim a sweep put on this job before launching it (``CLAIM``, ``tinylm.runs.job_files.claim_job``).
When ``MARKER`` exists already:

- its process still runs (``tinylm.run_folder.alive``; one on another host counts as running): refused,
  in one line naming that process and host;
- its process is gone (``kill -9``, a power cut) or the marker is damaged: stale, taken over. The
  stale file is first renamed to a name of this process's own, so of two processes taking it over
  at once only one gets it; one that grabbed a fresh claim instead gives it back.
- it was written by an earlier attempt of this SLURM job (the same SLURM_JOB_ID, a lower
  SLURM_RESTART_COUNT): SLURM requeued the job, perhaps onto another node, after ending that
  attempt, so it is stale too however its host looks from here.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.run_folder import CLAIM, MARKER, alive, read_marker
from tinylm.runs.job_files import since, this_process
from tinylm.values import is_int

ATTEMPTS = 3  # claims lost to another process taking over the same stale marker at the same moment


class FolderInUse(TinyLMError):
    """Another process trains in this run folder: nothing may be written there."""


def refusal(folder: Path, holder: dict) -> FolderInUse:
    gone = ("" if holder["host"] == socket.gethostname() else
            f"; if that process is gone, delete {folder / MARKER} and try again")
    return FolderInUse(f"run folder {folder} is in use by process {holder['pid']} on host {holder['host']} "
                       f"(since {since(holder)}): two processes must not train one run; wait until it ends, or "
                       f"stop it{gone}")


def slurm_attempt() -> dict:
    """This process's SLURM job and attempt (none outside SLURM), kept in the marker."""
    job = os.environ.get("SLURM_JOB_ID")
    return {"slurm_job": job, "slurm_restart": int(os.environ.get("SLURM_RESTART_COUNT") or 0)} if job else {}


def stale(holder: dict | None) -> bool:
    """Whether the claim ``holder`` is no longer held: damaged, its process gone, or an earlier SLURM attempt."""
    if holder is None or not alive(holder):
        return True
    mine = slurm_attempt()
    return bool(mine) and holder.get("slurm_job") == mine["slurm_job"] and \
        is_int(holder.get("slurm_restart")) and holder["slurm_restart"] < mine["slurm_restart"]


def _take_over(folder: Path, seen: bytes) -> None:
    """Remove the stale ``MARKER`` whose bytes were ``seen``, unless it changed meanwhile."""
    grabbed = folder / f"{MARKER}.stale-{os.getpid()}"
    try:
        os.rename(folder / MARKER, grabbed)
    except FileNotFoundError:  # another process removed it first
        return
    try:
        if grabbed.read_bytes() != seen:  # a fresh claim came in between: give it back
            os.link(grabbed, folder / MARKER)
    except FileExistsError:
        pass
    finally:
        grabbed.unlink(missing_ok=True)


def claim(folder: Path) -> bytes:
    """Claim ``folder`` for this process; return the marker written. TinyLMError if another holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    mine = json.dumps({**this_process(), **slurm_attempt()}).encode()
    private = folder / f"{MARKER}.{os.getpid()}"
    private.write_bytes(mine)
    try:
        for _ in range(ATTEMPTS):
            try:
                os.link(private, folder / MARKER)
                (folder / CLAIM).unlink(missing_ok=True)  # a sweep's claim on this job: taken over
                return mine
            except FileExistsError:
                pass
            try:
                held = (folder / MARKER).read_bytes()  # first the bytes, then what they say
            except FileNotFoundError:  # its holder just ended
                continue
            holder = read_marker(folder)
            if not stale(holder):
                raise refusal(folder, holder)
            _take_over(folder, held)
    finally:
        private.unlink(missing_ok=True)
    raise TinyLMError(f"could not claim run folder {folder}: other processes keep claiming it; "
                      "start one training of this run at a time")


@contextmanager
def holding(folder: Path) -> Iterator[None]:
    """``folder`` claimed for the duration of the block; the claim is released however it ends."""
    mine = claim(folder)
    try:
        yield
    finally:
        marker = folder / MARKER
        try:
            if marker.read_bytes() == mine:  # still ours
                marker.unlink()
        except FileNotFoundError:
            pass
