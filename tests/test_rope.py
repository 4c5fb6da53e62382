"""Rotary positions (pos_encoding="rope"): relative-position scores, causality, the KV cache."""

from __future__ import annotations

import math

import pytest
import torch

from tinylm.generation.sampling import generate
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.models.positions import RotaryPositions


def rope_model(**kw) -> GPT:
    torch.manual_seed(0)
    config = {"vocab_size": 73, "pos_encoding": "rope", **kw}
    return GPT(GPTConfig(**config)).eval()


def first_layer_scores(model: GPT, ids: torch.Tensor, start: int) -> torch.Tensor:
    """Layer 0's q·kᵀ/√hs (B, h, T, T) for ``ids`` (B, T) standing at positions start .. start+T-1.

    With rope nothing is added to the token embeddings, so layer 0's input does not depend on the
    positions; only the rotation of q and k does.
    """
    attn = model.blocks[0].attn
    with torch.no_grad():
        x = model.blocks[0].ln1(model.token_embedding(ids))  # (B, T, C)
        q, k, _ = attn.query_key_value(x, start)  # (B, h, T, hs) each
    return q @ k.transpose(-2, -1) / math.sqrt(attn.head_size)  # (B, h, T, T)


@pytest.mark.parametrize("shift", [1, 5, 20])
def test_shifting_the_whole_input_leaves_attention_scores_unchanged(shift):
    model = rope_model()
    ids = torch.randint(73, (2, 12), generator=torch.Generator().manual_seed(1))
    at_zero = first_layer_scores(model, ids, 0)
    shifted = first_layer_scores(model, ids, shift)
    assert torch.allclose(at_zero, shifted, atol=1e-5)
    # the rotation is real: the queries themselves do move with the position
    attn = model.blocks[0].attn
    x = model.blocks[0].ln1(model.token_embedding(ids)).detach()
    assert not torch.allclose(attn.query_key_value(x, 0)[0], attn.query_key_value(x, shift)[0], atol=1e-3)


def test_score_depends_only_on_the_distance_between_query_and_key():
    rotary = RotaryPositions(block_size=64, head_size=8)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)  # one query, one key

    def score(m: int, n: int) -> float:
        return (rotary(q, m) * rotary(k, n)).sum().item()

    assert score(10, 3) == pytest.approx(score(50, 43), abs=1e-5)  # distance 7 both times
    assert score(3, 3) == pytest.approx((q * k).sum().item(), abs=1e-5)  # distance 0: unrotated
    assert score(10, 3) != pytest.approx(score(10, 4), abs=1e-3)
    # a rotation keeps lengths
    assert rotary(q, 17).norm().item() == pytest.approx(q.norm().item(), rel=1e-5)


def test_rope_has_no_position_parameters():
    rope = rope_model()
    assert rope.num_params() == 210_761 - 2_048  # the reference model minus its position table
    assert dict(rope.parameter_table())["position_embedding"] == 0
    assert not any("position" in name or "rotary" in name for name in rope.state_dict())


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_future_tokens_never_change_the_past(impl):
    model = rope_model(attn_impl=impl)
    idx = torch.randint(73, (2, 20), generator=torch.Generator().manual_seed(2))
    changed = idx.clone()
    changed[:, 12:] = (changed[:, 12:] + 1) % 73
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(changed)
    assert torch.allclose(a[:, :12], b[:, :12], atol=1e-6)
    assert not torch.allclose(a[:, 12:], b[:, 12:])


def test_explicit_weights_are_causal_and_match_sdpa():
    sdpa, explicit = rope_model(attn_impl="sdpa"), rope_model(attn_impl="explicit")
    idx = torch.randint(73, (2, 32), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a, _ = sdpa(idx)
        b, _ = explicit(idx)
        weights = explicit.attention_maps(idx)
    assert torch.allclose(a, b, atol=1e-5)
    for w in weights:  # (B, h, T, T)
        assert torch.allclose(w.sum(-1), torch.ones(2, 4, 32), atol=1e-5)
        assert torch.all(w.triu(diagonal=1) == 0)


@pytest.mark.parametrize("attn_impl", ["sdpa", "explicit"])
def test_kv_cache_matches_the_reference_past_block_size(attn_impl):
    model = rope_model(block_size=8, n_embd=16, num_heads=2, num_layers=2, attn_impl=attn_impl, vocab_size=11)
    with torch.no_grad():  # larger weights than the init, so greedy text varies
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.7)
    prompt = torch.randint(11, (3, 5), generator=torch.Generator().manual_seed(4))
    cached = generate(model, prompt, 30, temperature=0, use_cache=True)
    reference = generate(model, prompt, 30, temperature=0, use_cache=False)
    assert cached.shape == (3, 35)  # the window slid 27 times
    assert torch.equal(cached, reference)
    assert len(cached[:, 5:].unique()) >= 4


def test_incremental_decoding_equals_one_full_pass():
    """Queries and keys rotated one position at a time in the cache equal a whole-sequence pass."""
    model = rope_model(block_size=16, n_embd=16, num_heads=2, num_layers=2)
    idx = torch.randint(73, (2, 16), generator=torch.Generator().manual_seed(5))
    cache = model.new_cache(2)
    with torch.no_grad():
        full, _ = model(idx)
        steps = [model(idx[:, :6], cache=cache)[0]] + [model(idx[:, t : t + 1], cache=cache)[0] for t in range(6, 16)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_odd_head_size_is_refused_with_a_fix():
    with pytest.raises(ValueError, match=r"head size .*=3 must be even for rope"):
        GPTConfig(vocab_size=5, n_embd=6, num_heads=2, pos_encoding="rope")
    GPTConfig(vocab_size=5, n_embd=6, num_heads=3, pos_encoding="rope")  # head size 2: fine
