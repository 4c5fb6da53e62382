"""Which folders of the logdir are tinylm runs, and what each holds.

A run folder (``tinylm.run_folder``) holds its checkpoints and either Hydra's record or TensorBoard event
files: a training run (``runs/<time>/``) or a sweep's job
(``multirun/<time>/<job>/``); a saved model folder (``model.safetensors``, ``config.json``) is listed as a run
with that one checkpoint and no events. At most ``MAX_DEPTH`` folders below the logdir (or the logdir itself). A run
is named by its path relative to the logdir, as TensorBoard names runs; its events are TensorBoard's
run(s) ``<name>[/...]``, and the run picker shows the run as TensorBoard lists it (``RunFolder.label``: a sweep
job's swept settings after its name). The browser only ever sends such a name back: ``Runs.find`` looks it up in the
listing, so no path it sends is ever opened; a folder whose name it would refuse (``looks_like_a_path``)
is not listed. No link is followed (``tinylm.explorer.runfiles`` has the rule, and what of a run is
read). A slow folder holds up no other request: the listing is made outside the lock, which only guards
the listing kept.
"""

from __future__ import annotations

import os
import threading
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tinylm.errors import TinyLMError
from tinylm.explorer import runfiles
from tinylm.run_folder import (
    BEST_PREFIX,
    CHECKPOINTS_DIR,
    CKPT_SUFFIX,
    EARLIER_EVENTS_DIR,
    HYDRA_DIR,
    LAST_CHECKPOINT,
    SAVED_CONFIG,
    SAVED_WEIGHTS,
    events_folder,
    holds_event_files,
    run_checkpoints,
)

MAX_DEPTH = 4  # logdir/multirun/<time>/<job> is 3 below
FRESH_S = 2.0  # a listing is reused this long; a name not in it is looked for again at once
SKIPPED = {CHECKPOINTS_DIR, EARLIER_EVENTS_DIR, "analysis", "__pycache__", "node_modules"}


class UnknownRun(TinyLMError):
    """``run`` names no run of the logdir (404), or is not a run name at all (``bad_name``: 400)."""

    def __init__(self, message: str, bad_name: bool = False):
        super().__init__(message)
        self.bad_name = bad_name
        self.status = 400 if bad_name else 404


class NoCheckpoint(TinyLMError):
    """A run with no checkpoint the tab may read (yet): not in the runs list, 404 for its routes."""

    status = 404


@dataclass(frozen=True)
class RunFolder:
    name: str  # relative to the logdir, with "/" ("." for the logdir itself)
    path: Path

    def checkpoint(self) -> Path:
        """The checkpoint ``generate.py run_dir=`` picks (the best, else the last) of those the tab may read
        (``run_checkpoints``, read only); NoCheckpoint if none."""
        found = run_checkpoints(self.path, read_only=True)
        if not found and (saved := saved_weights(self.path)):
            found = [saved]
        if not found:
            raise NoCheckpoint(f"run {self.name!r} has no checkpoint (a regular file {CHECKPOINTS_DIR}/{BEST_PREFIX}*"
                               f"{CKPT_SUFFIX} or {LAST_CHECKPOINT}, not a link) yet: pick a run from the runs list")
        return found[0]

    def probe_text(self, task: str = "text") -> str | None:
        """The text the run's attention view was drawn on, from Hydra's record of the run (None without one):
        the attention maps' probe (``callbacks.attention_maps.text``), or a translation run's source
        (``callbacks.translation_maps.source``)."""
        view = ("translation_maps", "source") if task == "translation" else ("attention_maps", "text")
        return runfiles.probe_text(self.path, view)

    def label(self) -> str:
        """The run as TensorBoard lists it, for the run picker: its name, and after it a sweep job's one folder
        of event files (``<swept settings>``: what sets the jobs of a sweep apart), in the run folder or, in a
        run of an earlier release, in its ``tensorboard/``."""
        settings = {p.name for folder in (self.path, self.path / EARLIER_EVENTS_DIR) for p in sub_folders(folder)
                    if p.name != EARLIER_EVENTS_DIR and holds_event_files(p)}
        if len(settings) != 1:
            return self.name
        return settings.pop() if self.name == "." else f"{self.name}/{settings.pop()}"


def sub_folders(folder: Path) -> list[Path]:
    """The folders in ``folder`` (not links to them); none when it cannot be listed."""
    try:
        return [p for p in folder.iterdir() if runfiles.real_dir(p)]
    except OSError:
        return []


def saved_weights(folder: Path) -> Path | None:
    """A saved model folder's weights (``lm.save_pretrained``, ``export.py format=huggingface``), which the tab
    reads as a run's checkpoint: ``model.safetensors`` and ``config.json`` regular files, not links; else None."""
    weights = folder / SAVED_WEIGHTS
    return weights if all(runfiles.regular_file(p) for p in (weights, folder / SAVED_CONFIG)) else None


def is_run_folder(path: Path) -> bool:
    if saved_weights(path):
        return True
    if not runfiles.real_dir(path / CHECKPOINTS_DIR):
        return False
    if runfiles.real_dir(path / HYDRA_DIR):
        return True
    events = events_folder(path)  # the run folder, or an earlier release's tensorboard/
    # a sweep job's <swept settings>/
    return holds_event_files(events) or any(holds_event_files(p) for p in sub_folders(events))


def scan(logdir: Path) -> list[RunFolder]:
    """Every run folder under ``logdir`` (or ``logdir`` itself), by name."""
    found: list[RunFolder] = []

    def visit(folder: Path, depth: int) -> None:
        if is_run_folder(folder):
            relative = folder.relative_to(logdir).as_posix()
            if not looks_like_a_path(relative):  # a name find refuses is not listed
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
    """A ``run`` that tries to leave the listing: absolute, ``..``, backslashes, control characters, or
    bytes that are not text (a folder name that is not UTF-8, which no URL can send back)."""
    parts = PurePosixPath(name).parts
    return (name.startswith(("/", "\\")) or "\\" in name or ".." in parts
            or any(unicodedata.category(c) in ("Cc", "Cs") for c in name) or (len(name) > 1 and name[1] == ":"))


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
            if not fresh and time.monotonic() - self._when < FRESH_S:
                return list(self._listed)
        listed = scan(self.logdir)
        with self._lock:
            self._listed, self._when = listed, time.monotonic()
        return list(listed)

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
