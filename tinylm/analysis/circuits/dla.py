"""Direct logit attribution: the final residual stream split into the parts that wrote it, each read
through the final norm and the output head for the true next token.

The residual stream after the last block is the sum of

    embed (the token embedding)  + pos_embed (the position table's rows; 0 with rope)
    + for every layer: each head's z_h W_O^h  (+ an encoder-decoder's cross-attention heads, "cross...")
                       + the MLP's output without its proj bias ("mlp<l>")
    + bias: every bias written into the stream (each attention's proj.bias, each MLP's proj.bias).

The final LayerNorm is linear once its scale is fixed: each part is centred (the mean over C subtracted,
a LayerNorm's centring; an RMSNorm has none), divided by the scale the run actually computed from the whole
stream at that position (sqrt(var + eps), or the RMS), and multiplied by the norm's gain; the norm's own bias
joins "bias". Each part is then dotted with the output head's row of the target (minus the row of ``against``
when given), and the output head's bias of the target (minus that of ``against``) joins "bias" too. The parts
add up to the logit the model computes (to float rounding). With ``logit_softcap`` the attributed logit is the
one before the cap (cap · tanh(logit / cap) is not linear): "logit" is that pre-cap logit, and the dict says so.
"""

from __future__ import annotations

import torch

import tinylm.analysis.circuits.parts as P
from tinylm.errors import TinyLMError
from tinylm.models.base import eval_no_grad


def _embed_point(model) -> str:
    names = model.hook_points()
    for name in ("hook_embed", "hook_tgt_embed"):
        if name in names:
            return name
    raise TinyLMError("the model has no token-embedding hook point (hook_embed)")


def residual_parts(model, inputs: tuple[torch.Tensor, ...]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The parts (name -> (T, C)) of the final residual stream for one sequence (``inputs`` of batch 1), in
    the order of the forward pass, and that stream (T, C) as the run computed it."""
    places = P.places(model)
    blocks = model.residual_layers()
    first, last = P.hook_name(model, blocks[0].hook_resid_pre), P.hook_name(model, blocks[-1].hook_resid_post)
    z_names = {id(place): P.hook_name(model, place.module.hook_z) for place in places}
    mlp_names = [P.hook_name(model, block.hook_mlp_out) for block in blocks]
    wanted = {_embed_point(model), first, last, *z_names.values(), *mlp_names}
    with eval_no_grad(model):
        _, cache = model.run_with_cache(*inputs, names_filter=lambda name: name in wanted)
    embed = P.host(cache[_embed_point(model)][0])  # (T, C)
    result = {"embed": embed, "pos_embed": P.host(cache[first][0]) - embed}
    bias = torch.zeros_like(embed[0])  # (C,)
    for layer, block in enumerate(blocks):
        for place in (p for p in places if p.layer == layer):
            z = P.host(cache[z_names[id(place)]][0])  # (T, h, hs)
            for head in range(place.module.num_heads):
                result[place.name(head)] = z[:, head] @ P.weights(place.module, head)["O"]  # (T, C)
            if place.module.proj.bias is not None:
                bias = bias + P.host(place.module.proj.bias)
        mlp_bias = P.host(block.ffwd.proj.bias)
        result[f"mlp{layer}"] = P.host(cache[mlp_names[layer]][0]) - mlp_bias
        bias = bias + mlp_bias
    result["bias"] = bias.expand_as(embed)
    return result, P.host(cache[last][0])


def attribute(model, inputs: tuple[torch.Tensor, ...], targets: list[int], against: int | None = None):
    """Per position t of ``targets`` (the next token wanted at position t): {part: its share of the logit
    (minus ``against``'s)}, before any soft cap."""
    found, stream = residual_parts(model, inputs)
    norm = P.final_norm(model)
    x = stream.double()
    if P.centers(norm):
        scale = (x.var(dim=-1, unbiased=False, keepdim=True) + norm.eps).sqrt()  # (T, 1)
    else:
        eps = norm.eps if norm.eps is not None else torch.finfo(stream.dtype).eps
        scale = (x.pow(2).mean(dim=-1, keepdim=True) + eps).sqrt()
    W_U, b_U = P.unembed(model)
    g, b = P.gain(norm).double(), P.norm_bias(norm)
    T = len(targets)
    rows = torch.tensor(targets)
    direction = W_U.double()[rows]  # (T, C)
    offset = torch.zeros(T, dtype=torch.float64) if b_U is None else b_U.double()[rows]
    if against is not None:
        direction = direction - W_U.double()[against]
        offset = offset - (0.0 if b_U is None else b_U.double()[against])
    out = []
    for name, part in found.items():
        read = P.center(part.double()[:T], norm) / scale[:T] * g  # (T, C)
        value = (read * direction).sum(-1)  # (T,)
        if name == "bias":
            value = value + (0 if b is None else (b.double() * direction).sum(-1)) + offset
        out.append((name, value))
    return [{name: float(value[t]) for name, value in out} for t in range(T)]


def model_logits(model, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The logits (T, V) before any soft cap, for one sequence: the final stream through ``lm_head(ln_f(.))``."""
    blocks = model.residual_layers()
    last = P.hook_name(model, blocks[-1].hook_resid_post)
    with eval_no_grad(model):
        _, cache = model.run_with_cache(*inputs, names_filter=lambda name: name == last)
        return P.host(model.lm_head(model.ln_f(cache[last]))[0])


def direct_logit_attribution(model, ids: list[int], tokenizer, against: str | None = None,
                             source: list[int] | None = None, targets: list[int] | None = None) -> dict:
    """``dla.json`` for a decoder reading ``ids``: at each position i < T-1 the logit of the true next token
    ids[i+1] split into its parts. An encoder-decoder reads ``source`` and the target ids ``ids`` (BEGIN
    first) and is attributed against ``targets`` (the target + END; default ids[1:]). ``against``: a character
    whose logit is subtracted (a logit difference)."""
    P.require_heads(model)
    against_id = None
    if against is not None:
        if tokenizer.unknown(against) or len(tokenizer.encode(against)) != 1:
            raise TinyLMError(f"against={against!r}: pass one character of the model's vocabulary")
        against_id = tokenizer.encode(against)[0]
    device = model.token_embeddings().device
    idx = torch.tensor(ids, device=device)[None]
    inputs = (idx,) if source is None else (torch.tensor(source, device=device)[None], idx)
    targets = list(ids[1:]) if targets is None else list(targets)
    if not targets:
        raise TinyLMError(f"the text is {len(ids)} token(s) long: pass at least two, so that there is a next token "
                          "to predict and attribute")
    per_position = attribute(model, inputs, targets, against_id)
    actual = model_logits(model, inputs)  # (T', V)
    rows = torch.arange(len(targets))
    logits = actual[rows, torch.tensor(targets)] - (0 if against_id is None else actual[rows, against_id])
    tokens = P.pieces(tokenizer, ids)
    positions = []
    for t, (parts, logit) in enumerate(zip(per_position, logits, strict=True)):
        entry = {"position": t, "target": tokenizer.decode_piece([targets[t]]), "logit": float(logit),
                 "parts": parts}
        if against is not None:
            entry["against"] = against
        positions.append(entry)
    result = {"tokens": tokens, "positions": positions}
    cap = getattr(model.config, "logit_softcap", None)
    if cap is not None:
        result["softcap"] = (f"logit_softcap={cap}: each logit here is the one before the cap, cap * tanh(logit / "
                             "cap), which is not linear in the parts")
    return result
