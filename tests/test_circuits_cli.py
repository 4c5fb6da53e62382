"""analyze.py's circuits on the session's trained GPT: dla.json, circuits.json, composition.json and
neurons.json with their exact keys (an outside check reads them), the figures and REPORT.md's paragraphs, the
new options checked before anything is written."""

from __future__ import annotations

import json

import pytest
from conftest import compose_config, entry_point
from test_analysis_cli import CIRCUIT_PNGS, TEXT, run_analyze

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
