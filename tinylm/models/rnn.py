"""A recurrent (LSTM or GRU) character language model: the baseline the Transformer is measured against.

Shapes: B = batch, T = sequence length, E = n_embd, H = hidden_size, V = vocabulary size.

    ids (B, T) -> token embedding (B, T, E) -> num_layers x LSTM/GRU -> (B, T, H)
      -> lm_head -> logits (B, T, V)

It is a decoder (``tinylm.models.base.Decoder``), so the same LightningModule, data, callbacks
and sampling loop drive it. Training reads windows of ``block_size`` tokens, each starting from a zero hidden state.
Generation is not limited to a window (``context_window`` is None): the hidden state carries the
whole past, and ``RNNState`` plays the part of the KV cache. It has no attention to show; its hook
points are ``hook_embed`` (B, T, E) and ``hook_rnn_out`` (B, T, H), the last layer's hidden states.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from tinylm.models.base import Decoder, ModelConfig
from tinylm.models.hook_points import HookPoint
from tinylm.models.ops import Dropout
from tinylm.models.rnn_checks import rnn_config_problems


@dataclass
class RNNConfig(ModelConfig):
    arch: str = "lstm"  # "lstm" or "gru"
    block_size: int = 32  # training window (backpropagation through time); generation is unlimited
    n_embd: int = 64  # E: token embedding width, the first layer's input
    hidden_size: int = 128  # H: hidden (and, for the LSTM, cell) state width of every layer
    num_layers: int = 2
    dropout: float = 0.1  # on the embeddings, between layers and before lm_head

    @classmethod
    def problems(cls, cfg: dict) -> list[str]:
        return rnn_config_problems(cfg)


class RNNState:
    """The hidden state carried from one generation step to the next: the RNN's "cache".

    Unlike a KV cache it has a fixed size and never goes stale, so a text of any length is
    continued one new token per step.
    """

    def __init__(self):
        self.hidden: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None  # None = zeros
        self.length = 0  # number of positions read

    def reset(self) -> None:
        self.hidden, self.length = None, 0


class RNNLanguageModel(Decoder):
    def __init__(self, config: RNNConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.n_embd)
        self.drop = Dropout(config.dropout)
        recurrent = nn.LSTM if config.arch == "lstm" else nn.GRU
        self.rnn = recurrent(
            config.n_embd, config.hidden_size, config.num_layers, batch_first=True,
            dropout=config.dropout if config.num_layers > 1 else 0.0,  # between layers only
        )
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)
        # Small output weights, zero bias: the initial loss is close to ln(V), as for the GPT.
        nn.init.normal_(self.lm_head.weight, mean=0.0, std=0.02)
        nn.init.zeros_(self.lm_head.bias)
        self.hook_embed = HookPoint()  # (B, T, E)
        self.hook_rnn_out = HookPoint()  # (B, T, H)
        self.hook_points()  # named, and quick to reach (tinylm.models.hook_points.named_hook_points)

    def forward(self, idx, targets=None, cache: RNNState | None = None, last_only=False):
        """idx (B, T) -> (logits (B, T, V), loss or None); see ``Decoder``.

        ``cache``: start from its hidden state and leave the new one in it; ``idx`` holds only the
        positions not read yet.
        """
        B, T = idx.shape
        x = self.drop(self.hook_embed(self.token_embedding(idx)))  # (B, T, E)
        out, hidden = self.rnn(x, cache.hidden if cache is not None else None)  # (B, T, H)
        out = self.hook_rnn_out(out)  # (B, T, H)
        if cache is not None:
            cache.hidden, cache.length = hidden, cache.length + T
        if last_only:
            out = out[:, -1:]  # (B, 1, H)
        logits = self.lm_head(self.drop(out))  # (B, T, V)
        loss = None
        if targets is not None and not last_only:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))  # (B*T, V) vs (B*T,)
        return logits, loss

    def parameter_table(self) -> list[tuple[str, int]]:
        """(part, parameter count) rows: embedding, each recurrent layer, lm_head."""
        rows = [("token_embedding", self.token_embedding.weight.numel())]
        for layer in range(self.config.num_layers):  # PyTorch names a layer's tensors *_l<layer>
            count = sum(p.numel() for name, p in self.rnn.named_parameters() if name.endswith(f"_l{layer}"))
            rows.append((f"{self.config.arch}.{layer}", count))
        rows.append(("lm_head", sum(p.numel() for p in self.lm_head.parameters())))
        return rows

    def new_cache(self, batch_size: int, device=None, dtype=torch.float32) -> RNNState:
        return RNNState()

    @property
    def context_window(self) -> None:
        return None  # the hidden state carries the whole past

    def dimensions(self) -> dict[str, int]:
        c = self.config
        return {"E (embedding width)": c.n_embd, "H (hidden size)": c.hidden_size, "V (vocabulary)": c.vocab_size}
