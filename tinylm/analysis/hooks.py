"""The machinery every experiment shares: PyTorch hooks that read or change a model while it runs.

Two places in a Transformer carry what the experiments look at (``LanguageModel.attention_layers``
and ``residual_layers`` name them):

- the input of an attention layer's ``proj``: the heads' outputs side by side, (B, T, h * hs),
  head ``j`` in columns ``j * hs .. (j + 1) * hs``. A forward pre-hook there zeroes a head
  (ablation), replaces it by its mean, or by another run's values (patching);
- a block's output, whose first element is the residual stream (B, T, C). A forward hook there
  reads it (the logit lens) or replaces positions of it (patching).

Every hook is removed when its ``with`` block ends, also on an error: the model is left as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn

Head = tuple[int, int]  # (layer, head), both counted from 0


@contextmanager
def hooked(pre_hooks: Iterable[tuple[nn.Module, Callable]] = (),
           hooks: Iterable[tuple[nn.Module, Callable]] = ()) -> Iterator[None]:
    """Forward pre-hooks and forward hooks ``(module, fn)`` in place for the ``with`` block."""
    handles = [module.register_forward_pre_hook(fn) for module, fn in pre_hooks]
    handles += [module.register_forward_hook(fn) for module, fn in hooks]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def head_columns(attention: nn.Module, head: int) -> slice:
    """The columns of ``attention.proj``'s input (B, T, h * hs) that hold ``head``'s output."""
    return slice(head * attention.head_size, (head + 1) * attention.head_size)


def _replace_heads(replacements: list[tuple[slice, Callable[[torch.Tensor], torch.Tensor]]]):
    """A pre-hook on ``proj``: (a head's columns, f(its current output (B, T, hs)) -> its new output)."""
    def hook(module, args):
        y = args[0].clone()  # (B, T, h * hs)
        for columns, replace in replacements:
            y[..., columns] = replace(y[..., columns])
        return (y, *args[1:])
    return hook


def heads_replaced(attentions: list[nn.Module], heads: Iterable[Head],
                   value: Callable[[int, int, torch.Tensor], torch.Tensor]):
    """Pre-hooks on ``proj`` of ``attentions`` (one per layer) that put ``value(layer, head, y)`` in
    place of each of ``heads``' outputs y (B, T, hs): for ``hooked(pre_hooks=...)``."""
    by_layer: dict[int, list[tuple[slice, Callable]]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(
            (head_columns(attentions[layer], head), lambda y, layer=layer, head=head: value(layer, head, y)))
    return [(attentions[layer].proj, _replace_heads(replacements)) for layer, replacements in by_layer.items()]


def ablated(attentions: list[nn.Module], heads: Iterable[Head], means: list[torch.Tensor] | None = None):
    """Pre-hooks switching ``heads`` off: their outputs zeroed, or with ``means`` (per layer, the
    mean heads' outputs (h * hs,), from ``head_means``) set to that mean at every position."""
    def value(layer, head, y):
        if means is None:
            return torch.zeros_like(y)
        return means[layer][head_columns(attentions[layer], head)].expand_as(y)
    return heads_replaced(attentions, heads, value)


def proj_inputs(attentions: list[nn.Module], run: Callable[[], object]) -> list[torch.Tensor]:
    """Per layer, the heads' outputs (B, T, h * hs) that ``run()`` feeds into each ``proj``."""
    seen: list[torch.Tensor | None] = [None] * len(attentions)

    def keeper(layer):
        def hook(module, args):
            seen[layer] = args[0].detach()
        return hook

    with hooked(pre_hooks=[(a.proj, keeper(i)) for i, a in enumerate(attentions)]):
        run()
    return seen


def head_means(attentions: list[nn.Module], run: Callable[[], object]) -> list[torch.Tensor]:
    """Per layer, the heads' outputs averaged over the batch and the positions of ``run()``: (h * hs,)."""
    return [y.mean(dim=(0, 1)) for y in proj_inputs(attentions, run)]


def residuals(blocks: list[nn.Module], run: Callable[[], object]) -> list[torch.Tensor]:
    """Per block, the residual stream (B, T, C) after it in ``run()``."""
    seen: list[torch.Tensor | None] = [None] * len(blocks)

    def keeper(layer):
        def hook(module, args, output):
            seen[layer] = output[0].detach()
        return hook

    with hooked(hooks=[(b, keeper(i)) for i, b in enumerate(blocks)]):
        run()
    return seen


def residual_replaced(block: nn.Module, positions: slice | int, values: torch.Tensor):
    """A forward hook on ``block`` putting ``values`` (B, P, C) in place of its residual stream at
    ``positions``: for ``hooked(hooks=...)``."""
    def hook(module, args, output):
        x = output[0].clone()  # (B, T, C)
        x[:, positions] = values
        return (x, *output[1:])
    return block, hook


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
    """``model`` with the heads ``values`` names (``parse_heads``) zeroed for the ``with`` block."""
    heads = parse_heads(values or [], model)
    with hooked(pre_hooks=ablated(switchable(model)[1], heads) if heads else ()):
        yield
