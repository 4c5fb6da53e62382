"""The saved circuits and neurons views (``standalone.circuits_view``, ``neurons_view``: ``lm.show_circuits``,
``lm.show_neurons``): one page naming no network address, holding answers equal to tinylm.analysis.circuits'
functions (through the routes' own ``tinylm.explorer.circuits``) for every head; and in headless Chromium,
opened from a file, the OV heatmap drawn with no console error and no request but the page's own."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT
from test_standalone_views import HAS_CHROMIUM, checkpoint, held, network_addresses

from tinylm.analysis.circuits.composition import composition_scores
from tinylm.analysis.circuits.dla import direct_logit_attribution
from tinylm.analysis.circuits.neurons import neuron_examples
from tinylm.analysis.circuits.ov_qk import head_circuits
from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.explorer import bundle, circuits, standalone

sys.path.insert(0, str(ROOT / "bench"))

import circuits_views as cv  # noqa: E402
import notebook_views as nv  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "Attention is all"  # characters of TINY_TEXT, within block_size (16)
SOURCE = "三千零五"  # a source of the numbers_zh translation run
SEQ2SEQ = ["experiment=numbers_zh", "data.demo_pairs=300", "model.n_embd=16", "model.num_heads=2",
           "model.encoder_layers=1", "model.decoder_layers=2", "trainer.max_steps=30", "trainer.val_check_interval=30",
           "logger=none", "trainer.enable_progress_bar=false", "threads=1"]


@pytest.fixture(scope="module")
def loaded(gpt_run):
    return load_model(checkpoint(gpt_run.path))


@pytest.fixture(scope="module")
def views(loaded):
    return standalone.circuits_view(loaded, TEXT), standalone.neurons_view(loaded, TEXT)


def as_json(data):
    return json.loads(json.dumps(data))


def test_the_pages_hold_the_frontend_and_name_no_network_address(views):
    for view in views:
        assert network_addresses(view.html) == [] and network_addresses(view._repr_html_()) == []
        for name in ("circuits_view.js", "neurons_view.js", "matrix.js"):
            assert f"// tinylm/explorer/static/{name}\n" in view.html
        assert view.html.count("<script") == 2
    assert [view.kind for view in views] == ["circuits", "neurons"]
    assert "matrix.js" in bundle.modules()


def test_the_circuits_page_holds_the_functions_answers_for_every_head(loaded, views):
    answers = held(views[0])
    model, tokenizer = loaded.model, loaded.tokenizer
    assert answers["circuits", ()] == as_json(head_circuits(model, tokenizer))
    assert answers["composition", ()] == as_json(composition_scores(model, seed=0))
    dla = answers["dla", (("text", TEXT),)]
    assert {k: v for k, v in dla.items() if k != "truncated"} == as_json(
        direct_logit_attribution(model, tokenizer.encode(TEXT), tokenizer))
    heads = [(layer, head) for layer in range(2) for head in range(2)]
    for layer, head in heads:
        params = (("head", str(head)), ("layer", str(layer)))
        assert answers["ov", params] == as_json(circuits.ov(loaded, layer, head))
        assert answers["qk", params] == as_json(circuits.qk(loaded, layer, head))
    assert len(answers) == 3 + 2 * len(heads)


def test_the_neurons_page_holds_the_function_s_examples(loaded, views):
    answers = held(views[1])
    assert list(answers) == [("neurons", (("k", "5"), ("text", TEXT)))]
    expected = neuron_examples(loaded.model, loaded.tokenizer, loaded.tokenizer.encode(TEXT), k=5)
    assert answers["neurons", (("k", "5"), ("text", TEXT))] == as_json(expected)


def test_a_model_without_heads_or_a_bad_text_is_one_line(lstm_run, loaded):
    lstm = load_model(checkpoint(lstm_run.path))
    for view in (standalone.circuits_view, standalone.neurons_view):
        with pytest.raises(TinyLMError, match="no attention heads, so .* does not apply"):
            view(lstm, "Attention")
        with pytest.raises(TinyLMError, match="'☃'"):
            view(loaded, "Att☃")


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium: apt-get install chromium fonts-noto-cjk")
def test_in_chromium_the_saved_circuits_view_draws_the_ov_heatmap_with_no_error(views, tmp_path):
    circuits_page = views[0].save(tmp_path / "circuits.html").as_uri()
    neurons_page = views[1].save(tmp_path / "neurons.html").as_uri()
    browser = nv.Browser(nv.tb.find_chromium(), str(tmp_path / "profile"), tmp_path / "chromium.log")
    try:
        ov = nv.shoot(browser, circuits_page, None, lambda page: cv.show_ov(page, "1.1"), tmp_path / "ov.png",
                      1000, 900)
        dla = nv.shoot(browser, circuits_page, None, lambda page: cv.show_dla(page, 3, summed=True),
                       tmp_path / "dla.png", 1000, 900)
        neurons = nv.shoot(browser, neurons_page, None, cv.show_neurons, tmp_path / "neurons.png", 1000, 900)
    finally:
        browser.close()
    for result in (ov, dla, neurons):
        assert result["errors"] == [] and result["foreign_requests"] == [], result
    copying = held(views[0])["ov", (("head", "1"), ("layer", "1"))]["copying"]
    assert ov["drawn"] is True and float(ov["copying"]) == pytest.approx(copying)
    assert ov["readout"].startswith("attending to ")  # a cell hovered
    assert dla["about"].startswith("summed over the 15 positions") and dla["cells"] == 4 + 2 + 3
    assert dla["rows"] == [["layer 0", ["L0H0", "L0H1", "mlp0"]], ["layer 1", ["L1H0", "L1H1", "mlp1"]],  # each MLP in
                           ["embeddings, biases", ["embed", "pos_embed", "bias"]]]  # its layer's row, not layer 0's
    assert neurons["layer"] == 1 and neurons["examples"] == 5


def test_lm_show_circuits_and_show_neurons_are_these_views(gpt_run, views):
    import tinylm

    lm = tinylm.load(checkpoint(gpt_run.path))
    assert lm.show_circuits(TEXT).data == views[0].data
    assert lm.show_neurons(TEXT).data == views[1].data


def test_a_circuits_page_holds_the_heads_asked_for_or_those_within_its_budget(loaded, monkeypatch):
    view = standalone.circuits_view(loaded, TEXT, heads=["1.0", (0, 1)])
    held_heads = sorted(params for route, params in held(view) if route == "ov")
    assert held_heads == [(("head", "0"), ("layer", "1")), (("head", "1"), ("layer", "0"))]
    assert view.data["head"] == [0, 1] and "0.1, 1.0" in view.data["missing_head"]
    with pytest.raises(TinyLMError, match="not a head of this model"):
        standalone.circuits_view(loaded, TEXT, heads=["2.0"])
    vocabulary, block = loaded.model.config.vocab_size, loaded.model.config.block_size
    monkeypatch.setattr(standalone, "MAX_CIRCUIT_VALUES", 2 * (2 * vocabulary**2 + block**2))  # two heads' worth
    view = standalone.circuits_view(loaded, TEXT)
    copying = {(e["layer"], e["head"]): e["copying"] for e in head_circuits(loaded.model, loaded.tokenizer)["heads"]}
    kept = sorted((int(dict(p)["layer"]), int(dict(p)["head"])) for route, p in held(view) if route == "ov")
    assert len(kept) == 2 and min(copying[h] for h in kept) >= max(v for h, v in copying.items() if h not in kept)


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    from conftest import train_in_process

    run = tmp_path_factory.mktemp("translator") / "numbers"
    train_in_process(run, *SEQ2SEQ)  # an encoder-decoder (4 s)
    return load_model(checkpoint(run))


def test_a_translation_model_s_circuits_view_holds_its_cross_heads_and_its_translation_s_attribution(translator):
    import tinylm

    view = standalone.circuits_view(translator, SOURCE)
    answers = held(view)
    assert answers["dla", (("text", SOURCE),)] == as_json(circuits.dla(translator, SOURCE))
    assert answers["dla", (("text", SOURCE),)]["source"] == list(SOURCE)
    assert "decoders" in answers["composition", ()]["error"]
    for layer in range(2):
        for head in range(2):
            params = (("head", str(head)), ("kind", "cross"), ("layer", str(layer)))
            assert answers["ov", params] == as_json(circuits.ov(translator, layer, head, "cross"))
            assert answers["qk", params]["kind"] == "cross" and answers["qk", params]["positional"] is None
            assert answers["ov", params[:1] + params[2:]] == as_json(circuits.ov(translator, layer, head))
    asked = standalone.circuits_view(translator, SOURCE, heads=["cross1.0"])
    held_ov = [p for route, p in held(asked) if route == "ov"]
    assert held_ov == [(("head", "0"), ("kind", "cross"), ("layer", "1"))]
    assert asked.data["head"] == [1, 0, "cross"]
    lm = tinylm.load(translator.path)
    assert lm.show_circuits(SOURCE).data == view.data
    for call in (lambda: lm.show_circuits("abc"), lambda: lm.show_circuits("三千\n十二")):
        with pytest.raises(TinyLMError, match="source line 1|one source line"):
            call()
    with pytest.raises(TinyLMError, match="reads a decoder's text"):
        lm.show_neurons(SOURCE)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium: apt-get install chromium fonts-noto-cjk")
def test_in_chromium_a_translation_model_s_circuits_view_shows_its_cross_heads(translator, tmp_path):
    page = standalone.circuits_view(translator, SOURCE).save(tmp_path / "circuits.html").as_uri()
    browser = nv.Browser(nv.tb.find_chromium(), str(tmp_path / "profile"), tmp_path / "chromium.log")
    try:
        dla = nv.shoot(browser, page, None, cv.show_dla, tmp_path / "dla.png", 1000, 900)
        ov = nv.shoot(browser, page, None, lambda p: cv.show_ov(p, "cross1.0"), tmp_path / "ov.png", 1000, 900)
    finally:
        browser.close()
    for result in (dla, ov):
        assert result["errors"] == [] and result["foreign_requests"] == [], result
    assert [label for label, _ in dla["rows"]] == ["layer 0", "cross-attention layer 0", "layer 1",
                                                   "cross-attention layer 1", "embeddings, biases"]
    assert dla["rows"][1][1] == ["crossL0H0", "crossL0H1"] and dla["rows"][2][1] == ["L1H0", "L1H1", "mlp1"]
    copying = circuits.ov(translator, 1, 0, "cross")["copying"]
    assert ov["drawn"] is True and float(ov["copying"]) == pytest.approx(copying)
