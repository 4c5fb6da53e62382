"""What each MLP neuron responds to and what it writes.

A neuron n of layer l is column n of the MLP's hidden layer: its activation is read at the hook point
``blocks.<l>.mlp.hook_post`` (after the ReLU, or relu² with activation=relu2). ``examples``: the k positions
of a text where it is largest, each with the character there, the ``context`` characters before it and it
(the window the model read last), and the activation. ``pushes``: the characters its output raises most,
W_out[:, n] (the MLP proj's column, what one unit of activation adds to the stream) centred and scaled by
the final norm's gain (as the OV circuits are: the stream's scale taken as 1, the output bias left out)
and read by the output head.

A text longer than the model reads at once is read in windows of block_size, one after another.
"""

from __future__ import annotations

import torch

import tinylm.analysis.circuits.parts as P
from tinylm.models.base import eval_no_grad

PUSHES = 5


def windows(model, ids: list[int], batch: int = 64):
    """Per window of block_size (one after another; ``batch`` whole windows run at once), its start and per layer
    every neuron's activation there: (T, N)."""
    blocks = model.residual_layers()
    names = [P.hook_name(model, block.ffwd.hook_post) for block in blocks]
    window = model.config.block_size
    device = model.token_embeddings().device
    whole = list(range(0, len(ids) - window + 1, window))
    groups = [whole[i : i + batch] for i in range(0, len(whole), batch)]
    if len(ids) % window:  # a shorter last window runs on its own
        groups.append([len(ids) - len(ids) % window])
    for group in groups:
        chunk = torch.tensor([ids[start : start + window] for start in group], device=device)
        with eval_no_grad(model):
            _, cache = model.run_with_cache(chunk, names_filter=lambda name: name in names)
        acts = [P.host(cache[name]) for name in names]  # (B, T, N) each
        for b, start in enumerate(group):
            yield start, [a[b] for a in acts]


def activations(model, ids: list[int]) -> list[torch.Tensor]:
    """Per layer, every neuron's activation at every position of ``ids``: (T, N)."""
    return [torch.cat(chunks) for chunks in zip(*(acts for _, acts in windows(model, ids)), strict=True)]


def strongest(model, ids: list[int], k: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, (values, positions), each (min(k, len(ids)), N): every neuron's ``k`` largest activations over
    ``ids`` and where, largest first; kept window by window, so a long text costs no more memory than k rows."""
    best: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    for start, acts in windows(model, ids):
        found = []
        for layer, a in enumerate(acts):
            where = torch.arange(start, start + a.size(0))[:, None].expand_as(a)
            if best is not None:
                a, where = torch.cat([best[layer][0], a]), torch.cat([best[layer][1], where])
            values, rows = a.topk(min(k, a.size(0)), dim=0)
            found.append((values, where.gather(0, rows)))
        best = found
    return best or []


def pushes(model, layer: int, tokenizer, top: int = PUSHES) -> list[list[dict]]:
    """Per neuron of ``layer``, the ``top`` characters its output raises most, with the logit per unit."""
    block = model.residual_layers()[layer]
    final = P.final_norm(model)
    W_out = P.host(block.ffwd.proj.weight).T  # (N, C): row n is what neuron n writes
    W_U, _ = P.unembed(model)
    logits = (P.center(W_out, final) * P.gain(final)) @ W_U.T  # (N, V)
    values, chars = logits.topk(min(top, logits.size(1)), dim=1)
    return [[{"char": tokenizer.decode_piece([c]), "logit": float(x)} for x, c in zip(vs, cs, strict=True)]
            for vs, cs in zip(values.tolist(), chars.tolist(), strict=True)]


def neuron_examples(model, tokenizer, ids: list[int], k: int = 5, context: int = 8) -> dict:
    """``neurons.json``: per layer, per neuron its top-``k`` positions of ``ids`` and its pushes."""
    P.require_heads(model)
    text = P.pieces(tokenizer, ids)
    layers = []
    for layer, (values, where) in enumerate(strongest(model, ids, k)):  # (k, N) each
        pushed = pushes(model, layer, tokenizer)
        neurons = []
        for n in range(values.size(1)):
            examples = [{"position": p, "char": text[p], "context": "".join(text[max(0, p - context) : p + 1]),
                         "activation": float(a)} for a, p in zip(values[:, n].tolist(), where[:, n].tolist(),
                                                                  strict=True)]
            neurons.append({"neuron": n, "examples": examples, "pushes": pushed[n]})
        layers.append({"layer": layer, "neurons": neurons})
    return {"layers": layers}
