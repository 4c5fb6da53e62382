"""The LSTM/GRU baseline (model=lstm): parameter budget, the shared sampling loop, train.py and generate.py."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import TINY_TEXT, compose, compose_config, entry_point
from omegaconf import OmegaConf

from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.generation.sampling import generate
from tinylm.models import build_model, model_config_problems
from tinylm.models.gpt import GPT
from tinylm.models.rnn import RNNConfig, RNNLanguageModel, RNNState
from tinylm.runs.resume import check_resume
from tinylm.training.config_checks import config_problems

generate_cli, visualize_cli = entry_point("generate.py"), entry_point("visualize.py")


def lstm_config(tmp_path, *overrides):
    cfg = compose("model=lstm", *overrides, output_dir=tmp_path)
    model = OmegaConf.to_container(cfg.model, resolve=True)
    return {**model, "vocab_size": 73}


def test_default_lstm_has_the_reference_budget(tmp_path):
    lstm = build_model(lstm_config(tmp_path))
    gru = build_model(lstm_config(tmp_path, "model.arch=gru"))
    assert isinstance(lstm, RNNLanguageModel) and lstm.config.arch == "lstm"
    # embedding 73x64; LSTM layers 4x(128x(64+128) + 2x128) and 4x(128x(128+128) + 2x128); head 128x73+73
    assert dict(lstm.parameter_table()) == {"token_embedding": 4_672, "lstm.0": 99_328, "lstm.1": 132_096,
                                            "lm_head": 9_417}
    assert lstm.num_params() == 245_513 and "245,513" in lstm.format_parameter_table()
    assert gru.num_params() == 187_657  # 3 gates instead of 4
    assert 180_000 < gru.num_params() < lstm.num_params() <= 250_000  # the GPT reference: 210,761


def test_forward_shapes_initial_loss_and_causality():
    torch.manual_seed(0)
    model = RNNLanguageModel(RNNConfig(vocab_size=73)).eval()
    idx = torch.randint(73, (3, 32))
    logits, loss = model(idx, idx)
    assert logits.shape == (3, 32, 73)
    assert loss.item() == pytest.approx(math.log(73), abs=0.05)  # small output init: uniform predictions
    changed = idx.clone()
    changed[:, 20:] = (changed[:, 20:] + 1) % 73
    with torch.no_grad():
        assert torch.equal(model(idx)[0][:, :20], model(changed)[0][:, :20])
    last, none = model(idx, idx, last_only=True)
    assert last.shape == (3, 1, 73) and none is None


def tiny_rnn(arch: str) -> RNNLanguageModel:
    torch.manual_seed(1)
    model = RNNLanguageModel(RNNConfig(vocab_size=11, arch=arch, block_size=8, n_embd=8, hidden_size=16,
                                       num_layers=2)).eval()
    with torch.no_grad():  # larger weights than the init, so greedy text varies
        for p in model.parameters():
            p.normal_(0.0, 0.8)
    return model


@pytest.mark.parametrize("arch", ["lstm", "gru"])
def test_hidden_state_cache_matches_rereading_the_whole_text(arch):
    model = tiny_rnn(arch)
    prompt = torch.randint(11, (3, 5), generator=torch.Generator().manual_seed(2))
    read = []  # (B, T) of the ids each forward pass embeds, read at hook_embed (B, T, E)
    with model.hooks([("hook_embed", lambda x, hook: read.append(tuple(x.shape[:2])))]):
        cached = generate(model, prompt, 30, temperature=0, use_cache=True)
        assert read == [(3, 5)] + [(3, 1)] * 29  # one new token per step, long past block_size 8
        read.clear()
        reference = generate(model, prompt, 30, temperature=0, use_cache=False)
    assert read == [(3, n) for n in range(5, 35)]  # no window: the reference reads every token
    assert torch.equal(cached, reference)
    assert len(cached[:, 5:].unique()) >= 4
    sampled = [generate(model, prompt, 20, generator=torch.Generator().manual_seed(5), use_cache=c)
               for c in (True, False)]
    assert torch.equal(*sampled)


def test_rnn_state_counts_positions():
    model = tiny_rnn("lstm")
    state = RNNState()
    with torch.no_grad():
        model(torch.zeros(2, 4, dtype=torch.long), cache=state)
        model(torch.zeros(2, 1, dtype=torch.long), cache=state)
    assert state.length == 5 and len(state.hidden) == 2  # LSTM: (h, c)
    assert state.hidden[0].shape == (2, 2, 16)  # (layers, B, H)
    state.reset()
    assert state.length == 0 and state.hidden is None


def test_architecture_choice_and_config_errors(tmp_path):
    assert isinstance(build_model({"vocab_size": 5, "n_embd": 8, "num_heads": 2}), GPT)  # no arch: GPT
    assert isinstance(build_model({"arch": "gpt", "vocab_size": 5, "n_embd": 8, "num_heads": 2}), GPT)
    assert model_config_problems({"arch": "rnn"}) == [
        "model.arch='rnn': choose one of gpt, lstm, gru, seq2seq (model=gpt, model=lstm or model=seq2seq)"]
    with pytest.raises(ValueError, match="model.arch='transformer'"):
        build_model({"arch": "transformer", "vocab_size": 5})
    cfg = compose("model=lstm", "model.hidden_size=0", "model.dropout=1.5", output_dir=tmp_path)
    assert config_problems(cfg) == ["model.hidden_size=0 must be a positive integer",
                                  "model.dropout=1.5 must be in [0, 1)"]


# --------------------------------------------------------------------------------------------
# train.py and generate.py


def test_lstm_trains_with_the_same_module_and_callbacks(lstm_run):
    """model=lstm trained 30 steps with the default callbacks (tests/conftest.py's LSTM_RUN)."""
    run, log = lstm_run.path, lstm_run.output
    metrics = json.loads((run / "metrics.json").read_text())
    vocab = len(set(TINY_TEXT))
    # embedding 37x16, one LSTM layer 4x(32x(16+32) + 2x32), head 32x37+37
    assert metrics["steps"] == 30 and metrics["num_params"] == 37 * 16 + 6_400 + 37 * 33 == 8_213
    assert metrics["val_loss"] < math.log(vocab) - 1.0  # learned, from ln V = 3.83 at the start
    assert metrics["val_bpc"] == pytest.approx(metrics["val_loss"] / math.log(2))  # char tokenizer
    assert "lstm.0" in log and "8,213" in log  # the parameter table
    assert log.count("AttentionMaps: the lstm model has no attention to draw") == 1
    assert "failed" not in log  # every other callback ran (samples, probes, projector)
    assert list(run.glob("events.out.tfevents.*"))


def test_generate_samples_from_an_lstm_checkpoint(lstm_run, capsys):
    run = lstm_run.path
    loaded = load_model(run / "checkpoints" / "last.ckpt")  # torch.load(weights_only=True) inside
    assert isinstance(loaded.model, RNNLanguageModel) and loaded.model.config.arch == "lstm"
    generate_cli.run(compose_config("generate", f"run_dir={run}", "prompt='自注意力'", "max_new_tokens=60",
                                    "temperature=0"))
    out, err = capsys.readouterr()
    sample = out.rstrip("\n")
    assert sample.startswith("自注意力") and len(sample) == 4 + 60  # 60 > block_size 16: no window limit
    assert set(sample) <= set(TINY_TEXT) and "8,213 parameters" in err


def test_resume_refuses_a_different_architecture(lstm_run):
    ckpt = lstm_run.path / "checkpoints" / "last.ckpt"
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)
    check_resume(ckpt, saved["model_config"], saved["tokenizer"])  # same model: fine
    gpt = {"vocab_size": saved["model_config"]["vocab_size"], "block_size": 16, "n_embd": 16, "num_heads": 2,
           "num_layers": 1, "pos_encoding": "learned"}
    with pytest.raises(TinyLMError, match=r"arch='lstm' \(config: None\)"):
        check_resume(ckpt, gpt, saved["tokenizer"])


def test_visualize_refuses_an_lstm_with_one_line(lstm_run):
    with pytest.raises(TinyLMError, match=r"^[^\n]+$") as info:
        visualize_cli.run(compose_config("visualize", f"run_dir={lstm_run.path}"))
    assert str(info.value).startswith("checkpoint ") and "holds an lstm model, which has no attention to draw" in (
        str(info.value))
