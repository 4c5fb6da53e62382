"""What every tinylm model is: a config dataclass validated in one place, and one interface.

Training, generation, the TensorBoard callbacks and ``visualize.py`` use a model only through
``LanguageModel``; none of them asks which class it holds. An architecture that has no attention
says so by returning ``None`` from ``attention_maps``. A translation model (an encoder-decoder)
says so with ``translates = True``; what it offers instead of a text continuation is listed in
``LanguageModel``'s docstring.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn


@dataclass
class ModelConfig:
    """Base of every architecture's config: ``problems`` lists what is wrong, construction refuses it."""

    vocab_size: int

    def __post_init__(self):
        problems = self.problems(asdict(self))
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def problems(cls, cfg: dict) -> list[str]:
        """Everything wrong with a config of this architecture, each as 'what is wrong: how to fix it'."""
        raise NotImplementedError


def size_problems(cfg: dict, keys: tuple[str, ...]) -> list[str]:
    """Sizes (``keys``) that are not positive integers, and a dropout outside [0, 1)."""
    problems = []
    for key in keys:
        value = cfg.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            problems.append(f"model.{key}={value!r} must be a positive integer")
    dropout = cfg.get("dropout")
    if not isinstance(dropout, int | float) or isinstance(dropout, bool) or not 0 <= dropout < 1:
        problems.append(f"model.dropout={dropout!r} must be in [0, 1)")
    return problems


class LanguageModel(nn.Module):
    """The interface of every model: ids in, next-token logits (and the loss) out.

    - ``forward(idx, targets=None, cache=None, last_only=False) -> (logits, loss)``
    - ``new_cache(batch_size, device, dtype)``: what carries the past between generation steps
    - ``context_window``: how many of the last tokens it reads (None: all of them)
    - ``has_attention`` and ``attention_maps(idx)``: per-layer attention weights (a model without
      attention has ``has_attention = False``, and its maps are None; a translation model's maps
      are its ``translation_maps``)
    - ``token_embeddings()``, ``dimensions()``, ``parameter_table()``: what it shows of itself
    - ``past_shape(batch_size, length)`` and ``step(idx, past_keys, past_values)``: decoding on plain
      tensors, what ONNX export traces (``tinylm.onnx.export``); an architecture without a step has
      ``past_shape`` None and cannot be exported
    - ``loss(batch)``: the training loss of one batch of its data module, all the LightningModule
      asks of any model (a language model's batch is ``(idx, targets)``)

    A model with ``translates = True`` (``tinylm.models.seq2seq``) maps a source to a target
    instead of continuing a text. Its batches are ``(source, target_in, target_out)``, its vocabulary
    starts with the padding, begin and end symbols (``PAD_ID, BEGIN_ID, END_ID``), and it has:

    - ``encode(src) -> memory``: the source (B, S), padded at the end, encoded once
    - ``decode(tgt, memory, cache=None, last_only=False) -> (logits, self_weights, cross_weights)``,
      with ``new_cache`` for incremental decoding (``tinylm.tasks.translation.decoding`` holds the loops)
    - ``translation_maps(src, tgt)``: the encoder, decoder and cross-attention weights per layer
    """

    config: ModelConfig
    has_attention = False
    translates = False

    def loss(self, batch) -> torch.Tensor:
        idx, targets = batch  # (B, T) each
        return self(idx, targets)[1]

    def new_cache(self, batch_size: int, device=None, dtype=torch.float32):
        raise NotImplementedError

    @property
    def context_window(self) -> int | None:
        return self.config.block_size

    def past_shape(self, batch_size: int, length: int) -> tuple[int, ...] | None:
        """The shape of ``step``'s keys and of its values for ``length`` positions; None: no ``step``."""
        return None

    def step(self, idx: torch.Tensor, past_keys: torch.Tensor, past_values: torch.Tensor):
        """``forward`` with the cache as plain tensors in and out, and no other state: one graph for export.

        idx (B, T) continues a text whose P earlier positions (P >= 0) left ``past_keys`` and
        ``past_values``, each ``past_shape(B, P)``. Returns the logits (B, T, V) and the keys and
        the values of all P + T positions, each ``past_shape(B, P + T)``.
        """
        raise NotImplementedError(f"{type(self).__name__} has no step: its past_shape is None")

    def attention_maps(self, idx: torch.Tensor) -> list[torch.Tensor] | None:
        """Per layer, the attention weights (B, h, T, T) for ``idx`` (B, T); None: no attention."""
        return None

    def token_embeddings(self) -> torch.Tensor:
        """The token embedding matrix (V, C): one row per vocabulary symbol."""
        return self.token_embedding.weight

    def dimensions(self) -> dict[str, int]:
        """The model's sizes by the letters its shape comments use, e.g. {"C (embedding width)": 64}."""
        raise NotImplementedError

    def parameter_table(self) -> list[tuple[str, int]]:
        """(part, parameter count) rows, in the order of the forward pass."""
        raise NotImplementedError

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def format_parameter_table(self) -> str:
        rows = self.parameter_table()
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {count:>10,}" for name, count in rows]
        lines.append(f"{'total':<{width}}  {self.num_params():>10,}")
        return "\n".join(lines)
