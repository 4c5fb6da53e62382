"""Composition scores between the heads of a decoder (Elhage et al., "A Mathematical Framework for
Transformer Circuits"): how much a later head B reads what an earlier head A writes.

In the row-vector convention of the models (``parts``), head A writes x W_OV^A with W_OV = W_V W_O (C, C),
and head B scores a query x_q against a key x_k as x_q W_QK^B x_kᵀ with W_QK = W_Q W_Kᵀ (C, C). Then, each
with ||M||_F the Frobenius norm,

    Q-composition: ||W_OV^A W_QK^B||   / (||W_OV^A|| ||W_QK^B||)   (A's output is B's query)
    K-composition: ||W_OV^A W_QK^Bᵀ||  / (||W_OV^A|| ||W_QK^B||)   (A's output is B's key)
    V-composition: ||W_OV^A W_OV^B||   / (||W_OV^A|| ||W_OV^B||)   (A's output is B's value)

(the paper's column-vector W_QKᵀ W_OV, W_QK W_OV and W_OV^B W_OV^A, transposed). The norm before B folds in:
its gain multiplies B's W_Q, W_K and W_V (diag(g) W), and a LayerNorm's centring is folded into A's W_O (its
output minus the mean over C). ``baseline``: the same score for random Gaussian W_Q, W_K, W_V, W_O of the
heads' shapes, averaged over draws (the score of two unrelated heads; the same for Q, K and V, since a
Gaussian matrix's distribution is unchanged by rotations). The scores are of the weights alone: rope's rotation of
the queries and keys and qk_norm's scaling are left out.
"""

from __future__ import annotations

import torch

import tinylm.analysis.circuits.parts as P
from tinylm.errors import TinyLMError

BASELINE_DRAWS = 200


def score(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a b||_F / (||a||_F ||b||_F), 0 when either is 0."""
    denominator = torch.linalg.matrix_norm(a) * torch.linalg.matrix_norm(b)
    if denominator == 0:
        return 0.0
    return float(torch.linalg.matrix_norm(a @ b) / denominator)


def head_matrices(place: P.HeadPlace, head: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(W_OV as the head writes it, output centred for a LayerNorm stream; W_OV and W_QK as it reads, its
    norm's gain folded in), each (C, C)."""
    w = P.weights(place.module, head)
    g = P.gain(place.norm)[:, None]  # (C, 1): diag(g) W
    written = w["V"] @ P.center(w["O"], place.norm)
    return written, (g * w["V"]) @ w["O"], (g * w["Q"]) @ (g * w["K"]).T


def baseline(C: int, hs: int, seed: int = 0, draws: int = BASELINE_DRAWS) -> float:
    """The mean composition score of random Gaussian heads of width C and head size hs."""
    generator = torch.Generator().manual_seed(seed)
    total = 0.0
    for _ in range(draws):
        v1, o1, q2, k2 = (torch.randn(C, hs, generator=generator) for _ in range(4))
        total += score(v1 @ o1.T, q2 @ k2.T)
    return total / draws


def composition_scores(model, seed: int = 0) -> dict:
    """``composition.json``: "q", "k", "v" each [earlier head][later head] over the decoder's heads in
    ``heads`` order (null where the second head is not in a later layer), and the random baseline."""
    places = [place for place in P.places(model) if place.prefix == ""]
    if any(place.prefix for place in P.places(model)):
        raise TinyLMError("composition scores are for decoders: an encoder-decoder's cross heads read keys and "
                          "values from the encoder, not from the stream the earlier heads write")
    heads = [(place, head) for place in places for head in range(place.module.num_heads)]
    mats = [head_matrices(place, head) for place, head in heads]
    n = len(heads)
    q, k, v = ([[None] * n for _ in range(n)] for _ in range(3))
    with torch.no_grad():
        for i, (a, _) in enumerate(heads):
            for j, (b, _) in enumerate(heads):
                if b.layer <= a.layer:
                    continue
                written, reads_ov, reads_qk = mats[i][0], mats[j][1], mats[j][2]
                q[i][j] = score(written, reads_qk)
                k[i][j] = score(written, reads_qk.T)
                v[i][j] = score(written, reads_ov)
    module = places[0].module
    C = module.qkv.weight.size(1)
    return {"q": q, "k": k, "v": v, "heads": [place.name(head) for place, head in heads],
            "baseline": baseline(C, module.head_size, seed)}
