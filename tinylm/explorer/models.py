"""Each run's model, loaded once and kept: at most ``KEPT`` of them, the least recently used dropped first.

A model is loaded as every command loads one (``tinylm.checkpoint.load_model``: ``weights_only=True``,
nothing in the file runs) and is loaded again when its checkpoint file changes (a new modification
time or size: training rewrote it). What ``runs`` lists of a checkpoint is kept on its own, small,
for every checkpoint seen, so listing many runs does not push the models out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

from tinylm.analysis.hooks import switchable
from tinylm.checkpoint import LoadedModel, load_model

KEPT = 4


def stamp(path: Path) -> tuple[int, int]:
    """What changes when a checkpoint is rewritten: its modification time (ns) and size."""
    status = path.stat()
    return status.st_mtime_ns, status.st_size


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


class Models:
    """Loaded checkpoints by path, the ``size`` most recently used kept."""

    def __init__(self, size: int = KEPT):
        self.size = size
        self._lock = threading.Lock()
        self._kept: OrderedDict[Path, tuple[tuple[int, int], LoadedModel]] = OrderedDict()
        self._described: dict[Path, tuple[tuple[int, int], dict]] = {}
        self.loads = 0  # how many times a file was read (the tests and the benchmark read it)

    def get(self, path: Path) -> LoadedModel:
        """The model of checkpoint ``path``, loaded now only if not kept or changed since."""
        current = stamp(path)
        with self._lock:
            kept = self._kept.get(path)
            if kept is not None and kept[0] == current:
                self._kept.move_to_end(path)
                return kept[1]
            loaded = load_model(path)
            self.loads += 1
            self._kept[path] = (current, loaded)
            self._kept.move_to_end(path)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
            self._described[path] = (current, describe(loaded))
            return loaded

    def description(self, path: Path) -> dict:
        """``describe`` of checkpoint ``path``, loading it only when it was never seen or has changed."""
        current = stamp(path)
        with self._lock:
            seen = self._described.get(path)
            if seen is not None and seen[0] == current:
                return seen[1]
        self.get(path)
        with self._lock:
            return self._described[path][1]
