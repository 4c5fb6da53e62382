"""``optim=muon``: Muon for the hidden weight matrices, AdamW for everything else, as one optimizer.

Muon (Keller Jordan, 2024; ``torch.optim.Muon``) replaces each update of a 2-D weight by its
momentum orthogonalised with a few Newton-Schulz iterations. It is meant for the matrices inside
the blocks; embeddings, the head and the gains and biases keep AdamW (the modded-nanogpt split).
``muon`` (conf/optim/muon.yaml) builds both and hands the module one ``MuonAdamW``, so Lightning
steps, clips, schedules and checkpoints it as any single optimizer.

PyTorch's Muon runs the Newton-Schulz iterations in bfloat16, made for GPUs. A CPU without bf16
units (the AVX2 machines here) emulates it: 16 matrices of the reference model took 324 ms per step
in bfloat16 and 31 ms in float32 (docs/performance.md). ``ns_dtype="float32"`` (the default here)
runs the same iterations in float32 (``Float32Muon``); ``bfloat16`` is PyTorch's own step.
"""

from __future__ import annotations

import torch
from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, _adjust_lr

from tinylm.errors import TinyLMError
from tinylm.training.adamw import AdamW
from tinylm.training.module import scheduled

NS_DTYPES = ("float32", "bfloat16")


RESTART = 3  # iterations on the small side before x = Q x₀ is formed again (see orthogonalise)


def orthogonalise(update: torch.Tensor, coefficients: tuple[float, float, float], steps: int,
                  eps: float) -> torch.Tensor:
    """About U Vᵀ of ``update`` = U S Vᵀ (singular values pushed near 1), by ``steps`` quintic
    Newton-Schulz iterations in float32: PyTorch's iteration without the cast to bfloat16.

    Each iteration maps x (m, n), m <= n, to Q x with Q = a + b G + c G², G = x xᵀ (m, m). Several
    can run on the small side alone: after x -> Q x, the next G is Q G Qᵀ, so a run of k iterations
    costs 2 m² n + (4k - 3) m³ instead of k (2 m² n + m³): fewer FLOPs when n > 1.5 m (at 5 steps, a
    quarter fewer for the qkv matrices, n = 3 m, and a third for the feed-forward ones, n = 4 m). Q
    grows like aᵏ and carries G's rounding along, so x is formed again every ``RESTART`` iterations:
    the result stays that of the plain iteration to float32 rounding, however many steps."""
    a, b, c = coefficients
    wide = update.T if update.size(0) > update.size(1) else update  # (m, n) with m <= n: the small Gram matrix
    x = wide.float()
    x = x / x.norm().clamp(min=eps)  # spectral norm <= 1
    m, n = x.shape
    run = RESTART if 2 * n > 3 * m else 1
    for first in range(0, steps, run):
        gram = x @ x.T  # (m, m)
        q = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        q.diagonal().add_(a)  # Q = a + b G + c G²
        for _ in range(min(run, steps - first) - 1):
            moved = q @ gram @ q.T  # (m, m): G of Q x
            q = torch.addmm(q, torch.addmm(moved, moved, moved, beta=b, alpha=c), q, beta=a)
        x = q @ x  # (m, n)
    x = x.to(update.dtype)
    return x.T if update.size(0) > update.size(1) else x


class Float32Muon(torch.optim.Muon):
    """``torch.optim.Muon`` (its settings, state and learning-rate adjustment) with the Newton-Schulz
    iterations in float32 (``orthogonalise``)."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, buffers = [], [], []
            self._init_group(group, params, grads, buffers)
            for param, grad, buffer in zip(params, grads, buffers, strict=True):
                buffer.lerp_(grad, 1 - group["momentum"])
                update = grad.lerp(buffer, group["momentum"]) if group["nesterov"] else buffer
                update = orthogonalise(update, group["ns_coefficients"], group["ns_steps"], group["eps"])
                param.mul_(1 - group["lr"] * group["weight_decay"])
                param.add_(update, alpha=-_adjust_lr(group["lr"], group["adjust_lr_fn"], param.shape))
        return loss


class MuonAdamW(torch.optim.Optimizer):
    """Two optimizers stepped as one: ``param_groups`` are theirs (AdamW's first), so a schedule, gradient
    clipping and the learning-rate log reach both; the state dict holds both states."""

    def __init__(self, adamw: torch.optim.Optimizer, muon: torch.optim.Optimizer):
        params = [p for optimizer in (adamw, muon) for group in optimizer.param_groups for p in group["params"]]
        super().__init__(params, {})
        self.optimizers = {"adamw": adamw, "muon": muon}
        self.param_groups = adamw.param_groups + muon.param_groups  # the same dicts: a change reaches both

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:  # Lightning's closure: forward and backward, once
            with torch.enable_grad():
                loss = closure()
        for optimizer in self.optimizers.values():
            optimizer.step()
        return loss

    def state_dict(self) -> dict:
        return {name: optimizer.state_dict() for name, optimizer in self.optimizers.items()}

    def load_state_dict(self, state_dict: dict) -> None:
        for name, optimizer in self.optimizers.items():
            optimizer.load_state_dict(state_dict[name])
        # loading gives each optimizer new group dicts: share those
        self.param_groups = self.optimizers["adamw"].param_groups + self.optimizers["muon"].param_groups


def muon(param_groups: list[dict], hidden: list[torch.nn.Parameter], lr: float = 1e-3, muon_lr: float = 0.02,
         momentum: float = 0.95, ns_steps: int = 5, ns_dtype: str = "float32", weight_decay: float = 0.1,
         betas: tuple[float, float] = (0.9, 0.99), warmup_steps: int = 0, decay_steps: int = 0,
         min_lr_ratio: float = 0.1, decay: str = "cosine"):
    """conf/optim/muon.yaml: Muon at ``muon_lr`` for the ``hidden`` matrices (``LitLanguageModel.hidden_matrices``),
    fused AdamW at ``lr`` for the rest of ``param_groups``; both decay their weights by ``weight_decay``
    (AdamW on matrices only) and follow one schedule (``tinylm.training.module.scheduled``)."""
    if not hidden:
        raise TinyLMError("optim=muon needs a model with hidden weight matrices in residual blocks (model=gpt): "
                          "use optim=adamw for this model")
    hidden_ids = {id(p) for p in hidden}
    rest = [{**group, "params": [p for p in group["params"] if id(p) not in hidden_ids]} for group in param_groups]
    adam = AdamW(rest, lr=lr, weight_decay=weight_decay, betas=tuple(betas))
    kind = Float32Muon if ns_dtype == "float32" else torch.optim.Muon
    orthogonal = kind(hidden, lr=muon_lr, weight_decay=weight_decay, momentum=momentum, ns_steps=ns_steps,
                      ns_coefficients=(DEFAULT_A, DEFAULT_B, DEFAULT_C))
    return scheduled(MuonAdamW(adam, orthogonal), warmup_steps, decay_steps, min_lr_ratio, decay)
