"""The encoder-decoder (model=seq2seq): padding, causality, the cache, overfitting, pairs data, the commands."""

from __future__ import annotations

import json
import logging
import math
import re
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, compose, compose_config, entry_point, run_train, train_in_process
from test_compare import fake_run

from tinylm import compare
from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.models import build_model
from tinylm.models.seq2seq import BEGIN_ID, END_ID, PAD_ID, Seq2Seq, Seq2SeqConfig
from tinylm.onnx.export import check_exportable
from tinylm.plots import figures as plotting
from tinylm.tasks import is_encoder_decoder
from tinylm.tasks.translation.batches import collate, collate_decoder_only
from tinylm.tasks.translation.data import PairDataModule
from tinylm.tasks.translation.decoding import (
    IGNORE,
    beam_search,
    edit_distance,
    translate,
    translate_lines,
    translation_scores,
)
from tinylm.tasks.translation.numbers_zh import chinese_numeral, numbers_zh_pairs
from tinylm.training.config_checks import config_problems

generate_cli = entry_point("generate.py")
V = 13
DEMO_EXACT_MATCH = 0.9967  # experiment=numbers_zh at its 1,500 steps: 598 of 600 held-out numbers (docs/translation.md)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tiny_model(pos_encoding: str = "learned", dropout: float = 0.0, seed: int = 0) -> Seq2Seq:
    torch.manual_seed(seed)
    return Seq2Seq(Seq2SeqConfig(vocab_size=V, block_size=8, n_embd=16, num_heads=2, encoder_layers=2,
                                 decoder_layers=2, dropout=dropout, pos_encoding=pos_encoding))


def example(src: list[int], tgt: list[int]):
    return collate([(src, tgt)])  # source (1, S), target_in (1, T), target_out (1, T)


@pytest.mark.parametrize("pos_encoding", ["learned", "sinusoidal", "rope"])
def test_padding_changes_nothing(pos_encoding):
    model = tiny_model(pos_encoding).eval()
    short, long = ([3, 4, 5], [6, 7]), ([8, 9, 10, 11, 12, 3], [4, 5, 6, 7, 8])
    src, tgt_in, tgt_out = collate([short, long])  # short is padded on both sides
    assert src[0, 3:].eq(PAD_ID).all() and tgt_in[0, 3:].eq(PAD_ID).all()
    with torch.no_grad():
        batched, _ = model(src, tgt_in, tgt_out)
        for row, pair in enumerate((short, long)):
            alone, _ = model(*example(*pair)[:2])
            assert torch.allclose(batched[row, : alone.size(1)], alone[0], atol=1e-5)


def test_future_target_tokens_never_change_earlier_outputs():
    model = tiny_model("rope").eval()
    src, tgt, _ = example([3, 4, 5, 6], [7, 8, 9, 10, 11])
    changed = tgt.clone()
    changed[0, 3:] = torch.tensor([12, 3, 4])
    with torch.no_grad():
        before, after = model(src, tgt)[0], model(src, changed)[0]
    assert torch.equal(before[:, :3], after[:, :3]) and not torch.allclose(before[:, 3:], after[:, 3:])


def test_cache_equals_no_cache():
    model = tiny_model("rope").eval()
    src = collate([([3, 4, 5], [6]), ([7, 8, 9, 10, 11], [6])])[0]  # (2, 5), the first row padded
    tgt = torch.tensor([[BEGIN_ID, 6, 7, 8, 9], [BEGIN_ID, 10, 11, 12, 3]])
    with torch.no_grad():
        memory = model.encode(src)
        full = model.decode(tgt, memory)  # (2, 5, V)
        cache = model.new_cache(2)
        steps = [model.decode(tgt[:, t : t + 1], memory, cache) for t in range(tgt.size(1))]
    assert cache.length == 5
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    assert translate(model, src) == translate(model, src, use_cache=False)
    generator = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    assert (translate(model, src, temperature=1.0, generator=generator())
            == translate(model, src, temperature=1.0, generator=generator(), use_cache=False))
    one = src[1:]
    assert beam_search(model, one, 3) == beam_search(model, one, 3, use_cache=False)
    assert beam_search(model, one, 1) == translate(model, one)[0]  # a beam of one is greedy


def test_beam_search_finds_a_translation_at_least_as_likely_as_greedy():
    model = tiny_model(seed=5).eval()
    src = torch.tensor([[3, 4, 5, 6]])

    def log_prob(ids):
        tgt_in, tgt_out = collate([([3], ids)])[1:]
        with torch.no_grad():
            logits = model(src, tgt_in)[0]
        return torch.log_softmax(logits, -1)[0].gather(1, tgt_out[0, :, None]).sum().item()

    greedy, beam = translate(model, src)[0], beam_search(model, src, 5)
    if len(greedy) < model.config.block_size and len(beam) < model.config.block_size:  # both ended
        assert log_prob(beam) >= log_prob(greedy) - 1e-5


def test_a_few_pairs_are_overfitted_to_exact_match():
    pairs = [("三千零五", "3005"), ("十二", "12"), ("一百一十", "110"), ("九万", "90000")]
    chars = sorted(set("".join(s + t for s, t in pairs)))
    stoi = {c: i + 3 for i, c in enumerate(chars)}
    examples = [([stoi[c] for c in s], [stoi[c] for c in t]) for s, t in pairs]
    torch.manual_seed(0)
    model = Seq2Seq(Seq2SeqConfig(vocab_size=len(chars) + 3, block_size=8, n_embd=32, num_heads=2,
                                  encoder_layers=1, decoder_layers=1, dropout=0.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = collate(examples)
    for _ in range(150):
        loss = model.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.01
    assert translate(model, batch[0]) == [t for _, t in examples]


def test_parameter_table_and_export_refusal():
    model = tiny_model()
    rows = dict(model.parameter_table())
    assert list(rows)[:3] == ["token_embedding", "position_embedding", "encoder.0"]
    assert {"ln_memory", "decoder.1", "lm_head"} <= set(rows) and sum(rows.values()) == model.num_params()
    assert rows["position_embedding"] == 8 * 16 and tiny_model("rope").parameter_table()[1] == ("position_embedding", 0)
    with pytest.raises(TinyLMError, match="model.arch=seq2seq model cannot be exported to ONNX"):
        check_exportable(model)


def test_chinese_numerals():
    cases = {1: "一", 10: "十", 12: "十二", 20: "二十", 110: "一百一十", 3005: "三千零五", 3050: "三千零五十",
             3500: "三千五百", 1010: "一千零一十", 10200: "一万零二百", 10010: "一万零一十", 23000: "二万三千",
             99999: "九万九千九百九十九"}
    assert {n: chinese_numeral(n) for n in cases} == cases
    pairs = numbers_zh_pairs(500, 9999, seed=1)
    assert len({t for _, t in pairs}) == 500 and pairs == numbers_zh_pairs(500, 9999, seed=1)
    assert edit_distance(list("3005"), list("305")) == 1 and edit_distance([], [1, 2]) == 2


def test_cross_attention_figure_has_target_rows_and_source_columns():
    weights = torch.softmax(torch.randn(2, 5, 4), dim=-1)  # (h, T, S): 5 target rows, 4 source columns
    fig = plotting.attention_figure(weights, list("三千零五"), 1, row_labels=[*"3005", "end"], kind="cross")
    texts = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]
    assert "4 end" in texts and "千\n1" in texts and "source character (attended to)" in texts
    assert any(t.startswith("Decoder layer 1 cross-attention:") for t in texts)
    image = fig.axes[0].images[0]
    assert image.get_array().shape == (5, 4) and not image.get_array().mask.any()  # nothing hidden
    assert plotting.render_rgb(fig).shape[2] == 3
    with pytest.raises(ValueError, match="3 row labels for 5 positions"):
        plotting.attention_figure(weights, list("三千零五"), 0, row_labels=list("300"), kind="cross")


def test_the_comparison_is_decided_by_exact_match(tmp_path):
    for name, exact, params in (("seq2seq", 0.95, 234_000), ("gpt", 0.60, 250_000)):
        fake_run(tmp_path / "seq2seq" / name, [f"model={name}"], {"val_loss": 0.1, "val_exact_match": exact,
                                                                  "val_cer": round(1 - exact, 2) / 10,
                                                                  "num_params": params},
                 {"loss/val_exact_match": [0.1, exact]})
    text = compare.write_report(tmp_path, compare.comparisons(20, 512)).read_text(encoding="utf-8")
    assert "## Translation: encoder-decoder vs decoder-only (`seq2seq`)" in text
    assert "Highest val_exact_match: **seq2seq** (0.9500)." in text
    assert re.search(r"\| seq2seq +\| 95\.0% +\| 0\.005 +\|", text) and re.search(r"\| gpt +\| 60\.0% ", text)
    assert (tmp_path / "seq2seq" / "curves.png").is_file()


# --------------------------------------------------------------------------------------------
# Pairs data and its bad inputs


def write(tmp_path, text: str):
    path = tmp_path / "pairs.tsv"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("text", "message"), [
    ("一\t1\n二 2\n", "line 2 has no tab: write each pair as source<TAB>target"),
    ("一\t1\n\t2\n", "line 2 has an empty source"),
    ("一\t1\n\n三\t\n", "line 3 has an empty target"),
    ("一\t1\n二\t\x03\n", "line 2 has a NUL, STX or ETX character"),
])
def test_bad_lines_are_one_error_naming_the_line(tmp_path, text, message):
    with pytest.raises(TinyLMError, match=message):
        PairDataModule(str(write(tmp_path, text))).prepare()


def test_no_usable_pair_and_long_pairs(tmp_path, caplog):
    with pytest.raises(TinyLMError, match="has 0 usable pair"):
        PairDataModule(str(write(tmp_path, "\n\n"))).prepare()
    with pytest.raises(TinyLMError, match="has 1 usable pair"):
        PairDataModule(str(write(tmp_path, "一二三四五\t1\n一\t1\n")), block_size=4).prepare()
    with pytest.raises(TinyLMError, match="data file not found"):
        PairDataModule(str(tmp_path / "missing.tsv")).prepare()
    lines = "".join(f"{s}\t{t}\n" for s, t in numbers_zh_pairs(40, 99, seed=0)) + "一二三四五\t1\n一\t1234\n"
    data = PairDataModule(str(write(tmp_path, lines)), block_size=4, batch_size=4, val_fraction=0.25)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        data.prepare()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "dropped 2 of 42 pairs longer than model.block_size=4" in warnings[0]
    assert (len(data.train_examples), len(data.val_examples)) == (30, 10)
    assert data.tokenizer.itos[:3] == ["\x00", "\x02", "\x03"]


def test_batches_are_padded_seeded_and_validation_is_held_out():
    data = PairDataModule(demo_pairs=300, block_size=8, batch_size=16, val_batches=2, seed=7)
    data.prepare()
    src, tgt_in, tgt_out = next(iter(data.train_dataloader()))
    assert src.shape[0] == 16 and tgt_in.shape == tgt_out.shape
    assert tgt_in[:, 0].eq(BEGIN_ID).all() and tgt_out.eq(END_ID).sum() == 16
    written = tgt_in[:, 1:] != PAD_ID  # the target, one step later in target_out
    assert torch.equal(tgt_in[:, 1:][written], tgt_out[:, :-1][written])
    again = PairDataModule(demo_pairs=300, block_size=8, batch_size=16, val_batches=2, seed=7)
    again.prepare()
    assert all(torch.equal(a, b) for a, b in zip(next(iter(again.train_dataloader())), (src, tgt_in, tgt_out),
                                                  strict=True))
    val = data.val_batches_list()
    assert [b[0].size(0) for b in val] == [16, 14]  # 30 held-out pairs, val_batches=2
    decode = data.tokenizer.decode
    train_sources = {decode(s) for s, _ in data.train_examples}
    assert not train_sources & {decode(s) for s, _ in data.val_examples}  # numbers never seen in training


def test_config_errors_name_the_key(tmp_path):
    cfg = compose("model=seq2seq", "data=pairs", "model.encoder_layers=0", "model.num_heads=3",
                  "data.demo=words", "data.demo_max=100000", output_dir=tmp_path)
    problems = config_problems(cfg)
    assert "model.encoder_layers=0 must be a positive integer" in problems
    assert any(p.startswith("model.n_embd=64 is not divisible by model.num_heads=3") for p in problems)
    assert "data.demo='words' must be one of numbers_zh" in problems
    assert "data.demo_max=100000 must be an integer in [2, 99999]" in problems
    assert config_problems(compose("experiment=numbers_zh", output_dir=tmp_path)) == []
    with pytest.raises(ValueError, match="decoder_layers"):
        build_model({"arch": "seq2seq", "vocab_size": 5, "decoder_layers": -1})


def test_decoder_only_batches_score_the_target_alone():
    idx, targets = collate_decoder_only([([3, 4, 5], [6, 7]), ([8], [9])])
    assert idx.tolist() == [[3, 4, 5, BEGIN_ID, 6, 7], [8, BEGIN_ID, 9, PAD_ID, PAD_ID, PAD_ID]]
    assert targets.tolist() == [[IGNORE, IGNORE, IGNORE, 6, 7, END_ID], [IGNORE, 9, END_ID, IGNORE, IGNORE, IGNORE]]
    torch.manual_seed(0)
    gpt = build_model({"arch": "gpt", "vocab_size": V, "block_size": 8, "n_embd": 16, "num_heads": 2,
                       "num_layers": 1, "dropout": 0.0})
    exact, examples, edits, chars = translation_scores(gpt, (idx, targets))
    assert examples == 2 and chars == 3 and 0 <= exact <= 2 and edits >= 0
    assert math.isfinite(gpt.loss((idx, targets)).item())


def test_a_model_and_its_data_must_fit(tmp_path):
    assert config_problems(compose("model=seq2seq", output_dir=tmp_path)) == [
        "model.arch=seq2seq translates source<TAB>target pairs: add data=pairs (data.path=FILE, or none for the "
        "generated demo), or use experiment=numbers_zh"]
    assert config_problems(compose("model=gpt", "data=pairs", output_dir=tmp_path)) == []  # decoder-only: its kind
    assert config_problems(compose("model=lstm", "data=pairs", output_dir=tmp_path)) == []


# --------------------------------------------------------------------------------------------
# The commands: train.py, generate.py, visualize.py


@pytest.mark.slow  # a whole process (or several) from start to end
def test_train_generate_and_visualize(tmp_path, capsys):
    run_dir = tmp_path / "run"
    train_in_process(run_dir, "experiment=numbers_zh", "data.demo_pairs=300", "model.n_embd=16", "model.num_heads=2",
                     "model.encoder_layers=1", "model.decoder_layers=1", "trainer.max_steps=20",
                     "trainer.val_check_interval=20", "callbacks.translation_samples.every_n_steps=10",
                     "callbacks.translation_maps.every_n_steps=10", "trainer.enable_progress_bar=false", "threads=1")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert 0 <= metrics["val_exact_match"] <= 1 and math.isfinite(metrics["val_cer"])
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    assert torch.load(ckpt, weights_only=True)["model_config"]["arch"] == "seq2seq"
    loaded = load_model(ckpt)
    assert is_encoder_decoder(loaded.model) and loaded.tokenizer.itos[:3] == ["\x00", "\x02", "\x03"]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0, "tensors": 0})
    events.Reload()
    assert {"loss/val_exact_match", "loss/val_cer", "loss/val"} <= set(events.Tags()["scalars"])
    assert {"maps/cross_attention_layer0", "maps/encoder_layer0"} <= set(events.Tags()["images"])
    assert any("translations" in tag for tag in events.Tags()["tensors"])

    sources = tmp_path / "sources.txt"
    sources.write_text("三千零五\n十二\n九百\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, str(ROOT / "generate.py"), f"ckpt_path={ckpt}",
                           f"prompt_file={sources}", "temperature=0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    capsys.readouterr()
    generate_cli.run(compose_config("generate", f"ckpt_path={ckpt}", f"prompt_file={sources}", "beam_size=3",
                                    "use_cache=false"))  # beam search, in-process
    outputs = [proc.stdout, capsys.readouterr().out]
    for out in outputs:
        assert len(out.split("\n")) == 4 and out.endswith("\n")  # one line per source
    lines = list(translate_lines(loaded.model, loaded.tokenizer, ["三千零五", "十二", "九百"], temperature=0))
    assert outputs[0] == "".join(f"{line}\n" for line in lines)
    with pytest.raises(TinyLMError, match="source line 2 has 1 character.s. outside the checkpoint's vocabulary: 'X'"):
        list(translate_lines(loaded.model, loaded.tokenizer, ["十二", "三千零X"]))
    assert list(translate_lines(loaded.model, loaded.tokenizer, ["", "十二"], temperature=0)) == ["", lines[1]]
    entry_point("visualize.py").run(compose_config("visualize", f"ckpt_path={ckpt}", "text='三千零五'",
                                                   f"out_dir={tmp_path / 'maps'}"))
    assert sorted(p.name for p in (tmp_path / "maps").iterdir()) == ["cross_attention_layer0.png",
                                                                    "encoder_layer0.png"]


@pytest.mark.slow
def test_the_numbers_demo_reaches_the_reported_accuracy(tmp_path):
    """experiment=numbers_zh as docs/translation.md reports it: held-out exact match at the default 1,500 steps."""
    run_dir = tmp_path / "run"
    run_train(run_dir, "experiment=numbers_zh", "callbacks=minimal", "logger=none", "threads=1",
              "trainer.enable_progress_bar=false", in_process=True)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 1500 and metrics["val_exact_match"] >= DEMO_EXACT_MATCH - 0.01
