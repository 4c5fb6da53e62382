"""Activation patching: which activations carry the clean text's answer.

Run the model on a clean text and on a corrupt one of the same length. The clean answer is the
clean run's top-1 prediction after its last token. Then run the corrupt text again with one
activation taken from the clean run: the residual stream after block l at position t, or one
head's output (at every position). How much of the clean answer's logit comes back is

    restored = (patched logit - corrupt logit) / (clean logit - corrupt logit)

1: that activation alone brings the clean answer back; 0: it makes no difference. Patching the
whole residual stream after the last block gives the clean logits exactly.
"""

from __future__ import annotations

import math

import torch

from tinylm.analysis.heads import all_heads
from tinylm.analysis.hooks import head_outputs, heads_replaced, residual_replaced, residuals
from tinylm.analysis.probe import Probe
from tinylm.models.hook_points import hooked


def patched_residual_logits(corrupt: Probe, clean_streams: list[torch.Tensor], layer: int,
                            positions: slice | int) -> torch.Tensor:
    """The corrupt probe's logits (B, T, V) with the residual stream after block ``layer`` at
    ``positions`` taken from ``clean_streams`` (per block (B, T, C), from ``residuals``)."""
    block = corrupt.model.residual_layers()[layer]
    with hooked([residual_replaced(block, positions, clean_streams[layer][:, positions])]):
        return corrupt.logits()


def patched_head_logits(corrupt: Probe, attentions: list, clean_heads: list[torch.Tensor],
                        head: tuple[int, int]) -> torch.Tensor:
    """The corrupt probe's logits (B, T, V) with ``head``'s output taken from ``clean_heads`` (per
    layer (B, T, h, hs), from ``head_outputs``) at every position."""
    def clean(layer, index, z):
        return clean_heads[layer][:, :, index]
    with hooked(heads_replaced(attentions, [head], clean)):
        return corrupt.logits()


def _restored(logit: float, clean: float, corrupt: float) -> float | None:
    """The fraction of the clean answer's logit a patch brings back; None when clean = corrupt."""
    gap = clean - corrupt
    return (logit - corrupt) / gap if abs(gap) > 1e-9 and math.isfinite(gap) else None


def patching(clean: Probe, corrupt: Probe, attention: str = "self") -> dict:
    """``patching.json``: the clean answer (its id) and how much of its logit, after the last
    position, each patch restores: "residual" per block and position, "heads" per layer and head
    of the ``attention`` kind (``LanguageModel.attention_layers``)."""
    model = clean.model
    clean_logits = clean.logits()
    answer = int(clean_logits[0, -1].argmax())
    clean_logit, corrupt_logit = clean_logits[0, -1, answer].item(), corrupt.logits()[0, -1, answer].item()

    def restored(logits):
        return _restored(logits[0, -1, answer].item(), clean_logit, corrupt_logit)

    streams = residuals(model.residual_layers(), clean.logits)
    residual = [[restored(patched_residual_logits(corrupt, streams, layer, t)) for t in range(streams[layer].size(1))]
                for layer in range(len(streams))]
    attentions = model.attention_layers()[attention]
    clean_heads = head_outputs(attentions, clean.logits)
    heads = [{"layer": layer, "head": head,
              "restored": restored(patched_head_logits(corrupt, attentions, clean_heads, (layer, head)))}
             for layer, head in all_heads(attentions)]
    return {"answer": answer, "clean_logit": clean_logit, "corrupt_logit": corrupt_logit,
            "residual": residual, "heads": heads}
