import math

import pytest
import torch

from tinylm.models.gpt import GPT, GPTConfig
from tinylm.models.positions import sinusoidal_table


def reference_config(**kw):
    return GPTConfig(**{"vocab_size": 73, **kw})


def default_model(vocab_size: int, tmp_path, *overrides: str):
    """The model the default config (conf/model/gpt.yaml, or another with overrides) describes at V."""
    from conftest import compose
    from omegaconf import OmegaConf

    from tinylm.models import build_model

    model = OmegaConf.to_container(compose(*overrides, output_dir=tmp_path).model, resolve=True)
    return build_model({**model, "vocab_size": vocab_size})


def test_parameter_figures_of_the_default_configs_match_the_readme(tmp_path):
    from conftest import ROOT

    from tinylm.tasks.text.data import TextDataModule

    corpus = TextDataModule()
    corpus.prepare()
    assert corpus.tokenizer.vocab_size == 405  # the default corpus: what `python train.py` trains on
    gpt = {V: default_model(V, tmp_path) for V in (405, 73)}
    tables = {V: dict(model.parameter_table()) for V, model in gpt.items()}
    for V, table in tables.items():
        assert table["token_embedding"] == V * 64
        assert table["position_embedding"] == 2_048
        assert [table[f"blocks.{i}"] for i in range(4)] == [49_792] * 4
        assert table["ln_f"] == 128
        assert table["lm_head"] == 64 * V + V
    assert (tables[73]["token_embedding"], tables[73]["lm_head"]) == (4_672, 4_745)
    assert (tables[405]["token_embedding"], tables[405]["lm_head"]) == (25_920, 26_325)
    assert {V: model.num_params() for V, model in gpt.items()} == {405: 253_589, 73: 210_761}
    assert "253,589" in gpt[405].format_parameter_table()  # what `python train.py` prints
    lstm = default_model(405, tmp_path, "model=lstm").num_params()
    gru = default_model(405, tmp_path, "model=lstm", "model.arch=gru").num_params()
    assert (lstm, gru) == (309_589, 251_733)

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    comparisons = (ROOT / "docs" / "comparisons.md").read_text(encoding="utf-8")
    for part, name in [("token embedding (V x 64)", "token_embedding"), ("position embedding (32 x 64)",
                       "position_embedding"), ("final LayerNorm", "ln_f"), ("lm_head (64 x V + V)", "lm_head")]:
        assert f"| {part} | {tables[405][name]:,} | {tables[73][name]:,} |" in readme
    assert "| 4 blocks x 49,792 | 199,168 | 199,168 |" in readme
    assert "| **total** | **253,589** | **210,761** |" in readme
    assert f"LSTM baseline, {lstm:,} params on the default corpus (model.arch=gru: {gru:,})" in comparisons


def test_sinusoidal_positions_have_no_parameters():
    model = GPT(reference_config(pos_encoding="sinusoidal"))
    assert model.num_params() == 210_761 - 2_048
    table = sinusoidal_table(32, 64)
    assert table.shape == (32, 64)
    assert torch.allclose(table[0, 0::2], torch.zeros(32)) and torch.allclose(table[0, 1::2], torch.ones(32))
    assert table[5, 0] == pytest.approx(math.sin(5.0))


def test_forward_shapes_and_initial_loss():
    torch.manual_seed(0)
    model = GPT(reference_config()).eval()
    idx = torch.randint(73, (3, 32))
    logits, loss = model(idx, idx)
    assert logits.shape == (3, 32, 73)
    assert loss.shape == ()
    assert abs(loss.item() - math.log(73)) < 0.1  # small init: uniform predictions
    logits, loss = model(idx[:, :5])
    assert logits.shape == (3, 5, 73) and loss is None


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_causal_mask_future_tokens_never_change_the_past(impl):
    torch.manual_seed(0)
    model = GPT(reference_config(attn_impl=impl)).eval()
    idx = torch.randint(73, (2, 20))
    changed = idx.clone()
    changed[:, 12:] = (changed[:, 12:] + 1) % 73
    a, _ = model(idx)
    b, _ = model(changed)
    assert torch.allclose(a[:, :12], b[:, :12], atol=1e-6)
    assert not torch.allclose(a[:, 12:], b[:, 12:])


@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_explicit_and_sdpa_attention_are_equal(pos):
    torch.manual_seed(0)
    fast = GPT(reference_config(pos_encoding=pos))
    slow = GPT(reference_config(pos_encoding=pos, attn_impl="explicit"))
    assert fast.state_dict().keys() == slow.state_dict().keys()
    slow.load_state_dict(fast.state_dict())
    fast.eval(), slow.eval()
    idx = torch.randint(73, (4, 32))
    logits_f, loss_f = fast(idx, idx)
    logits_s, loss_s = slow(idx, idx)
    assert torch.allclose(logits_f, logits_s, atol=1e-5)
    loss_f.backward(), loss_s.backward()
    for (name, pf), ps in zip(fast.named_parameters(), slow.parameters(), strict=True):
        assert torch.allclose(pf.grad, ps.grad, atol=1e-6, rtol=1e-4), name


def test_attention_weights_are_causal_probabilities():
    torch.manual_seed(0)
    model = GPT(reference_config()).eval()  # sdpa model still returns weights on request
    idx = torch.randint(73, (2, 10))
    attention = model.attention_maps(idx)
    assert len(attention) == 4
    for w in attention:
        assert w.shape == (2, 4, 10, 10)
        assert torch.allclose(w.sum(-1), torch.ones(2, 4, 10))
        assert torch.all(w.triu(diagonal=1) == 0)


def test_shape_rows_list_every_hook_point_in_forward_order():
    from tinylm.callbacks.shapes import shape_rows

    model = GPT(reference_config(num_layers=2))  # sdpa: the table still shows the (B, h, T, T) weights
    ids = torch.zeros(3, 32, dtype=torch.long)
    rows = shape_rows(model, (ids, ids))
    shapes = {name: shape for name, shape, _, _ in rows}
    dims = {name: dims for name, _, dims, _ in rows}
    assert [name for name, *_ in rows][:4] == ["ids", "targets", "hook_embed", "hook_pos_embed"]
    assert shapes["ids"] == (3, 32) and dims["ids"] == "B, T"
    assert shapes["hook_embed"] == shapes["hook_pos_embed"] == (3, 32, 64)
    assert shapes["blocks.1.attn.hook_q"] == (3, 32, 4, 16) and dims["blocks.1.attn.hook_q"] == "B, T, h, hs"
    assert shapes["blocks.0.attn.hook_attn_scores"] == (3, 4, 32, 32)
    assert shapes["blocks.0.mlp.hook_post"] == (3, 32, 256) and dims["blocks.0.mlp.hook_post"] == "B, T, 4C"
    assert shapes["logits"] == (3, 32, 73)
    assert shapes["loss input: logits"] == (96, 73)
    assert [name for name, *_ in rows].count("blocks.1.hook_resid_post") == 1
    assert len(rows) == 2 + len(model.hook_points()) + 3  # ids, targets; every point once; logits, loss inputs
    assert model.training  # its own mode back


def test_too_long_input_is_refused():
    model = GPT(reference_config(block_size=8))
    with pytest.raises(ValueError, match="longer than block_size=8"):
        model(torch.zeros(1, 9, dtype=torch.long))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"n_embd": 64, "num_heads": 3}, "not divisible by model.num_heads=3"),
        ({"num_layers": 0}, "model.num_layers=0 must be a positive integer"),
        ({"dropout": 1.0}, r"model.dropout=1.0 must be in \[0, 1\)"),
        ({"pos_encoding": "rope?"}, "choose one of learned, sinusoidal"),
    ],
)
def test_bad_model_config(kw, message):
    with pytest.raises(ValueError, match=message):
        reference_config(**kw)


def test_fast_dropout_matches_nn_dropout_statistics():
    from tinylm.models.ops import Dropout

    torch.manual_seed(0)
    drop = Dropout(0.1)
    x = torch.ones(1000, 1000, requires_grad=True)
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.002  # keep probability 1 - p
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.9))  # inverted scaling
    assert abs(y.mean().item() - 1.0) < 0.005  # expectation preserved
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept)  # gradient flows only through kept elements
    assert torch.equal(drop.eval()(x), x)  # identity at eval time
    assert torch.equal(Dropout(0.0).train()(x), x)


def test_training_attention_equals_the_textbook_formula_with_the_same_masks():
    """The fused training path (baddbmm with the causal bias, cheap dropout masks) computes
    softmax(q k^T / sqrt(hs) masked) -> dropout -> @ v -> proj -> dropout, mask for mask."""
    from tinylm.models.gpt import CausalSelfAttention

    torch.manual_seed(0)
    attn = CausalSelfAttention(64, 4, dropout=0.2, block_size=32, rope=False, impl="sdpa").train()
    x = torch.randn(3, 20, 64, requires_grad=True)
    torch.manual_seed(1)
    fast = attn(x)

    torch.manual_seed(1)  # the same random draws, in the same order
    B, T, C = x.shape
    q, k, v = attn.query_key_value(x)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(attn.head_size)
    scores = scores.masked_fill(~attn.causal_mask[:T, :T], float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = weights * attn.attn_dropout.mask(weights)
    y = attn.proj((weights @ v).transpose(1, 2).reshape(B, T, C))
    textbook = y * attn.resid_dropout.mask(y)

    assert torch.allclose(fast, textbook, atol=1e-6)
    (grad_fast,) = torch.autograd.grad(fast.square().sum(), x)
    (grad_textbook,) = torch.autograd.grad(textbook.square().sum(), x)
    assert torch.allclose(grad_fast, grad_textbook, atol=1e-5)
    assert (fast == 0).float().mean() > 0.1  # dropout did drop (p=0.2 on the output)


def test_compiled_model_keeps_its_parameter_names(tmp_path):
    """compile=true compiles in place: checkpoints load into a compiled model or a plain one."""
    from conftest import compose

    from tinylm.tasks import model_class_of, task_of_config
    from tinylm.tasks.text.data import TextDataModule
    from tinylm.training.fit import Run, build_module

    cfg = compose("compile=true", "model.num_layers=1", output_dir=tmp_path)
    datamodule = TextDataModule(block_size=cfg.model.block_size)
    datamodule.prepare()
    plain_cfg = compose("model.num_layers=1", output_dir=tmp_path)
    compiled = build_module(Run(cfg, task_of_config(cfg), model_class_of(cfg)), datamodule)
    plain = build_module(Run(plain_cfg, task_of_config(plain_cfg), model_class_of(plain_cfg)), datamodule)
    assert compiled.model._compiled_call_impl is not None  # compiled on first call, not here
    assert plain.model._compiled_call_impl is None
    assert "compile" not in compiled.hparams.model  # not part of what the model is
    assert compiled.state_dict().keys() == plain.state_dict().keys()
    plain.load_state_dict(compiled.state_dict())


def test_model_compile_must_be_a_boolean(tmp_path):
    from conftest import compose

    from tinylm.training.config_checks import config_problems

    assert config_problems(compose("compile=maybe", output_dir=tmp_path)) == [
        "compile='maybe' must be one of true, false"
    ]
    assert config_problems(compose("model=lstm", "compile=true", output_dir=tmp_path)) == []

