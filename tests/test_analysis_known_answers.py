"""tinylm.analysis against answers known in advance: hand-set weights, a zeroed projection, patching
everything, and the logit lens's last layer (in-process, untrained models)."""

from __future__ import annotations

import math

import pytest
import torch

from tinylm.analysis.heads import ablation_losses, all_heads, attention_scores, head_table
from tinylm.analysis.hooks import residuals
from tinylm.analysis.lens import lens_logits, logit_lens
from tinylm.analysis.patching import patched_residual_logits, patching
from tinylm.analysis.probe import Probe
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.tokenizer import CharTokenizer

KINDS = [(pos, impl) for pos in ("learned", "sinusoidal", "rope") for impl in ("sdpa", "explicit")]


def random_gpt(pos_encoding: str = "learned", attn_impl: str = "sdpa", seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=12, block_size=16, n_embd=16, num_heads=2, num_layers=2,
                          pos_encoding=pos_encoding, attn_impl=attn_impl))
    with torch.no_grad():  # larger weights than the initial ones, so that every part matters
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model.eval()


def previous_token_gpt(T: int = 8) -> GPT:
    """One layer, two heads of size 8. Position t's embedding is e_t; head 0's query for t is
    100 e_(t-1) and its key for s is e_s (up to the LayerNorm's shift), so it attends to t - 1 only.
    Head 1's weights are zero: it attends uniformly."""
    C = 16
    model = GPT(GPTConfig(vocab_size=5, block_size=T, n_embd=C, num_heads=2, num_layers=1, dropout=0.0))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        block = model.blocks[0]
        for norm in (block.ln1, block.ln2, model.ln_f):
            norm.weight.fill_(1.0)
        model.position_embedding.weight.copy_(torch.eye(T, C))  # (T, C): position t -> e_t
        qkv = block.attn.qkv.weight  # (3C, C): queries, keys, values; head 0 in the first 8 rows of each
        for t in range(1, T):
            qkv[t - 1, t] = 100.0
        for s in range(T):
            qkv[C + s, s] = 1.0
    return model.eval()


def test_a_head_set_to_attend_to_the_previous_token_scores_one():
    T = 8
    model = previous_token_gpt(T)
    rows = attention_scores(model, torch.tensor([1, 2, 3, 4, 1, 2, 3, 4]), n=4)
    head0, head1 = rows
    assert (head0["layer"], head0["head"], head1["head"]) == (0, 0, 1)
    assert head0["previous_token"] == pytest.approx(1.0, abs=1e-6)
    assert head0["entropy"] == pytest.approx(0.0, abs=1e-4)  # row 0 sees itself, every other row i - 1 only
    # the uniform head: row i gives 1 / (i + 1) to every key, its entropy is ln(i + 1)
    assert head1["previous_token"] == pytest.approx(sum(1 / (i + 1) for i in range(1, T)) / (T - 1), rel=1e-5)
    assert head1["entropy"] == pytest.approx(sum(math.log(i + 1) for i in range(T)) / T, rel=1e-5)
    assert head1["induction"] == pytest.approx(sum(1 / (i + 1) for i in range(4, 8)) / 4, rel=1e-5)


@pytest.mark.parametrize("mode", ["zero", "mean"])
@pytest.mark.parametrize(("pos_encoding", "attn_impl"), KINDS)
def test_a_head_whose_output_projection_is_zero_has_no_ablation_delta(mode, pos_encoding, attn_impl):
    model = random_gpt(pos_encoding, attn_impl)
    attention = model.blocks[1].attn
    with torch.no_grad():
        attention.proj.weight[:, attention.head_size:] = 0  # head 1's columns
    probe = Probe.of_text(model, torch.randint(12, (2, 16), generator=torch.Generator().manual_seed(1)))
    attentions = model.attention_layers()["self"]
    deltas = ablation_losses(probe, attentions, all_heads(attentions), mode)
    assert deltas[1, 1] == 0.0
    assert deltas[0, 0] != 0.0 and deltas[1, 0] != 0.0  # the other heads do matter


@pytest.mark.parametrize(("pos_encoding", "attn_impl"), KINDS)
def test_the_lens_last_layer_is_the_models_logits(pos_encoding, attn_impl):
    model = random_gpt(pos_encoding, attn_impl)
    probe = Probe.of_text(model, torch.randint(12, (1, 10), generator=torch.Generator().manual_seed(2)))
    layers = lens_logits(probe)
    assert len(layers) == 2
    assert torch.equal(layers[-1], probe.logits())
    assert not torch.equal(layers[0], probe.logits())


def test_logit_lens_json_names_tokens_and_top1_characters():
    model = random_gpt()
    tokenizer = CharTokenizer.from_text("abcdefghijk\n")
    ids = torch.tensor([tokenizer.encode("abcabca")])
    lens = logit_lens(Probe.of_text(model, ids), tokenizer)
    assert lens["tokens"] == list("abcabca")
    assert [layer["layer"] for layer in lens["layers"]] == [0, 1]
    last = lens["layers"][-1]
    logits = model(ids)[0][0]
    assert last["top1"] == [tokenizer.decode([i]) for i in logits.argmax(-1).tolist()]
    assert last["prob"] == pytest.approx(torch.softmax(logits, -1).max(-1).values.tolist(), abs=1e-6)
    assert last["loss"] == pytest.approx(torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:]).item(), rel=1e-5)


@pytest.mark.parametrize(("pos_encoding", "attn_impl"), KINDS)
def test_patching_the_whole_last_residual_restores_the_clean_logits_exactly(pos_encoding, attn_impl):
    model = random_gpt(pos_encoding, attn_impl)
    generator = torch.Generator().manual_seed(3)
    clean = Probe.of_text(model, torch.randint(12, (1, 9), generator=generator))
    corrupt = Probe.of_text(model, torch.randint(12, (1, 9), generator=generator))
    streams = residuals(model.residual_layers(), clean.logits)
    assert torch.equal(patched_residual_logits(corrupt, streams, 1, slice(None)), clean.logits())
    result = patching(clean, corrupt)
    assert result["residual"][-1][-1] == 1.0  # the last block at the last position: all of it
    assert result["residual"][-1][0] == 0.0  # the last block at another position: none (no block follows)
    assert [(h["layer"], h["head"]) for h in result["heads"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_head_table_rows_have_the_documented_keys():
    rows = head_table(random_gpt(), torch.arange(12), n=4, draws=2)
    assert [(r["layer"], r["head"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(list(r) == ["layer", "head", "previous_token", "induction", "entropy", "ablation_loss_delta"]
               for r in rows)
    assert all(0 <= r["previous_token"] <= 1 and 0 <= r["induction"] <= 1 and r["entropy"] >= 0 for r in rows)


def test_scoring_draws_nothing_from_the_global_random_stream():
    model = random_gpt()
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    head_table(model, torch.arange(12), n=4, draws=3)
    assert torch.equal(torch.rand(3), expected)
