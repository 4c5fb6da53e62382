"""The shape trace (``debug=shapes``): every stage of one forward pass, with its tensor shape.

Models call ``trace("stage", tensor)`` at each stage. Outside ``with trace_shapes() as rows:`` that
is a single ``if``, so training pays nothing for it. While tracing, the GPT's attention takes its
explicit path, so the (B, h, T, T) scores appear even for a model that trains with SDPA.
``STAGES`` names what each stage is; ``shape_table`` prints the rows with those names.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

_ROWS: list[tuple[str, tuple[int, ...]]] | None = None


def trace(stage: str, tensor: torch.Tensor) -> None:
    if _ROWS is not None:
        _ROWS.append((stage, tuple(tensor.shape)))


def tracing() -> bool:
    return _ROWS is not None


@contextmanager
def trace_shapes():
    global _ROWS
    _ROWS = rows = []
    try:
        yield rows
    finally:
        _ROWS = None


# stage -> (dimensions, what the tensor is). Stages inside a block repeat once per layer.
STAGES = {
    "ids": ("B, T", "token ids of the batch"),
    "token embedding": ("B, T, C", "one learned vector per token id"),
    "position embedding": ("T, C", "one vector per position, shared by the batch"),
    "token + position": ("B, T, C", "their sum (positions broadcast over B): block input"),
    "q": ("B, h, T, hs", "queries, split into h heads of size hs"),
    "k": ("B, h, T, hs", "keys"),
    "v": ("B, h, T, hs", "values"),
    "scores": ("B, h, T, T", "q·kᵀ/√hs: one row per query, one column per key"),
    "attention weights": ("B, h, T, T", "softmax over keys of the masked scores: rows sum to 1"),
    "attention output per head": ("B, h, T, hs", "softmax(masked scores) @ v"),
    "heads concatenated": ("B, T, C", "the heads side by side again (h·hs = C)"),
    "attention projection": ("B, T, C", "output projection of the attention (added to the residual)"),
    "feed-forward hidden": ("B, T, 4C", "the MLP's wider hidden layer, after ReLU"),
    "block output": ("B, T, C", "after both residual additions"),
    "recurrent output": ("B, T, H", "the last recurrent layer's hidden state at every position"),
    "final LayerNorm": ("B, T, C", "the last block's output, normalised"),
    "logits": ("B, T, V", "a score for every vocabulary symbol at every position"),
    "loss input: logits": ("B·T, V", "flattened for cross-entropy"),
    "loss input: targets": ("B·T", "the true next token of every position, flattened"),
}
IN_BLOCK = ("q", "k", "v", "scores", "attention weights", "attention output per head", "heads concatenated",
            "attention projection", "feed-forward hidden", "block output")


def shape_table(rows: list[tuple[str, tuple[int, ...]]], sizes: dict[str, int]) -> str:
    """Format ``trace_shapes`` rows as a table, naming blocks and each dimension's meaning."""
    table, layer = [], 0
    for stage, shape in rows:
        dims, meaning = STAGES.get(stage, ("?", ""))
        name = f"block {layer} · {stage}" if stage in IN_BLOCK else stage
        table.append((name, str(shape), f"({dims})", meaning))
        layer += stage == "block output"
    header = ("stage", "shape", "dimensions", "meaning")
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True))
             + "  " + row[3] for row in [header, *table]]
    lines.insert(1, "-" * max(len(line) for line in lines))
    legend = ", ".join(f"{k} = {v}" for k, v in sizes.items())
    return "\n".join([*lines, "", legend])
