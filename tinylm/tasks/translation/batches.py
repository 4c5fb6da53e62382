"""How pairs of ids become padded batches (``collate``, ``collate_decoder_only``): tensors only, so the
analysis and the views batch pairs without the data module.

A batch for an encoder-decoder is three id tensors, each row padded with PAD_ID at the end:

    source     (B, S)  the source symbols
    target_in  (B, T)  BEGIN + target: what the decoder reads
    target_out (B, T)  target + END: what it must predict at each position (padding is not scored)

With ``decoder_only`` (a GPT or an RNN on the same pairs) a pair is one sequence, BEGIN
separating the two sides, and only the target is scored (IGNORE is cross-entropy's ignore index):

    idx     (B, L)  source + BEGIN + target, padded with PAD_ID
    targets (B, L)  IGNORE under the source, then target + END, padded with IGNORE
"""

from __future__ import annotations

import torch

from tinylm.models.seq2seq import BEGIN_ID, END_ID, PAD_ID
from tinylm.tasks.translation.symbols import IGNORE


def pad(rows: list[list[int]], value: int = PAD_ID) -> torch.Tensor:
    """Rows of ids -> (B, longest row), padded with ``value`` at the end."""
    out = torch.full((len(rows), max(len(r) for r in rows)), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def collate(examples: list[tuple[list[int], list[int]]]):
    """(source ids, target ids) pairs -> source (B, S), target_in (B, T), target_out (B, T)."""
    sources = pad([s for s, _ in examples])  # (B, S)
    target_in = pad([[BEGIN_ID, *t] for _, t in examples])  # (B, T)
    target_out = pad([[*t, END_ID] for _, t in examples])  # (B, T)
    return sources, target_in, target_out


def collate_decoder_only(examples: list[tuple[list[int], list[int]]]):
    """(source ids, target ids) pairs -> idx (B, L) = source + BEGIN + target, targets (B, L), target scored only."""
    idx = pad([[*s, BEGIN_ID, *t] for s, t in examples])  # (B, L)
    targets = pad([[IGNORE] * len(s) + [*t, END_ID] for s, t in examples], IGNORE)  # (B, L)
    return idx, targets
