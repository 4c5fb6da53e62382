"""The saved views (tinylm/explorer/standalone.py: ``lm.show``, ``lm.show_heads``) in headless Chromium: a
view's file opened by ``file://`` and a page of notebook cells (each view's ``_repr_html_``, as Jupyter puts
it in the page), driven with real mouse input over the DevTools pipe of tensorboard_screenshots.py, with
every console error, uncaught exception and request the page makes written down.

    python bench/notebook_views.py CHECKPOINT --out docs/screenshots [--text TEXT] [--head L.H] [--query Q]

For a text model it writes ``<out>/notebook-show.png`` (a notebook cell of ``lm.show(TEXT)``, head L.H
large and its Q-th character hovered: that character's attention lines, with their weights),
``notebook-ablation.png`` (each head switched off alone until a top-1 prediction changes: the head grid and
the predictions, the changed ones marked), ``notebook-lens.png`` (the logit lens) and ``notebook-heads.png``
(``lm.show_heads()``); for a translation model ``notebook-translation.png`` (``lm.show(TEXT)``, TEXT its
source). It prints one JSON line per screenshot, with the page's errors and the requests it made that are not
its own file (both must be empty: exit 1 otherwise). tests/test_standalone_views.py drives the pages with it.

Regenerate the screenshots (from the repository root; a few minutes on 2 cores, most of it training):

    python -c "import random; r = random.Random(0); a = 'abcdefghijklmnopqrstuvwxyz012345'; print(''.join((s := \
''.join(r.choice(a) for _ in range(r.randint(5, 10)))) * 2 for _ in range(13000)), end='')" > /tmp/repeats.txt
    python train.py experiment=induction_heads data.path=/tmp/repeats.txt seed=1 hydra.run.dir=/tmp/views/induction
    python bench/notebook_views.py /tmp/views/induction/checkpoints/last.ckpt --out docs/screenshots \
        --text k3xq2ahk3xq2ah0cq5zt0cq5zt --head 1.1 --query 10
    python train.py experiment=numbers_zh trainer.max_steps=300 hydra.run.dir=/tmp/views/numbers
    python bench/notebook_views.py /tmp/views/numbers/checkpoints/last.ckpt --out docs/screenshots --text 三千零五
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from pathlib import Path

import tensorboard_screenshots as tb

OWN_URLS = ("file:", "about:", "data:", "blob:")  # what a saved page may load: itself
# A page expression runs with ``doc`` (the view's document: the page's, or its iframe's), ``$``, ``$$`` and
# ``frame`` (the iframe, or null) defined.
IN_PAGE = """
const frame = {frame} === null ? null : document.querySelectorAll('iframe')[{frame}];
const doc = frame ? frame.contentDocument : document;
const $ = sel => doc ? doc.querySelector(sel) : null;
const $$ = sel => doc ? [...doc.querySelectorAll(sel)] : [];
"""


class Browser(tb.Chromium):
    """tensorboard_screenshots' Chromium, which also writes down the page's errors and every URL it requests."""

    def __init__(self, exe: str, profile: str, log: Path):
        super().__init__(exe, profile, log)
        self.errors: list[str] = []
        self.urls: list[str] = []

    def _note(self, message: dict) -> None:
        super()._note(message)
        event, params = message.get("method"), message.get("params", {})
        if event == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
        elif event == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(" ".join(str(arg.get("value", arg.get("description", ""))) for arg in params["args"]))
        elif event == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(params["entry"]["text"])
        elif event == "Network.requestWillBeSent":
            self.urls.append(params["request"]["url"])

    def open(self, url: str, width: int, height: int, timeout: float) -> str:
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        page = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Emulation.setDeviceMetricsOverride", page, width=width, height=height, deviceScaleFactor=1,
                  mobile=False)
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", page)
        self.send("Page.navigate", page, url=url)
        deadline = time.monotonic() + timeout
        while page not in self._loaded:
            self._note(self._next_message(deadline, f"load event from {url}"))
        return page

    def foreign(self) -> list[str]:
        """The URLs requested that are not the page's own (a file, data: or blob:)."""
        return [url for url in self.urls if not url.startswith(OWN_URLS)]


class Page:
    """One saved view on screen: the page itself (``frame`` None) or the ``frame``-th iframe of it."""

    def __init__(self, browser: Browser, session: str, frame: int | None = None):
        self.browser, self.session, self.frame = browser, session, frame

    def js(self, expression: str):
        prefix = IN_PAGE.replace("{frame}", "null" if self.frame is None else str(self.frame))
        return self.browser.evaluate(self.session, f"(() => {{ {prefix} return ({expression}); }})()")

    def wait_for(self, expression: str, what: str, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(f"doc ? (v => v && v.nodeType ? true : v)({expression}) : null")
            if value:
                return value
            if time.monotonic() > deadline:
                raise tb.ScreenshotError(f"the saved view showed no {what} in {timeout:.0f} s; its errors: "
                                         f"{self.browser.errors}")
            time.sleep(0.1)

    def where(self, selector: str) -> tuple[float, float]:
        """The middle of ``selector`` on the screen, scrolled into view first if it is not."""
        found = self.js(f"""(el => {{
            if (!el) return null;
            const seen = el.getBoundingClientRect(), top = (frame ? frame.getBoundingClientRect().top : 0) + seen.top;
            if (top < 0 || top + seen.height > window.innerHeight) el.scrollIntoView({{block: 'center'}});
            const f = frame ? frame.getBoundingClientRect() : {{left: 0, top: 0}}, r = el.getBoundingClientRect();
            return [f.left + r.left + r.width / 2, f.top + r.top + r.height / 2];
        }})($({json.dumps(selector)}))""")
        if not found:
            raise tb.ScreenshotError(f"no {selector} in the saved view")
        return found[0], found[1]

    def hover(self, selector: str) -> None:
        x, y = self.where(selector)
        self.browser.send("Input.dispatchMouseEvent", self.session, type="mouseMoved", x=x, y=y)

    def click(self, selector: str) -> None:
        x, y = self.where(selector)
        self.browser.send("Input.dispatchMouseEvent", self.session, type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.browser.send("Input.dispatchMouseEvent", self.session, type=kind, x=x, y=y, button="left",
                              clickCount=1)

    def scroll_to(self, selector: str) -> None:
        """The page scrolled so that ``selector`` (in the view, or the iframe itself) is near the top."""
        self.js(f"""(el => {{
            const top = (frame ? frame.getBoundingClientRect().top : 0) + el.getBoundingClientRect().top;
            const header = frame ? 0 : doc.querySelector('header')?.offsetHeight || 0; // sticky, over the page
            window.scrollBy(0, top - 8 - header);
        }})($({json.dumps(selector)}))""")


def notebook_page(views: list, titles: list[str]) -> str:
    """A page of notebook cells, each a title (the code) and a view's ``_repr_html_`` as its output."""
    cells = "\n".join(f'<div class="cell"><pre class="code">In [{i + 1}]: {title}</pre>'
                      f'<div class="output">{view._repr_html_()}</div></div>'
                      for i, (view, title) in enumerate(zip(views, titles, strict=True)))
    return ("<!doctype html><html><head><meta charset='utf-8'><style>body {margin: 0; padding: 12px 24px;"
            " font: 13px monospace; background: #fff;} .cell {margin-bottom: 14px;} .code {background: #f5f5f5;"
            " border: 1px solid #e0e0e0; padding: 6px 10px; margin: 0 0 6px;} .output {padding-left: 8px;}"
            f"</style></head><body>{cells}</body></html>")


# ---------------------------------------------------------------------------------------------------
# What each screenshot shows, each brought on screen as a user would

TEXT_READY = "$$('canvas.map').length && $('svg.lines') && $('table.preds td') && $('table.lens td')"


def show_text(page: Page, head: str | None = None, query: int | None = None) -> dict:
    """The text view with ``head`` ("layer.head") large, else the first, and its ``query``-th character hovered."""
    page.wait_for(TEXT_READY, "attention maps, lines, predictions and the logit lens")
    if head is not None:
        layer, index = head.split(".")
        page.click(f'.mapcell[data-layer="{layer}"][data-head="{index}"]')
        page.wait_for(f"$('.lines-title').textContent === 'Layer {layer}, head {index}'", f"head {head} large")
    tokens = int(page.js("$('.tokcount').dataset.count"))
    query = min(tokens - 1, 6 if query is None else query)
    page.js("window.scrollTo(0, 0)")  # the cell's top: its code, the view's header
    page.hover(f'svg.lines rect.hit[data-query="{query}"]')
    page.wait_for(f"$('svg.lines line.att.focused')?.dataset.query === '{query}'", "the hovered lines")
    return {"maps": page.js("$$('canvas.map').length"), "hovered": query,
            "lines": page.js("$$('svg.lines line.att.focused').length")}


def show_ablation(page: Page) -> dict:
    """Each head switched off alone, the last layer's first, until a top-1 prediction changes."""
    page.wait_for(TEXT_READY, "the text view")
    switches = page.js("$$('button.switch').map(b => b.dataset.head)")
    for head in reversed(switches):
        page.click(f'button.switch[data-head="{head}"]')
        page.wait_for("$$('button.switch.off').length === 1 && $('.summary')?.textContent.startsWith('1 head')"
                      " && $('table.lens td') && !$('.card-body.stale')", f"the predictions with {head} off")
        if int(page.js("$('.summary').dataset.changed")) or head == switches[0]:
            break
        page.click(f'button.switch[data-head="{head}"]')
        page.wait_for("$('.summary')?.textContent.startsWith('Every head')", "the predictions with every head on")
    page.scroll_to(".text-view > .cols")
    return {"off": page.js("$$('button.switch.off').map(b => b.dataset.head)"),
            "changed": int(page.js("$('.summary').dataset.changed"))}


def show_lens(page: Page) -> dict:
    page.wait_for("$('table.lens td')", "the logit lens")
    page.scroll_to("table.preds")
    return {"lens_cells": page.js("$$('table.lens td').length")}


def show_heads(page: Page) -> dict:
    page.wait_for("$('.score svg.chart') && $('table.headtable td')", "the head scores")
    return {"scores": page.js("$$('.score').length"), "cells": page.js("$$('table.headtable td').length")}


def show_translation(page: Page) -> dict:
    page.wait_for("$('.target-text') || $('.translation .msg:not(.loading)')", "the translation")
    if rows := page.js("$$('svg.lines rect.hit').length"):
        page.hover(f'svg.lines rect.hit[data-query="{min(rows - 1, 1)}"]')
        page.wait_for("$('svg.lines line.att.focused')", "the hovered lines")
    return {"translation": page.js("$('.target-text')?.textContent ?? null"),
            "maps": page.js("$$('canvas.map').length")}


def shoot(browser: Browser, url: str, frame: int | None, show, out: Path, width: int, height: int) -> dict:
    """Open ``url``, bring a view on screen with ``show``, save a screenshot to ``out``; its JSON line."""
    started, before = time.monotonic(), len(browser.errors)
    session = browser.open(url, width, height, timeout=60)
    try:
        shown = show(Page(browser, session, frame))
        time.sleep(0.3)  # the hover's repaint
        size = tb.save_png(browser.screenshot(session), out, max_kb=400)
    finally:
        browser.close_page(session)
    return {"file": str(out), "size": size, **shown, "errors": browser.errors[before:],
            "foreign_requests": browser.foreign(), "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    parser.add_argument("--text", default=None, help="the text of lm.show (default: the run's probe)")
    parser.add_argument("--head", default=None, help="the head shown large in notebook-show.png, e.g. 1.1")
    parser.add_argument("--query", type=int, default=None, help="the character hovered there (default: the 7th)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args(argv)

    from tinylm.checkpoint import load_model
    from tinylm.explorer import standalone

    loaded = load_model(args.checkpoint)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="notebook-views-") as scratch:
        scratch = Path(scratch)
        browser = Browser(tb.find_chromium(), str(scratch / "profile"), scratch / "chromium.log")
        try:
            if loaded.task == "translation":
                view = standalone.translation_view(loaded, args.text)
                cell = scratch / "notebook.html"
                source = json.dumps(view.data["run"]["text"], ensure_ascii=False)
                cell.write_text(notebook_page([view], [f"lm.show({source})"]), encoding="utf-8")
                results.append(shoot(browser, cell.as_uri(), 0, show_translation,
                                     args.out / "notebook-translation.png", args.width, args.height))
            else:
                text, heads = standalone.text_view(loaded, args.text), standalone.heads_view(loaded)
                shown = json.dumps(text.data["run"]["text"], ensure_ascii=False)
                cell = scratch / "notebook.html"
                cell.write_text(notebook_page([text, heads], [f"lm.show({shown})", "lm.show_heads()"]),
                                encoding="utf-8")
                saved = text.save(scratch / "view.html")
                shown_text = functools.partial(show_text, head=args.head, query=args.query)
                for name, url, frame, show in (("show", cell.as_uri(), 0, shown_text),
                                               ("ablation", saved.as_uri(), None, show_ablation),
                                               ("lens", saved.as_uri(), None, show_lens),
                                               ("heads", heads.save(scratch / "heads.html").as_uri(), None,
                                                show_heads)):
                    results.append(shoot(browser, url, frame, show, args.out / f"notebook-{name}.png", args.width,
                                         args.height))
        finally:
            browser.close()
    for result in results:
        print(json.dumps(result, ensure_ascii=False), flush=True)
    return 0 if all(not r["errors"] and not r["foreign_requests"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
