"""The machinery every experiment shares: hooks on a model's named hook points (``tinylm.models.hook_points``)
that read or change it while it runs.

Two places in a Transformer carry what the experiments look at (``LanguageModel.attention_layers``
and ``residual_layers`` name the modules that hold them):

- an attention layer's ``hook_z``: each head's output (B, T, h, hs), head ``j`` at ``[:, :, j]``.
  Replacing it there zeroes a head (ablation), sets it to its mean, or to another run's values
  (patching); for an encoder-decoder the heads switched off are the cross-attention's
  (``decoder.{l}.cross_attn.hook_z``);
- a block's ``hook_resid_post``: the residual stream (B, T, C) after it. Reading it gives the logit
  lens; replacing positions of it patches the stream.

Every hook is removed when its ``with`` block ends, also on an error: the model is left as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn

from tinylm.models.hook_points import HookFn, HookPoint, hooked, recorded

Head = tuple[int, int]  # (layer, head), both counted from 0


def heads_replaced(attentions: list[nn.Module], heads: Iterable[Head],
                   value: Callable[[int, int, torch.Tensor], torch.Tensor]) -> list[tuple[HookPoint, HookFn]]:
    """Hooks on the ``hook_z`` of ``attentions`` (one per layer) that put ``value(layer, head, z)`` in place of
    each of ``heads``' outputs z (B, T, hs): for ``hooked``."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def replacer(layer: int, indices: list[int]) -> HookFn:
        def hook(z, hook):
            z = z.clone()  # (B, T, h, hs)
            for head in indices:
                z[:, :, head] = value(layer, head, z[:, :, head])
            return z
        return hook
    return [(attentions[layer].hook_z, replacer(layer, indices)) for layer, indices in by_layer.items()]


def ablated(attentions: list[nn.Module], heads: Iterable[Head], means: list[torch.Tensor] | None = None):
    """Hooks switching ``heads`` off: their outputs zeroed, or with ``means`` (per layer, the mean heads'
    outputs (h, hs), from ``head_means``) set to that mean at every position."""
    def value(layer, head, z):
        if means is None:
            return torch.zeros_like(z)
        return means[layer][head].expand_as(z)
    return heads_replaced(attentions, heads, value)


def head_outputs(attentions: list[nn.Module], run: Callable[[], object]) -> list[torch.Tensor]:
    """Per layer, the heads' outputs (B, T, h, hs) ``run()`` reaches each ``hook_z`` with."""
    return recorded([attention.hook_z for attention in attentions], run)


def head_means(attentions: list[nn.Module], run: Callable[[], object]) -> list[torch.Tensor]:
    """Per layer, the heads' outputs averaged over the batch and the positions of ``run()``: (h, hs)."""
    # averaged as the heads side by side (B, T, h * hs), the tensor the output projection reads
    return [z.reshape(*z.shape[:2], -1).mean(dim=(0, 1)).view(z.shape[2:]) for z in head_outputs(attentions, run)]


def residuals(blocks: list[nn.Module], run: Callable[[], object]) -> list[torch.Tensor]:
    """Per block, the residual stream (B, T, C) after it in ``run()``, read at its ``hook_resid_post``."""
    return recorded([block.hook_resid_post for block in blocks], run)


def residual_replaced(block: nn.Module, positions: slice | int, values: torch.Tensor) -> tuple[HookPoint, HookFn]:
    """A hook on ``block``'s ``hook_resid_post`` putting ``values`` (B, P, C) in place of the residual stream
    at ``positions``: for ``hooked``."""
    def hook(x, hook):
        x = x.clone()  # (B, T, C)
        x[:, positions] = values
        return x
    return block.hook_resid_post, hook


def switchable(model: nn.Module) -> tuple[str, list[nn.Module]]:
    """The heads a command switches off: a decoder's self-attention, an encoder-decoder's cross-attention."""
    layers = model.attention_layers()
    kind = "self" if "self" in layers else "cross"
    return kind, layers.get(kind, [])


def parse_heads(values, model: nn.Module) -> list[Head]:
    """``ablate=[0.2,1.3]``'s heads, "layer.head" each (a number or a string; head 10 and up: quote it,
    '1.10'), checked against ``model``; one TinyLMError naming the first bad one."""
    from tinylm.errors import TinyLMError
    from tinylm.values import layer_and_head

    kind, attentions = switchable(model)
    heads = []
    for value in values:
        parsed = layer_and_head(value)
        if parsed is None:
            raise TinyLMError(f"ablate: {value!r} is not layer.head: write e.g. ablate=[0.2,1.3] (layer 0 head 2, "
                              "layer 1 head 3; from head 10 on quote it: ablate=['1.10'])")
        layer, head = parsed
        if not attentions or layer >= len(attentions) or head >= attentions[layer].num_heads:
            shape = (f"{len(attentions)} layers of {attentions[0].num_heads} {kind}-attention heads"
                     if attentions else f"no attention heads (an {model.config.arch} model)")
            raise TinyLMError(f"ablate: there is no head {layer}.{head}: the model has {shape}, counted from 0")
        heads.append((layer, head))
    return heads


@contextmanager
def heads_switched_off(model: nn.Module, values) -> Iterator[None]:
    """``model`` with the heads ``values`` names (``parse_heads``) zeroed at their ``hook_z`` for the ``with``
    block."""
    heads = parse_heads(values or [], model)
    with hooked(ablated(switchable(model)[1], heads) if heads else ()):
        yield
