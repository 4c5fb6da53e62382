"""The tinylm tab's circuits routes (dla, circuits, ov, qk, composition, neurons), in-process over a logdir of
the session's tiny GPT and LSTM runs: each answers the numbers of tinylm.analysis.circuits' own functions (the
matrices rounded as the other routes round), and a bad input is one line of JSON (400), never a 500."""

from __future__ import annotations

import json
import math
import shutil
from urllib.parse import quote

import pytest
import torch

from tinylm.analysis.circuits.composition import composition_scores
from tinylm.analysis.circuits.dla import direct_logit_attribution
from tinylm.analysis.circuits.neurons import neuron_examples
from tinylm.analysis.circuits.ov_qk import head_circuits, ov_circuit, positional_qk, qk_circuit
from tinylm.checkpoint import load_model
from tinylm.explorer import circuits
from tinylm.explorer.inprocess import client
from tinylm.run_folder import checkpoint_in_run

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "Attention is all you need"  # characters of TINY_TEXT (gpt_run reads it)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory, gpt_run, lstm_run):
    runs = tmp_path_factory.mktemp("circuits") / "runs"
    shutil.copytree(gpt_run.path, runs / "gpt")
    shutil.copytree(lstm_run.path, runs / "lstm")
    return runs


@pytest.fixture(scope="module")
def app(logdir):
    return client(logdir)


@pytest.fixture(scope="module")
def loaded(logdir):
    return load_model(checkpoint_in_run(logdir / "gpt").path)


def get(app, route: str, **params):
    query = "&".join(f"{k}={quote(str(v))}" for k, v in params.items())
    response = app[0].get(f"/data/plugin/tinylm/{route}" + (f"?{query}" if query else ""))
    assert response.mimetype == "application/json"
    return response.status_code, json.loads(response.get_data(as_text=True))


def close(answer, expected: torch.Tensor, places: int = 4) -> bool:
    """A route's rounded matrix (None for -inf) against the function's tensor."""
    got = torch.tensor([[-math.inf if v is None else v for v in row] for row in answer], dtype=torch.float64)
    expected = expected.double()
    finite = torch.isfinite(expected)
    return torch.equal(finite, torch.isfinite(got)) and torch.allclose(got[finite], expected[finite], atol=10**-places)


def test_dla_answers_the_function_s_parts_which_add_up_to_each_logit(app, loaded):
    status, body = get(app, "dla", run="gpt", text=TEXT)
    assert status == 200
    ids = loaded.tokenizer.encode(TEXT)[-16:]  # the last block_size characters, as the other routes read a text
    expected = direct_logit_attribution(loaded.model, ids, loaded.tokenizer)
    assert body["truncated"] is True and body["tokens"] == expected["tokens"] == list(TEXT[-16:])
    assert len(body["positions"]) == len(ids) - 1
    for got, want in zip(body["positions"], expected["positions"], strict=True):
        assert got["target"] == want["target"] and got["position"] == want["position"]
        assert set(got["parts"]) == {"embed", "pos_embed", "L0H0", "L0H1", "L1H0", "L1H1", "mlp0", "mlp1", "bias"}
        assert got["parts"] == pytest.approx(want["parts"], abs=1e-9)
        assert sum(got["parts"].values()) == pytest.approx(got["logit"], abs=1e-4)


def test_dla_against_a_character_subtracts_its_logit(app, loaded):
    status, body = get(app, "dla", run="gpt", text="Attention", against="e")
    assert status == 200
    expected = direct_logit_attribution(loaded.model, loaded.tokenizer.encode("Attention"), loaded.tokenizer,
                                        against="e")
    assert [p["logit"] for p in body["positions"]] == pytest.approx([p["logit"] for p in expected["positions"]])


def test_circuits_ov_and_qk_answer_the_functions_numbers(app, loaded):
    status, body = get(app, "circuits", run="gpt")
    assert status == 200
    expected = head_circuits(loaded.model, loaded.tokenizer)
    assert body == json.loads(json.dumps(expected))
    for entry in expected["heads"]:
        layer, head = entry["layer"], entry["head"]
        status, ov = get(app, "ov", run="gpt", layer=layer, head=head)
        assert status == 200 and ov["tokens"] == expected["tokens"] and ov["copying"] == entry["copying"]
        assert close(ov["ov"], ov_circuit(loaded.model, layer, head))
        status, qk = get(app, "qk", run="gpt", layer=layer, head=head)
        assert status == 200 and close(qk["qk"], qk_circuit(loaded.model, layer, head))
        positions = positional_qk(loaded.model, layer, head)  # learned positions: a (T, T) pattern
        assert positions.shape == (16, 16) and close(qk["positional"], positions)
        assert all(v is None for row, values in enumerate(qk["positional"]) for v in values[row + 1:])
        assert qk["positional_previous_token"] == entry["positional_previous_token"]
        # the positional score the view draws: the softmax of the scores over sqrt(head size)
        pattern = torch.softmax(positions / math.sqrt(qk["head_size"]), dim=-1)
        assert pattern.diagonal(offset=-1).mean().item() == pytest.approx(entry["positional_previous_token"])


def test_composition_answers_the_function_s_scores(app, loaded):
    status, body = get(app, "composition", run="gpt")
    assert status == 200
    assert body == json.loads(json.dumps(composition_scores(loaded.model, seed=0)))
    assert body["heads"] == ["L0H0", "L0H1", "L1H0", "L1H1"] and 0 < body["baseline"] < 1


def test_neurons_answers_the_function_s_examples_over_the_whole_text(app, loaded):
    text = TEXT * 2  # longer than block_size (16): read in windows, never cut
    status, body = get(app, "neurons", run="gpt", text=text, k=3)
    assert status == 200
    assert body == json.loads(json.dumps(neuron_examples(loaded.model, loaded.tokenizer,
                                                         loaded.tokenizer.encode(text), k=3)))
    neurons = body["layers"][0]["neurons"]
    assert len(body["layers"]) == 2 and len(neurons) == 4 * 16 and all(len(n["examples"]) == 3 for n in neurons)
    assert max(e["position"] for n in neurons for e in n["examples"]) >= 16
    for example in neurons[0]["examples"]:
        assert example["context"].endswith(example["char"]) and text[example["position"]] == example["char"]


@pytest.mark.parametrize(("route", "params", "message"), [
    ("dla", {"run": "gpt"}, "text parameter is missing"),
    ("dla", {"run": "gpt", "text": ""}, "text is empty"),
    ("dla", {"run": "gpt", "text": "Att☃"}, "'☃'"),
    ("dla", {"run": "gpt", "text": "Attention", "against": "ee"}, "one character"),
    ("dla", {"run": "gpt", "text": "Attention", "against": "☃"}, "against='☃'"),
    ("ov", {"run": "gpt", "layer": "0"}, "head parameter is missing"),
    ("ov", {"run": "gpt", "layer": "2", "head": "0"}, "not a head of this model: layers 0 to 1"),
    ("qk", {"run": "gpt", "layer": "0", "head": "x"}, "head='x'"),
    ("qk", {"run": "gpt", "layer": "-1", "head": "0"}, "not a head"),
    ("neurons", {"run": "gpt", "text": "Attention", "k": "0"}, "k='0'"),
    ("neurons", {"run": "gpt", "text": "Attention", "k": "99"}, "from 1 to 20"),
    ("dla", {"run": "lstm", "text": "Attention"}, "no attention heads"),
    ("circuits", {"run": "lstm"}, "no attention heads"),
    ("composition", {"run": "lstm"}, "hook_rnn_out"),
    ("neurons", {"run": "lstm", "text": "Attention"}, "does not apply"),
    ("ov", {"run": "nope", "layer": "0", "head": "0"}, "nope"),
])
def test_bad_inputs_are_one_line_of_json(app, route, params, message):
    status, body = get(app, route, **params)
    assert status in (400, 404), body
    assert list(body) == ["error"] and "\n" not in body["error"] and message in body["error"], body


def test_the_route_functions_raise_one_line_for_a_model_without_heads(logdir):
    lstm = load_model(checkpoint_in_run(logdir / "lstm").path)
    for call in (lambda: circuits.heads(lstm), lambda: circuits.ov(lstm, 0, 0), lambda: circuits.composition(lstm)):
        with pytest.raises(Exception, match="no attention heads, so .* does not apply"):
            call()
