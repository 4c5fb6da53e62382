"""analyze.py's circuits on the session's trained GPT: dla.json, circuits.json, composition.json and
neurons.json with their exact keys (an outside check reads them), the figures and REPORT.md's paragraphs, the
new options checked before anything is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import TINY_TEXT, compose_config, entry_point
from omegaconf import OmegaConf
from test_analysis_cli import CIRCUIT_PNGS, TEXT, run_analyze

import tinylm
from tinylm.errors import TinyLMError

analyze = entry_point("analyze.py")


def test_analyze_writes_the_four_circuit_files_with_their_keys(gpt_run, tmp_path, capsys):
    result = run_analyze(f"run_dir={gpt_run.path}", f"text={TEXT}", f"out_dir={tmp_path}", "dla_position=3",
                         "neurons_k=2")
    read = {name: json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8"))
            for name in ("dla", "circuits", "composition", "neurons")}
    assert read == {name: result[name] for name in read}

    dla = read["dla"]
    assert set(dla) == {"tokens", "positions"} and dla["tokens"] == list(TEXT)
    assert len(dla["positions"]) == len(TEXT) - 1
    first = dla["positions"][0]
    assert set(first) == {"position", "target", "logit", "parts"} and first["target"] == TEXT[1]
    assert list(first["parts"]) == ["embed", "pos_embed", "L0H0", "L0H1", "mlp0", "L1H0", "L1H1", "mlp1", "bias"]
    assert all(sum(p["parts"].values()) == pytest.approx(p["logit"], abs=1e-4) for p in dla["positions"])

    circuits = read["circuits"]
    assert {"heads", "tokens", "folded"} <= set(circuits)
    assert [(h["layer"], h["head"]) for h in circuits["heads"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all({"layer", "head", "copying", "positional_previous_token"} <= set(h) for h in circuits["heads"])
    assert all(0 <= h["copying"] <= 1 and 0 <= h["positional_previous_token"] <= 1 for h in circuits["heads"])

    composition = read["composition"]
    assert set(composition) == {"q", "k", "v", "heads", "baseline"}
    assert composition["heads"] == ["L0H0", "L0H1", "L1H0", "L1H1"]
    for kind in ("q", "k", "v"):
        matrix = composition[kind]
        assert len(matrix) == 4 and all(len(row) == 4 for row in matrix)
        assert all(0 < matrix[i][j] < 1 for i in (0, 1) for j in (2, 3))  # earlier layer -> later layer
        assert all(matrix[i][j] is None for i in range(4) for j in range(4) if j // 2 <= i // 2)
    assert 0 < composition["baseline"] < 1

    layers = read["neurons"]["layers"]
    assert [layer["layer"] for layer in layers] == [0, 1]
    neuron = layers[0]["neurons"][0]
    assert set(neuron) == {"neuron", "examples", "pushes"} and len(neuron["examples"]) == 2
    assert set(neuron["examples"][0]) == {"position", "char", "context", "activation"}
    assert set(neuron["pushes"][0]) == {"char", "logit"}

    assert CIRCUIT_PNGS <= {p.stem for p in tmp_path.glob("*.png")}
    report = (tmp_path / "REPORT.md").read_text(encoding="utf-8")
    assert all(f"]({name}.png)" in report for name in CIRCUIT_PNGS)
    assert "## Direct logit attribution at one position" in report and "## K-composition" in report
    printed = capsys.readouterr().out
    assert "dla at position 3 (next" in printed and "composition k: strongest" in printed
    assert "circuits: head" in printed and "neurons layer 1: neuron" in printed


def test_a_logit_difference_against_a_character(gpt_run, tmp_path):
    result = run_analyze(f"run_dir={gpt_run.path}", f"text={TEXT}", f"out_dir={tmp_path}", f"dla_against={TEXT[0]}")
    assert all(p["against"] == TEXT[0] for p in result["dla"]["positions"])
    assert all(sum(p["parts"].values()) == pytest.approx(p["logit"], abs=1e-4) for p in result["dla"]["positions"])


@pytest.mark.parametrize(("override", "message"), [
    ("dla_position=-1", "dla_position=-1 must be an integer >= 0, or null for the last position"),
    ("dla_against=ab", "dla_against='ab' must be one character, or null"),
    ("neurons_k=0", "neurons_k=0 must be an integer >= 1"),
    ("neurons_context=-2", "neurons_context=-2 must be an integer >= 0"),
])
def test_bad_circuit_options_are_one_line_before_any_checkpoint(override, message, tmp_path):
    with pytest.raises(TinyLMError, match=message):
        analyze.run(compose_config("analyze", f"run_dir={tmp_path / 'none'}", override))


@pytest.mark.parametrize(("override", "message"), [
    ("dla_position=14", "dla_position=14 must be a position of the text that has a next character: from 0 to 13"),
    ("dla_against=z", "against='z': pass one character of the model's vocabulary"),
])
def test_options_that_depend_on_the_text_refuse_before_any_file(gpt_run, tmp_path, override, message):
    with pytest.raises(TinyLMError, match=message):
        run_analyze(f"run_dir={gpt_run.path}", f"text={TEXT}", f"out_dir={tmp_path / 'out'}", override)
    assert not (tmp_path / "out" / "dla.json").exists() and not (tmp_path / "out" / "heads.json").exists()


def test_an_lstm_checkpoint_is_one_line_naming_the_circuits(lstm_run, tmp_path):
    with pytest.raises(TinyLMError, match="lstm model: it has no attention heads") as e:
        run_analyze(f"run_dir={lstm_run.path}", f"text={TEXT}", f"out_dir={tmp_path}")
    assert "the circuits (direct logit attribution, OV/QK, composition, neurons) do not apply" in str(e.value)


def test_neurons_look_in_a_text_longer_than_the_model_reads(gpt_run, tmp_path):
    result = run_analyze(f"run_dir={gpt_run.path}", f"text={TEXT}", f"out_dir={tmp_path}", f"neurons_text={TEXT * 3}",
                         "neurons_k=40")
    layers = result["neurons"]["layers"]
    positions = {e["position"] for layer in layers for n in layer["neurons"] for e in n["examples"]}
    assert max(positions) >= 16 and max(positions) < 45  # beyond one window of block_size 16
    with pytest.raises(TinyLMError, match="neurons_text"):
        run_analyze(f"run_dir={gpt_run.path}", f"text={TEXT}", f"out_dir={tmp_path / 'b'}", "neurons_text=ZZZ")


# The neurons read the run's validation text: the last data.val_fraction (0.1) of its data file, repeated
# data.repeat (30) times, as evaluate.py split=val scores it. The session's run has its data file deleted.
WHOLE = TINY_TEXT * 30
VALIDATION = WHOLE[len(WHOLE) - int(len(WHOLE) * 0.1):]


def run_with_its_data(gpt_run, tmp_path) -> Path:
    """A copy of the session's run whose recorded config names a data file that is there."""
    run = tmp_path / "run"
    shutil.copytree(gpt_run.path, run)
    data = tmp_path / "tiny.txt"
    data.write_text(TINY_TEXT, encoding="utf-8")
    config = run / ".hydra" / "config.yaml"
    recorded = OmegaConf.load(config)
    recorded.data.path = str(data)
    OmegaConf.save(recorded, config)
    return run


def assert_read_in(neurons: dict, text: str) -> list[int]:
    positions = []
    for layer in neurons["layers"]:
        for neuron in layer["neurons"]:
            for e in neuron["examples"]:
                p = e["position"]
                assert e["char"] == text[p] and e["context"] == text[max(0, p - 8): p + 1]
                positions.append(p)
    return positions


def test_the_neurons_read_the_runs_validation_text(gpt_run, tmp_path, capsys):
    run = run_with_its_data(gpt_run, tmp_path)
    run_analyze(f"run_dir={run}", f"text={TEXT}", f"out_dir={tmp_path / 'out'}", "neurons_k=3")
    neurons = json.loads((tmp_path / "out" / "neurons.json").read_text(encoding="utf-8"))
    assert neurons["source"] == "validation" and neurons["length"] == len(VALIDATION) == 156  # its last 3 copies
    assert max(assert_read_in(neurons, VALIDATION)) >= 16  # beyond the first window of block_size 16
    assert "not the run's validation text" not in capsys.readouterr().out


def test_the_validation_text_read_is_capped(gpt_run, tmp_path, monkeypatch):
    monkeypatch.setattr("tinylm.analysis.circuits.texts.VALIDATION_CHARS", 40)
    neurons = tinylm.load(run_with_its_data(gpt_run, tmp_path)).neurons(k=2)
    assert neurons["source"] == "validation" and neurons["length"] == 40
    assert_read_in(neurons, VALIDATION[:40])


def test_without_the_runs_data_file_the_neurons_read_the_text_and_say_so(gpt_run, tmp_path, capsys):
    result = run_analyze(f"run_dir={gpt_run.path}", f"text={TEXT}", f"out_dir={tmp_path}", "neurons_k=2")
    assert result["neurons"]["source"] == "probe" and result["neurons"]["length"] == len(TEXT)
    assert_read_in(result["neurons"], TEXT)
    lines = [line for line in capsys.readouterr().out.splitlines() if "not the run's validation text" in line]
    assert len(lines) == 1 and "the run's data file" in lines[0] and "tiny.txt is missing" in lines[0]
    given = run_analyze(f"run_dir={gpt_run.path}", f"text={TEXT}", f"out_dir={tmp_path / 'b'}", "neurons_text=自注意力")
    assert given["neurons"]["source"] == "text" and given["neurons"]["length"] == 4


def test_lm_neurons_read_the_validation_text_else_the_recorded_probe(gpt_run, tmp_path, capsys):
    run = run_with_its_data(gpt_run, tmp_path)
    lm = tinylm.load(run)
    assert lm.neurons(k=2)["source"] == "validation"
    assert lm.neurons("自注意力", k=2)["source"] == "text"
    (tmp_path / "tiny.txt").unlink()
    (run / "probe.txt").write_text(TEXT, encoding="utf-8")
    capsys.readouterr()
    probe = lm.neurons(k=2)
    assert probe["source"] == "probe" and probe["length"] == len(TEXT)
    assert_read_in(probe, TEXT)
    assert "neurons: read on the run's recorded probe, not the run's validation text" in capsys.readouterr().out
