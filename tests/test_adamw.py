"""tinylm's AdamW (tinylm.training.adamw) is torch's fused AdamW with less Python: the same weights and state."""

from __future__ import annotations

import copy

import pytest
import torch

from tinylm.models.gpt import GPT, GPTConfig
from tinylm.training import adamw


def tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=11, block_size=8, n_embd=16, num_heads=2, num_layers=2, dropout=0.1))


def groups(model: GPT) -> list[dict]:
    """The training module's two groups: decay on matrices, none on gains and biases."""
    return [{"params": [p for p in model.parameters() if p.dim() >= 2]},
            {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]


def train(model: GPT, optimizer: torch.optim.Optimizer, steps: int, seed: int = 1, closure: bool = False) -> None:
    torch.manual_seed(seed)
    for _ in range(steps):
        x = torch.randint(11, (4, 8))
        y = torch.randint(11, (4, 8))

        def forward_backward(x=x, y=y):
            optimizer.zero_grad()
            loss = model(x, y)[1]
            loss.backward()
            return loss

        if closure:  # as Lightning steps it: the forward and backward passes inside step
            assert torch.isfinite(optimizer.step(forward_backward))
        else:
            forward_backward()
            optimizer.step()


def assert_same(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name


def assert_same_state(a: torch.optim.Optimizer, b: torch.optim.Optimizer) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for i, state in sa["state"].items():
        assert state.keys() == sb["state"][i].keys()
        for key, value in state.items():
            assert value.dtype == sb["state"][i][key].dtype and torch.equal(value, sb["state"][i][key]), (i, key)


def short_path_only(monkeypatch) -> None:
    """torch's own step refuses to run: what passes then took the short path."""
    def refused(*args, **kwargs):
        raise AssertionError("torch's AdamW.step ran")
    monkeypatch.setattr(torch.optim.AdamW, "step", refused)


@pytest.mark.parametrize("closure", [False, True])
def test_the_same_weights_and_state_as_torchs_fused_adamw(closure, monkeypatch):
    ours, theirs = tiny_gpt(), tiny_gpt()
    settings = {"lr": 3e-3, "weight_decay": 0.1, "betas": (0.9, 0.99)}
    ours_opt = adamw.AdamW(groups(ours), **settings)
    theirs_opt = torch.optim.AdamW(groups(theirs), fused=True, **settings)
    train(theirs, theirs_opt, 25, closure=closure)
    short_path_only(monkeypatch)
    train(ours, ours_opt, 25, closure=closure)
    assert_same(ours, theirs)
    assert_same_state(ours_opt, theirs_opt)
    assert not torch.equal(ours.lm_head.weight, tiny_gpt().lm_head.weight)  # it trained


def test_checkpoints_of_either_continue_in_the_other():
    """A state saved by torch's AdamW (checkpoints of earlier releases) continues in adamw.AdamW exactly as in
    torch's, and the other way round; a changed learning rate (a schedule, a resume) is followed."""
    start = tiny_gpt()
    first = torch.optim.AdamW(groups(start), lr=3e-3, fused=True)
    train(start, first, 10)
    saved = copy.deepcopy(first.state_dict())
    runs = {}
    for kind in (adamw.AdamW, torch.optim.AdamW):
        model = copy.deepcopy(start)
        optimizer = kind(groups(model), lr=3e-3, **({} if kind is adamw.AdamW else {"fused": True}))
        optimizer.load_state_dict(copy.deepcopy(saved))
        for group in optimizer.param_groups:
            group["lr"] = 1e-3
        train(model, optimizer, 10, seed=2)
        runs[kind] = model, optimizer
    assert_same(runs[adamw.AdamW][0], runs[torch.optim.AdamW][0])
    assert_same_state(runs[adamw.AdamW][1], runs[torch.optim.AdamW][1])
    reloaded = torch.optim.AdamW(groups(copy.deepcopy(start)), lr=1e-3, fused=True)
    reloaded.load_state_dict(runs[adamw.AdamW][1].state_dict())  # ours loads back into torch's


def test_what_the_short_path_leaves_out_is_torchs_own_step():
    """amsgrad (torch's own step), with a frozen parameter (no gradient, no state) beside trained ones."""
    ours, theirs = tiny_gpt(), tiny_gpt()
    for model in (ours, theirs):
        model.position_embedding.weight.requires_grad_(False)
    ours_opt = adamw.AdamW(groups(ours), lr=3e-3, amsgrad=True)
    theirs_opt = torch.optim.AdamW(groups(theirs), lr=3e-3, amsgrad=True, fused=True)
    train(ours, ours_opt, 10)
    train(theirs, theirs_opt, 10)
    assert_same(ours, theirs)
    assert_same_state(ours_opt, theirs_opt)
    assert ours.position_embedding.weight not in ours_opt.state  # never stepped: no state, as torch


def test_zero_grad_clears_every_gradient():
    model = tiny_gpt()
    optimizer = adamw.AdamW(groups(model), lr=1e-3)
    train(model, optimizer, 1)
    assert all(p.grad is not None for p in model.parameters())
    optimizer.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    train(model, optimizer, 1)
    optimizer.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


def test_a_gradscaler_step_unscales_and_skips_an_overflow_as_torchs():
    """Under a GradScaler (16-mixed) the kernel gets the scale and the inf flag: an overflowed step changes
    nothing, a finite one is unscaled, as with torch's fused AdamW."""
    results = {}
    for kind in (adamw.AdamW, torch.optim.AdamW):
        model = tiny_gpt()
        optimizer = kind(groups(model), lr=3e-3, **({} if kind is adamw.AdamW else {"fused": True}))
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
        torch.manual_seed(1)
        for step in range(6):
            x, y = torch.randint(11, (4, 8)), torch.randint(11, (4, 8))
            optimizer.zero_grad()
            scaler.scale(model(x, y)[1]).backward()
            if step == 3:  # an overflow: this step must be skipped
                model.lm_head.weight.grad[0, 0] = float("inf")
            scaler.step(optimizer)
            scaler.update()
        assert all(torch.isfinite(p).all() for p in model.parameters())
        results[kind] = model, optimizer
    assert_same(results[adamw.AdamW][0], results[torch.optim.AdamW][0])
    assert_same_state(results[adamw.AdamW][1], results[torch.optim.AdamW][1])
    assert float(results[adamw.AdamW][1].state[results[adamw.AdamW][0].lm_head.weight]["step"]) == 5  # 6 - 1 skipped
