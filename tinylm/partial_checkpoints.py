"""Half-written checkpoints, as their writer sees them: a checkpoint is written to ``<name>.ckpt.tmp`` and
renamed into place (``tinylm.training.safety``), so ``kill -9`` mid-write leaves a ``.tmp`` that no lister
ever takes (they list ``*.ckpt`` regular files only). The folder's one writer (a checkpoint being written, a
run starting in its folder) removes them; a lister removes them once their writer is gone
(``tinylm.runs.partials``).
"""

from __future__ import annotations

from pathlib import Path

TMP_SUFFIX = ".tmp"  # a checkpoint being written: <name>.ckpt.tmp


def partial_checkpoints(checkpoint_dir: Path) -> list[Path]:
    return sorted(Path(checkpoint_dir).glob(f"*.ckpt{TMP_SUFFIX}"))


def remove_partial_checkpoints(checkpoint_dir: Path, keep: Path | None = None) -> list[Path]:
    """Remove the ``*.ckpt.tmp`` in ``checkpoint_dir`` but ``keep`` (call it as the folder's one writer:
    holding the run folder, ``tinylm.runs.lock``, or writing a checkpoint there); return what was removed."""
    removed = [tmp for tmp in partial_checkpoints(checkpoint_dir) if tmp != keep]
    for tmp in removed:
        tmp.unlink(missing_ok=True)
    return removed
