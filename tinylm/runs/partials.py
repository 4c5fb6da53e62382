"""Half-written checkpoints: the ``<name>.ckpt.tmp`` a killed run leaves in its ``checkpoints/`` folder.

A checkpoint is written to ``<name>.ckpt.tmp`` and renamed into place (``tinylm.training.safety``), so
``kill -9`` mid-write leaves a ``.tmp`` that no lister ever takes (they list ``*.ckpt`` regular files
only). It is removed:

- by the run's next start in that folder (``remove_partial_checkpoints``, holding the folder);
- by the next checkpoint written into that folder (its writer is the folder's one writer);
- by anything that lists the run's checkpoints (``remove_stale_partials``) once the run's claim
  (``running.json``, ``tinylm.runs.lock``) shows that the process that wrote it is gone: a run killed
  during its first checkpoint has no ``last.ckpt`` to resume from, so nothing else would.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tinylm.partial_checkpoints import partial_checkpoints
from tinylm.runs.job_files import MARKER, alive, read_marker

MARKER_BYTES = 4096  # a claim is a line of JSON: a larger or non-regular running.json is not read


def writer_gone(run_dir: Path) -> bool:
    """Whether the run's claim (``running.json``) names a process that is gone: a run killed mid-way. No claim
    (a run that ended, or one trained without the run manager), a damaged one or one on another host: False."""
    marker = run_dir / MARKER
    try:
        info = os.stat(marker)
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode) or info.st_size > MARKER_BYTES:
        return False
    holder = read_marker(run_dir)
    return holder is not None and not alive(holder)


def remove_stale_partials(checkpoint_dir: Path) -> list[Path]:
    """Remove the ``*.ckpt.tmp`` of ``checkpoint_dir`` when its run's writer is gone (``writer_gone``);
    return what was removed. Listed before the claim is read: a process that claims the run afterwards
    writes its own ``.tmp`` only after claiming it, so it never loses one to this."""
    found = partial_checkpoints(checkpoint_dir)
    if not found or not writer_gone(Path(checkpoint_dir).parent):
        return []
    for tmp in found:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # a read-only logdir: it stays, and no lister takes it
            pass
    return found
