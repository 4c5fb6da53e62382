"""The models' named hook points (tinylm.models.hook_points): every point's name and shape for each model
kind, run_with_cache and run_with_hooks leaving the model's numbers alone, and the analysis
(ablation, patching, the logit lens, debug=shapes) going through them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from tinylm.analysis.hooks import ablated, head_means, heads_switched_off
from tinylm.callbacks.shapes import MEANINGS, shape_rows
from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.generation.sampling import generate
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.models.hook_points import hooked
from tinylm.models.rnn import RNNConfig, RNNLanguageModel
from tinylm.models.seq2seq import PAD_ID, Seq2Seq, Seq2SeqConfig

B, T, S, V = 2, 6, 5, 13  # batch, (target) positions, source positions, vocabulary
C, H, HS, E, HIDDEN = 16, 2, 8, 8, 12  # width, heads, head size; an RNN's embedding and hidden sizes

KINDS = {
    "gpt-learned": lambda: GPT(GPTConfig(vocab_size=V, block_size=8, n_embd=C, num_heads=H, num_layers=2)),
    "gpt-sinusoidal": lambda: GPT(GPTConfig(vocab_size=V, block_size=8, n_embd=C, num_heads=H, num_layers=2,
                                            pos_encoding="sinusoidal")),
    "gpt-rope": lambda: GPT(GPTConfig(vocab_size=V, block_size=8, n_embd=C, num_heads=H, num_layers=2,
                                      pos_encoding="rope")),
    "gpt-options": lambda: GPT(GPTConfig(vocab_size=V, block_size=8, n_embd=C, num_heads=H, num_layers=2,
                                         norm="rmsnorm", activation="relu2", qk_norm=True, logit_softcap=5.0,
                                         tied_head=True)),
    "gpt-explicit": lambda: GPT(GPTConfig(vocab_size=V, block_size=8, n_embd=C, num_heads=H, num_layers=2,
                                          attn_impl="explicit")),
    "lstm": lambda: RNNLanguageModel(RNNConfig(vocab_size=V, arch="lstm", block_size=8, n_embd=E,
                                               hidden_size=HIDDEN, num_layers=2)),
    "gru": lambda: RNNLanguageModel(RNNConfig(vocab_size=V, arch="gru", block_size=8, n_embd=E,
                                              hidden_size=HIDDEN, num_layers=1)),
    "seq2seq": lambda: Seq2Seq(Seq2SeqConfig(vocab_size=V, block_size=8, n_embd=C, num_heads=H)),
    "seq2seq-rope": lambda: Seq2Seq(Seq2SeqConfig(vocab_size=V, block_size=8, n_embd=C, num_heads=H,
                                                  encoder_layers=1, decoder_layers=1, pos_encoding="rope")),
}


def model_of(kind: str, seed: int = 0):
    torch.manual_seed(seed)
    return KINDS[kind]()


def batch_of(model) -> tuple[torch.Tensor, ...]:
    """A decoder's (ids, targets) (B, T) each; an encoder-decoder's (src (B, S), tgt, targets (B, T))."""
    g = torch.Generator().manual_seed(1)
    if model.kind == "encoder-decoder":
        src = torch.randint(3, V, (B, S), generator=g)
        src[1, 3:] = PAD_ID  # the second source is shorter
        return src, torch.randint(3, V, (B, T), generator=g), torch.randint(3, V, (B, T), generator=g)
    return torch.randint(V, (B, T), generator=g), torch.randint(V, (B, T), generator=g)


# --------------------------------------------------------------------------------------------
# Names and shapes, as COMMON42 / the issue lists them, in the order one forward pass reaches them

SIDE = (B, T, C)
HEADS = (B, T, H, HS)


def attention_points(prefix: str, rope: bool, q: int = T, k: int = T) -> list[tuple[str, tuple]]:
    points = [(f"{prefix}.hook_q", (B, q, H, HS)), (f"{prefix}.hook_k", (B, k, H, HS)),
              (f"{prefix}.hook_v", (B, k, H, HS))]
    if rope:
        points += [(f"{prefix}.hook_rot_q", (B, q, H, HS)), (f"{prefix}.hook_rot_k", (B, k, H, HS))]
    return points + [(f"{prefix}.hook_attn_scores", (B, H, q, k)), (f"{prefix}.hook_pattern", (B, H, q, k)),
                     (f"{prefix}.hook_z", (B, q, H, HS))]


def gpt_block(layer: int, rope: bool, prefix: str = "blocks", attn: str = "attn", t: int = T) -> list:
    p, side = f"{prefix}.{layer}", (B, t, C)
    return [(f"{p}.hook_resid_pre", side), (f"{p}.ln1.hook_normalized", side),
            *attention_points(f"{p}.{attn}", rope, t, t), (f"{p}.hook_attn_out", side), (f"{p}.hook_resid_mid", side),
            (f"{p}.ln2.hook_normalized", side), (f"{p}.mlp.hook_pre", (B, t, 4 * C)),
            (f"{p}.mlp.hook_post", (B, t, 4 * C)), (f"{p}.hook_mlp_out", side), (f"{p}.hook_resid_post", side)]


def decoder_block(layer: int, rope: bool) -> list:
    p = f"decoder.{layer}"
    self_half = gpt_block(layer, rope, "decoder", "self_attn")[:-4]  # up to ln2.hook_normalized
    cross = [(f"{p}.cross_attn.hook_q", HEADS), (f"{p}.cross_attn.hook_attn_scores", (B, H, T, S)),
             (f"{p}.cross_attn.hook_pattern", (B, H, T, S)), (f"{p}.cross_attn.hook_z", HEADS)]
    return [*self_half, *cross, (f"{p}.hook_cross_attn_out", SIDE), (f"{p}.hook_resid_mid_cross", SIDE),
            (f"{p}.ln3.hook_normalized", SIDE), (f"{p}.mlp.hook_pre", (B, T, 4 * C)),
            (f"{p}.mlp.hook_post", (B, T, 4 * C)), (f"{p}.hook_mlp_out", SIDE), (f"{p}.hook_resid_post", SIDE)]


def expected_points(kind: str) -> list[tuple[str, tuple]]:
    rope = kind.endswith("rope")
    if kind in ("lstm", "gru"):
        return [("hook_embed", (B, T, E)), ("hook_rnn_out", (B, T, HIDDEN))]
    if kind.startswith("gpt"):
        embed = [("hook_embed", SIDE)] + ([] if rope else [("hook_pos_embed", SIDE)])
        return [*embed, *gpt_block(0, rope), *gpt_block(1, rope), ("ln_final.hook_normalized", SIDE)]
    layers = 1 if rope else 2
    source = [("hook_src_embed", (B, S, C))] + ([] if rope else [("hook_src_pos_embed", (B, S, C))])
    source += [point for layer in range(layers) for point in gpt_block(layer, rope, "encoder", t=S)]
    source.append(("ln_memory.hook_normalized", (B, S, C)))
    memory = [(f"decoder.{layer}.cross_attn.hook_{part}", (B, S, H, HS)) for layer in range(layers) for part in "kv"]
    target = [("hook_tgt_embed", SIDE)] + ([] if rope else [("hook_tgt_pos_embed", SIDE)])
    decoder = [point for layer in range(layers) for point in decoder_block(layer, rope)]
    return [*source, *memory, *target, *decoder, ("ln_final.hook_normalized", SIDE)]


@pytest.mark.parametrize("kind", KINDS)
def test_every_hook_point_has_its_name_and_shape_in_forward_order(kind):
    model = model_of(kind).eval()
    (logits, _), cache = model.run_with_cache(*batch_of(model))
    assert list(cache.shapes().items()) == expected_points(kind)
    assert set(model.hook_points()) == set(cache)  # one forward pass reaches every point, once
    assert all(point.name == name for name, point in model.hook_points().items())
    assert logits.shape == (B, T, V)
    assert all(not tensor.requires_grad for tensor in cache.values())  # detached


@pytest.mark.parametrize("kind", KINDS)
def test_run_with_cache_and_hooks_returning_none_change_no_bit(kind):
    model = model_of(kind).eval()
    batch = batch_of(model)
    logits, loss = model(*batch)
    (cached_logits, cached_loss), _ = model.run_with_cache(*batch)
    looked = model.run_with_hooks(*batch, fwd_hooks=[(None, lambda tensor, hook: None)])
    assert torch.equal(cached_logits, logits) and torch.equal(cached_loss, loss)
    assert torch.equal(looked[0], logits) and torch.equal(looked[1], loss)


@pytest.mark.parametrize("kind", ["gpt-learned", "gpt-rope", "gpt-options", "lstm", "seq2seq"])
def test_hooks_returning_none_change_no_bit_while_training(kind):
    """Train mode, dropout on, the same seed: the same loss and the same gradients, bit for bit."""
    def step(hooked_run: bool):
        model = model_of(kind).train()
        batch = batch_of(model)
        torch.manual_seed(7)
        hooks = [(None, lambda tensor, hook: None)] if hooked_run else []
        with model.hooks(hooks):
            loss = model(*batch)[1]
        loss.backward()
        return loss, [p.grad for p in model.parameters()]

    (plain_loss, plain_grads), (hooked_loss, hooked_grads) = step(False), step(True)
    assert torch.equal(plain_loss, hooked_loss)
    assert all(torch.equal(a, b) for a, b in zip(plain_grads, hooked_grads, strict=True))


# --------------------------------------------------------------------------------------------
# Switching a head off at hook_z is what generate.py ablate= and the old column zeroing did


def zero_columns_of_proj_input(attention, head: int):
    """The old mechanism, by hand: a pre-hook on ``proj`` zeroing the head's columns of its input (B, T, h*hs)."""
    def hook(module, args):
        y = args[0].clone()
        y[..., head * attention.head_size : (head + 1) * attention.head_size] = 0
        return (y,)
    return attention.proj.register_forward_pre_hook(hook)


@pytest.mark.parametrize(("kind", "name", "attention"), [
    ("gpt-learned", "blocks.1.attn.hook_z", lambda m: m.blocks[1].attn),
    ("gpt-rope", "blocks.1.attn.hook_z", lambda m: m.blocks[1].attn),
    ("seq2seq", "decoder.1.cross_attn.hook_z", lambda m: m.decoder[1].cross_attn),
])
def test_zeroing_a_head_at_hook_z_equals_ablate_and_the_old_column_zeroing(kind, name, attention):
    model = model_of(kind).eval()
    batch = batch_of(model)

    def zero_head(z, hook):
        z = z.clone()
        z[:, :, 1] = 0
        return z

    through_hook_z = model.run_with_hooks(*batch, fwd_hooks=[(name, zero_head)])[0]
    with heads_switched_off(model, ["1.1"]):  # generate.py ablate=[1.1]
        ablate = model(*batch)[0]
    handle = zero_columns_of_proj_input(attention(model), 1)
    try:
        by_hand = model(*batch)[0]
    finally:
        handle.remove()
    assert torch.equal(through_hook_z, ablate) and torch.equal(through_hook_z, by_hand)
    assert not torch.allclose(through_hook_z, model(*batch)[0])  # the head mattered
    assert not any(point.active for point in model.hook_points().values())


def test_generation_with_a_head_off_is_the_same_through_hook_z_and_ablate():
    model = model_of("gpt-learned").eval()
    prompt = torch.tensor([[1, 2, 3]])

    def zero_head(z, hook):
        z = z.clone()
        z[:, :, 0] = 0
        return z

    with model.hooks([("blocks.0.attn.hook_z", zero_head)]):
        through_hook_z = generate(model, prompt, 12, temperature=0)
    with heads_switched_off(model, ["0.0"]):
        ablate = generate(model, prompt, 12, temperature=0, use_cache=False)
    assert torch.equal(through_hook_z, ablate)


def test_mean_ablation_sets_a_head_to_its_mean_output():
    model = model_of("gpt-learned").eval()
    ids = batch_of(model)[0]
    attentions = model.attention_layers()["self"]
    means = head_means(attentions, lambda: model(ids))  # per layer (h, hs)
    (_, cache) = model.run_with_cache(ids, names_filter="blocks.1.attn.hook_z")
    z = cache["blocks.1.attn.hook_z"]
    assert means[1].shape == (H, HS) and torch.allclose(means[1], z.mean(dim=(0, 1)), atol=1e-6)
    seen = {}
    with hooked(ablated(attentions, [(1, 0)], means)):
        model.run_with_hooks(ids, fwd_hooks=[("blocks.1.attn.hook_z", lambda z, hook: seen.setdefault("z", z))])
    assert torch.equal(seen["z"][:, :, 0], means[1][0].expand(B, T, HS))
    assert torch.equal(seen["z"][:, :, 1], z[:, :, 1])


# --------------------------------------------------------------------------------------------
# Replacing the attention's scores or weights


@pytest.mark.parametrize("kind", ["gpt-learned", "gpt-explicit", "seq2seq"])
def test_replacing_hook_pattern_changes_the_output_even_under_sdpa(kind):
    """Each position attending to itself only: each head's output is its own value, exactly."""
    model = model_of(kind).eval()
    batch = batch_of(model)
    prefix = "decoder.0.self_attn" if kind == "seq2seq" else "blocks.0.attn"

    def itself(pattern, hook):
        return torch.eye(pattern.size(-1)).expand_as(pattern).clone()

    def hidden_but_itself(scores, hook):
        return scores.masked_fill(~torch.eye(scores.size(-1), dtype=torch.bool), float("-inf"))

    logits = model(*batch)[0]
    for name, fn in [(f"{prefix}.hook_pattern", itself), (f"{prefix}.hook_attn_scores", hidden_but_itself)]:
        with model.hooks([(name, fn)]):
            (changed, _), cache = model.run_with_cache(*batch, names_filter=lambda n: n.startswith(prefix))
        assert torch.equal(cache[f"{prefix}.hook_z"], cache[f"{prefix}.hook_v"])
        assert not torch.allclose(changed, logits)


# --------------------------------------------------------------------------------------------
# The hooks' lifetime, names, the cache's short keys


def test_hooks_are_removed_after_run_with_hooks_also_when_a_hook_raises():
    model = model_of("gpt-learned").eval()
    ids = batch_of(model)[0]
    before = model(ids)[0]

    def fails(tensor, hook):
        raise RuntimeError(f"stop at {hook.name}")

    with pytest.raises(RuntimeError, match="stop at blocks.0.attn.hook_pattern"):
        model.run_with_hooks(ids, fwd_hooks=[("blocks.0.attn.hook_pattern", fails), (None, lambda t, hook: None)])
    assert not any(point._forward_hooks for point in model.hook_points().values())
    model.run_with_hooks(ids, fwd_hooks=[(lambda name: "hook_z" in name, lambda t, hook: t * 0)])
    assert not any(point._forward_hooks for point in model.hook_points().values())
    assert torch.equal(model(ids)[0], before)


def test_an_unknown_hook_point_is_one_line_naming_close_matches():
    model = model_of("gpt-learned")
    with pytest.raises(TinyLMError) as raised:
        model.run_with_hooks(batch_of(model)[0], fwd_hooks=[("blocks.0.attn.hook_patern", lambda t, hook: None)])
    message = str(raised.value)
    assert "\n" not in message and "'blocks.0.attn.hook_patern'" in message
    assert "blocks.0.attn.hook_pattern" in message.replace("'blocks.0.attn.hook_patern'", "")
    assert not any(point._forward_hooks for point in model.hook_points().values())


def test_the_cache_takes_transformerlens_short_keys():
    gpt = model_of("gpt-learned").eval()
    _, cache = gpt.run_with_cache(batch_of(gpt)[0])
    assert cache["pattern", 0] is cache["blocks.0.attn.hook_pattern"]
    assert cache["resid_post", 1] is cache["blocks.1.hook_resid_post"]
    seq2seq = model_of("seq2seq").eval()
    _, cache = seq2seq.run_with_cache(*batch_of(seq2seq)[:2])
    assert cache["pattern", 1, "cross_attn"] is cache["decoder.1.cross_attn.hook_pattern"]
    assert torch.all(cache["pattern", 1, "cross_attn"][1, :, :, 3:] == 0)  # the padding is never read
    with pytest.raises(KeyError, match="add the part that tells them apart"):
        cache["pattern", 0]  # the encoder's, the decoder's and the cross-attention's


def test_print_hides_the_hook_points_and_the_parameter_count_stays():
    model = GPT(GPTConfig(vocab_size=73))  # the reference model
    text = str(model)
    assert not [line for line in text.splitlines()[:-1] if "hook" in line.lower()]
    assert text.splitlines()[-1] == f"{len(model.hook_points())} hook points: model.hook_points()"
    assert "(attn): CausalSelfAttention(" in text and "(ffwd): FeedForward(" in text
    assert model.num_params() == 210_761
    assert not [name for name in model.state_dict() if "hook" in name]


@pytest.mark.parametrize("name", ["release-0.1-gpt-rope.ckpt", "release-0.1-lstm.ckpt"])
def test_an_earlier_release_checkpoint_has_the_same_keys_and_runs_with_cache(name):
    path = ROOT / "tests" / "fixtures" / name
    stored = torch.load(path, weights_only=True)["state_dict"]
    model = load_model(path).model
    assert sorted(f"model.{key}" for key in model.state_dict()) == sorted(stored)
    ids = torch.tensor([[1, 2, 3, 4]])
    (logits, _), cache = model.run_with_cache(ids)
    assert torch.equal(logits, model(ids)[0]) and cache["hook_embed"].shape[:2] == (1, 4)


# --------------------------------------------------------------------------------------------
# debug=shapes and the rest of tinylm go through the hook points


@pytest.mark.parametrize("kind", ["gpt-learned", "gpt-rope", "lstm", "seq2seq"])
def test_the_shape_table_has_a_row_per_hook_point_with_its_meaning(kind):
    model = model_of(kind)
    rows = shape_rows(model, batch_of(model))
    names = [row[0] for row in rows]
    inputs = 3 if kind == "seq2seq" else 2
    assert names[inputs:-3] == [name for name, _ in expected_points(kind)]
    assert names[-3:] == ["logits", "loss input: logits", "loss input: targets"]
    for name, shape, dims, meaning in rows:
        assert len(dims.split(", ")) == len(shape) and meaning, name
        if name.startswith(("hook", "blocks", "encoder", "decoder", "ln_")):
            assert name.rsplit(".", 1)[-1] in MEANINGS
    found = {name: dims for name, _, dims, _ in rows}
    if kind == "lstm":
        assert (found["hook_embed"], found["hook_rnn_out"]) == ("B, T, E", "B, T, H")
    if kind == "seq2seq":
        assert found["encoder.0.attn.hook_pattern"] == "B, h, S, S"
        assert found["decoder.0.cross_attn.hook_pattern"] == "B, h, T, S"
        assert found["decoder.0.cross_attn.hook_k"] == "B, S, h, hs"
    assert model.training  # left in its own mode


def test_nothing_in_tinylm_hooks_into_modules_but_through_hook_points():
    package = ROOT / "tinylm"
    allowed = {package / "models" / "hook_points.py"}
    found = [str(path.relative_to(ROOT)) for path in package.rglob("*.py") if path not in allowed
             and re.search(r"register_forward(_pre)?_hook|\btrace\(\"", path.read_text(encoding="utf-8"))]
    assert found == []
    assert not Path(package / "models" / "tracing.py").exists()


def test_run_with_cache_works_under_inference_mode():
    """The explorer's views run in torch.inference_mode: the cache and the logits are the forward's there too."""
    model = model_of("gpt-learned").eval()
    ids = batch_of(model)[0]
    with torch.inference_mode():
        logits = model(ids)[0]
        (cached, _), cache = model.run_with_cache(ids)
        with heads_switched_off(model, ["0.1"]):
            ablate = model(ids)[0]
    assert torch.equal(cached, logits) and cache["pattern", 1].shape == (B, H, T, T)
    assert not torch.equal(ablate, logits)


@pytest.mark.parametrize("point", ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_attn_scores",
                                   "ln_final.hook_normalized", "blocks.0.attn.hook_z"])
def test_an_edit_in_place_counts_also_under_inference_mode(point):
    """A hook that edits its tensor in place and returns None changes the output, with or without a version
    counter (inference_mode tensors have none), on the SDPA path too; looking changes nothing."""
    model = model_of("gpt-learned").eval()
    ids = batch_of(model)[0]

    def edit(tensor, hook):
        tensor[..., 0] = 0.5

    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            logits = model(ids)[0]
            edited = model.run_with_hooks(ids, fwd_hooks=[(point, edit)])[0]
            looked = model.run_with_hooks(ids, fwd_hooks=[(point, lambda tensor, hook: None)])[0]
        assert not torch.equal(edited, logits) and torch.equal(looked, logits), mode


def test_cache_short_forms_as_in_transformer_lens():
    model = model_of("gpt-learned").eval()
    _, cache = model.run_with_cache(batch_of(model)[0])
    last = max(int(name.split(".")[1]) for name in cache if name.startswith("blocks."))
    assert cache["embed"] is cache["hook_embed"] and cache["pos_embed"] is cache["hook_pos_embed"]
    assert cache["pattern", -1] is cache[f"blocks.{last}.attn.hook_pattern"]
    assert cache["resid_post", 0] is cache["blocks.0.hook_resid_post"]


@pytest.mark.parametrize("fwd_hooks, said", [
    ([("hook_embed",)], "with fn(tensor, hook) callable: got ('hook_embed',)"),
    (("hook_embed", lambda tensor, hook: None), "put the one pair in a list"),
    ([("hook_embed", "not a function")], "with fn(tensor, hook) callable"),
    (3, "not int"),
])
def test_a_malformed_fwd_hooks_is_one_line_showing_the_form(fwd_hooks, said):
    model = model_of("gpt-learned").eval()
    with pytest.raises(TinyLMError) as info:
        model.run_with_hooks(batch_of(model)[0], fwd_hooks=fwd_hooks)
    message = str(info.value)
    assert message.startswith("fwd_hooks is a list of (name, fn) pairs") and said in message and "\n" not in message
    assert all(not point._forward_hooks for point in model.hook_points().values())
