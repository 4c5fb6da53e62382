"""The shape table (``debug=shapes``): every hook point one forward pass reaches, with its tensor's shape.

The rows come from ``model.run_with_cache``: the ids first, then each hook point in the order the
forward pass reached it (its name is the one ``cache[name]`` and ``run_with_hooks`` take), then the
logits and what the loss compares. ``MEANINGS`` says what each hook point holds, keyed by the last
part of its name (``blocks.0.attn.hook_q`` -> ``hook_q``); ``dimensions`` writes its dimension letters
for where it sits (an encoder's positions are S, a cross-attention's keys come from the source).
"""

from __future__ import annotations

import torch

from tinylm.models.base import LanguageModel, eval_no_grad

Row = tuple[str, tuple[int, ...], str, str]  # (name, shape, dimension letters, what it is)

# the last part of a hook point's name -> (its dimensions, what it holds)
MEANINGS = {
    "hook_embed": ("B, T, C", "token embedding: one learned vector per token id"),
    "hook_pos_embed": ("B, T, C", "position embedding: one vector per position, the same for every sequence"),
    "hook_src_embed": ("B, S, C", "source token embedding"),
    "hook_src_pos_embed": ("B, S, C", "source position embedding"),
    "hook_tgt_embed": ("B, T, C", "target token embedding"),
    "hook_tgt_pos_embed": ("B, T, C", "target position embedding"),
    "hook_resid_pre": ("B, T, C", "residual stream into the block"),
    "hook_normalized": ("B, T, C", "the norm's input normalised, before its gain (and bias)"),
    "hook_q": ("B, T, h, hs", "queries, split into h heads of size hs"),
    "hook_k": ("B, T, h, hs", "keys, split into heads"),
    "hook_v": ("B, T, h, hs", "values, split into heads"),
    "hook_rot_q": ("B, T, h, hs", "queries rotated by their position (rope)"),
    "hook_rot_k": ("B, T, h, hs", "keys rotated by their position (rope)"),
    "hook_attn_scores": ("B, h, T, T", "q·kᵀ/√hs, -inf where hidden: one row per query, one column per key"),
    "hook_pattern": ("B, h, T, T", "attention weights, softmax of the scores over the keys: rows sum to 1"),
    "hook_z": ("B, T, h, hs", "each head's output: pattern @ v"),
    "hook_attn_out": ("B, T, C", "attention's output, heads concatenated and projected (added to the residual)"),
    "hook_resid_mid": ("B, T, C", "residual stream after attention"),
    "hook_cross_attn_out": ("B, T, C", "cross-attention's output, projected (added to the residual)"),
    "hook_resid_mid_cross": ("B, T, C", "residual stream after cross-attention"),
    "hook_pre": ("B, T, 4C", "the MLP's wider hidden layer, before the activation"),
    "hook_post": ("B, T, 4C", "the MLP's hidden layer after the activation"),
    "hook_mlp_out": ("B, T, C", "the MLP's output (added to the residual)"),
    "hook_resid_post": ("B, T, C", "residual stream after the block: its output"),
    "hook_rnn_out": ("B, T, H", "the last recurrent layer's hidden state at every position"),
}


def _letters(dims: str, swap: dict[str, str], last: bool = False) -> str:
    """``dims`` with letters swapped (``last``: only the last letter)."""
    parts = dims.split(", ")
    if last:
        return ", ".join([*parts[:-1], swap.get(parts[-1], parts[-1])])
    return ", ".join(swap.get(part, part) for part in parts)


def dimensions(name: str, model: LanguageModel) -> tuple[str, str]:
    """What hook point ``name`` of ``model`` holds: its dimension letters and meaning (``MEANINGS``)."""
    last = name.rsplit(".", 1)[-1]
    dims, meaning = MEANINGS.get(last, ("?", "a hook point tinylm has no words for yet"))
    if not any(key.startswith("C ") for key in model.dimensions()):  # an RNN's embedding width is E
        dims = _letters(dims, {"C": "E"})
    source_side = name.startswith(("encoder.", "ln_memory."))
    if source_side:
        dims = _letters(dims, {"T": "S"})
    elif ".cross_attn." in name and last in ("hook_k", "hook_v"):  # computed once from the encoder's output
        dims, meaning = _letters(dims, {"T": "S"}), meaning.replace("keys", "the source's keys").replace(
            "values", "the source's values")
    elif ".cross_attn." in name and last in ("hook_attn_scores", "hook_pattern"):
        dims = _letters(dims, {"T": "S"}, last=True)  # target queries (T) over source keys (S)
    return dims, meaning


def input_rows(model: LanguageModel, batch: tuple[torch.Tensor, ...]) -> list[Row]:
    """The rows of the ids a batch holds: a decoder's (ids, targets); an encoder-decoder's (src, tgt, targets)."""
    if model.kind == "encoder-decoder":
        names = [("source ids", "B, S", "the source, padded at the end"),
                 ("target ids", "B, T", "BEGIN + the target, read by the decoder (teacher forcing)"),
                 ("targets", "B, T", "the target + END: what each position should predict (padding not scored)")]
    else:
        names = [("ids", "B, T", "token ids of the batch"),
                 ("targets", "B, T", "the next token of every position")]
    return [(name, tuple(ids.shape), dims, meaning) for (name, dims, meaning), ids in zip(names, batch, strict=False)]


def shape_rows(model: LanguageModel, batch: tuple[torch.Tensor, ...]) -> list[Row]:
    """One forward pass of ``batch`` in eval mode, without autograd: the ids, every hook point in the order
    it was reached, the logits and (with targets) the loss's inputs."""
    with eval_no_grad(model):
        (logits, _), cache = model.run_with_cache(*batch)
    rows = input_rows(model, batch)
    rows += [(name, tuple(tensor.shape), *dimensions(name, model)) for name, tensor in cache.items()]
    rows.append(("logits", tuple(logits.shape), "B, T, V", "a score for every vocabulary symbol at every position"))
    has_targets = len(batch) == (3 if model.kind == "encoder-decoder" else 2)
    if has_targets:
        B, T, V = logits.shape
        rows += [("loss input: logits", (B * T, V), "B·T, V", "flattened for cross-entropy"),
                 ("loss input: targets", (B * T,), "B·T", "the true next token of every position, flattened")]
    return rows


def sizes_of(model: LanguageModel, batch: tuple[torch.Tensor, ...]) -> dict[str, int]:
    """The legend: each dimension letter of the table and its size in this batch and model."""
    B = batch[0].size(0)
    if model.kind == "encoder-decoder":
        positions = {"S (source positions)": batch[0].size(1), "T (target positions)": batch[1].size(1)}
    else:
        positions = {"T (positions)": batch[0].size(1)}
    return {"B (sequences per batch)": B, **positions, **model.dimensions()}


def format_table(rows: list[Row], sizes: dict[str, int]) -> str:
    """``shape_rows`` as an aligned table: name, shape, dimensions, meaning; then the legend."""
    table = [(name, str(shape), f"({dims})", meaning) for name, shape, dims, meaning in rows]
    header = ("tensor (hook point)", "shape", "dimensions", "meaning")
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3]
             for row in [header, *table]]
    lines.insert(1, "-" * max(len(line) for line in lines))
    legend = ", ".join(f"{k} = {v}" for k, v in sizes.items())
    return "\n".join([*lines, "", legend])


def shape_table(model: LanguageModel, batch: tuple[torch.Tensor, ...]) -> str:
    """The table ``debug=shapes`` prints for one batch (``shape_rows``, ``format_table``)."""
    return format_table(shape_rows(model, batch), sizes_of(model, batch))
