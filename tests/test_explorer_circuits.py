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
from tinylm.explorer import circuits, views
from tinylm.explorer.inprocess import client
from tinylm.run_folder import checkpoint_in_run

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "Attention is all you need"  # characters of TINY_TEXT (gpt_run reads it)
SOURCE = "三千零五"  # a source of the numbers_zh translation run
SEQ2SEQ = ["experiment=numbers_zh", "data.demo_pairs=300", "model.n_embd=16", "model.num_heads=2",
           "model.encoder_layers=1", "model.decoder_layers=2", "trainer.max_steps=30", "trainer.val_check_interval=30",
           "callbacks.translation_maps.source='三千零五'", "logger=none", "trainer.enable_progress_bar=false",
           "threads=1"]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory, gpt_run, lstm_run):
    from conftest import train_in_process

    runs = tmp_path_factory.mktemp("circuits") / "runs"
    shutil.copytree(gpt_run.path, runs / "gpt")
    shutil.copytree(lstm_run.path, runs / "lstm")
    train_in_process(runs / "numbers", *SEQ2SEQ)  # an encoder-decoder (4 s)
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


def test_a_translation_run_s_dla_attributes_its_greedy_translation_as_lm_dla_does(app, logdir):
    import tinylm

    status, body = get(app, "dla", run="numbers", text=SOURCE)
    assert status == 200, body
    lm = tinylm.load(checkpoint_in_run(logdir / "numbers").path)
    expected = lm.dla(SOURCE)  # the source, with its greedy translation as the target (BEGIN first, then END)
    assert body["tokens"] == expected["tokens"] and body["positions"] == json.loads(json.dumps(expected["positions"]))
    translator = load_model(checkpoint_in_run(logdir / "numbers").path)
    assert body["source"] == list(SOURCE)
    assert body["translation"] == views.translation(translator, SOURCE)["translation"]
    assert len(body["positions"]) == len(body["translation"]) + 1  # each character written, then the end
    for position in body["positions"]:
        assert {"crossL0H0", "crossL1H1", "L1H1", "mlp1"} <= set(position["parts"])
        assert sum(position["parts"].values()) == pytest.approx(position["logit"], abs=1e-4)
    status, body = get(app, "dla", run="numbers", text=SOURCE, against="3")
    assert status == 200 and all(p["against"] == "3" for p in body["positions"])


def test_a_translation_run_s_cross_heads_have_ov_and_qk_circuits(app, logdir):
    translator = load_model(checkpoint_in_run(logdir / "numbers").path)
    named = {e["name"]: e for e in head_circuits(translator.model, translator.tokenizer)["heads"]}
    for layer in range(2):
        for head in range(2):
            status, ov = get(app, "ov", run="numbers", layer=layer, head=head, kind="cross")
            assert status == 200 and ov["kind"] == "cross", ov
            assert close(ov["ov"], ov_circuit(translator.model, layer, head, prefix="cross"))
            assert ov["copying"] == named[f"crossL{layer}H{head}"]["copying"]
            status, qk = get(app, "qk", run="numbers", layer=layer, head=head, kind="cross")
            assert status == 200 and qk["positional"] is None and qk["kind"] == "cross"
            assert close(qk["qk"], qk_circuit(translator.model, layer, head, prefix="cross"))
            status, own = get(app, "ov", run="numbers", layer=layer, head=head)  # kind=self, the default
            assert status == 200 and "kind" not in own and close(own["ov"], ov_circuit(translator.model, layer, head))
            assert own["copying"] == named[f"L{layer}H{head}"]["copying"]
    status, body = get(app, "circuits", run="numbers")
    assert status == 200 and {e["name"] for e in body["heads"]} == set(named)


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
    ("dla", {"run": "gpt", "text": "A"}, "one character"),
    ("dla", {"run": "gpt", "text": "A", "against": "e"}, "one character"),
    ("dla", {"run": "numbers", "text": "三千\n十二"}, "one source line"),
    ("dla", {"run": "numbers", "text": "abc"}, "source line 1"),
    ("ov", {"run": "gpt", "layer": "0", "head": "0", "kind": "cross"}, "no cross-attention"),
    ("qk", {"run": "numbers", "layer": "0", "head": "0", "kind": "encoder"}, "kind='encoder'"),
    ("qk", {"run": "numbers", "layer": "2", "head": "0", "kind": "cross"}, "not a cross-attention head"),
    ("neurons", {"run": "numbers", "text": SOURCE}, "reads a decoder's text"),
    ("composition", {"run": "numbers"}, "decoders"),
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


# ------------------------------------------------------------------------------------------------
# The tab itself: TensorBoard on a trained run, in headless Chromium


@pytest.mark.browser
@pytest.mark.slow
def test_in_tensorboard_the_circuits_and_neurons_views_show_the_routes_numbers(gpt_run, tmp_path):
    import sys
    import urllib.parse

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "bench"))
    import tensorboard_screenshots as tb
    import tinylm_tab as ui

    if not any(shutil.which(name) for name in tb.CHROMIUM_NAMES):
        pytest.skip("needs Chromium: apt-get install chromium fonts-noto-cjk")

    def route(name: str, **params) -> dict:
        return server.get(f"/data/plugin/tinylm/{name}?{urllib.parse.urlencode(params)}")

    server = tb.TensorBoard(gpt_run.log_dir, tb.free_port(), tmp_path / "tensorboard.log")
    browser = None
    try:
        assert server.wait_for_data(0, ["tinylm"], timeout=90) == {"tinylm"}, tb.last_line(server.log)
        browser = tb.Chromium(tb.find_chromium(), str(tmp_path / "profile"), tmp_path / "chromium.log")
        page = browser.open(f"{server.url}/#tinylm", 1280, 900, timeout=60)
        ui.wait_for(browser, page, "$$('canvas.map').length", "the text view", timeout=60)
        run = route("runs")["runs"][0]
        ui.click(browser, page, 'button.tab[data-view="circuits"]')
        ui.wait_for(browser, page, "$('.dla-grid td') && $('canvas.heatmap[data-name=ov]') && "
                    "$('table.composition-grid td[data-value]')", "the circuits view")
        ui.type_text(browser, page, "textarea.textin", "Attention")
        dla = route("dla", run=run["name"], text="Attention")
        last = dla["positions"][-1]
        ui.wait_for(browser, page, f"$('.dla-about').textContent.includes('target {last['target']}')",
                    "its attribution")
        shown = ui.tab(browser, page, "$$('.dla-grid td[data-part]').map(c => [c.dataset.part, c.textContent])")
        assert dict(shown) == {part: f"{value:.2f}" for part, value in last["parts"].items()}
        rows = ui.tab(browser, page, "$$('.dla-grid tr').map(r => [r.querySelector('th')?.textContent, "  # each MLP
                      "[...r.querySelectorAll('td[data-part]')].map(c => c.dataset.part)])")  # in its layer's row
        assert [row for row in rows if row[1]] == [["layer 0", ["L0H0", "L0H1", "mlp0"]],
                                                   ["layer 1", ["L1H0", "L1H1", "mlp1"]],
                                                   ["embeddings, biases", ["embed", "pos_embed", "bias"]]]
        ui.type_text(browser, page, "textarea.textin", "A")  # one character: nothing to attribute, one note
        ui.wait_for(browser, page, "$('.dla .msg.note')?.textContent.startsWith('Type at least two')", "the note")
        ui.type_text(browser, page, "textarea.textin", "Attention")
        ui.wait_for(browser, page, f"$('.dla-about')?.textContent.includes('target {last['target']}')", "it again")
        ui.type_text(browser, page, "input.against", "e")
        ui.wait_for(browser, page, "$('.dla-about').textContent.includes('minus the logit of e')", "the difference")
        against = route("dla", run=run["name"], text="Attention", against="e")["positions"][-1]
        assert f"logit {against['logit']:.2f}" in ui.tab(browser, page, "$('.dla-about').textContent")
        ui.click(browser, page, 'td.pick[data-head="1.1"]')
        ui.wait_for(browser, page, "$('.head-title').textContent === 'layer 1, head 1' && "
                    "$('.ov .summary')?.dataset.copying !== undefined && $$('.qk canvas.heatmap').length === 2",
                    "head 1.1's circuits")
        ov = route("ov", run=run["name"], layer=1, head=1)
        assert float(ui.tab(browser, page, "$('.ov .summary').dataset.copying")) == pytest.approx(ov["copying"])
        ui.click(browser, page, 'button.tab[data-view="neurons"]')
        ui.wait_for(browser, page, "$('button.neuron')", "the neurons")
        ui.click(browser, page, 'button.neuron[data-neuron="3"]')
        ui.wait_for(browser, page, "$('table.neuron-examples tr[data-position]')", "neuron 3's examples")
        text = ui.tab(browser, page, "$('textarea.textin').value")
        neurons = route("neurons", run=run["name"], text=text, k=5)
        expected = [e["position"] for e in neurons["layers"][0]["neurons"][3]["examples"]]
        positions = ui.tab(browser, page, "$$('table.neuron-examples tr[data-position]').map(r => +r.dataset.position)")
        assert positions == expected
        assert ui.tab(browser, page, "$$('.msg.error').length") == 0
    finally:
        if browser:
            browser.close()
        tb.stop(server.proc)


@pytest.mark.browser
@pytest.mark.slow
def test_in_tensorboard_a_translation_run_s_circuits_view_attributes_its_translation(tmp_path):
    import sys
    import urllib.parse

    from conftest import ROOT, train_in_process

    sys.path.insert(0, str(ROOT / "bench"))
    import tensorboard_screenshots as tb
    import tinylm_tab as ui

    if not any(shutil.which(name) for name in tb.CHROMIUM_NAMES):
        pytest.skip("needs Chromium: apt-get install chromium fonts-noto-cjk")
    train_in_process(tmp_path / "runs" / "numbers", *SEQ2SEQ)
    server = tb.TensorBoard(tmp_path / "runs", tb.free_port(), tmp_path / "tensorboard.log")
    browser = None
    try:
        assert server.wait_for_data(0, ["tinylm"], timeout=90) == {"tinylm"}, tb.last_line(server.log)
        browser = tb.Chromium(tb.find_chromium(), str(tmp_path / "profile"), tmp_path / "chromium.log")
        page = browser.open(f"{server.url}/#tinylm", 1280, 900, timeout=60)
        ui.wait_for(browser, page, "$('button.tab[data-view=circuits]') && "
                    "!$('button.tab[data-view=circuits]').disabled", "the circuits tab, offered", timeout=60)
        assert ui.tab(browser, page, "$('button.tab[data-view=neurons]').disabled") is True
        ui.click(browser, page, 'button.tab[data-view="circuits"]')
        ui.wait_for(browser, page, "$('.dla-grid td[data-part]') && $('canvas.heatmap[data-name=ov]')", "the view")
        ui.type_text(browser, page, "textarea.textin", SOURCE)
        query = urllib.parse.urlencode({"run": "numbers", "text": SOURCE})
        dla = server.get(f"/data/plugin/tinylm/dla?{query}")
        ui.wait_for(browser, page, f"$('.translation-of')?.dataset.translation === {json.dumps(dla['translation'])}",
                    "the translation's attribution")
        shown = ui.tab(browser, page, "$$('.dla-grid td[data-part]').map(c => [c.dataset.part, c.textContent])")
        assert dict(shown) == {part: f"{value:.2f}" for part, value in dla["positions"][-1]["parts"].items()}
        labels = ui.tab(browser, page, "$$('.dla-grid tr th.rowlabel').map(th => th.textContent)")
        assert labels == ["layer 0", "cross-attention layer 0", "layer 1", "cross-attention layer 1",
                          "embeddings, biases"]
        ui.click(browser, page, 'td.pick[data-head="cross1.0"]')
        ui.wait_for(browser, page, "$('.head-title').textContent === 'cross-attention layer 1, head 0' && "
                    "$('.ov .summary')?.dataset.copying !== undefined && $('.qk canvas.heatmap')", "the cross head")
        ov = server.get("/data/plugin/tinylm/ov?run=numbers&layer=1&head=0&kind=cross")
        assert float(ui.tab(browser, page, "$('.ov .summary').dataset.copying")) == pytest.approx(ov["copying"])
        assert "decoders" in ui.tab(browser, page, "$('.composition .msg.note').textContent")
        assert ui.tab(browser, page, "$$('.msg.error').length") == 0
    finally:
        if browser:
            browser.close()
        tb.stop(server.proc)
