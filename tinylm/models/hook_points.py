"""Named hook points: the one way to look inside a tinylm model while it runs (TransformerLens's names).

A ``HookPoint`` is an identity module a model passes a tensor through at each stage of its forward
pass (``x = self.hook_resid_pre(x)``). With nothing attached, the call returns its input at once,
without nn.Module's call machinery (global module hooks do not see hook points), so the reference
model's 63 points cost its training step nothing measurable (``bench/bench_hook_points.py``). A hook
attached to a point sees the tensor and may return a replacement, as in TransformerLens:
``fn(tensor, hook) -> tensor or None``.

Every model names its hook points by their module path, written with TransformerLens's words where
tinylm's modules are named otherwise (a class's ``hook_aliases``: the GPT's ``ffwd`` is ``mlp`` and
its ``ln_f`` is ``ln_final``), e.g. ``blocks.0.attn.hook_pattern``, ``blocks.3.mlp.hook_post``,
``ln_final.hook_normalized``. ``LanguageModel.hook_points()`` lists them; ``hooks``,
``run_with_hooks`` and ``run_with_cache`` (on the model, and on ``tinylm.load``'s object) attach
hooks for one run and remove them afterwards, also after an error.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn

from tinylm.errors import TinyLMError

HookFn = Callable[..., "torch.Tensor | None"]  # fn(tensor, hook=HookPoint) -> a replacement or None
NamesFilter = str | Iterable[str] | Callable[[str], bool] | None  # which points: see ``select``


class HookPoint(nn.Module):
    """An identity on the forward pass where hooks read or replace a tensor; ``name`` is its public name."""

    def __init__(self):
        super().__init__()
        self.name: str | None = None  # set when its model lists its hook points

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self._forward_hooks:  # nothing attached: the tensor itself, without nn.Module's call machinery
            return x
        return super().__call__(x)

    @property
    def active(self) -> bool:
        """Whether a hook is attached: a model then computes what the point shows even on a fast path
        that would skip it (attention weights under SDPA, a norm's output before its gain)."""
        return bool(self._forward_hooks)

    def add_hook(self, fn: HookFn):
        """Attach ``fn(tensor, hook=self) -> tensor or None``; returns the handle that removes it."""
        def hook(module, args, output):
            return fn(output, hook=self)
        return self.register_forward_hook(hook)

    def passed(self, x: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """``x`` through the point, and whether a hook replaced it or edited it in place (an edit in place
        is seen by the tensor's version counter; tensors made under ``torch.inference_mode`` have none, and
        are compared with a copy taken before the hooks ran)."""
        if not self._forward_hooks:
            return x, False
        if x.is_inference():  # no version counter: compare with a copy
            before = x.clone()
            out = self(x)
            return out, out is not x or not torch.equal(out, before)
        version = x._version
        out = self(x)
        return out, out is not x or out._version != version

    def __repr__(self) -> str:
        return f"HookPoint({self.name!r})"


def public_name(path: str, aliases: dict[str, str]) -> str:
    """A module path (``blocks.0.ffwd.hook_pre``) in TransformerLens's words (``blocks.0.mlp.hook_pre``)."""
    return ".".join(aliases.get(part, part) for part in path.split("."))


def named_hook_points(model: nn.Module, aliases: dict[str, str]) -> dict[str, HookPoint]:
    """Every hook point of ``model`` by its public name, each told its name.

    Each is also made a plain attribute of the module that holds it: ``self.hook_q`` is then found in
    the instance's ``__dict__`` instead of through ``nn.Module.__getattr__``, a Python function that
    a forward pass would call once per hook point (about 30 µs of the reference model's forward)."""
    points = {}
    owners = dict(model.named_modules())
    for path, module in owners.items():
        if isinstance(module, HookPoint):
            module.name = public_name(path, aliases)
            points[module.name] = module
            owner, _, attribute = path.rpartition(".")
            vars(owners[owner])[attribute] = module  # the same object _modules holds
    return points


def select(points: dict[str, HookPoint], names: NamesFilter) -> list[str]:
    """The names ``names`` picks: None (all), one name, a list of names, or a filter ``f(name) -> bool``.
    A name the model lacks is one TinyLMError with the closest names it has."""
    if names is None:
        return list(points)
    if callable(names):
        return [name for name in points if names(name)]
    wanted = [names] if isinstance(names, str) else list(names)
    for name in wanted:
        if name not in points:
            close = difflib.get_close_matches(name, points, n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(close)}?" if close else f"it has {summary(points)}"
            raise TinyLMError(f"the model has no hook point {name!r}: {hint} (all of them: hook_points())")
    return wanted


def summary(points: dict[str, HookPoint]) -> str:
    """A short account of a model's hook points, for messages: the first and the last few names."""
    names = list(points)
    if len(names) <= 6:
        return ", ".join(names) or "no hook points"
    return f"{len(names)} hook points, {', '.join(names[:3])} ... {', '.join(names[-2:])}"


@contextmanager
def hooked(hooks: Iterable[tuple[HookPoint, HookFn]] = ()) -> Iterator[None]:
    """``(hook point, fn)`` pairs attached for the ``with`` block, removed after it, also after an error: the one
    place hooks are attached and removed."""
    handles = []
    try:
        for point, fn in hooks:
            handles.append(point.add_hook(fn))
        yield
    finally:
        for handle in handles:
            handle.remove()


def attached(points: dict[str, HookPoint], fwd_hooks: Iterable[tuple[NamesFilter, HookFn]]):
    """``fwd_hooks`` ((names, fn) pairs) attached for a ``with`` block (``hooked``); a bad pair or an unknown name
    is refused before any hook is attached."""
    return hooked([(points[name], fn) for names, fn in hook_pairs(fwd_hooks) for name in select(points, names)])


def hook_pairs(fwd_hooks) -> list[tuple[NamesFilter, HookFn]]:
    """``fwd_hooks`` as a list of (names, fn) pairs; anything else is one TinyLMError that shows the form."""
    form = "fwd_hooks is a list of (name, fn) pairs, e.g. fwd_hooks=[('blocks.0.attn.hook_z', fn)]"
    if isinstance(fwd_hooks, tuple) and len(fwd_hooks) == 2 and callable(fwd_hooks[1]):
        raise TinyLMError(f"{form}: put the one pair in a list")
    try:
        pairs = [tuple(pair) for pair in fwd_hooks]
    except TypeError:
        raise TinyLMError(f"{form}, not {type(fwd_hooks).__name__}") from None
    for pair in pairs:
        if len(pair) != 2 or not callable(pair[1]):
            raise TinyLMError(f"{form}, with fn(tensor, hook) callable: got {pair!r}")
    return pairs


class ActivationCache(dict):
    """What ``run_with_cache`` keeps: hook point name -> tensor, in the order the forward pass reached them.

    Besides full names, TransformerLens's short forms: ``cache["pattern", 0]`` is layer 0's ``hook_pattern``
    (``cache["pattern", -1]`` the last layer's; ``cache["pattern", 0, "cross_attn"]`` where several points of
    a layer share the short name), and ``cache["embed"]`` a point outside the blocks (``hook_embed``).
    """

    def __getitem__(self, key):
        if not isinstance(key, tuple):
            if key not in self and f"hook_{key}" in self:
                return super().__getitem__(f"hook_{key}")
            return super().__getitem__(key)
        short, layer, *within = key
        if isinstance(layer, int) and layer < 0:
            layers = {int(name.split(".")[1]) for name in self if name.count(".") >= 2 and name.split(".")[1].isdigit()}
            layer = max(layers, default=-1) + 1 + layer
        found = [name for name in self
                 if name.endswith(f".hook_{short}") and f".{layer}." in f".{name}"
                 and all(f".{part}." in f".{name}" for part in within)]
        if len(found) != 1:
            raise KeyError(f"{key!r} names {'no' if not found else len(found)} hook points"
                           + (f": {', '.join(found)}; add the part that tells them apart" if found else ""))
        return super().__getitem__(found[0])

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(tensor.shape) for name, tensor in self.items()}


def keeper(cache: ActivationCache) -> HookFn:
    """A hook that stores what it sees in ``cache`` under the point's name, and changes nothing."""
    def keep(tensor, hook):
        cache[hook.name] = tensor.detach()
    return keep


def recorded(points: list[HookPoint], run: Callable[[], object]) -> list[torch.Tensor]:
    """What each of ``points`` saw during ``run()``, in the order given (each must be reached)."""
    seen: dict[int, torch.Tensor] = {}
    with hooked([(point, lambda tensor, hook, i=i: seen.__setitem__(i, tensor.detach()))
                 for i, point in enumerate(points)]):
        run()
    return [seen[i] for i in range(len(points))]
