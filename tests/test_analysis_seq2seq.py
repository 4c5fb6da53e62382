"""analyze.py and tinylm.analysis on an encoder-decoder: cross-attention heads scored and switched off
on the loss and on exact match, the logit lens on the decoder."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import compose_config, entry_point, train_in_process

from tinylm.analysis.lens import lens_logits
from tinylm.analysis.translation import cross_head_table, first_pair_probe
from tinylm.cli import quote_values
from tinylm.errors import TinyLMError
from tinylm.models.seq2seq import Seq2Seq, Seq2SeqConfig

analyze = entry_point("analyze.py")
PAIRS = [([3, 4, 5], [6, 7]), ([5, 3], [7, 6, 8]), ([4, 4, 4, 3], [8])]


def random_seq2seq() -> Seq2Seq:
    torch.manual_seed(0)
    model = Seq2Seq(Seq2SeqConfig(vocab_size=10, block_size=8, n_embd=16, num_heads=2, encoder_layers=1,
                                  decoder_layers=2))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model.eval()


def test_cross_heads_whose_projection_is_zero_change_neither_loss_nor_exact_match():
    model = random_seq2seq()
    attention = model.decoder[1].cross_attn
    with torch.no_grad():
        attention.proj.weight[:, : attention.head_size] = 0  # head 0 of layer 1 writes nothing
    rows = cross_head_table(model, PAIRS)
    assert [(r["layer"], r["head"], r["attention"]) for r in rows] == [(0, 0, "cross"), (0, 1, "cross"),
                                                                       (1, 0, "cross"), (1, 1, "cross")]
    assert rows[2]["ablation_loss_delta"] == 0.0 and rows[2]["ablation_exact_match_delta"] == 0.0
    assert rows[0]["ablation_loss_delta"] != 0.0
    assert all(r["previous_token"] is None and r["induction"] is None and r["entropy"] > 0 for r in rows)


def test_the_lens_reads_the_decoder_and_its_last_layer_is_the_logits():
    model = random_seq2seq()
    probe = first_pair_probe(model, PAIRS)
    layers = lens_logits(probe)
    assert len(layers) == 2 and torch.equal(layers[-1], probe.logits())


@pytest.fixture(scope="module")
def numbers_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("numbers") / "run"
    train_in_process(run, "experiment=numbers_zh", "data.demo_pairs=300", "model.n_embd=16", "model.num_heads=2",
                     "model.encoder_layers=1", "model.decoder_layers=2", "trainer.max_steps=10",
                     "trainer.val_check_interval=10", "callbacks=minimal", "logger=none",
                     "trainer.enable_progress_bar=false", "threads=1")
    return run


def run_analyze(*overrides: str) -> dict:
    quoted = quote_values(quote_values(list(overrides), analyze.TEXT_KEYS, literal=True), analyze.PATH_KEYS)
    return analyze.run(compose_config("analyze", *quoted))


def test_analyze_scores_an_encoder_decoders_cross_heads(numbers_run, tmp_path, capsys):
    run_analyze(f"run_dir={numbers_run}", "text=三千零五\\n十二", f"out_dir={tmp_path}")
    heads = json.loads((tmp_path / "heads.json").read_text(encoding="utf-8"))
    assert len(heads) == 4 and all(h["attention"] == "cross" for h in heads)
    assert {"ablation_loss_delta", "ablation_exact_match_delta", "entropy"} <= set(heads[0])
    lens = json.loads((tmp_path / "logit_lens.json").read_text(encoding="utf-8"))
    assert lens["tokens"][0] == "\x02" and [layer["layer"] for layer in lens["layers"]] == [0, 1]  # BEGIN first
    assert {p.stem for p in tmp_path.glob("*.png")} == {"logit_lens", "entropy", "ablation_loss_delta",
                                                         "ablation_exact_match_delta", "dla_position", "dla_summed",
                                                         "circuits_copying", "circuits_positional", "circuits_ov"}
    assert "ablation_exact_match_delta" in capsys.readouterr().out


@pytest.mark.parametrize(("overrides", "message"), [
    (["text=三千零五", "corrupt_text=三千零六"], "activation patching runs on decoders"),
    (["text=三千零五\\n十二", "target=3005"], "target has 1 line(s) for 2 source line(s)"),
])
def test_what_does_not_apply_to_an_encoder_decoder_is_one_error(numbers_run, tmp_path, overrides, message):
    with pytest.raises(TinyLMError) as e:
        run_analyze(f"run_dir={numbers_run}", f"out_dir={tmp_path}", *overrides)
    assert message in str(e.value)
