"""Which folders of the logdir are tinylm runs, and what each holds.

A run folder holds ``checkpoints/`` and either Hydra's record (``.hydra/``) or TensorBoard event files
(``tensorboard/``): a training run (``runs/<time>/``) or a sweep's job (``multirun/<time>/<job>/``),
at most ``MAX_DEPTH`` folders below the logdir (or the logdir itself). A run is named by its path
relative to the logdir, as TensorBoard names runs; its events are TensorBoard's run(s)
``<name>/tensorboard[/...]``. The browser only ever sends such a name back: ``Runs.find`` looks it up
in the listing, so no path it sends is ever opened.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tinylm.checkpoint import checkpoint_in_run
from tinylm.errors import TinyLMError
from tinylm.runs.folder import HYDRA_DIR, read_record

MAX_DEPTH = 4  # logdir/multirun/<time>/<job> is 3 below
FRESH_S = 2.0  # a listing is reused this long; a name not in it is looked for again at once
SKIPPED = {"checkpoints", "tensorboard", "analysis", "__pycache__", "node_modules"}
EVENTS_DIR = "tensorboard"


class UnknownRun(TinyLMError):
    """``run`` names no run of the logdir (404), or is not a run name at all (``bad_name``: 400)."""

    def __init__(self, message: str, bad_name: bool = False):
        super().__init__(message)
        self.bad_name = bad_name


@dataclass(frozen=True)
class RunFolder:
    name: str  # relative to the logdir, with "/" ("." for the logdir itself)
    path: Path

    @property
    def events_prefix(self) -> str:
        """TensorBoard's name of the run's event folder: its runs are this name or below it."""
        return EVENTS_DIR if self.name == "." else f"{self.name}/{EVENTS_DIR}"

    def checkpoint(self) -> Path:
        """The checkpoint ``generate.py run_dir=`` picks: the best, else the last (a TinyLMError if none)."""
        return checkpoint_in_run(self.path).path

    def probe_text(self, task: str = "text") -> str | None:
        """The text the run's attention view was drawn on, from Hydra's record of the run (None without one):
        the attention maps' probe (``callbacks.attention_maps.text``), or a translation run's source
        (``callbacks.translation_maps.source``)."""
        record = self.path / HYDRA_DIR / "config.yaml"
        view = ("translation_maps", "source") if task == "translation" else ("attention_maps", "text")
        try:
            return text_in_record(record, record.stat().st_mtime_ns, view)
        except OSError:
            return None


@functools.lru_cache(maxsize=256)
def text_in_record(record: Path, modified: int, view: tuple[str, str]) -> str | None:
    """``callbacks.<view[0]>.<view[1]>`` of a run's config.yaml (parsed once per version of the file)."""
    try:
        text = read_record(record)["callbacks"][view[0]][view[1]]
    except (ValueError, TypeError, KeyError):
        return None
    return text if isinstance(text, str) else None


def is_run_folder(path: Path) -> bool:
    if not (path / "checkpoints").is_dir():
        return False
    if (path / HYDRA_DIR).is_dir():
        return True
    events = path / EVENTS_DIR
    return events.is_dir() and any(p.name.startswith("events.out.tfevents") for p in events.rglob("*"))


def scan(logdir: Path) -> list[RunFolder]:
    """Every run folder under ``logdir`` (or ``logdir`` itself), by name."""
    found: list[RunFolder] = []

    def visit(folder: Path, depth: int) -> None:
        if is_run_folder(folder):
            relative = folder.relative_to(logdir).as_posix()
            found.append(RunFolder(relative, folder))
            return
        if depth == MAX_DEPTH:
            return
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and not entry.name.startswith(".") and entry.name not in SKIPPED:
                visit(Path(entry.path), depth + 1)

    visit(logdir, 0)
    return sorted(found, key=lambda run: run.name)


def looks_like_a_path(name: str) -> bool:
    """A ``run`` that tries to leave the listing: absolute, ``..``, backslashes, control characters."""
    parts = PurePosixPath(name).parts
    return (name.startswith(("/", "\\")) or "\\" in name or ".." in parts or any(ord(c) < 32 for c in name)
            or (len(name) > 1 and name[1] == ":"))


class Runs:
    """The run folders of one logdir, listed again every ``FRESH_S`` seconds (or at once for an unknown name)."""

    def __init__(self, logdir: str | os.PathLike | None):
        self.logdir = Path(logdir).expanduser().resolve() if logdir else None
        self._lock = threading.Lock()
        self._listed: list[RunFolder] = []
        self._when = -FRESH_S

    def list(self, fresh: bool = False) -> list[RunFolder]:
        if self.logdir is None or not self.logdir.is_dir():
            return []
        with self._lock:
            if fresh or time.monotonic() - self._when >= FRESH_S:
                self._listed, self._when = scan(self.logdir), time.monotonic()
            return list(self._listed)

    def find(self, name: str) -> RunFolder:
        """The run called ``name``; UnknownRun (400 for a path, 404 for a name not listed)."""
        if looks_like_a_path(name):
            raise UnknownRun(f"run={name!r} is not a run name: pass a name from the runs list "
                             "(/data/plugin/tinylm/runs)", bad_name=True)
        for listed in (self.list(), self.list(fresh=True)):
            for run in listed:
                if run.name == name:
                    return run
        raise UnknownRun(f"no run {name!r} in the logdir: pass a name from the runs list (/data/plugin/tinylm/runs)")
