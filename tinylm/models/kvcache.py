"""The KV cache of incremental decoding: keys and values of past positions, one pair of tensors per layer.

Shared by every attention here (the GPT's and the encoder-decoder's decoder).
"""

from __future__ import annotations

import torch


class KVCache:
    """Keys/values of the positions encoded so far, (B, h, length, hs) per layer: incremental decoding.

    Each step appends its positions, so it holds at most the first block_size positions of a text.
    Once a text outgrows the block, every kept token moves to a new position and the window is
    encoded afresh (``tinylm.generation.sampling``), with rope too: from the second layer on, cached keys
    and values depend on tokens that left the window. It starts from the keys and values
    (L, B, h, P, hs) of P earlier positions (``GPT.step``), or from none (``empty``).
    """

    def __init__(self, past_keys: torch.Tensor, past_values: torch.Tensor):
        self.keys, self.values = list(past_keys.unbind(0)), list(past_values.unbind(0))  # L x (B, h, P, hs) each
        self.length = past_keys.size(3)  # number of positions stored

    @classmethod
    def empty(cls, layers: int, batch_size: int, num_heads: int, head_size: int, device=None, dtype=torch.float32):
        """A cache of no positions yet for ``layers`` attention layers."""
        none = torch.zeros(layers, batch_size, num_heads, 0, head_size, device=device, dtype=dtype)  # (L, B, h, 0, hs)
        return cls(none, none)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Add k, v (B, h, T, hs) of the next T positions to ``layer``; return all its keys and values."""
        self.keys[layer] = torch.cat((self.keys[layer], k), dim=2)  # (B, h, length+T, hs)
        self.values[layer] = torch.cat((self.values[layer], v), dim=2)  # (B, h, length+T, hs)
        return self.keys[layer], self.values[layer]
