"""The batches every task's data module serves: ``SeededBatches``, an endless stream whose batch ``s``
depends only on (seed, rank, s), from where a resumed run left off (``stream_position``), through
``batch_loader``; and ``data_identity``, what a checkpoint records of its data."""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

IDENTITY_SLICE = 1 << 20  # ids hashed at a time by data_identity

def data_identity(*parts) -> dict:
    """What a checkpoint records of its data (``tinylm.training.module``), so that a resume on an edited text
    can tell: the token count and a SHA-256 of the ids of each part (training, validation), in order.
    Not the path: a shared checkpoint should not reveal it."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        for start in range(0, len(part), IDENTITY_SLICE):  # a few MiB at a time, however long the part
            digest.update(np.asarray(part[start : start + IDENTITY_SLICE], dtype=np.int64).tobytes())
    return {"tokens": sum(len(part) for part in parts), "sha256": digest.hexdigest()}


class SeededBatches(IterableDataset):
    """An endless stream of training batches; batch ``s`` depends only on (seed, rank, s), so a
    resumed run (``start_step``) draws exactly what an uninterrupted one would. ``draw(generator)``
    makes one batch."""

    def __init__(self, seed, rank=0, start_step=0):
        self.seed, self.rank, self.start_step = seed, rank, start_step

    def draw(self, generator: torch.Generator):
        raise NotImplementedError

    def __iter__(self):
        generator = torch.Generator()
        step = self.start_step
        while True:
            generator.manual_seed(hash((self.seed, self.rank, step)) & 0x7FFF_FFFF_FFFF_FFFF)
            yield self.draw(generator)
            step += 1


def stream_position(trainer) -> tuple[int, int]:
    """(rank, step) a training stream starts at: where a resumed run left off."""
    return (trainer.global_rank, trainer.global_step) if trainer is not None else (0, 0)


def batch_loader(batches) -> DataLoader:
    """Batches as they are (no collation), with the loader's own generator: creating its iterator
    must not draw from the global RNG (dropout's)."""
    return DataLoader(batches, batch_size=None, generator=torch.Generator())
