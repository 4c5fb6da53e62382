"""The logit lens: what the model would predict if it stopped after each block.

The residual stream after block l is read the way the last one is: through the final LayerNorm
and the output head (``LanguageModel.head``). The last block's reading is the model's own logits,
exactly; earlier ones show how the prediction forms layer by layer.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from tinylm.analysis.hooks import residuals
from tinylm.analysis.probe import Probe
from tinylm.models.base import eval_no_grad


def pieces(tokenizer, ids: list[int]) -> list[str]:
    """Each token's own text (a byte that is only part of a UTF-8 character: "")."""
    return [tokenizer.decode_piece([i]) for i in ids]


def lens_logits(probe: Probe) -> list[torch.Tensor]:
    """Per block, the logits (B, T, V) read from the residual stream after it."""
    model = probe.model
    streams = residuals(model.residual_layers(), probe.logits)  # per block (B, T, C)
    with eval_no_grad(model):
        return [model.head(x).float() for x in streams]


def logit_lens(probe: Probe, tokenizer) -> dict:
    """``logit_lens.json``: the probe's tokens, and per block the top-1 token at each position,
    its probability and the mean next-token loss over the scored positions."""
    layers = []
    for layer, logits in enumerate(lens_logits(probe)):
        prob, top1 = F.softmax(logits[0], dim=-1).max(dim=-1)  # (T,) each
        layers.append({"layer": layer, "top1": pieces(tokenizer, top1.tolist()),
                       "prob": [round(p, 6) for p in prob.tolist()],
                       "loss": probe.loss(logits=logits)})
    return {"tokens": pieces(tokenizer, probe.tokens[0].tolist()), "layers": layers}
