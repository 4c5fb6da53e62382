"""Screenshots of the saved circuits and neurons views (``lm.show_circuits``, ``lm.show_neurons``) in headless
Chromium, each brought on screen as a user would: docs/screenshots/circuits-{dla,ov,qk,composition,neurons}.png.

Each page is opened from a file; it must show its view with no console error and request nothing but itself
(exit 1 otherwise). tests/test_standalone_circuits.py drives the pages with ``show_ov``.

Regenerate the screenshots (from the repository root; the model as bench/notebook_views.py trains it):

    python train.py experiment=induction_heads data.path=/tmp/repeats.txt seed=1 hydra.run.dir=/tmp/views/induction
    python bench/circuits_views.py /tmp/views/induction/checkpoints/last.ckpt --out docs/screenshots \\
        --text k3xq2ahk3xq2ah0cq5zt0cq5zt --head 1.1 --qk-head 0.0 --position 10

A translation run (an encoder-decoder: the source's greedy translation attributed, a cross-attention head):

    python train.py experiment=numbers_zh trainer.max_steps=300 hydra.run.dir=/tmp/views/numbers
    python bench/circuits_views.py /tmp/views/numbers/checkpoints/last.ckpt --out docs/screenshots \
        --prefix circuits-numbers --only dla --head cross1.0 --text 三千零五 --position 1
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import notebook_views as nv

READY = ("$('.dla-grid td') && $('canvas.heatmap[data-name=ov]') && "
         "($('table.composition-grid') || $('.composition .msg.note'))")  # an encoder-decoder: a note


def show_dla(page: nv.Page, position: int | None = None, summed: bool = False) -> dict:
    """The attribution at ``position`` (a character of the strip clicked), or summed over the text."""
    page.wait_for(READY, "the attribution, the OV circuit and the composition")
    if position is not None:
        page.click(f'.dla-strip .tok[data-pos="{position}"]')
        page.wait_for(f"$('.dla-strip .tok.picked')?.dataset.pos === '{position}'", f"position {position} picked")
    if summed:
        page.click("button.dla-mode")
        page.wait_for("$('.dla-about').textContent.startsWith('summed')", "the sum over the text")
    page.js("window.scrollTo(0, 0)")
    return {"about": page.js("$('.dla-about').firstChild.textContent"),
            "cells": page.js("$$('.dla-grid td[data-part]').length"),
            "rows": page.js("$$('.dla-grid tr').map(r => [r.querySelector('th')?.textContent, [...r.querySelectorAll("
                            "'td[data-part]')].map(c => c.dataset.part)]).filter(r => r[1].length)")}  # row: its parts


def pick_head(page: nv.Page, head: str | None) -> None:
    page.wait_for(READY, "the circuits view")
    if head is not None:
        page.click(f'td.pick[data-head="{head}"]')
        layer, index = head.removeprefix("cross").split(".")
        title = f"{'cross-attention ' if head.startswith('cross') else ''}layer {layer}, head {index}"
        page.wait_for(f"$('.head-title').textContent === '{title}' && "
                      "$('canvas.heatmap[data-name=ov]') && $('canvas.heatmap[data-name=qk]')",
                      f"head {head}'s circuits")


def hover_cell(page: nv.Page, name: str, row: int, col: int) -> None:
    """The pointer on the cell (row, col) of the heatmap ``name``."""
    x, y = page.js(f"""(c => {{
        const r = c.getBoundingClientRect(), pad = Number(c.dataset.pad), cell = Number(c.dataset.cell);
        return [r.left + pad + ({col} + 0.5) * cell, r.top + pad + ({row} + 0.5) * cell];
    }})($('canvas.heatmap[data-name={name}]'))""")
    page.browser.send("Input.dispatchMouseEvent", page.session, type="mouseMoved", x=x, y=y)


def show_ov(page: nv.Page, head: str | None = None) -> dict:
    """A head's OV circuit, a cell of its diagonal hovered (the middle row's)."""
    pick_head(page, head)
    page.scroll_to(".ov")
    middle = int(page.js("Number($('canvas.heatmap[data-name=ov]').dataset.rows)")) // 2
    hover_cell(page, "ov", middle, middle)
    page.wait_for("$('.ov .readout').textContent.startsWith('attending')", "the hovered cell's readout")
    return {"copying": page.js("$('.ov .summary').dataset.copying"),
            "drawn": page.js("$('canvas.heatmap[data-name=ov]').dataset.drawn === 'true'"),
            "readout": page.js("$('.ov .readout').textContent")}


def show_qk(page: nv.Page, head: str | None = None) -> dict:
    pick_head(page, head)
    page.scroll_to(".qk")
    return {"maps": page.js("$$('.qk canvas.heatmap').length"), "note": page.js("$('.qk .msg')?.textContent ?? null")}


def show_composition(page: nv.Page) -> dict:
    page.wait_for(READY, "the composition")
    page.scroll_to(".composition")
    page.js("window.scrollBy(0, -36)")  # its card's title too
    return {"cells": page.js("$$('table.composition-grid td[data-value]').length")}


def show_neurons(page: nv.Page, layer: int | None = None) -> dict:
    """The neuron with the strongest activation of ``layer`` (the last by default) clicked."""
    page.wait_for("$('button.neuron')", "the neurons")
    if layer is None:
        layer = page.js("$$('.layer-tabs .tab').length") - 1
    page.click(f'.layer-tabs .tab[data-layer="{layer}"]')
    page.wait_for(f"$('.layer-tabs .tab.active')?.dataset.layer === '{layer}'", f"layer {layer}")
    best = page.js("$$('button.neuron').sort((a, b) => b.dataset.activation - a.dataset.activation)[0].dataset.neuron")
    page.click(f'button.neuron[data-neuron="{best}"]')
    page.wait_for("$('table.neuron-examples tr[data-position]')", "the neuron's examples")
    page.js("window.scrollTo(0, 0)")
    return {"layer": layer, "neuron": best, "examples": page.js("$$('table.neuron-examples tr[data-position]').length")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    parser.add_argument("--text", default=None, help="the text (default: the run's probe)")
    parser.add_argument("--head", default=None, help="the head whose OV circuit is shot, e.g. 1.1")
    parser.add_argument("--qk-head", default=None, help="the head whose QK circuits are shot (default: --head)")
    parser.add_argument("--only", default=None, help="shoot these only, e.g. qk,neurons")
    parser.add_argument("--prefix", default="circuits", help="the screenshots' names: PREFIX-dla.png, ...")
    parser.add_argument("--position", type=int, default=None, help="the position of circuits-dla.png")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args(argv)

    from tinylm.checkpoint import load_model
    from tinylm.explorer import standalone

    loaded = load_model(args.checkpoint)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="circuits-views-") as scratch:
        scratch = Path(scratch)
        shown = sorted({head for head in (args.head, args.qk_head) if head}) or None  # None: as many as it holds
        circuits = standalone.circuits_view(loaded, args.text, heads=shown).save(scratch / "circuits.html").as_uri()
        neurons = None if args.only and "neurons" not in args.only.split(",") else (  # none for a translation
            standalone.neurons_view(loaded, args.text).save(scratch / "neurons.html").as_uri())
        browser = nv.Browser(nv.tb.find_chromium(), str(scratch / "profile"), scratch / "chromium.log")
        try:
            for name, url, show, height in (
                    ("dla", circuits, lambda page: show_dla(page, args.position), args.height),
                    ("ov", circuits, lambda page: show_ov(page, args.head), args.height),
                    ("qk", circuits, lambda page: show_qk(page, args.qk_head or args.head), args.height),
                    ("composition", circuits, show_composition, 420),  # the card alone
                    ("neurons", neurons, show_neurons, args.height)):
                if args.only and name not in args.only.split(","):
                    continue
                results.append(nv.shoot(browser, url, None, show, args.out / f"{args.prefix}-{name}.png",
                                        args.width, height))
        finally:
            browser.close()
    for result in results:
        print(json.dumps(result, ensure_ascii=False), flush=True)
    return 0 if all(not r["errors"] and not r["foreign_requests"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
