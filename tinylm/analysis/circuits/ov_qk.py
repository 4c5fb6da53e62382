"""Each head's OV and QK circuits (Elhage et al., "A Mathematical Framework for Transformer Circuits") over the
character vocabulary, and its positional QK pattern.

- OV (V, V): row a, column b = what attending to character a makes the head write into logit b:
  norm(W_E)[a] W_V W_O, centred and scaled by the final norm's gain, times W_U[b].
- QK (V, V): row a (the query's character), column b (the key's): norm(W_E)[a] W_Q W_Kᵀ norm(W_E)[b]ᵀ.
- positional QK (T, T) for a learned or sin/cos position table P: norm(P) W_Q W_Kᵀ norm(P)ᵀ, -inf above
  the diagonal (a query never sees a later key); None with rope, whose positions are no vectors in the
  stream but a rotation of the queries and keys (the scores depend on the distance alone).

What is folded and what is left out (``FOLDED``): each embedding row goes through the norm before the head
on its own (centred, divided by its own scale, times the gain; the bias left out); the final norm's
centring and gain are folded into the output, its division by the stream's scale taken as 1, the output
head's bias left out; the path is the direct one (embedding -> head -> output), whatever earlier layers add.
``copying`` (the fraction of characters whose largest OV output is the character itself) does not depend
on any positive scale.
"""

from __future__ import annotations

import math

import torch

import tinylm.analysis.circuits.parts as P

FOLDED = ("Direct path only (token embedding -> head -> output head; what earlier layers write is left out). "
          "Each embedding or position row goes through the norm before the head on its own: centred (LayerNorm), "
          "divided by its own scale, times the gain (ln1's gain folded into W_Q, W_K, W_V; the norms' biases left "
          "out). The final norm's centring and gain are folded into W_O; its division by the stream's scale is "
          "taken as 1 (the run's scale varies by position; copying and argmaxes do not depend on it); the output "
          "head's bias is left out. QK is unscaled (the model divides by sqrt(head size), the positional score "
          "does too).")
ROPE = ("rope: no position vectors enter the stream; queries and keys are rotated by their position, so the "
        "positional QK pattern is not a matrix of the weights alone (positional_previous_token: null), and the "
        "token QK is the score of two characters at the same position (distance 0)")
QK_NORM = "qk_norm: the model scales each query and key to unit RMS, which QK leaves out (its scale is not the model's)"


def _place(model, layer: int, prefix: str = "") -> P.HeadPlace:
    for place in P.places(model):
        if place.layer == layer and place.prefix == prefix:
            return place
    raise IndexError(f"no {prefix or 'self'}-attention in layer {layer}")


def _key_norm(model, place: P.HeadPlace):
    """The norm that the keys and values are read through: the stream's own, or a cross head's memory norm."""
    return getattr(model, "ln_memory", place.norm) if place.prefix == "cross" else place.norm


def ov_circuit(model, layer: int, head: int, prefix: str = "") -> torch.Tensor:
    """(V, V): row = the character attended to, column = the output logit it writes."""
    place = _place(model, layer, prefix)
    w = P.weights(place.module, head)
    E = P.normalized(_key_norm(model, place), model.token_embeddings())  # (V, C)
    final = P.final_norm(model)
    out = P.center(E @ w["V"] @ w["O"], final) * P.gain(final)  # (V, C)
    W_U, _ = P.unembed(model)
    return out @ W_U.T  # (V, V)


def qk_circuit(model, layer: int, head: int, prefix: str = "") -> torch.Tensor:
    """(V, V): row = the query's character, column = the key's."""
    place = _place(model, layer, prefix)
    w = P.weights(place.module, head)
    raw = model.token_embeddings()
    queries = P.normalized(place.norm, raw) @ w["Q"]  # (V, hs)
    keys = P.normalized(_key_norm(model, place), raw) @ w["K"]  # (V, hs)
    return queries @ keys.T


def positional_qk(model, layer: int, head: int) -> torch.Tensor | None:
    """(T, T) for T = block_size: row i (query position), column j <= i (key position), -inf above the
    diagonal; None with rope (no position table)."""
    table = P.positions_table(model)
    if table is None:
        return None
    place = _place(model, layer)
    w = P.weights(place.module, head)
    pos = P.normalized(place.norm, table)  # (T, C)
    scores = (pos @ w["Q"]) @ (pos @ w["K"]).T  # (T, T)
    hidden = torch.ones_like(scores, dtype=torch.bool).triu(1)
    return scores.masked_fill(hidden, float("-inf"))


def copying(ov: torch.Tensor) -> float:
    """The fraction of rows whose largest entry is on the diagonal."""
    return (ov.argmax(dim=1) == torch.arange(ov.size(0))).float().mean().item()


def previous_token_score(scores: torch.Tensor, head_size: int) -> float:
    """The mean over query rows i >= 1 of softmax(row i's scores over keys 0..i / sqrt(hs))[i - 1]."""
    weights = torch.softmax(scores / math.sqrt(head_size), dim=-1)  # -inf above the diagonal -> 0
    return weights.diagonal(offset=-1).mean().item()


def head_circuits(model, tokenizer) -> dict:
    """``circuits.json``: per head its copying score and its positional previous-token score (null with rope
    and for cross-attention heads), the vocabulary's characters and what the circuits leave out."""
    rows = []
    with torch.no_grad():
        for place in P.places(model):
            for head in range(place.module.num_heads):
                ov = ov_circuit(model, place.layer, head, place.prefix)
                positional = None if place.prefix else positional_qk(model, place.layer, head)
                rows.append({"layer": place.layer, "head": head, "name": place.name(head), "copying": copying(ov),
                             "positional_previous_token": None if positional is None
                             else previous_token_score(positional, place.module.head_size)})
    notes = [FOLDED]
    if P.positions_table(model) is None:
        notes.append(ROPE)
    if getattr(model.config, "qk_norm", False):
        notes.append(QK_NORM)
    if any(place.prefix == "cross" for place in P.places(model)):
        notes.append("cross heads: keys and values are source characters through ln_memory (the encoder's layers "
                     "left out), no positional score")
    vocab = P.pieces(tokenizer, range(model.config.vocab_size))
    return {"heads": rows, "tokens": vocab, "folded": " ".join(notes)}
