"""The logit lens (``tinylm.analysis.lens``) on the subject's probe, a decoder's or an encoder-decoder's:
``logit_lens.json``, its figure first in REPORT.md, a line per block."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tinylm.analysis.figures import grid_figure, positions
from tinylm.analysis.lens import logit_lens
from tinylm.analysis.registry import ReportFigure, Result, Subject, register
from tinylm.plots.figures import visible

if TYPE_CHECKING:
    from matplotlib.figure import Figure

READING = (
    "Logit lens", "Each row is the model cut short after one block: its residual stream read through the "
    "final LayerNorm and the output head, as if no block followed. Each column is a position of the text; "
    "the cell shows the character predicted to come next and is coloured by that prediction's probability. "
    "The last row is the model's own prediction. Where a column turns bright only in the later rows, the "
    "later blocks are what make that prediction; the loss on the left falls as the rows get better.")


@register("logit_lens", models=("decoder", "encoder-decoder"), order=20, figure_order=0)
def lens_analysis(subject: Subject) -> Result:
    lens = logit_lens(subject.probe, subject.tokenizer)
    lines = [f"after block {layer['layer']}: loss {layer['loss']:.4f}, predicts {visible(layer['top1'][-1])!r} "
             f"({layer['prob'][-1]:.2f}) after the last token" for layer in lens["layers"]]
    return Result(lens, [ReportFigure("logit_lens", lens_figure(lens, subject.note), *READING)], lines)


def lens_figure(lens: dict, note: str) -> Figure:
    """A row per block, a column per position; each cell the top-1 prediction of the next token read
    after that block, coloured by its probability."""
    layers = lens["layers"]
    probs = np.array([layer["prob"] for layer in layers])  # (L, T)
    text = [[visible(t) or "?" for t in layer["top1"]] for layer in layers]
    rows = [f"after block {layer['layer']}  loss {layer['loss']:.2f}" for layer in layers]
    return grid_figure(probs, rows, positions(lens["tokens"]),
                       ["Logit lens: the next token predicted after each block", *([note] if note else [])],
                       ("position (the token read last)", "block"), "probability of the top-1 token", 0.0, 1.0,
                       cell_text=text)
