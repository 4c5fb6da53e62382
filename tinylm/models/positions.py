"""Position encodings, shared by the GPT and the encoder-decoder.

A model adds a learned table (``nn.Embedding(block_size, C)``) or the fixed sin/cos one
(``SinusoidalPositions``) to its token embeddings, or, with rope, adds nothing and rotates the
queries and keys inside attention (``RotaryPositions``). ``position_embedding`` makes the first two.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def sinusoidal_table(block_size: int, n_embd: int) -> torch.Tensor:
    """Fixed sin/cos positions (Vaswani et al. 2017): even dims sin, odd dims cos. (T, C)."""
    position = torch.arange(block_size, dtype=torch.float32).unsqueeze(1)  # (T, 1)
    freq = torch.exp(torch.arange(0, n_embd, 2, dtype=torch.float32) * (-math.log(10000.0) / n_embd))
    table = torch.zeros(block_size, n_embd)
    table[:, 0::2] = torch.sin(position * freq)  # (T, C/2)
    table[:, 1::2] = torch.cos(position * freq)
    return table


class SinusoidalPositions(nn.Module):
    """Same interface as ``nn.Embedding(block_size, C)``, no parameters."""

    def __init__(self, block_size: int, n_embd: int):
        super().__init__()
        self.register_buffer("table", sinusoidal_table(block_size, n_embd), persistent=False)

    def forward(self, pos: torch.Tensor) -> torch.Tensor:
        return self.table[pos]


class RotaryPositions(nn.Module):
    """Rotary position embedding (RoPE, Su et al. 2021) for queries or keys, no parameters.

    Channel i of a head and channel i + hs/2 form a pair, rotated by the angle pos * theta_i with
    theta_i = 10000^(-2i/hs). A query at position m and a key at position n, rotated by their own
    angles, have the dot product of the unrotated pair turned by (m - n) * theta_i: attention
    scores depend on how far apart two tokens are, not on where they stand. (Pairing i with i+1
    is the same up to a reordering of channels; halves are cheaper to slice.)
    """

    def __init__(self, block_size: int, head_size: int):
        super().__init__()
        theta = torch.exp(torch.arange(0, head_size, 2, dtype=torch.float32) * (-math.log(10000.0) / head_size))
        angles = torch.arange(block_size, dtype=torch.float32).unsqueeze(1) * theta  # (block, hs/2)
        self.register_buffer("cos", angles.cos(), persistent=False)  # (block, hs/2)
        self.register_buffer("sin", angles.sin(), persistent=False)  # (block, hs/2)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Rotate x (B, h, T, hs) whose first position is ``start``."""
        T = x.size(-2)
        cos, sin = self.cos[start : start + T].to(x.dtype), self.sin[start : start + T].to(x.dtype)  # (T, hs/2)
        first, second = x.chunk(2, dim=-1)  # (B, h, T, hs/2) each: the two members of every pair
        return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)  # (B, h, T, hs)


def position_embedding(pos_encoding: str, block_size: int, n_embd: int) -> nn.Module | None:
    """What a model adds to its token embeddings (T, C) per position; None for rope (positions enter attention)."""
    if pos_encoding == "learned":
        return nn.Embedding(block_size, n_embd)
    if pos_encoding == "sinusoidal":
        return SinusoidalPositions(block_size, n_embd)
    return None
