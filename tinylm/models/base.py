"""What every tinylm model is: a config dataclass validated in one place, and one of two kinds.

- a **decoder** (``Decoder``: the GPT, the LSTM and GRU) continues a text: ids in, the next
  token's logits out;
- an **encoder-decoder** (``EncoderDecoder``: ``tinylm.models.seq2seq``) maps a source to a
  target: the source is encoded once, the target decoded against it.

Each model class names its kind (``kind``; ``tinylm.tasks.is_encoder_decoder`` asks it). Training,
generation, the TensorBoard callbacks and ``visualize.py`` use a model only through the interface of
its kind, listed in each base's docstring; none of them asks which class it holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

import torch
import torch.nn as nn

from tinylm.models.hook_points import (
    ActivationCache,
    HookFn,
    HookPoint,
    NamesFilter,
    attached,
    keeper,
    named_hook_points,
    recorded,
)


@dataclass
class ModelConfig:
    """Base of every architecture's config: ``problems`` lists what is wrong, construction refuses it.

    ``shape_keys()`` are the settings a checkpoint's weights depend on (a resume must keep them):
    every field but ``vocab_size`` (the data's) and those named in ``free_keys``.
    """

    vocab_size: int
    free_keys: ClassVar[tuple[str, ...]] = ("dropout",)  # settings that change no weight
    # options a checkpoint records only when not at their default (``tinylm.models.model_config``): a model
    # that leaves them at their defaults saves the same config whether or not a reader knows them
    option_keys: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self):
        problems = self.problems(asdict(self))
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def problems(cls, cfg: dict) -> list[str]:
        """Everything wrong with a config of this architecture, each as 'what is wrong: how to fix it'."""
        raise NotImplementedError

    @classmethod
    def shape_keys(cls) -> tuple[str, ...]:
        """The config fields a checkpoint's weights depend on, e.g. ("arch", "block_size", "n_embd", ...)."""
        return tuple(f.name for f in fields(cls) if f.name != "vocab_size" and f.name not in cls.free_keys)


@contextmanager
def eval_no_grad(model: nn.Module):
    """Eval mode and no autograd for one step, then the model's own mode back.

    Scoped to a step rather than a whole stream, so nothing leaks into the caller's code while a
    stream is paused between tokens (or abandoned half way). Switching modes walks every
    submodule, so a model already in eval mode is left alone.
    """
    was_training = model.training
    if was_training:
        model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if was_training:
            model.train()


class LanguageModel(nn.Module):
    """What models of both kinds offer:

    - ``kind``: "decoder" (``Decoder``) or "encoder-decoder" (``EncoderDecoder``)
    - ``forward(...) -> (logits, loss)``, always that pair (the loss None without targets); what
      goes in depends on the kind
    - ``loss(batch)``: the training loss of one batch of its data module, all the LightningModule
      asks of any model
    - ``new_cache(batch_size, device, dtype)``: what carries the past between decoding steps
    - ``context_window``: how many of the last tokens it reads (None: all of them)
    - ``has_attention``: whether it has attention weights to show
    - ``past_shape(batch_size, length)``: the shape of ``Decoder.step``'s keys and values; None for
      a model without a step, which cannot be exported to ONNX
    - ``token_embeddings()``, ``dimensions()``, ``parameter_table()``: what it shows of itself
    - ``attention_layers()``, ``residual_layers()``, ``head(x)``: the parts ``tinylm.analysis`` hooks
      into to score, ablate and patch heads and to read the residual stream (the logit lens)
    - ``hook_points()``, ``hooks(fwd_hooks)``, ``run_with_hooks``, ``run_with_cache``: its named hook
      points (``tinylm.models.hook_points``), the one way anything looks inside it while it runs
    """

    config: ModelConfig
    kind: ClassVar[str]
    has_attention = False
    hook_aliases: ClassVar[dict[str, str]] = {}  # module name -> the word TransformerLens uses for it

    def hook_points(self) -> dict[str, HookPoint]:
        """Every hook point by its public name (``blocks.0.attn.hook_pattern``, ...), in the order of its modules."""
        points = self.__dict__.get("_hook_points")
        if points is None:
            points = self.__dict__["_hook_points"] = named_hook_points(self, self.hook_aliases)
        return points

    @contextmanager
    def hooks(self, fwd_hooks: Iterable[tuple[NamesFilter, HookFn]] = ()) -> Iterator[LanguageModel]:
        """The model with ``fwd_hooks`` ((names, fn) pairs, ``fn(tensor, hook) -> tensor or None``) attached
        for the ``with`` block; they are removed after it, also after an error."""
        with attached(self.hook_points(), fwd_hooks):
            yield self

    def run_with_hooks(self, *args, fwd_hooks: Iterable[tuple[NamesFilter, HookFn]] = (), **kwargs):
        """``self(*args, **kwargs)`` with ``fwd_hooks`` attached for this one call."""
        with self.hooks(fwd_hooks):
            return self(*args, **kwargs)

    def run_with_cache(self, *args, names_filter: NamesFilter = None, **kwargs):
        """``self(*args, **kwargs)`` and an ``ActivationCache`` of what the hook points ``names_filter``
        picks (all of them by default) saw, detached."""
        cache = ActivationCache()
        with self.hooks([(names_filter, keeper(cache))]):
            return self(*args, **kwargs), cache

    def __repr__(self) -> str:
        """The architecture as ``nn.Module`` prints it, without the hook points (one line counts them)."""
        def lines(module: nn.Module, indent: str) -> list[str]:
            children = [(name, child) for name, child in module.named_children()
                        if not isinstance(child, HookPoint)]
            head = f"{type(module).__name__}({module.extra_repr()}"
            if not children:
                return [head + ")"]
            body = [f"{indent}  ({name}): " + "\n".join(lines(child, indent + "  ")) for name, child in children]
            return [head, *body, f"{indent})"]
        return "\n".join(lines(self, "")) + f"\n{len(self.hook_points())} hook points: model.hook_points()"

    def loss(self, batch) -> torch.Tensor:
        raise NotImplementedError

    def new_cache(self, batch_size: int, device=None, dtype=torch.float32):
        raise NotImplementedError

    @property
    def context_window(self) -> int | None:
        return self.config.block_size

    def past_shape(self, batch_size: int, length: int) -> tuple[int, ...] | None:
        """The shape of ``step``'s keys and of its values for ``length`` positions; None: no ``step``."""
        return None

    def token_embeddings(self) -> torch.Tensor:
        """The token embedding matrix (V, C): one row per vocabulary symbol."""
        return self.token_embedding.weight

    def attention_layers(self) -> dict[str, list[nn.Module]]:
        """Each kind of attention's modules, one per layer: "self" for a decoder; "encoder", "decoder"
        and "cross" for an encoder-decoder; {} without attention. Each module's ``proj`` reads the
        heads' outputs side by side, (B, T, h * hs), and has ``num_heads`` and ``head_size``."""
        return {}

    def residual_layers(self) -> list[nn.Module]:
        """The blocks whose outputs (the first element of what each returns) are the residual stream
        (B, T, C) that ``head`` reads after the last of them; [] for a model without one."""
        return []

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """A residual stream (B, T, C) -> final LayerNorm -> lm_head -> logits (B, T, V)."""
        raise NotImplementedError(f"{type(self).__name__} has no residual stream to read")

    def dimensions(self) -> dict[str, int]:
        """The model's sizes by the letters its shape comments use, e.g. {"C (embedding width)": 64}."""
        raise NotImplementedError

    def parameter_table(self) -> list[tuple[str, int]]:
        """(part, parameter count) rows, in the order of the forward pass."""
        raise NotImplementedError

    @staticmethod
    def counted(parts: list[tuple[str, nn.Module | None]]) -> list[tuple[str, int]]:
        """(part, parameter count) rows of named modules (None: 0), a parameter shared by two parts (a tied
        head's matrix) counted once, with the first."""
        seen: set[int] = set()
        rows = []
        for name, module in parts:
            params = [p for p in (module.parameters() if module is not None else ()) if id(p) not in seen]
            seen.update(id(p) for p in params)
            rows.append((name, sum(p.numel() for p in params)))
        return rows

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def format_parameter_table(self) -> str:
        rows = self.parameter_table()
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {count:>10,}" for name, count in rows]
        lines.append(f"{'total':<{width}}  {self.num_params():>10,}")
        return "\n".join(lines)


class Decoder(LanguageModel):
    """A model that continues a text (the GPT, the LSTM and GRU):

    - ``forward(idx, targets=None, cache=None, last_only=False) -> (logits, loss)``: ids (B, T) in,
      logits (B, T, V) of the next token at every position out, and the mean cross-entropy against
      ``targets`` (B, T) (None without them). ``cache`` (from ``new_cache``): decode
      incrementally, ``idx`` holding only the positions not read yet. ``last_only``: the logits of
      the last position only, (B, 1, V), and no loss
    - ``loss((idx, targets))``: its batches are (idx, targets), (B, T) each
    - ``attention_maps(idx)``: per layer, the attention weights (B, h, T, T) for ``idx`` (B, T);
      None for a model without attention (``has_attention = False``)
    - ``step(idx, past_keys, past_values)``: ``forward`` on plain tensors, what ONNX export traces
      (``tinylm.onnx.export``), for an architecture whose ``past_shape`` is not None
    """

    kind = "decoder"

    def loss(self, batch) -> torch.Tensor:
        idx, targets = batch  # (B, T) each
        return self(idx, targets)[1]

    def step(self, idx: torch.Tensor, past_keys: torch.Tensor, past_values: torch.Tensor):
        """``forward`` with the cache as plain tensors in and out, and no other state: one graph for export.

        idx (B, T) continues a text whose P earlier positions (P >= 0) left ``past_keys`` and
        ``past_values``, each ``past_shape(B, P)``. Returns the logits (B, T, V) and the keys and
        the values of all P + T positions, each ``past_shape(B, P + T)``.
        """
        raise NotImplementedError(f"{type(self).__name__} has no step: its past_shape is None")

    def attention_maps(self, idx: torch.Tensor) -> list[torch.Tensor] | None:
        """Per layer, the attention weights (B, h, T, T) for ``idx`` (B, T), read at each attention's
        ``hook_pattern``; None: no attention."""
        if not self.has_attention:
            return None
        layers = self.attention_layers()["self"]
        return recorded([attention.hook_pattern for attention in layers], lambda: self(idx))


class EncoderDecoder(LanguageModel):
    """A model that maps a source to a target (``tinylm.models.seq2seq``).

    Its vocabulary starts with the padding, begin and end symbols (``PAD_ID, BEGIN_ID, END_ID`` of
    ``tinylm.models.seq2seq``); sources are padded with PAD_ID at the end.

    - ``forward(src, tgt, targets=None) -> (logits, loss)``: teacher forcing, the source (B, S)
      and the target (B, T) that starts with BEGIN in, the logits (B, T, V) of the next target
      symbol at every position out, and the cross-entropy against ``targets`` (B, T) (target +
      END, padded with PAD_ID, which the loss leaves out; None without them)
    - ``loss((src, tgt, targets))``: its batches are (source, target_in, target_out)
    - ``encode(src) -> memory``: the source encoded once, all the decoder reads of it
    - ``decode(tgt, memory, cache=None, last_only=False) -> (logits, self_weights, cross_weights)``:
      the target against an encoded source, with each decoder layer's self-attention (B, h, T, T)
      and cross-attention (B, h, T, S) weights; ``cache`` (``new_cache``) for incremental decoding
      (``tinylm.tasks.translation.decoding`` holds the loops)
    - ``translation_maps(src, tgt)``: per layer, the "encoder", "decoder" and "cross" attention weights
    """

    kind = "encoder-decoder"

    def loss(self, batch) -> torch.Tensor:
        src, tgt, targets = batch  # (B, S), (B, T), (B, T)
        return self(src, tgt, targets)[1]

    def encode(self, src: torch.Tensor):
        """Source ids (B, S), padded with PAD_ID at the end -> the memory ``decode`` reads."""
        raise NotImplementedError

    def decode(self, tgt: torch.Tensor, memory, cache=None, last_only: bool = False):
        """Target ids (B, T) -> logits (B, T, V), and per decoder layer the self- and cross-attention weights."""
        raise NotImplementedError

    def translation_maps(self, src: torch.Tensor, tgt: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        """Per layer: "encoder" (B, h, S, S), "decoder" (B, h, T, T) and "cross" (B, h, T, S) attention
        weights, read at each attention's ``hook_pattern``."""
        layers = self.attention_layers()
        kinds = ("encoder", "decoder", "cross")
        points = [attention.hook_pattern for kind in kinds for attention in layers[kind]]
        weights = recorded(points, lambda: self(src, tgt))
        counts = [len(layers[kind]) for kind in kinds]
        starts = [sum(counts[:i]) for i in range(len(kinds))]
        return {kind: weights[start:start + count] for kind, start, count in zip(kinds, starts, counts, strict=True)}
