"""Scoring a language model on a whole text (``evaluate.py``), not a random sample; translation pairs are
scored by their task (``tinylm.tasks.translation.task.score_pairs``).

A text of N token ids has N - 1 positions to predict (every id after the first). They are covered
by windows of the model's ``block_size`` T (its training window; for an RNN too, which like in
training starts each window from a zero state), starting every ``stride`` S tokens:

    window k reads ids[k*S : k*S + T] and predicts ids[k*S + 1 : k*S + T + 1]

The first window scores all its T positions (the one at window index j has j + 1 tokens of
context). Each later window scores only the positions no earlier window scored: its last S, each
with T - S + 1 .. T tokens of context. A last window ends exactly at the text's end and scores what
is left. So every position is scored exactly once: ``tokens`` is N - 1. S = T gives disjoint windows
(each position the context of its window, as training's windows); a smaller S gives more context per
position at T / S times the compute.

The loss is the mean cross-entropy (nats) over those positions, as the models compute it in training.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from tinylm.models import LanguageModel
from tinylm.models.base import eval_no_grad
from tinylm.tasks.text.data import gather_windows


def window_plan(n_ids: int, block_size: int, stride: int) -> list[tuple[int, int]]:
    """(start, first scored index in the window) of each window over ``n_ids`` ids (n_ids > block_size)."""
    last = n_ids - 1 - block_size  # the start of the window that ends at the last id
    starts = list(range(0, last + 1, stride))
    if starts[-1] != last:
        starts.append(last)
    plan, done = [], 0  # done: the positions 1 .. done are scored
    for start in starts:  # the window predicts positions start + 1 .. start + block_size
        plan.append((start, done - start))
        done = start + block_size
    return plan


def score_text(model: LanguageModel, ids: torch.Tensor, stride: int, batch_size: int) -> tuple[float, int]:
    """(mean loss, positions scored) of ``model`` over every position of ``ids`` (N,), N > block_size."""
    block_size = model.config.block_size
    plan = window_plan(len(ids), block_size, stride)
    total, count = torch.zeros((), dtype=torch.float64), 0
    with eval_no_grad(model):
        for i in range(0, len(plan), batch_size):
            starts, firsts = zip(*plan[i : i + batch_size], strict=True)
            x, y = gather_windows(ids, torch.tensor(starts), block_size)  # (B, T) each
            logits = model(x)[0]  # (B, T, V)
            losses = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="none").view_as(y)
            scored = torch.arange(block_size) >= torch.tensor(firsts)[:, None]  # (B, T)
            total += losses[scored].double().sum()
            count += int(scored.sum())
    return float(total / count), count

