"""The models' normalisation layers: LayerNorm and RMSNorm, each with its hook point.

``hook_normalized`` shows what TransformerLens shows there: the input normalised, before the
layer's gain (and bias). The layer itself runs PyTorch's fused kernel; only while a hook is
attached does it also compute the normalised input, and only a hook that changes it makes the
output ``normalized * weight (+ bias)``: a hook that returns None leaves the output bit for bit.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.nn import functional as F

from tinylm.models.hook_points import HookPoint


class _Hooked:
    """The forward both norms share: the fused layer, and the hook point on the normalised input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)  # (..., C), PyTorch's fused kernel
        hook = self._modules["hook_normalized"]  # (the attribute lookup of a submodule is slow Python)
        if not hook.active:
            return out
        normalized, changed = hook.passed(self.normalize(x))  # (..., C), no gain
        return self.affine(normalized) if changed else out


class LayerNorm(_Hooked, nn.LayerNorm):
    def __init__(self, n_embd: int):
        super().__init__(n_embd)
        self.hook_normalized = HookPoint()  # (..., C): (x - mean) / sqrt(var + eps)

    def normalize(self, x):
        return F.layer_norm(x, self.normalized_shape, eps=self.eps)

    def affine(self, normalized):
        return normalized * self.weight + self.bias


class RMSNorm(_Hooked, nn.RMSNorm):
    def __init__(self, n_embd: int):
        super().__init__(n_embd)
        self.hook_normalized = HookPoint()  # (..., C): x / sqrt(mean(x²) + eps)

    def normalize(self, x):
        return F.rms_norm(x, self.normalized_shape, eps=self.eps)

    def affine(self, normalized):
        return normalized * self.weight


NORMS = {"layernorm": LayerNorm, "rmsnorm": RMSNorm}  # model.norm -> the class of every norm layer
