"""The speedrun options of the GPT (RMSNorm, ReLU², QK-norm, logit soft-cap, tied head) and optim=muon:
each does what it says, off by default, recorded in checkpoints, kept by generation and ONNX export."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import TINY_MODEL, TINY_TEXT, compose
from torch.nn import functional as F

from tinylm.generation.sampling import generate
from tinylm.models import build_model, model_config, model_config_problems
from tinylm.models.gpt import GPT, Attention, FeedForward, GPTConfig
from tinylm.tokenizer import CharTokenizer
from tinylm.training.module import adamw, warmup_cosine
from tinylm.training.muon import MuonAdamW, muon, orthogonalise

V, BLOCK = 40, 8
EVERY_TRICK = {"norm": "rmsnorm", "activation": "relu2", "qk_norm": True, "logit_softcap": 3.0, "tied_head": True}
pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tiny(**options) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=V, block_size=BLOCK, n_embd=16, num_heads=2, num_layers=2, dropout=0.0,
                         **options))


def windows(data: torch.Tensor, generator: torch.Generator, batch: int = 16):
    starts = torch.randint(len(data) - BLOCK - 1, (batch,), generator=generator)
    x = torch.stack([data[s : s + BLOCK] for s in starts])  # (batch, BLOCK)
    y = torch.stack([data[s + 1 : s + BLOCK + 1] for s in starts])
    return x, y


def train_tiny(model: GPT, configured, steps: int, tokenizer: CharTokenizer) -> list[float]:
    """``steps`` steps of ``configured`` (what an optim partial returns) on TINY_TEXT; the losses."""
    optimizer = configured["optimizer"] if isinstance(configured, dict) else configured
    data = torch.tensor(tokenizer.encode(TINY_TEXT * 4))
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(steps):
        loss = model(*windows(data, generator))[1]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if isinstance(configured, dict):
            configured["lr_scheduler"]["scheduler"].step()
        losses.append(loss.item())
    return losses


def hidden(model: GPT) -> list[torch.nn.Parameter]:
    return [p for block in model.residual_layers() for p in block.parameters() if p.dim() == 2]


def groups(model: GPT) -> list[dict]:
    return [{"params": [p for p in model.parameters() if p.dim() >= 2]},
            {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]


# --------------------------------------------------------------------------------------------
# Each option changes the forward pass as defined


def test_rmsnorm_gives_unit_rms_times_the_gain_and_replaces_every_layernorm():
    model = tiny(norm="rmsnorm")
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    norm = model.blocks[0].ln1
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 2.0, 16))
        x = torch.randn(3, 5, 16) * 7 + 2
        y = norm(x)
    rms = (y / norm.weight).pow(2).mean(-1).sqrt()
    assert torch.allclose(rms, torch.ones_like(rms), atol=1e-4)
    assert not any(name.endswith("ln1.bias") for name in model.state_dict())  # a gain, no bias


def test_relu2_is_relu_squared():
    torch.manual_seed(0)
    plain, squared = FeedForward(16, 0.0), FeedForward(16, 0.0, squared=True)
    squared.load_state_dict(plain.state_dict())
    x = torch.randn(2, 5, 16)
    expected = squared.proj(F.relu(squared.fc(x)) ** 2)
    assert torch.allclose(squared(x), expected) and not torch.allclose(plain(x), expected)


def test_logit_softcap_bounds_the_logits_and_is_cap_tanh_of_the_raw_ones():
    raw, capped = tiny(), tiny(logit_softcap=2.0)
    with torch.no_grad():
        raw.lm_head.weight.mul_(50)  # raw logits far beyond the cap (not so far that tanh rounds to 1)
    capped.load_state_dict(raw.state_dict())
    ids = torch.randint(V, (2, BLOCK))
    logits, expected = capped(ids)[0], raw(ids)[0]
    assert expected.abs().max() > 4 and logits.abs().max() < 2.0
    assert torch.allclose(logits, 2.0 * torch.tanh(expected / 2.0))


def test_qk_norm_normalises_each_heads_queries_and_keys():
    torch.manual_seed(0)
    plain = Attention(16, 2, 0.0, BLOCK, rope=False)
    normed = Attention(16, 2, 0.0, BLOCK, rope=False, qk_norm=True)
    normed.load_state_dict(plain.state_dict())
    x = torch.randn(3, BLOCK, 16) * 5
    q, k, v = normed.query_key_value(x)  # (B, h, T, hs) each
    q0, k0, v0 = plain.query_key_value(x)
    for t in (q, k):
        assert torch.allclose(t.pow(2).mean(-1).sqrt(), torch.ones(3, 2, BLOCK), atol=1e-4)
    assert torch.allclose(q, q0 / q0.pow(2).mean(-1, keepdim=True).sqrt(), atol=1e-5)
    assert torch.allclose(v, v0)  # values untouched


def test_tied_head_shares_the_embedding_storage_and_drops_v_times_c_parameters():
    untied, tied = tiny(), tiny(tied_head=True)
    assert tied.lm_head.weight is tied.token_embedding.weight
    assert tied.lm_head.weight.data_ptr() == tied.token_embedding.weight.data_ptr()
    assert untied.num_params() - tied.num_params() == V * 16
    assert sum(count for _, count in tied.parameter_table()) == tied.num_params()  # counted once
    assert dict(tied.parameter_table())["lm_head"] == V  # its bias
    assert GPT(GPTConfig(vocab_size=73)).num_params() == 210_761  # the reference is unchanged


def test_options_are_recorded_when_set_and_configs_without_them_build_the_reference():
    default, tricked = model_config(tiny()), model_config(tiny(**EVERY_TRICK))
    assert not set(EVERY_TRICK) & set(default)  # a reference model saves the config it always did
    assert {k: tricked[k] for k in EVERY_TRICK} == EVERY_TRICK
    rebuilt = build_model(tricked)
    assert rebuilt.config == tiny(**EVERY_TRICK).config
    assert build_model(default).config == GPTConfig(vocab_size=V, block_size=BLOCK, n_embd=16, num_heads=2,
                                                    num_layers=2, dropout=0.0)
    assert set(GPTConfig.shape_keys()) >= {"norm", "tied_head"}  # other weights: a resume must keep them


@pytest.mark.parametrize(("key", "value", "line"), [
    ("logit_softcap", 0, "model.logit_softcap=0 must be a positive number (e.g. 15) or null (no cap)"),
    ("logit_softcap", -3.0, "model.logit_softcap=-3.0 must be a positive number (e.g. 15) or null (no cap)"),
    ("logit_softcap", "big", "model.logit_softcap='big' must be a positive number (e.g. 15) or null (no cap)"),
    ("norm", "batchnorm", "model.norm='batchnorm': choose one of layernorm, rmsnorm"),
    ("activation", "gelu", "model.activation='gelu': choose one of relu, relu2"),
    ("qk_norm", "yes", "model.qk_norm='yes' must be true or false"),
    ("tied_head", 1, "model.tied_head=1 must be true or false"),
])
def test_a_bad_option_is_one_line(key, value, line):
    cfg = {"arch": "gpt", "vocab_size": V, "block_size": BLOCK, "n_embd": 16, "num_heads": 2, "num_layers": 1,
           "dropout": 0.0, "pos_encoding": "learned", "attn_impl": "sdpa", key: value}
    assert model_config_problems(cfg) == [line]
    with pytest.raises(ValueError, match="^" + line.replace("(", r"\(").replace(")", r"\)") + "$"):
        build_model(cfg)


def test_a_bad_option_stops_train_py_before_training_with_one_error_line(tmp_path):
    from tinylm.runs.job import main as train_main

    with pytest.raises(SystemExit) as info:
        train_main(compose("model.logit_softcap=-1", "logger=none", output_dir=tmp_path / "run"))
    assert str(info.value) == ("error: invalid config: model.logit_softcap=-1 must be a positive number (e.g. 15) "
                               "or null (no cap)")


@pytest.mark.parametrize(("override", "line"), [
    ("optim.ns_dtype=float16", "optim.ns_dtype='float16' must be one of float32, bfloat16"),
    ("optim.muon_lr=0", "optim.muon_lr=0 must be a positive number"),
    ("optim.momentum=1", "optim.momentum=1 must be a number in [0, 1)"),
    ("optim.decay=step", "optim.decay='step' must be one of cosine, linear"),
])
def test_a_bad_muon_or_schedule_setting_is_one_line(tmp_path, override, line):
    from tinylm.training.config_checks import config_problems

    assert config_problems(compose("optim=muon", override, output_dir=tmp_path)) == [line]
    assert config_problems(compose("optim=muon", output_dir=tmp_path)) == []


# --------------------------------------------------------------------------------------------
# Training, generation and export with every trick


@pytest.fixture(scope="module")
def tricked():
    """A tiny model with every option, trained for a moment on TINY_TEXT, and its tokenizer."""
    tokenizer = CharTokenizer.from_text(TINY_TEXT)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the one_thread fixture starts after a module's fixtures
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=BLOCK, n_embd=32, num_heads=2, num_layers=2,
                          dropout=0.0, **EVERY_TRICK))
    losses = train_tiny(model, adamw(groups(model), lr=1e-2, warmup_steps=10, decay_steps=150, decay="linear"),
                        150, tokenizer)
    torch.set_num_threads(threads)
    return model.eval(), tokenizer, losses


def test_a_tiny_model_with_every_trick_learns_the_tiny_text(tricked):
    _, tokenizer, losses = tricked
    assert losses[0] > 0.8 * math.log(tokenizer.vocab_size)
    assert np.mean(losses[-10:]) < 0.5  # the text is learned almost by heart


def test_greedy_generation_with_the_kv_cache_equals_the_full_forward(tricked):
    model, tokenizer, _ = tricked
    prompt = torch.tensor([tokenizer.encode("自注意")])
    cached = generate(model, prompt, 3 * BLOCK, temperature=0)  # past the block: the window re-encoded
    ids = prompt
    with torch.no_grad():
        for _ in range(3 * BLOCK):
            logits = model(ids[:, -BLOCK:])[0]  # (1, T, V): every position, no cache
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(cached, ids)
    assert tokenizer.decode(cached[0, 3:].tolist()).startswith("力")  # it continues the text it learned


@pytest.mark.slow
def test_the_onnx_export_of_every_trick_matches_torchs_logits(tricked, tmp_path):
    from tinylm.onnx.export import export_onnx
    from tinylm.onnx.runtime import load_onnx

    model, tokenizer, _ = tricked
    onnx_model = load_onnx(export_onnx(model, tokenizer, tmp_path / "tricks.onnx"))
    generator = torch.Generator().manual_seed(1)
    for batch, length, past in [(1, 1, 0), (2, BLOCK, 0), (2, 1, 3), (3, 4, 4)]:
        ids = torch.randint(tokenizer.vocab_size, (batch, length), generator=generator)
        keys, values = (torch.randn(model.past_shape(batch, past), generator=generator) for _ in range(2))
        with torch.no_grad():
            expected = model.step(ids, keys, values)
        got = onnx_model.run(ids.numpy(), (keys.numpy(), values.numpy()))
        for want, have in zip(expected, (got[0], *got[1]), strict=True):
            assert np.abs(want.numpy() - have).max() < 1e-4, (batch, length, past)


# --------------------------------------------------------------------------------------------
# Schedules and Muon


def test_linear_decay_falls_in_a_straight_line_to_the_floor():
    factors = [warmup_cosine(step, 10, 110, 0.1, "linear") for step in range(10, 111, 25)]
    assert factors == pytest.approx([1.0, 0.775, 0.55, 0.325, 0.1])
    assert warmup_cosine(60, 10, 110, 0.1) == pytest.approx(0.55)  # the cosine's midpoint too
    assert warmup_cosine(35, 10, 110, 0.1) > warmup_cosine(35, 10, 110, 0.1, "linear")  # cosine stays high longer


def test_float32_newton_schulz_orthogonalises_like_pytorchs_bfloat16():
    from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C, _zeropower_via_newtonschulz

    g = torch.randn(48, 16, generator=torch.Generator().manual_seed(0))
    coefficients = (DEFAULT_A, DEFAULT_B, DEFAULT_C)
    ours, theirs = orthogonalise(g, coefficients, 5, 1e-7), _zeropower_via_newtonschulz(g, coefficients, 5, 1e-7)
    singular = torch.linalg.svdvals(ours)
    assert ours.dtype == torch.float32 and ours.shape == g.shape
    assert singular.min() > 0.5 and singular.max() < 1.5  # the quintic's band around 1
    assert (ours - theirs.float()).abs().max() < 0.05  # the same iteration, bfloat16's rounding apart


@pytest.mark.parametrize("shape", [(48, 16), (16, 48), (24, 24), (20, 28)])  # tall, wide: by the Gram matrix
def test_newton_schulz_is_the_quintic_applied_to_the_singular_values(shape):
    """x = U S Vᵀ maps to U p(S) Vᵀ, p the quintic composed 5 times on S / ||x||: computed in float64 by
    SVD, it must match orthogonalise's float32 result whichever way it iterates."""
    from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C

    g = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    u, s, vh = torch.linalg.svd(g.double(), full_matrices=False)
    s = s / g.double().norm()
    for _ in range(5):
        s = DEFAULT_A * s + DEFAULT_B * s**3 + DEFAULT_C * s**5
    expected = u @ torch.diag(s) @ vh
    ours = orthogonalise(g, (DEFAULT_A, DEFAULT_B, DEFAULT_C), 5, 1e-7)
    assert (ours.double() - expected).abs().max() < 1e-5


@pytest.mark.parametrize("steps", [5, 10])
def test_newton_schulz_on_the_small_side_stays_the_plain_iteration_for_a_low_rank_update(monkeypatch, steps):
    """A gradient's rank is at most batch x block: a rank-4 update of a wide matrix, iterated on the small side
    (``RESTART`` iterations at a time) and plainly (``RESTART = 1``, one at a time), at 5 and at 10 steps."""
    from torch.optim._muon import DEFAULT_A, DEFAULT_B, DEFAULT_C

    import tinylm.training.muon as muon_module

    generator = torch.Generator().manual_seed(2)
    g = torch.randn(64, 4, generator=generator) @ torch.randn(4, 256, generator=generator)
    coefficients = (DEFAULT_A, DEFAULT_B, DEFAULT_C)
    small_side = orthogonalise(g, coefficients, steps, 1e-7)
    monkeypatch.setattr(muon_module, "RESTART", 1)
    plain = orthogonalise(g, coefficients, steps, 1e-7)
    assert torch.linalg.svdvals(small_side).max() < 1.5  # the quintic's band: no blow-up of G's rounding
    assert (small_side - plain).abs().max() < 1e-2  # both drift from exact arithmetic on the tiny singular values


@pytest.mark.parametrize("ns_dtype", ["float32", "bfloat16"])
def test_muon_takes_the_hidden_matrices_and_its_steps_lower_the_loss(ns_dtype):
    tokenizer = CharTokenizer.from_text(TINY_TEXT)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=BLOCK, n_embd=16, num_heads=2, num_layers=2,
                          dropout=0.0))
    optimizer = muon(groups(model), hidden(model), lr=1e-2, muon_lr=0.02, ns_dtype=ns_dtype)
    assert isinstance(optimizer, MuonAdamW)
    adam, orthogonal = optimizer.optimizers["adamw"], optimizer.optimizers["muon"]
    muon_ids = {id(p) for g in orthogonal.param_groups for p in g["params"]}
    assert muon_ids == {id(p) for p in hidden(model)}  # 4 matrices per block
    adam_ids = {id(p) for g in adam.param_groups for p in g["params"]}
    assert len(muon_ids) + len(adam_ids) == len(list(model.parameters()))
    assert {id(model.token_embedding.weight), id(model.lm_head.weight), id(model.ln_f.weight)} <= adam_ids
    losses = train_tiny(model, optimizer, 60, tokenizer)
    assert np.mean(losses[-5:]) < 0.5 * losses[0]


@pytest.mark.slow
def test_a_muon_run_resumed_from_last_ckpt_ends_with_the_uninterrupted_runs_weights(tmp_path, tiny_text_file):
    from tinylm.runs.job import main as train_main

    common = [*TINY_MODEL, "optim=muon", "optim.decay_steps=16", "optim.warmup_steps=2", f"data.path={tiny_text_file}",
              "data.repeat=30", "logger=none", "callbacks=minimal", "trainer.val_check_interval=8"]
    train_main(compose(*common, "trainer.max_steps=16", output_dir=tmp_path / "whole"))
    train_main(compose(*common, "trainer.max_steps=8", output_dir=tmp_path / "half"))
    half = tmp_path / "half" / "checkpoints" / "last.ckpt"
    train_main(compose(*common, "trainer.max_steps=16", f"ckpt_path={half}", output_dir=tmp_path / "resumed"))
    whole, resumed = (torch.load(tmp_path / run / "checkpoints" / "last.ckpt", weights_only=True)
                      for run in ("whole", "resumed"))
    assert resumed["global_step"] == whole["global_step"] == 16
    assert set(whole["optimizer_states"][0]) == {"adamw", "muon"}
    for key, value in whole["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key
    first = torch.load(half, weights_only=True)
    changed = [k for k, v in first["state_dict"].items() if not torch.equal(v, whole["state_dict"][k])]
    assert changed  # the second half trained
