"""The two kinds of model: every architecture is a decoder or an encoder-decoder, offers its kind's
interface, and its forward returns (logits, loss); configs check themselves and name their shape keys."""

from __future__ import annotations

import pytest
import torch
from builders import ARCHITECTURES

from tinylm.models import build_model, model_config_problems
from tinylm.models.base import Decoder, EncoderDecoder, LanguageModel, eval_no_grad
from tinylm.models.gpt import GPTConfig
from tinylm.models.hook_points import ActivationCache, keeper
from tinylm.models.rnn import RNNConfig
from tinylm.models.seq2seq import PAD_ID, Seq2SeqConfig
from tinylm.runs.resume import shape_keys

V, B, S, T = 11, 2, 5, 6
TINY = {  # arch -> model config, small enough to build in milliseconds
    "gpt": {"block_size": 8, "n_embd": 16, "num_heads": 2, "num_layers": 2},
    "lstm": {"block_size": 8, "n_embd": 8, "hidden_size": 12, "num_layers": 2},
    "gru": {"block_size": 8, "n_embd": 8, "hidden_size": 12, "num_layers": 1},
    "seq2seq": {"block_size": 8, "n_embd": 16, "num_heads": 2, "encoder_layers": 1, "decoder_layers": 2},
}
KIND_BASES = {"decoder": Decoder, "encoder-decoder": EncoderDecoder}


def tiny(arch: str, **overrides) -> LanguageModel:
    torch.manual_seed(0)
    return build_model({"arch": arch, "vocab_size": V, **TINY[arch], **overrides}).eval()


def ids(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, V, shape, generator=torch.Generator().manual_seed(seed))  # no PAD/BEGIN/END


def test_every_architecture_has_a_tiny_config_here():
    assert set(TINY) == set(ARCHITECTURES)


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_each_architecture_names_one_kind_and_derives_from_its_base(arch):
    model_class = ARCHITECTURES[arch][1]
    assert model_class.kind in KIND_BASES
    assert issubclass(model_class, KIND_BASES[model_class.kind])
    model = tiny(arch)
    assert model.kind == model_class.kind
    assert isinstance(model.has_attention, bool)


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_forward_returns_logits_and_loss(arch):
    model = tiny(arch)
    if model.kind == "decoder":
        x, y = ids(B, T), ids(B, T, seed=2)
        with_targets, without = model(x, y), model(x)
        assert model.loss((x, y)).item() == pytest.approx(with_targets[1].item())
    else:
        src, tgt, out = ids(B, S), ids(B, T), ids(B, T, seed=2)
        with_targets, without = model(src, tgt, out), model(src, tgt)
        assert model.loss((src, tgt, out)).item() == pytest.approx(with_targets[1].item())
    for result in (with_targets, without):
        assert isinstance(result, tuple) and len(result) == 2
        assert result[0].shape == (B, T, V)
    assert with_targets[1].shape == () and without[1] is None
    assert torch.equal(with_targets[0], without[0])


@pytest.mark.parametrize("arch", [a for a in ARCHITECTURES if ARCHITECTURES[a][1].kind == "decoder"])
def test_a_decoder_continues_with_a_cache_and_shows_its_attention(arch):
    model = tiny(arch)
    x = ids(B, T)
    with torch.no_grad():
        full, _ = model(x)
        last, loss = model(x, ids(B, T), last_only=True)
        cache = model.new_cache(B)
        steps = [model(x[:, :3], cache=cache)[0]] + [model(x[:, t : t + 1], cache=cache)[0] for t in range(3, T)]
    assert last.shape == (B, 1, V) and loss is None
    assert torch.allclose(last, full[:, -1:], atol=1e-5)
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    maps = model.attention_maps(x)
    if not model.has_attention:
        assert maps is None and model.past_shape(B, 0) is None
        return
    assert len(maps) == model.config.num_layers
    for w in maps:  # (B, h, T, T), causal rows of probabilities
        assert w.shape == (B, 2, T, T) and torch.all(w.triu(diagonal=1) == 0)
        assert torch.allclose(w.sum(-1), torch.ones(B, 2, T), atol=1e-5)
    keys = torch.zeros(model.past_shape(B, 0))
    logits, new_keys, new_values = model.step(x, keys, keys)
    assert torch.allclose(logits, full, atol=1e-5)
    assert new_keys.shape == new_values.shape == model.past_shape(B, T)


def test_attention_maps_leave_the_default_run_alone():
    """The weights are read at each layer's hook_pattern: the SDPA forward gives the same logits before,
    during and after, and the maps are the explicit attention's (bit for bit in the first layer; later
    layers read SDPA's output, equal to the explicit one's within rounding)."""
    model = tiny("gpt", dropout=0.0)
    sdpa_explicit = tiny("gpt", dropout=0.0, attn_impl="explicit")
    x = ids(B, T)
    before = model(x, x)[0]
    maps = model.attention_maps(x)
    during, cache = model.run_with_cache(x, x)
    after = model(x, x)[0]
    assert torch.equal(before, after) and torch.equal(before, during[0])
    reference = sdpa_explicit.attention_maps(x)
    assert torch.equal(maps[0], reference[0])
    for layer, (mine, theirs) in enumerate(zip(maps, reference, strict=True)):
        assert torch.allclose(mine, theirs, atol=1e-6)
        assert torch.equal(mine, cache["pattern", layer])


def test_an_encoder_decoder_encodes_once_and_decodes_against_it():
    model = tiny("seq2seq")
    src, tgt = ids(B, S), ids(B, T)
    src[1, 3:] = PAD_ID  # the second source is shorter
    seen = ActivationCache()
    with torch.no_grad():
        memory = model.encode(src)
        with model.hooks([(lambda name: name.endswith("hook_pattern"), keeper(seen))]):  # the weights
            logits = model.decode(tgt, memory)
        cache = model.new_cache(B)
        steps = [model.decode(tgt[:, t : t + 1], memory, cache) for t in range(T)]
    self_weights = [seen[f"decoder.{layer}.self_attn.hook_pattern"] for layer in range(2)]
    cross_weights = [seen[f"decoder.{layer}.cross_attn.hook_pattern"] for layer in range(2)]
    assert torch.allclose(logits, model(src, tgt)[0])
    assert torch.allclose(torch.cat(steps, dim=1), logits, atol=1e-5)
    assert [w.shape for w in self_weights] == [(B, 2, T, T)] * 2
    assert [w.shape for w in cross_weights] == [(B, 2, T, S)] * 2
    assert torch.all(cross_weights[0][1, :, :, 3:] == 0)  # padding never read
    maps = model.translation_maps(src, tgt)
    assert {k: [w.shape for w in v] for k, v in maps.items()} == {
        "encoder": [(B, 2, S, S)], "decoder": [(B, 2, T, T)] * 2, "cross": [(B, 2, T, S)] * 2}
    assert model.past_shape(B, 0) is None  # no step: not exportable


def test_the_encoder_decoder_config_is_itself_not_a_gpt():
    config = Seq2SeqConfig(vocab_size=V)
    assert not hasattr(config, "num_layers") and not hasattr(config, "attn_impl")
    problems = model_config_problems({"arch": "seq2seq", "vocab_size": V, **TINY["seq2seq"], "num_heads": 3,
                                      "encoder_layers": 0, "pos_encoding": "alibi", "dropout": 0.1})
    assert problems == [
        "model.encoder_layers=0 must be a positive integer",
        "model.n_embd=16 is not divisible by model.num_heads=3: use model.num_heads=4 or a multiple of 3 for "
        "n_embd (e.g. 18)",
        "model.pos_encoding='alibi': choose one of learned, sinusoidal, rope",
    ]
    with pytest.raises(ValueError, match=r"head size model.n_embd/model.num_heads=3 must be even for rope"):
        Seq2SeqConfig(vocab_size=V, n_embd=12, num_heads=4, pos_encoding="rope")
    assert model_config_problems({"arch": "seq2seq", "vocab_size": V, **TINY["seq2seq"], "dropout": 1.0,
                                  "pos_encoding": "learned"}) == ["model.dropout=1.0 must be in [0, 1)"]


def test_each_config_class_names_the_keys_its_weights_depend_on():
    assert GPTConfig.shape_keys() == ("arch", "block_size", "n_embd", "num_heads", "num_layers", "pos_encoding",
                                      "norm", "tied_head")
    assert RNNConfig.shape_keys() == ("arch", "block_size", "n_embd", "hidden_size", "num_layers")
    assert Seq2SeqConfig.shape_keys() == ("arch", "block_size", "n_embd", "num_heads", "encoder_layers",
                                          "decoder_layers", "pos_encoding")
    # a resume compares the keys of both architectures, the config's first
    assert shape_keys({"arch": "seq2seq"}, {"arch": "lstm"}) == [
        "arch", "block_size", "n_embd", "num_heads", "encoder_layers", "decoder_layers", "pos_encoding",
        "hidden_size", "num_layers"]
    assert shape_keys({}, {"arch": "unknown"}) == list(GPTConfig.shape_keys())  # no arch: a GPT (release 0.1)


def test_eval_no_grad_gives_the_model_its_mode_back():
    model = tiny("gpt").train()
    with eval_no_grad(model):
        assert not model.training and not torch.is_grad_enabled()
    assert model.training and torch.is_grad_enabled()
    with eval_no_grad(model.eval()):
        pass
    assert not model.training
