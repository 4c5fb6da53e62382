"""What the tinylm tab reads of a run folder, and its one rule for links: it follows none.
The tab reads two kinds of file below the logdir: a run's checkpoints (``tinylm.run_folder.run_checkpoints``
read only, loaded by ``tinylm.checkpoint.load_model``) and its Hydra record (``config.yaml``, for the probe
text and the data, ``hydra.yaml``); TensorBoard reads the event files. Outside it, the tab reads the opening
of the data file a run's record names (``head_of``). A file is read only when it is a regular file with no
symbolic link on its way (the logdir itself may be a link: it is resolved once, when the tab starts), and
never more of it than a cap: ``MAX_CHECKPOINT_MIB`` of a checkpoint, ``tinylm.run_folder.RECORD_MIB`` of a
record, the first bytes of a data file. A link, a FIFO, a device or a folder under such a name is as if it
were not there; so is a run folder, its checkpoints' folder or its record's that is a link
(``tinylm.explorer.runs.scan`` lists no run through one). Nothing is opened in a way that can block.
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path

from tinylm.run_folder import HYDRA_DIR, small_record
from tinylm.textfile import capped_file

MAX_CHECKPOINT_MIB = 1024  # torch.load reads a checkpoint whole into memory


def unlinked(path: Path) -> bool:
    """Whether the absolute ``path`` has no symbolic link on its way (it is its own real path)."""
    return path.resolve() == path


def real_dir(path: Path) -> bool:
    """Whether ``path`` is a folder, not a link to one."""
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def regular_file(path: Path) -> bool:
    """Whether ``path`` is a regular file, not a link to one."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def checkpoint_stamp(path: Path) -> tuple[int, int]:
    """What changes when checkpoint ``path`` is rewritten (its modification time in ns, its size), when the
    tab may read it; one TinyLMError when it may not (gone, not a regular file, over the cap)."""
    info = capped_file(path, "checkpoint", MAX_CHECKPOINT_MIB, links=False)
    return info.st_mtime_ns, info.st_size


def probe_text(run_dir: Path, view: tuple[str, str]) -> str | None:
    """``callbacks.<view[0]>.<view[1]>`` of the run's recorded ``config.yaml``; None without one it may read."""
    try:
        text = record(run_dir)["callbacks"][view[0]][view[1]]
    except (TypeError, KeyError):
        return None
    return text if isinstance(text, str) else None


def record(run_dir: Path, name: str = "config.yaml") -> dict | None:
    """The run's recorded ``name`` (``config.yaml``, ``hydra.yaml``), parsed; None without one it may read."""
    path = run_dir / HYDRA_DIR / name
    if not unlinked(path):
        return None
    try:
        modified = path.lstat().st_mtime_ns
    except OSError:
        return None
    return parsed_record(path, modified)


def unreadable_record(run_dir: Path) -> bool:
    """Whether the run has a ``config.yaml`` that the tab may not read (a link, a FIFO, too big, not YAML)."""
    path = run_dir / HYDRA_DIR / "config.yaml"
    return os.path.lexists(path) and record(run_dir) is None


@functools.lru_cache(maxsize=256)
def parsed_record(path: Path, modified: int) -> dict | None:
    """``record``'s answer, parsed once per version of the file."""
    parsed = small_record(path, links=False)
    return parsed if isinstance(parsed, dict) else None


def head_of(path: Path, size: int) -> bytes | None:
    """The first ``size`` bytes of the regular file ``path`` (no link on its way, opened without blocking);
    None when the tab may not read it."""
    if not unlinked(path):
        return None
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return None
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW), "rb") as f:
            return f.read(size) if stat.S_ISREG(os.fstat(f.fileno()).st_mode) else None
    except OSError:
        return None
