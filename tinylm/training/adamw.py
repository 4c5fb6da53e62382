"""PyTorch's fused AdamW with its per-step Python trimmed: the same kernel, the same state, fewer microseconds.

``torch.optim.AdamW(fused=True)`` spends more Python around its one kernel per step than the kernel takes
(``_use_grad``'s wrapper, ``_init_group``'s per-parameter checks, grouping the tensors by device and
dtype at every step), and its ``zero_grad`` goes through the profiler's hooks: on the reference model the
optimizer step took 1.18 ms and ``zero_grad`` 0.23 ms of a ~21 ms step, 0.95 and 0.09 ms here
(``docs/performance.md``). ``AdamW`` here calls the same ``torch._fused_adamw_``
kernel with the same arguments, so the weights come out bit for bit those of ``torch.optim.AdamW``,
and keeps the same ``state`` (``step``, ``exp_avg``, ``exp_avg_sq`` per parameter), so its
checkpoints and torch's load into each other. What the short path does not cover (tensors of
several devices or dtypes in one group, sparse or complex gradients, amsgrad, maximize,
differentiable or capturable steps, a group loaded as not fused, a step under a ``GradScaler`` that passes its
scale and inf flags to the kernel) goes to torch's own ``step``.
"""

from __future__ import annotations

import torch


class AdamW(torch.optim.AdamW):
    """``torch.optim.AdamW(..., fused=True)``, stepped through its kernel directly (see the module). Its
    class name is torch's, so what names optimizers by class (the learning-rate log's ``lr-AdamW``) is the same."""

    def __init__(self, params, **settings):
        super().__init__(params, fused=True, **settings)

    def _plain(self, group: dict, params: list[torch.Tensor]) -> bool:
        """Whether ``params`` of ``group`` fit the short path: one device and dtype, dense real
        gradients, and none of the options it leaves to torch."""
        if (group["amsgrad"] or group["maximize"] or group["differentiable"] or group["capturable"]
                or not group["fused"]):  # a non-fused group (a torch checkpoint's settings loaded): torch's path
            return False
        first = params[0]
        return all(p.device == first.device and p.dtype == first.dtype and p.grad.dtype == p.dtype
                   and not p.grad.is_sparse and not p.is_complex() for p in params)

    def _state(self, p: torch.Tensor) -> dict:
        """The parameter's state, made as torch's fused AdamW makes it on its first step."""
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:  # Lightning's closure runs the forward and backward passes
            with torch.enable_grad():
                loss = closure()
        groups = [(group, [p for p in group["params"] if p.grad is not None]) for group in self.param_groups]
        scaled = getattr(self, "grad_scale", None) is not None or getattr(self, "found_inf", None) is not None
        if scaled or not all(self._plain(group, params) for group, params in groups if params):
            super().step()  # torch's own path for what the short one leaves out (the closure has run)
            return loss
        for group, params in groups:
            if not params:
                continue
            states = [self._state(p) for p in params]
            steps = [state["step"] for state in states]
            torch._foreach_add_(steps, 1)
            beta1, beta2 = group["betas"]
            torch._fused_adamw_(
                params, [p.grad for p in params], [state["exp_avg"] for state in states],
                [state["exp_avg_sq"] for state in states], [], steps, amsgrad=False, lr=group["lr"],
                beta1=float(beta1), beta2=float(beta2), weight_decay=group["weight_decay"], eps=group["eps"],
                maximize=False, grad_scale=None, found_inf=None)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        if not set_to_none:
            super().zero_grad(set_to_none=False)
            return
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None
