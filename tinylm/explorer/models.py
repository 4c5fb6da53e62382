"""Each run's model, loaded once and kept: at most ``KEPT`` of them, the least recently used dropped first.

A model is loaded as every command loads one (``tinylm.checkpoint.load_model``: ``weights_only=True``,
nothing in the file runs), from a checkpoint the tab may read (``tinylm.explorer.runfiles``), and is loaded
again when its checkpoint file changes (a new modification time or size: training rewrote it). A training
run replaces its best checkpoint by the next (``best-step<N>.ckpt``): a file that vanishes or changes while
it is being loaded is normal, and the run's checkpoint is looked up again (``in_run``). What ``runs``
lists of a checkpoint is kept on its own, small, for every checkpoint seen, so listing many runs does not
push the models out.

No lock is held while a file is read or a model computes, but each checkpoint's own: a load that is slow
or stuck holds up the requests for that checkpoint only, and each model computes one request at a time
(``Kept.lock``: switching heads off hooks into the model), beside the other models.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tinylm.analysis.hooks import switchable
from tinylm.checkpoint import UNKNOWN_DATA, load_model, vocabulary_origin
from tinylm.errors import TinyLMError
from tinylm.explorer.runfiles import checkpoint_stamp, unreadable_record
from tinylm.explorer.runs import RunFolder
from tinylm.tasks.base import LoadedModel

KEPT = 4
TRIES = 3  # looks for a run's checkpoint when the one found vanishes while being read
Answer = TypeVar("Answer")


class Changed(TinyLMError):
    """A checkpoint that vanished or changed while being read (409: try again)."""

    status = 409


@dataclass
class Kept:
    """A checkpoint's model as loaded from the file as it was (``stamp``), and the lock of its computations."""

    stamp: tuple[int, int]
    loaded: LoadedModel
    lock: threading.Lock = field(default_factory=threading.Lock)


def describe(loaded: LoadedModel) -> dict:
    """What ``runs`` says of a checkpoint's model, through the models' shared interface."""
    model = loaded.model
    _, attentions = switchable(model)
    return {
        "kind": model.kind if model.has_attention else "rnn",
        "task": loaded.task,
        "checkpoint": loaded.path.name,
        "step": loaded.global_step,
        "layers": len(attentions),
        "heads": attentions[0].num_heads if attentions else 0,
        "block_size": model.config.block_size,
    }


def loaded_in_tab(path: Path) -> LoadedModel:
    """``load_model`` of checkpoint ``path`` (in ``<run>/checkpoints/``); when the tab may not read its run's
    ``config.yaml``, what its vocabulary's messages say of the run's data is that it is unknown (not a guess)."""
    loaded = load_model(path)
    if unreadable_record(path.parent.parent):
        loaded.tokenizer.origin = vocabulary_origin(path, UNKNOWN_DATA)
    return loaded


def stamp_of(path: Path) -> tuple[int, int]:
    """``checkpoint_stamp``, or Changed when the file is gone (replaced by a newer one)."""
    try:
        return checkpoint_stamp(path)
    except TinyLMError:
        if os.path.lexists(path):
            raise
        raise Changed(f"checkpoint {path.name} was replaced while being read: ask again") from None


class Models:
    """Loaded checkpoints by path, the ``size`` most recently used kept."""

    def __init__(self, size: int = KEPT):
        self.size = size
        self._lock = threading.Lock()  # guards the tables below; never held while reading or computing
        self._loading: dict[Path, threading.Lock] = {}  # each checkpoint's, held while it loads
        self._kept: OrderedDict[Path, Kept] = OrderedDict()
        self._described: dict[Path, tuple[tuple[int, int], dict]] = {}
        self.loads = 0  # how many times a file was read (the tests and the benchmark read it)

    def get(self, path: Path) -> Kept:
        """The model of checkpoint ``path``, loaded now only if not kept or changed since."""
        current = stamp_of(path)
        with self._lock:
            loading = self._loading.setdefault(path, threading.Lock())
        try:
            return self._load(path, current, loading)
        finally:
            with self._lock:  # kept only while in use (a training run names a new file at each best)
                if self._loading.get(path) is loading:
                    del self._loading[path]

    def _load(self, path: Path, current: tuple[int, int], loading: threading.Lock) -> Kept:
        with loading:
            with self._lock:
                kept = self._kept.get(path)
                if kept is not None and kept.stamp == current:
                    self._kept.move_to_end(path)
                    return kept
            try:
                loaded = loaded_in_tab(path)
            except TinyLMError:
                if stamp_of(path) != current:
                    raise Changed(f"checkpoint {path.name} changed while being read: ask again") from None
                raise
            kept, described = Kept(current, loaded), describe(loaded)
            with self._lock:
                self.loads += 1
                self._kept[path] = kept
                self._kept.move_to_end(path)
                while len(self._kept) > self.size:
                    self._kept.popitem(last=False)
                self._described[path] = (current, described)
            return kept

    def description(self, path: Path) -> dict:
        """``describe`` of checkpoint ``path``, loading it only when it was never seen or has changed."""
        current = stamp_of(path)
        with self._lock:
            seen = self._described.get(path)
            if seen is not None and seen[0] == current:
                return seen[1]
        self.get(path)
        with self._lock:
            return self._described[path][1]

    def in_run(self, run: RunFolder, use: Callable[[Path], Answer]) -> Answer:
        """``use`` (``get``, ``description``) on ``run``'s checkpoint; when that file vanishes or changes
        while being read, on the run's checkpoint then (Changed after ``TRIES`` such turns)."""
        for _ in range(TRIES - 1):
            try:
                return use(run.checkpoint())
            except Changed:
                continue
        return use(run.checkpoint())
