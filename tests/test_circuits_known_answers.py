"""The circuits (tinylm.analysis.circuits) on tiny hand-set models with known answers: an OV circuit that is the
identity copies every character, a head with a zero W_O attributes and composes nothing, the direct logit
attribution's parts add up to the logit for every position encoding and option, a rank-one head composes fully
with itself and not at all with an orthogonal one, a hand-set position table makes a previous-token head, a
hand-set neuron pushes its character. No training."""

from __future__ import annotations

import math

import pytest
import torch
from builders import ARCHITECTURES, build_tokenizer

from tinylm.analysis.circuits import composition_scores, direct_logit_attribution, head_circuits, neuron_examples
from tinylm.analysis.circuits.composition import baseline, score
from tinylm.analysis.circuits.dla import model_logits
from tinylm.analysis.circuits.neurons import activations
from tinylm.analysis.circuits.ov_qk import copying, ov_circuit, positional_qk, previous_token_score, qk_circuit
from tinylm.api.lm import LM
from tinylm.errors import TinyLMError
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.models.seq2seq import Seq2Seq, Seq2SeqConfig

LETTERS = "abcdefgh"  # the tokenizer's vocabulary: 8 characters, ids 0..7 in this order
TOKENIZER = build_tokenizer("char", LETTERS)


def gpt(seed: int = 0, std: float = 0.3, **options) -> GPT:
    """A 2-layer, 2-head GPT with every weight (biases and norm gains too) drawn at ``std``: no part is trivial."""
    torch.manual_seed(seed)
    config = dict(vocab_size=len(LETTERS), block_size=12, n_embd=16, num_heads=2, num_layers=2, dropout=0.1)
    model = GPT(GPTConfig(**{**config, **options}))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std).add_(1.0 if p.dim() == 1 and p.numel() == 16 else 0.0)  # gains near 1
    return model.eval()


def text_ids(length: int = 12, seed: int = 1) -> list[int]:
    return torch.randint(len(LETTERS), (length,), generator=torch.Generator().manual_seed(seed)).tolist()


# ------------------------------------------------------------------------------------------------------------
# Direct logit attribution


@pytest.mark.parametrize("options", [{}, {"pos_encoding": "sinusoidal"}, {"pos_encoding": "rope"},
                                     {"norm": "rmsnorm"}, {"activation": "relu2", "tied_head": True},
                                     {"qk_norm": True, "attn_impl": "explicit"}])
def test_the_parts_add_up_to_the_logit(options):
    model = gpt(**options)
    ids = text_ids()
    dla = direct_logit_attribution(model, ids, TOKENIZER)
    logits = model(torch.tensor(ids)[None])[0][0]  # (T, V): the model's own, no cap here
    assert dla["tokens"] == [LETTERS[i] for i in ids]
    assert [p["position"] for p in dla["positions"]] == list(range(len(ids) - 1))
    for p in dla["positions"]:
        t = p["position"]
        assert p["target"] == LETTERS[ids[t + 1]]
        assert p["logit"] == pytest.approx(logits[t, ids[t + 1]].item(), abs=1e-5)
        assert sum(p["parts"].values()) == pytest.approx(p["logit"], abs=1e-4)
        assert list(p["parts"]) == ["embed", "pos_embed", "L0H0", "L0H1", "mlp0", "L1H0", "L1H1", "mlp1", "bias"]
    if options.get("pos_encoding") == "rope":
        assert all(p["parts"]["pos_embed"] == 0 for p in dla["positions"])


def test_a_text_of_one_character_has_nothing_to_attribute_and_says_so():
    model = gpt(seed=3)
    for call in (lambda: LM.from_model(model, TOKENIZER).dla("a"),
                 lambda: direct_logit_attribution(model, [0], TOKENIZER),  # the tab's route calls this
                 lambda: direct_logit_attribution(model, [0], TOKENIZER, against="b")):
        with pytest.raises(TinyLMError, match="1 token.* long: pass at least two, so that there is a next token"):
            call()


def test_a_logit_difference_against_another_character_adds_up_too():
    model = gpt(seed=3)
    ids = text_ids(seed=3)
    dla = direct_logit_attribution(model, ids, TOKENIZER, against="c")
    logits = model(torch.tensor(ids)[None])[0][0]
    for p in dla["positions"]:
        t = p["position"]
        assert p["against"] == "c"
        assert p["logit"] == pytest.approx((logits[t, ids[t + 1]] - logits[t, 2]).item(), abs=1e-5)
        assert sum(p["parts"].values()) == pytest.approx(p["logit"], abs=1e-4)
    with pytest.raises(TinyLMError, match="against='z': pass one character of the model's vocabulary"):
        direct_logit_attribution(model, ids, TOKENIZER, against="z")


def test_with_a_softcap_the_pre_cap_logit_is_attributed_and_said():
    model = gpt(seed=4, logit_softcap=2.0)
    ids = text_ids(seed=4)
    dla = direct_logit_attribution(model, ids, TOKENIZER)
    capped = model(torch.tensor(ids)[None])[0][0]
    raw = model_logits(model, (torch.tensor(ids)[None],))
    assert "before the cap" in dla["softcap"]
    for p in dla["positions"]:
        t, target = p["position"], ids[p["position"] + 1]
        assert p["logit"] == pytest.approx(raw[t, target].item(), abs=1e-5)
        assert 2.0 * math.tanh(p["logit"] / 2.0) == pytest.approx(capped[t, target].item(), abs=1e-5)
        assert sum(p["parts"].values()) == pytest.approx(p["logit"], abs=1e-4)


def test_dropout_is_off_even_if_the_model_was_training():
    model = gpt(seed=5, dropout=0.5).train()
    ids = text_ids(seed=5)
    first, second = (direct_logit_attribution(model, ids, TOKENIZER) for _ in range(2))
    assert first == second and model.training  # eval for the run, its mode back after


def test_an_encoder_decoders_cross_heads_are_attributed():
    torch.manual_seed(0)
    model = Seq2Seq(Seq2SeqConfig(vocab_size=8, block_size=10, n_embd=16, num_heads=2, encoder_layers=1,
                                  decoder_layers=2)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    source, target, wanted = [3, 4, 5, 6], [1, 5, 6, 7], [5, 6, 7, 2]
    dla = direct_logit_attribution(model, target, TOKENIZER, source=source, targets=wanted)
    logits = model(torch.tensor([source]), torch.tensor([target]))[0][0]
    assert {"L0H0", "crossL0H0", "crossL1H1", "mlp1"} <= set(dla["positions"][0]["parts"])
    for p in dla["positions"]:
        t = p["position"]
        assert p["logit"] == pytest.approx(logits[t, wanted[t]].item(), abs=1e-5)
        assert sum(p["parts"].values()) == pytest.approx(p["logit"], abs=1e-4)
    circuits = head_circuits(model, TOKENIZER)
    assert [r["name"] for r in circuits["heads"]][:4] == ["L0H0", "L0H1", "crossL0H0", "crossL0H1"]
    assert all(r["positional_previous_token"] is None for r in circuits["heads"] if r["name"].startswith("cross"))
    assert ov_circuit(model, 1, 0, prefix="cross").shape == qk_circuit(model, 1, 0, prefix="cross").shape == (8, 8)
    with pytest.raises(TinyLMError, match="composition scores are for decoders"):
        composition_scores(model)


def test_an_rnn_gets_one_line_saying_what_applies():
    config_class, model_class = ARCHITECTURES["lstm"]
    model = model_class(config_class(vocab_size=8)).eval()
    lm = LM.from_model(model, TOKENIZER)
    for call in (lambda: lm.dla("abc"), lm.circuits, lm.composition, lambda: lm.neurons("abc"),
                 lambda: direct_logit_attribution(model, [0, 1], TOKENIZER)):
        with pytest.raises(TinyLMError, match="has no attention heads"):
            call()


# ------------------------------------------------------------------------------------------------------------
# OV and QK circuits


def one_hot_model(sign: float = 1.0, **options) -> GPT:
    """One layer, one head of size C = 16: token a embedded as the one-hot e_a, W_V = W_O = I (times ``sign``),
    W_U = the embedding: the OV circuit is ``sign`` times the identity (up to the norms' centring)."""
    model = GPT(GPTConfig(vocab_size=8, block_size=8, n_embd=16, num_heads=1, num_layers=1, dropout=0.0,
                          **options)).eval()
    C = 16
    with torch.no_grad():
        model.token_embedding.weight.copy_(torch.eye(C)[:8])
        model.lm_head.weight.copy_(torch.eye(C)[:8])
        qkv = model.blocks[0].attn.qkv.weight
        qkv.zero_()
        qkv[2 * C:] = torch.eye(C)
        model.blocks[0].attn.proj.weight.copy_(sign * torch.eye(C))
    return model


@pytest.mark.parametrize("options", [{}, {"norm": "rmsnorm"}, {"pos_encoding": "rope"}])
def test_an_identity_ov_circuit_copies_every_character(options):
    model = one_hot_model(**options)
    ov = ov_circuit(model, 0, 0)
    assert ov.shape == (8, 8) and copying(ov) == 1.0
    assert head_circuits(model, TOKENIZER)["heads"][0]["copying"] == 1.0
    assert copying(ov_circuit(one_hot_model(sign=-1.0, **options), 0, 0)) == 0.0  # it writes "not a" instead


def test_a_hand_set_position_table_makes_a_previous_token_head():
    """Positions one-hot (e_i), W_Q = 3 I and W_K = 3 S with S the shift e_i -> e_(i+1): query i matches key i-1."""
    model = GPT(GPTConfig(vocab_size=8, block_size=8, n_embd=16, num_heads=1, num_layers=1, dropout=0.0)).eval()
    C = 16
    with torch.no_grad():
        model.position_embedding.weight.copy_(torch.eye(C)[:8])
        qkv = model.blocks[0].attn.qkv.weight  # rows: outputs; q = x W_Q with W_Q = qkv[:C].T
        qkv.zero_()
        qkv[:C] = 3 * torch.eye(C)
        qkv[C:2 * C] = 3 * torch.eye(C).roll(1, dims=0)  # W_K = its transpose: e_i W_K = e_(i+1)
    scores = positional_qk(model, 0, 0)
    assert scores.shape == (8, 8) and torch.isinf(scores.triu(1)[scores.triu(1) != 0]).all()
    assert previous_token_score(scores, 16) > 0.95
    assert head_circuits(model, TOKENIZER)["heads"][0]["positional_previous_token"] > 0.95
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight[C:2 * C] = 3 * torch.eye(C)  # now each query matches its own position
    assert previous_token_score(positional_qk(model, 0, 0), 16) < 0.05


def test_rope_has_no_positional_qk_and_says_why():
    model = gpt(pos_encoding="rope")
    assert positional_qk(model, 0, 0) is None
    circuits = head_circuits(model, TOKENIZER)
    assert all(r["positional_previous_token"] is None for r in circuits["heads"])
    assert "rope" in circuits["folded"] and "Direct path only" in circuits["folded"]
    assert circuits["tokens"] == list(LETTERS)
    assert set(circuits["heads"][0]) == {"layer", "head", "name", "copying", "positional_previous_token"}


def test_qk_circuit_is_the_embeddings_through_the_query_and_key_weights():
    model = one_hot_model()
    C = 16
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight[:C] = torch.eye(C)
        model.blocks[0].attn.qkv.weight[C:2 * C] = torch.eye(C)
    qk = qk_circuit(model, 0, 0)
    assert qk.shape == (8, 8) and (qk.argmax(dim=1) == torch.arange(8)).all()  # each character matches itself


# ------------------------------------------------------------------------------------------------------------
# A head with zero W_O, composition


def test_a_head_with_zero_w_o_attributes_and_composes_nothing():
    model = gpt(seed=6)
    with torch.no_grad():
        model.blocks[0].attn.proj.weight[:, 8:16] = 0  # head 1 of layer 0 (hs = 8)
    dla = direct_logit_attribution(model, text_ids(seed=6), TOKENIZER)
    assert all(p["parts"]["L0H1"] == 0 for p in dla["positions"])
    comp = composition_scores(model)
    row = comp["heads"].index("L0H1")
    for kind in ("q", "k", "v"):
        assert comp[kind][row][2:] == [0.0, 0.0]
        assert all(v > 0 for v in comp[kind][0][2:])  # its neighbour's are not
    assert not ov_circuit(model, 0, 1).any()  # its OV circuit is zero too


def test_composition_of_a_matrix_with_itself_is_one_and_with_an_orthogonal_one_zero():
    u = torch.zeros(16)
    u[0], u[1] = 1.0, -1.0
    v = torch.zeros(16)
    v[2], v[3] = 1.0, -1.0
    P, Q = torch.outer(u, u) / 2, torch.outer(v, v) / 2  # rank-one projectors, u ⟂ v
    assert score(P, P) == pytest.approx(1.0) and score(P, Q) == 0.0
    assert score(P, torch.zeros(16, 16)) == 0.0

    # the same inside a model: head L0H0 writes along u (W_V = u e_0ᵀ, W_O = e_0 uᵀ), L1H0 reads u with its
    # queries, keys and values, L1H1 reads v; the norms' gains are 1 and u, v have mean 0 (no centring)
    model = GPT(GPTConfig(vocab_size=8, block_size=8, n_embd=16, num_heads=2, num_layers=2, dropout=0.0)).eval()
    C, hs = 16, 8
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.zero_()
            block.attn.proj.weight.zero_()
        a = model.blocks[0].attn
        a.qkv.weight[2 * C] = u  # W_V column 0 of head 0 = u
        a.proj.weight[:, 0] = u  # W_O row 0 of head 0 = u
        b = model.blocks[1].attn
        for head, w in ((0, u), (1, v)):
            for part in range(3):
                b.qkv.weight[part * C + head * hs] = w
            b.proj.weight[:, head * hs] = w
    comp = composition_scores(model)
    assert comp["heads"] == ["L0H0", "L0H1", "L1H0", "L1H1"]
    for kind in ("q", "k", "v"):
        assert comp[kind][0][2] == pytest.approx(1.0) and comp[kind][0][3] == pytest.approx(0.0, abs=1e-7)
        assert comp[kind][1][2:] == [0.0, 0.0]  # L0H1 writes nothing
        assert all(comp[kind][i][j] is None for i in range(4) for j in range(4) if j // 2 <= i // 2)


def test_the_baseline_is_that_of_random_heads():
    first, again, other = baseline(16, 8, seed=0), baseline(16, 8, seed=0), baseline(16, 8, seed=1)
    assert first == again and first != other and 0.05 < first < 0.5
    assert baseline(64, 16, seed=0) < first  # wider random matrices are closer to orthogonal
    assert composition_scores(gpt())["baseline"] == baseline(16, 8, seed=0)


# ------------------------------------------------------------------------------------------------------------
# Neurons


def test_neurons_examples_are_the_largest_activations_and_a_hand_set_neuron_pushes_its_character():
    model = gpt(seed=7)
    ids = text_ids(30, seed=7)  # longer than block_size: read in windows
    found = neuron_examples(model, TOKENIZER, ids, k=3, context=4)
    acts = []
    for start in range(0, 30, 12):
        _, cache = model.run_with_cache(torch.tensor(ids[start:start + 12])[None])
        acts.append(cache["blocks.1.mlp.hook_post"][0])
    acts = torch.cat(acts)  # (30, 64)
    neuron = found["layers"][1]["neurons"][5]
    assert neuron["neuron"] == 5 and len(neuron["examples"]) == 3
    assert [e["activation"] for e in neuron["examples"]] == pytest.approx(acts[:, 5].topk(3).values.tolist())
    for e in neuron["examples"]:
        assert e["char"] == LETTERS[ids[e["position"]]] and e["context"].endswith(e["char"])
        assert e["context"] == "".join(LETTERS[i] for i in ids[max(0, e["position"] - 4): e["position"] + 1])
    assert len(found["layers"]) == 2 and len(found["layers"][0]["neurons"]) == 64

    hand = one_hot_model()  # W_U = one-hot rows; neuron 0 writes e_3: it pushes "d" most
    with torch.no_grad():
        hand.blocks[0].ffwd.proj.weight.zero_()
        hand.blocks[0].ffwd.proj.weight[3, 0] = 1.0
    pushes = neuron_examples(hand, TOKENIZER, [0, 1, 2], k=2)["layers"][0]["neurons"][0]["pushes"]
    assert pushes[0]["char"] == "d" and pushes[0]["logit"] > pushes[1]["logit"]


def test_the_strongest_positions_are_kept_across_windows_as_over_the_whole_text():
    model = gpt(seed=3)
    ids = text_ids(50, seed=3)  # 5 windows of 12; k larger than a window
    found = neuron_examples(model, TOKENIZER, ids, k=20)
    for layer, acts in enumerate(activations(model, ids)):  # (50, 64): every position at once
        values, where = acts.topk(20, dim=0)
        for n in (0, 17, 63):
            examples = found["layers"][layer]["neurons"][n]["examples"]
            assert [e["activation"] for e in examples] == pytest.approx(values[:, n].tolist())
            assert [acts[e["position"], n].item() for e in examples] == pytest.approx(values[:, n].tolist())


# ------------------------------------------------------------------------------------------------------------
# The Python API


def test_the_lm_methods_return_what_the_functions_do():
    model = gpt(seed=8)
    lm = LM.from_model(model, TOKENIZER)
    assert lm.dla("abcdabcd", against="a") == direct_logit_attribution(model, [0, 1, 2, 3] * 2, TOKENIZER, "a")
    assert lm.circuits() == head_circuits(model, TOKENIZER)
    assert lm.composition(seed=2) == composition_scores(model, seed=2)
    expected = neuron_examples(model, TOKENIZER, [0, 1, 2] * 2, k=2)
    assert lm.neurons("abcabc", k=2) == {**expected, "source": "text", "length": 6}
    with pytest.raises(TinyLMError, match="pass text="):
        lm.neurons()
