"""The KV cache of incremental decoding: each causal self-attention owns one (``kv_cache``), the keys and
values of the positions it has encoded so far.

Shared by every causal attention here (the GPT's and the encoder-decoder's decoder). ``KVCaches`` hands
the caches out: ``new_cache`` gives every attention an empty one, ``step`` (ONNX) the keys and values
of earlier positions, and the model decodes with them when it is passed as ``cache``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn


class KVCache:
    """One attention's keys and values of the positions encoded so far, (B, h, length, hs) each.

    Each step appends its positions, so it holds at most the first block_size positions of a text.
    Once a text outgrows the block, every kept token moves to a new position and the window is
    encoded afresh (``tinylm.generation.sampling``), with rope too: from the second layer on, cached
    keys and values depend on tokens that left the window.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values  # (B, h, P, hs) each

    @property
    def length(self) -> int:
        """The number of positions stored."""
        return self.keys.size(2)

    def append(self, k: torch.Tensor, v: torch.Tensor):
        """Add k, v (B, h, T, hs) of the next T positions; return all the keys and values stored."""
        self.keys = torch.cat((self.keys, k), dim=2)  # (B, h, length+T, hs)
        self.values = torch.cat((self.values, v), dim=2)  # (B, h, length+T, hs)
        return self.keys, self.values

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep (and reorder) the rows ``rows`` (B',) of the batch: (B', h, length, hs) each."""
        self.keys, self.values = self.keys[rows], self.values[rows]


class KVCaches:
    """The caches of a model's causal attentions, each kept by its attention as ``kv_cache``: what
    ``new_cache`` returns and the model reads as ``cache`` (decode incrementally, only the new positions).

    It starts from the keys and values (L, B, h, P, hs) of P earlier positions, one layer per
    attention (``GPT.step``), or from none (``empty``). A model has one set of caches at a time:
    a new one replaces the last.
    """

    def __init__(self, attentions: Sequence[nn.Module], past_keys: torch.Tensor, past_values: torch.Tensor):
        self.attentions = list(attentions)
        for attention, k, v in zip(self.attentions, past_keys.unbind(0), past_values.unbind(0), strict=True):
            attention.kv_cache = KVCache(k, v)  # (B, h, P, hs) each; a plain attribute, never in the state_dict

    @classmethod
    def empty(cls, attentions: Sequence[nn.Module], batch_size: int, device=None, dtype=torch.float32):
        """Caches of no positions yet for ``attentions`` (each with ``num_heads`` and ``head_size``)."""
        first = attentions[0]
        shape = (len(attentions), batch_size, first.num_heads, 0, first.head_size)  # (L, B, h, 0, hs)
        none = torch.zeros(shape, device=device, dtype=dtype)
        return cls(attentions, none, none)

    @property
    def length(self) -> int:
        """The number of positions stored (the same in every layer)."""
        return self.attentions[0].kv_cache.length

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep (and reorder) the rows ``rows`` (B',) of the batch in every layer: a beam's kept hypotheses."""
        for attention in self.attentions:
            attention.kv_cache.keep_rows(rows)

    def release(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every layer's keys and values, (L, B, h, length, hs) each; the attentions keep no cache after."""
        caches = [attention.kv_cache for attention in self.attentions]
        for attention in self.attentions:
            attention.kv_cache = None
        return torch.stack([c.keys for c in caches]), torch.stack([c.values for c in caches])
