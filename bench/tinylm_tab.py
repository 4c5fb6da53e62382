"""Driving the tinylm tab (tinylm/explorer) in the headless Chromium of tensorboard_screenshots.py:
its page lives in an iframe of TensorBoard's page; this module finds it, reads it, and gives it real
mouse and keyboard input (DevTools ``Input`` events at the element's place on the screen), as a user
would. Used by bench/tensorboard_screenshots.py (the tab's screenshots) and tests/test_explorer_browser.py.

Every function takes the ``Chromium`` of tensorboard_screenshots.py and a page (session id) that has
TensorBoard open at ``#tinylm``. A page expression here runs with ``doc`` (the tab's document),
``$``/``$$`` (querySelector/All in it) and ``frameWindow`` defined.
"""

from __future__ import annotations

import json
import time

# Prefixed to every expression: the tab's iframe (TensorBoard names the plugin in its src).
FRAME = """
const frame = deepAll('iframe').find(f => (f.getAttribute('src') || '').includes('name=tinylm'));
const doc = frame && frame.contentDocument;
const frameWindow = frame && frame.contentWindow;
const $ = sel => doc ? doc.querySelector(sel) : null;
const $$ = sel => doc ? [...doc.querySelectorAll(sel)] : [];
"""
# How much the tab shows: attention maps, lines, table cells and chart lines (0: nothing yet).
CONTENT = "$$('canvas.map, svg.lines line, table.grid td, svg.chart polyline').length"


class TabError(Exception):
    """The tab did not show what was waited for in time."""


def tab(browser, page: str, expression: str):
    """The value of ``expression`` evaluated with the tab's document at hand (null before the tab exists)."""
    return browser.evaluate(page, f"(() => {{ {FRAME} return ({expression}); }})()")


def wait_for(browser, page: str, expression: str, what: str, timeout: float = 30):
    """Poll ``expression`` until it is truthy; return its value (true for an element)."""
    deadline = time.monotonic() + timeout
    while True:
        value = tab(browser, page, f"doc ? (v => v && v.nodeType ? true : v)({expression}) : null")  # an element: found
        if value:
            return value
        if time.monotonic() > deadline:
            raise TabError(f"the tinylm tab showed no {what} in {timeout:.0f} s")
        time.sleep(0.2)


def where(browser, page: str, selector: str) -> tuple[float, float]:
    """The middle of the tab's element ``selector`` on the screen, scrolled into view if needed."""
    found = tab(browser, page, f"""(el => {{
        if (!el) return null;
        const r0 = el.getBoundingClientRect();
        if (r0.top < 0 || r0.bottom > frameWindow.innerHeight) el.scrollIntoView({{block: 'center'}});
        const f = frame.getBoundingClientRect(), r = el.getBoundingClientRect();
        return [f.left + frame.clientLeft + r.left + r.width / 2, f.top + frame.clientTop + r.top + r.height / 2];
    }})($({json.dumps(selector)}))""")
    if not found:
        raise TabError(f"no {selector} in the tinylm tab")
    return found[0], found[1]


def hover(browser, page: str, selector: str) -> None:
    x, y = where(browser, page, selector)
    browser.send("Input.dispatchMouseEvent", page, type="mouseMoved", x=x, y=y)


def click(browser, page: str, selector: str) -> None:
    x, y = where(browser, page, selector)
    browser.send("Input.dispatchMouseEvent", page, type="mouseMoved", x=x, y=y)
    for kind in ("mousePressed", "mouseReleased"):
        browser.send("Input.dispatchMouseEvent", page, type=kind, x=x, y=y, button="left", clickCount=1)


def type_text(browser, page: str, selector: str, text: str) -> None:
    """Click into the text box, select what it holds and type ``text`` over it."""
    click(browser, page, selector)
    tab(browser, page, f"$({json.dumps(selector)}).select()")
    browser.send("Input.insertText", page, text=text)


def first_map_ms(browser, page: str, since: str = "page") -> float | None:
    """Milliseconds to the tab's first attention map on screen (the mark the tab sets once that map has
    been painted), or None before it: from opening TensorBoard's page (``since="page"``: TensorBoard's own
    page loads first), or from the tab's frame starting to load (``since="tab"``: the tab's own part)."""
    origin = "performance.timeOrigin" if since == "page" else "frameWindow.performance.timeOrigin"
    return tab(browser, page, f"""(() => {{
        const mark = frameWindow && frameWindow.performance.getEntriesByName('tinylm-first-map')[0];
        return mark ? Math.round(frameWindow.performance.timeOrigin + mark.startTime - {origin}) : null;
    }})()""")


def scroll_to(browser, page: str, selector: str | None) -> None:
    """Scroll the tab so that ``selector``'s top is at the top of its frame (None: to the very top)."""
    if selector is None:
        tab(browser, page, "frameWindow.scrollTo(0, 0)")
    else:
        tab(browser, page, f"frameWindow.scrollTo(0, $({json.dumps(selector)}).getBoundingClientRect().top"
                           " + frameWindow.scrollY - 8)")


def predictions_ready(off: int) -> str:
    """An expression: the predictions with ``off`` heads switched off are on the page."""
    return (f"$('.summary') && !$('.preds')?.closest('.card-body')?.querySelector('.msg.loading')"
            f" && $$('button.switch.off').length === {off} && $('.summary').textContent.startsWith("
            f"{json.dumps('Every head' if off == 0 else f'{off} head')})")


# ------------------------------------------------------------------------------------------------
# The views the screenshots show: each brings the tab to one view and returns when it is on screen.


def show_text(browser, page: str) -> None:
    """Your text with a character hovered: its lines to the keys, weights written."""
    wait_for(browser, page, "$('.tokcount')?.dataset.count && $('svg.lines') && $$('canvas.map').length",
                     "attention maps")
    tokens = int(tab(browser, page, "$('.tokcount').dataset.count"))
    hover(browser, page, f'svg.lines rect.hit[data-query="{min(tokens - 1, 6)}"]')
    wait_for(browser, page, "$('svg.lines line.att.focused')", "hovered lines")
    scroll_to(browser, page, None)


def show_ablation(browser, page: str) -> None:
    """Heads switched off, one after the other, until a top-1 prediction changes (at most every head);
    the head grid and the predictions in view."""
    wait_for(browser, page, predictions_ready(0), "predictions")
    switches = tab(browser, page, "$$('button.switch').map(b => b.dataset.head)")
    for off, head in enumerate(reversed(switches), start=1):  # the last layer's heads first
        click(browser, page, f'button.switch[data-head="{head}"]')
        wait_for(browser, page, predictions_ready(off), f"predictions with {off} head(s) off")
        if int(tab(browser, page, "$('.summary').dataset.changed")):
            break
    scroll_to(browser, page, ".headgrid")


def show_lens(browser, page: str) -> None:
    wait_for(browser, page, "$('table.lens td')", "logit lens")
    scroll_to(browser, page, ".preds")


def show_view(name: str, ready: str):
    def show(browser, page: str) -> None:
        wait_for(browser, page, f"$('button.tab[data-view={name}]')", f"{name} button")
        if not tab(browser, page, f"$('button.tab[data-view={name}]').classList.contains('active')"):
            click(browser, page, f"button.tab[data-view={name}]")
        wait_for(browser, page, ready, f"{name} view")
        scroll_to(browser, page, None)
    return show


def show_translation(browser, page: str, source: str | None = None) -> None:
    """A translation run's translation and cross-attention (of ``source``, typed into the source box;
    None: the run's own example source, which it opens with), a target character hovered. The view is
    ready once its source box answers: a translation, an error or a note (an empty box)."""
    show_view("translation", "$('.target-text') || $('.translation .msg:not(.loading)')")(browser, page)
    if source is not None:
        type_text(browser, page, "textarea.textin", source)
        wait_for(browser, page, f"$('.target-text') && $('textarea.textin').value === {json.dumps(source)}"
                 " && !$('.translation .msg')", "the typed source's translation")
    if tab(browser, page, "!!$('svg.lines rect.hit')"):
        hover(browser, page, 'svg.lines rect.hit[data-query="1"]')
        wait_for(browser, page, "$('svg.lines line.att.focused')", "hovered lines")
    scroll_to(browser, page, None)


# For a text run and for a translation run: (view name, how to show it), shot in this order. A translation
# run logs no probe attention and no head scores (those are the text task's views): only its translation.
TEXT_VIEWS = (("text", show_text), ("ablation", show_ablation), ("lens", show_lens),
              ("training", show_view("training", "$('.steplabel') || $('.msg.note') || $('.msg.error')")),
              ("heads", show_view("heads", "$('.score svg.chart') || $('.msg.note') || $('.msg.error')")))
TRANSLATION_VIEWS = (("translation", show_translation),)
