"""The tinylm tab in a real browser: TensorBoard on a trained run, opened in headless Chromium and used
as a user would, with real mouse and keyboard input (bench/tinylm_tab.py, over the DevTools pipe of
bench/tensorboard_screenshots.py). What the page shows is checked against the plugin's own routes:
the tokens, the weights on the lines, and the predictions with a head switched off."""

import json
import shutil
import sys
import urllib.error
import urllib.parse
from pathlib import Path

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import tensorboard_screenshots as tb  # noqa: E402
import tinylm_tab as ui  # noqa: E402

HAS_CHROMIUM = any(shutil.which(name) for name in tb.CHROMIUM_NAMES)
TEXT = "Attention is all"  # characters of the run's text (tests/conftest.py's TINY_TEXT)
LINES = "$$('svg.lines line.att').map(l => [+l.dataset.query, +l.dataset.key, +l.dataset.weight])"
PREDICTIONS = ("$$('table.preds td[data-pos]').map(c => [+c.dataset.pos, +c.dataset.rank, c.dataset.token,"
               " +c.dataset.p, c.classList.contains('changed')])")


def route(server: tb.TensorBoard, name: str, **params) -> dict:
    return server.get(f"/data/plugin/tinylm/{name}?{urllib.parse.urlencode(params)}")


def type_text(server, browser, page, run: str, text: str) -> dict:
    """Type ``text`` into the text box; return the attention route's answer once the page shows its tokens."""
    ui.type_text(browser, page, "textarea.textin", text)
    attention = route(server, "attention", run=run, text=text)
    tokens = json.dumps(attention["tokens"])
    ui.wait_for(browser, page, f"$('.tokcount')?.dataset.count === '{len(attention['tokens'])}' && $('svg.lines')"
                f" && JSON.stringify($$('.strip .tok').map(t => t.dataset.token)) === JSON.stringify({tokens})",
                "the typed text")
    return attention


def hover_query(browser, page, query: int) -> list[list]:
    """Point at the query character ``query`` in the lines view; return its lines: [query, key, weight]."""
    ui.hover(browser, page, f'svg.lines rect.hit[data-query="{query}"]')
    ui.wait_for(browser, page, f"$('svg.lines line.att.focused')?.dataset.query === '{query}'", "the hovered lines")
    return ui.tab(browser, page, LINES)


def shown_predictions(browser, page) -> tuple[list[list[list]], list[list[int]]]:
    """The predictions table: per position, its [token, p] by rank; and the [position, rank] cells marked changed."""
    table: dict[int, list] = {}
    cells = sorted(ui.tab(browser, page, PREDICTIONS))
    for pos, _rank, token, p, _changed in cells:
        table.setdefault(pos, []).append([token, p])
    return [table[pos] for pos in sorted(table)], [[pos, rank] for pos, rank, *_, changed in cells if changed]


def as_shown(answer: dict) -> list[list[list]]:
    return [[[guess["token"], guess["p"]] for guess in column] for column in answer["top"]]


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium: apt-get install chromium fonts-noto-cjk")
def test_type_a_text_hover_a_character_and_switch_a_head_off(gpt_run, tmp_path: Path):
    server = tb.TensorBoard(gpt_run.log_dir, tb.free_port(), tmp_path / "tensorboard.log")
    browser = None
    try:
        assert server.wait_for_data(0, ["tinylm"], timeout=90) == {"tinylm"}, tb.last_line(server.log)
        browser = tb.Chromium(tb.find_chromium(), str(tmp_path / "profile"), tmp_path / "chromium.log")
        page = browser.open(f"{server.url}/#tinylm", 1280, 800, timeout=60)

        # opened: the run picked, every layer's and head's map drawn
        run = route(server, "runs")["runs"][0]
        ui.wait_for(browser, page, "$$('canvas.map').length", "attention maps", timeout=60)
        assert ui.tab(browser, page, "$$('select.runs option').map(o => o.value)") == [run["name"]]
        assert ui.tab(browser, page, "$$('canvas.map').length") == run["layers"] * run["heads"] == 4
        first_map_ms = ui.first_map_ms(browser, page)
        print(f"first attention map {first_map_ms} ms after opening TensorBoard's page")  # its target: the bench
        assert first_map_ms > 0

        # typed: one token per character, the space shown as ␣
        attention = type_text(server, browser, page, run["name"], TEXT)
        assert attention["tokens"] == list(TEXT)
        strip = ui.tab(browser, page, "$$('.strip .tok').map(t => t.textContent)")
        assert strip == [("␣" if ch == " " else ch) for ch in TEXT]

        # hovered: the character's lines carry the attention route's weights, written to 2 decimals
        query = 5
        row = attention["attention"][0][0][query]  # the large head is layer 0, head 0 at first
        assert hover_query(browser, page, query) == [[query, key, row[key]] for key in range(query + 1)]
        labels = ui.tab(browser, page, "$$('svg.lines text.w').map(t => t.textContent)")
        assert labels == [f"{weight:.2f}" for weight in row[: query + 1]]
        ui.click(browser, page, '.mapcell[data-layer="1"][data-head="1"]')  # another head, large
        ui.wait_for(browser, page, "$('.lines-title').textContent === 'Layer 1, head 1'", "layer 1, head 1 large")
        row = attention["attention"][1][1][query]
        assert hover_query(browser, page, query) == [[query, key, row[key]] for key in range(query + 1)]

        # a head switched off: the predictions become the predict route's ablated answer, changes marked
        base = route(server, "predict", run=run["name"], text=TEXT, k=5)
        ui.wait_for(browser, page, ui.predictions_ready(0), "the predictions")
        assert shown_predictions(browser, page) == (as_shown(base), [])
        ui.click(browser, page, 'button.switch[data-head="1.0"]')
        ui.wait_for(browser, page, ui.predictions_ready(1), "the predictions with layer 1, head 0 off")
        ablated = route(server, "predict", run=run["name"], text=TEXT, k=5, ablate="1.0")
        assert ablated["ablated"] == ["1.0"] and as_shown(ablated) != as_shown(base)
        shown, marked = shown_predictions(browser, page)
        assert shown == as_shown(ablated)
        assert marked == [[pos, rank] for pos, column in enumerate(ablated["top"]) for rank, guess in enumerate(column)
                          if guess["token"] != base["top"][pos][rank]["token"]]
        assert ui.tab(browser, page, """$('.mapcell[data-layer="1"][data-head="0"] .badge')?.textContent""") == "off"
        assert "layer 1 head 0" in ui.tab(browser, page, "$('.summary').textContent")
        ui.click(browser, page, 'button.switch[data-head="1.0"]')  # on again: the model's own predictions
        ui.wait_for(browser, page, ui.predictions_ready(0), "the predictions with every head on")
        assert shown_predictions(browser, page) == (as_shown(base), [])

        # bad input: the route's one-line message, shown as text (the markup in it is not markup)
        bad = "<b>€</b>"
        ui.type_text(browser, page, "textarea.textin", bad)
        with pytest.raises(urllib.error.HTTPError) as refused:
            route(server, "attention", run=run["name"], text=bad)
        message = json.loads(refused.value.read())["error"]
        shown = ui.wait_for(browser, page, "$$('.msg.error').map(m => m.textContent).join('|')", "an error message")
        assert message in shown
        assert ui.tab(browser, page, "doc.querySelectorAll('main b').length") == 0
    finally:
        if browser:
            browser.close()
        tb.stop(server.proc)


# The switchboard's layout: where its switches sit in its card, and the card beside the predictions'.
SWITCHBOARD = """(() => {
    const card = $('.switchboard').closest('.card'), preds = $('table.preds').closest('.card');
    const style = frameWindow.getComputedStyle(card);
    const contentLeft = card.getBoundingClientRect().left + card.clientLeft + parseFloat(style.paddingLeft);
    const labels = Math.max(...$$('.switches .rowhead').map(e => e.getBoundingClientRect().width));
    const firstSwitch = Math.min(...$$('button.switch').map(e => e.getBoundingClientRect().left));
    return {offset: firstSwitch - contentLeft, labels,
            besidePredictions: Math.abs(card.getBoundingClientRect().top - preds.getBoundingClientRect().top) < 1};
})()"""


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium: apt-get install chromium fonts-noto-cjk")
def test_the_switchboard_stays_beside_the_predictions_with_its_switches_next_to_their_labels(gpt_run, tmp_path):
    """Every head switched off (the longest caption): the switches still start right after the layer labels,
    and the card stays beside the predictions, at 1280 px as at 1000."""
    server = tb.TensorBoard(gpt_run.log_dir, tb.free_port(), tmp_path / "tensorboard.log")
    browser = None
    try:
        assert server.wait_for_data(0, ["tinylm"], timeout=90) == {"tinylm"}, tb.last_line(server.log)
        browser = tb.Chromium(tb.find_chromium(), str(tmp_path / "profile"), tmp_path / "chromium.log")
        for width in (1280, 1000):
            page = browser.open(f"{server.url}/#tinylm", width, 800, timeout=60)
            ui.wait_for(browser, page, ui.predictions_ready(0), "the predictions", timeout=60)
            heads = ui.tab(browser, page, "$$('button.switch').map(b => b.dataset.head)")
            for off, head in enumerate(heads, start=1):
                ui.click(browser, page, f'button.switch[data-head="{head}"]')
                ui.wait_for(browser, page, ui.predictions_ready(off), f"the predictions with {off} head(s) off")
            layout = ui.tab(browser, page, SWITCHBOARD)
            assert layout["offset"] <= layout["labels"] + 12, layout  # 4 px gap, the label's 4 px padding, slack
            assert layout["besidePredictions"], layout
            browser.close_page(page)
    finally:
        if browser:
            browser.close()
        tb.stop(server.proc)
