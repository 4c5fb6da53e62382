"""The saved views (tinylm/explorer/standalone.py: ``lm.show``, ``lm.show_heads``, a translation's view): one
HTML page holding the tab's own frontend and answers equal to the routes', naming no network address; and in
headless Chromium, opened from a file and as notebook cells, the attention drawn, a character hovered and a
head switched off, as the tab does it, with no console error and no request but the page's own."""

from __future__ import annotations

import html
import json
import re
import shutil
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from conftest import ROOT, TINY_MODEL, TINY_TEXT, train_in_process

from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.explorer import bundle, head_scores, standalone, views
from tinylm.explorer.inprocess import client
from tinylm.run_folder import run_checkpoints

sys.path.insert(0, str(ROOT / "bench"))

import notebook_views as nv  # noqa: E402
import tensorboard_screenshots as tb  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

HAS_CHROMIUM = any(shutil.which(name) for name in tb.CHROMIUM_NAMES)
TEXT = "Attention is all"  # characters of TINY_TEXT
# What a page must not hold: an address on the network, in any of the forms a page fetches from
NETWORK = [re.compile(pattern, re.IGNORECASE) for pattern in (
    r"\b(?:https?|wss?|ftp)://", r"""\b(?:src|href|action|data)\s*=\s*["']?\s*//""", r"@import",
    r"""\bfetch\s*\(\s*["'`](?:[a-z]+:)?//""", r"""\bimport\s*\(\s*["'`]""", r"<link\b", r"<script[^>]*\bsrc\b",
    r"<iframe[^>]*\bsrc\s*=")] + [re.compile(r"\burl\s*\(")]  # CSS's url(), not JavaScript's URL()
# a GPT with TensorBoard and the head scores every 6 steps: what the heads view reads back
HEADS_RUN = [*TINY_MODEL, "model.num_layers=2", "data.repeat=30", "optim.lr=0.01", "trainer.max_steps=12",
             "trainer.val_check_interval=12", "callbacks.head_scores.every_n_steps=6", "~callbacks.sample_text",
             "~callbacks.next_token_probes", "~callbacks.embedding_projector", "~callbacks.attention_maps"]
SEQ2SEQ = ["experiment=numbers_zh", "data.demo_pairs=300", "model.n_embd=16", "model.num_heads=2",
           "model.encoder_layers=1", "model.decoder_layers=2", "trainer.max_steps=30", "trainer.val_check_interval=30",
           "logger=none", "trainer.enable_progress_bar=false", "threads=1"]


def network_addresses(page: str) -> list[str]:
    return [found.group(0) for pattern in NETWORK for found in pattern.finditer(page)]


def checkpoint(run: Path) -> Path:
    return run_checkpoints(run, read_only=True)[0]  # the tab's: the best, else the last


@pytest.fixture(scope="module")
def loaded(gpt_run):
    return load_model(checkpoint(gpt_run.path))


@pytest.fixture(scope="module")
def text_view(loaded):
    return standalone.text_view(loaded, TEXT)


def held(view: standalone.View) -> dict[tuple, dict]:
    """The page's answers, (route, params as a sorted tuple) -> answer, each attention's maps put back."""
    answers = {}
    for entry in view.data["answers"]:
        answer = dict(entry["answer"])
        if "maps" in answer:
            answer["attention"] = [view.data["maps"][i] for i in answer.pop("maps")]
        answers[entry["route"], tuple(sorted(entry["params"].items()))] = answer
    return answers


# ------------------------------------------------------------------------------------------------
# The page


def test_the_page_holds_every_module_of_the_frontend_and_its_styles(text_view):
    page = text_view.html
    for name in bundle.modules():
        assert f"// tinylm/explorer/static/{name}\nconst {bundle.variable(name)} = (() => {{" in page, name
    assert (bundle.STATIC / "styles.css").read_text(encoding="utf-8") in page
    assert page.count("<script") == 2 and '<script type="module">' in page  # the data, and the frontend
    assert "import {" not in page and "\nexport " not in page  # rewritten into the one script


def test_the_page_names_no_network_address(loaded, text_view):
    assert network_addresses(text_view.html) == []
    assert network_addresses(text_view._repr_html_()) == []
    assert network_addresses(standalone.heads_view(loaded).html) == []
    for name in bundle.modules():  # the tab's own files: their one URL is the routes', built from import.meta.url
        source = (bundle.STATIC / name).read_text(encoding="utf-8")
        assert network_addresses(source) == [], name


def test_the_page_data_can_hold_any_text_without_ending_its_script_or_naming_an_address():
    data = {"text": "see https://example.com/x</script><script>alert(1)</script> & \u2028 <!--"}
    held_json = bundle.script_json(data)
    assert json.loads(held_json) == data
    assert network_addresses(held_json) == [] and "<" not in held_json and "&" not in held_json


def test_a_module_the_bundle_cannot_read_is_one_error(monkeypatch):
    with pytest.raises(TinyLMError, match=r"static/x.js: an import or export the saved views cannot bundle"):
        bundle.rewritten("x.js", 'export default function f() {}\n')
    with pytest.raises(TinyLMError, match=r"in a circle \(a.js -> b.js -> a.js\)"):
        bundle.ordered("a.js", {"a.js": 'import { b } from "./b.js";\n', "b.js": 'import { a } from "./a.js";\n'})
    body, imports = bundle.rewritten("y.js", 'import { h, put as p } from "./dom.js";\nexport const y = 1;\n')
    assert imports == ["dom.js"] and body == 'const { h, put: p } = tinylm_dom;\nconst y = 1;\nreturn { y };'


def test_repr_html_is_the_page_in_an_iframe_of_its_own(text_view, tmp_path):
    cell = text_view._repr_html_()
    found = re.fullmatch(r'<iframe class="tinylm-view" title="[^"]*" srcdoc="([^"]*)" style="[^"]*"></iframe>', cell)
    assert found and html.unescape(found.group(1)) == text_view.html
    saved = text_view.save(tmp_path / "view.html")
    assert saved == tmp_path / "view.html" and saved.read_text(encoding="utf-8") == text_view.html


# ------------------------------------------------------------------------------------------------
# What the page holds: the routes' answers


def test_every_answer_is_the_route_functions_own(loaded, text_view):
    answers = held(text_view)
    assert len(answers) == 16 * 3  # 2 x 2 heads: every combination switched off, each attention, predict, lens
    for (route, params), answer in answers.items():
        params = dict(params)
        ablate = params["ablate"].split(",") if "ablate" in params else []
        if route == "predict":
            assert answer == views.predict(loaded, params["text"], ablate, int(params["k"]))
        else:
            assert answer == getattr(views, route)(loaded, params["text"], ablate)


def test_the_answers_are_what_the_http_routes_answer(gpt_run, text_view, tmp_path):
    runs = tmp_path / "outputs" / "runs"
    shutil.copytree(gpt_run.path, runs / "gpt")
    app, _ = client(runs)
    answers = held(text_view)
    asked = [("attention", {"text": TEXT}), ("attention", {"ablate": "0.1,1.0", "text": TEXT}),
             ("predict", {"ablate": "1.1", "k": "5", "text": TEXT}), ("lens", {"ablate": "0.0", "text": TEXT})]
    for route, params in asked:
        query = "&".join(f"{k}={quote(v)}" for k, v in {"run": "gpt", **params}.items())
        response = app.get(f"/data/plugin/tinylm/{route}?{query}")
        assert response.status_code == 200
        assert json.loads(response.get_data(as_text=True)) == answers[route, tuple(sorted(params.items()))]
    run = json.loads(app.get("/data/plugin/tinylm/runs").get_data(as_text=True))["runs"][0]
    ours = text_view.data["run"]
    assert {k: ours[k] for k in ("kind", "task", "checkpoint", "step", "layers", "heads", "block_size")} == {
        k: run[k] for k in ("kind", "task", "checkpoint", "step", "layers", "heads", "block_size")}


def test_the_head_states_held_fit_the_budget():
    assert standalone.head_states([f"{layer}.{h}" for layer in range(4) for h in range(4)], 64)[1] == 1  # 17 states
    states, most = standalone.head_states([f"{layer}.{h}" for layer in range(2) for h in range(4)], 64)
    assert most == 2 and len(states) == 1 + 8 + 28 and states[0] == () and ("0.0", "1.3") in states
    states, most = standalone.head_states(["0.0", "0.1"], 64)
    assert most == 2 and states == [(), ("0.0",), ("0.1",), ("0.0", "0.1")]
    assert standalone.head_states(["0.0", "0.1"], 2) == ([()], 0)  # the heads alone would be 3


def test_a_large_model_holds_fewer_states(loaded, monkeypatch):
    monkeypatch.setattr(standalone, "MAX_WEIGHTS", 4 * len(TEXT) ** 2 * 3)  # 3 states of 2 x 2 heads' weights
    view = standalone.text_view(loaded, TEXT, ablate=["1.1"])
    assert {dict(params).get("ablate", "") for _, params in held(view)} == {"", "1.1"}
    assert view.data["missing"].startswith("Not in this saved view (it holds every head on only): ")


def test_a_small_budget_holds_each_head_alone_and_the_heads_asked_for(loaded):
    view = standalone.text_view(loaded, TEXT, ablate=[(1, 1), "0.0", "1.0"], budget=5)
    states = {params.get("ablate", "") for (_, params) in ((r, dict(p)) for r, p in held(view))}
    assert states == {"", "0.0", "0.1", "1.0", "1.1", "0.0,1.0,1.1"}
    assert view.data["off"] == ["0.0", "1.0", "1.1"]
    assert view.data["missing"].startswith("Not in this saved view (it holds every head switched off alone): "
                                           "call lm.show(text, ablate={ablate})")
    assert standalone.text_view(loaded, TEXT).data["missing"] is None  # every combination held
    with pytest.raises(TinyLMError, match=r"ablate: '2.0' is not a head of this model: .* layers 0 to 1, heads 0 to 1"):
        standalone.text_view(loaded, TEXT, ablate=["2.0"])


def test_a_text_the_model_cannot_read_is_its_one_line_error(loaded):
    with pytest.raises(TinyLMError, match="☃"):
        standalone.text_view(loaded, "自☃")


def test_an_rnn_view_holds_its_predictions_and_the_routes_errors(lstm_run):
    rnn = load_model(checkpoint(lstm_run.path))
    answers = held(standalone.text_view(rnn, TEXT))
    assert len(answers) == 3  # no heads to switch off
    attention, lens = answers["attention", (("text", TEXT),)], answers["lens", (("text", TEXT),)]
    assert "no attention" in attention["error"] and "no residual stream" in lens["error"]
    assert answers["predict", (("k", "5"), ("text", TEXT))] == views.predict(rnn, TEXT, [], 5)


def test_the_heads_of_a_run_without_logged_scores_are_computed_now(loaded):
    from tinylm.analysis.heads import attention_scores

    view = standalone.heads_view(loaded, text=TEXT)
    scores = view.data["answers"][0]["answer"]
    assert (scores["layers"], scores["heads"], scores["steps"]) == (2, 2, [loaded.global_step])
    import torch

    for row in attention_scores(loaded.model, torch.tensor(loaded.tokenizer.encode(TEXT))):
        for score in scores["scores"]:
            assert scores["values"][score][0][row["layer"]][row["head"]] == round(row[score], 6)
    assert "computed now on 'Attention is all'" in view.data["about"]


@pytest.mark.slow  # a tiny run with TensorBoard
def test_the_logged_head_scores_are_the_heads_routes_answer(tmp_path):
    runs = tmp_path / "outputs" / "runs"
    text = tmp_path / "tiny.txt"
    text.write_text(TINY_TEXT, encoding="utf-8")
    train_in_process(runs / "tb", *HEADS_RUN, f"data.path={text}")
    view = standalone.heads_view(load_model(checkpoint(runs / "tb")))
    app, _ = client(runs)
    route = json.loads(app.get("/data/plugin/tinylm/heads?run=tb").get_data(as_text=True))
    assert route["steps"] == [6, 12] and view.data["answers"][0]["answer"] == route
    assert view.data["about"] == "logged while training: 2 steps, 6 to 12"
    assert head_scores.logged(tmp_path) is not None  # any folder with event files below it


@pytest.mark.slow  # a tiny translation run
def test_a_translation_view_holds_the_translate_routes_answer(tmp_path):
    train_in_process(tmp_path / "numbers", *SEQ2SEQ)
    translator = load_model(checkpoint(tmp_path / "numbers"))
    view = standalone.translation_view(translator, "三千零五")
    answer = view.data["answers"][0]["answer"]
    assert answer == views.translation(translator, "三千零五") and answer["cross_attention"]
    assert network_addresses(view.html) == []
    with pytest.raises(TinyLMError, match="this model translates"):
        standalone.text_view(translator, "三千")
    if HAS_CHROMIUM:
        browser = nv.Browser(tb.find_chromium(), str(tmp_path / "profile"), tmp_path / "chromium.log")
        try:
            session = browser.open(view.save(tmp_path / "t.html").as_uri(), 1280, 900, timeout=60)
            shown = nv.show_translation(nv.Page(browser, session))
            assert shown == {"translation": answer["translation"], "maps": 2 * 2 + 1}  # the grid, one head large
            assert browser.errors == [] and browser.foreign() == []
        finally:
            browser.close()


# ------------------------------------------------------------------------------------------------
# In a browser


@pytest.fixture
def browser(tmp_path):
    found = nv.Browser(tb.find_chromium(), str(tmp_path / "profile"), tmp_path / "chromium.log")
    yield found
    found.close()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium: apt-get install chromium fonts-noto-cjk")
def test_the_saved_file_shows_the_attention_hover_and_a_head_switched_off(loaded, browser, tmp_path):
    view = standalone.text_view(loaded, TEXT, budget=5)  # each head alone: two at once is a note
    answers = held(view)
    page = nv.Page(browser, browser.open(view.save(tmp_path / "view.html").as_uri(), 1280, 900, timeout=60))
    page.wait_for(nv.TEXT_READY, "the text view")
    assert page.js("$$('canvas.map').length") == 4
    assert page.js("$$('.strip .tok').map(t => t.dataset.token)") == list(TEXT)
    assert page.js("$('textarea.textin').readOnly") is True

    query, attention = 5, answers["attention", (("text", TEXT),)]["attention"]
    page.hover(f'svg.lines rect.hit[data-query="{query}"]')
    page.wait_for(f"$('svg.lines line.att.focused')?.dataset.query === '{query}'", "the hovered lines")
    lines = page.js("$$('svg.lines line.att.focused').map(l => [+l.dataset.key, +l.dataset.weight])")
    assert lines == [[key, attention[0][0][query][key]] for key in range(query + 1)]

    page.click('button.switch[data-head="1.0"]')
    page.wait_for("$('.summary')?.textContent.startsWith('1 head')", "the predictions with layer 1 head 0 off")
    ablated = answers["predict", (("ablate", "1.0"), ("k", "5"), ("text", TEXT))]
    shown = page.js("$$('table.preds td[data-pos]').map(c => [+c.dataset.pos, +c.dataset.rank, c.dataset.token])")
    assert sorted(shown) == [[pos, rank, guess["token"]] for pos, column in enumerate(ablated["top"])
                             for rank, guess in enumerate(column)]
    assert page.js("""$('.mapcell[data-layer="1"][data-head="0"] .badge')?.textContent""") == "off"

    page.click('button.switch[data-head="0.1"]')  # a second head: not held, a note says how to get it
    note = page.wait_for("$('.msg.note')?.textContent", "the note")
    assert note == ('Not in this saved view (it holds every head switched off alone): call lm.show(text, '
                    'ablate=["0.1","1.0"]) for these heads off at once, or open the run in the tinylm tab.')
    assert page.js("$$('.msg.error').length") == 0
    assert browser.errors == [] and browser.foreign() == []


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium: apt-get install chromium fonts-noto-cjk")
def test_two_views_as_notebook_cells_each_render_in_their_own_frame(loaded, text_view, browser, tmp_path):
    heads = standalone.heads_view(loaded, text=TEXT)
    notebook = tmp_path / "notebook.html"
    notebook.write_text(nv.notebook_page([text_view, heads], ["lm.show(text)", "lm.show_heads()"]), encoding="utf-8")
    session = browser.open(notebook.as_uri(), 1280, 900, timeout=60)
    text_cell, heads_cell = nv.Page(browser, session, 0), nv.Page(browser, session, 1)
    shown = nv.show_text(text_cell)
    assert shown["maps"] == 4 and shown["lines"] == shown["hovered"] + 1
    assert nv.show_heads(heads_cell) == {"scores": 3, "cells": 3 * 4}
    assert heads_cell.js("$$('canvas.map').length") == 0  # each frame its own document
    height = text_cell.js("Math.ceil(doc.body.getBoundingClientRect().height)")
    assert abs(text_cell.js("frame.getBoundingClientRect().height") - height) <= 1  # the frame fits its page
    assert browser.errors == [] and browser.foreign() == []
