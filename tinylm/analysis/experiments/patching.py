"""Activation patching (``tinylm.analysis.patching``) from the text's run into corrupt_text's, on a
decoder: ``patching.json``, the residual stream's and the heads' figures, one table line."""

from __future__ import annotations

import math

import numpy as np
import torch

from tinylm.analysis.figures import grid_figure, head_grid, positions
from tinylm.analysis.lens import pieces
from tinylm.analysis.patching import patching
from tinylm.analysis.probe import Probe
from tinylm.analysis.registry import ReportFigure, Result, Subject, register
from tinylm.plots.figures import visible

RESIDUAL = (
    "Activation patching, residual stream", "The model reads the corrupt text, but the residual stream "
    "after one block at one position is copied from the clean text's run. The cell is the share of the "
    "clean answer's logit (after the last position) that this one copy brings back: 1 means the "
    "information the answer needs is all there, 0 that it is not used. The bright path shows where the "
    "information travels from the changed position to the last one.")
HEADS = (
    "Activation patching, heads", "As above, but copying one head's output (at every position) from the "
    "clean run: the heads whose cells are bright move the information the clean answer needs.")


@register("patching", needs=("corrupt_text",), order=30)
def patching_analysis(subject: Subject) -> Result:
    patch = patching(subject.probe, Probe.of_text(subject.model, torch.tensor(subject.corrupt)[None]))
    patch["answer_text"] = subject.tokenizer.decode_piece([patch["answer"]])
    tokens = pieces(subject.tokenizer, subject.probe.tokens[0].tolist())
    return Result(patch, patching_figures(patch, tokens, subject.note), [patch_line(patch)])


def patching_figures(patch: dict, tokens: list[str], note: str) -> list[ReportFigure]:
    """The residual stream (blocks × positions) and the heads (layer × head): the share of the clean
    answer's logit each patch restores."""
    values = np.array([[np.nan if v is None else v for v in row] for row in patch["residual"]])  # (L, T)
    text = [["–" if math.isnan(v) else f"{v:.1f}" for v in row] for row in values]
    title = [f"Activation patching: clean → corrupt, answer {visible(patch['answer_text'])!r}", note]
    residual = grid_figure(values, [f"after block {i}" for i in range(len(values))], positions(tokens), title,
                           ("position patched", "residual stream"), "share of the clean logit restored",
                           min(0.0, float(np.nanmin(values, initial=0))), max(1.0, float(np.nanmax(values, initial=1))),
                           cell_text=text)
    return [ReportFigure("patching_residual", residual, *RESIDUAL),
            ReportFigure("patching_heads", head_grid(patch["heads"], "restored", note=note), *HEADS)]


def patch_line(patch: dict) -> str:
    best = max((h for h in patch["heads"] if h["restored"] is not None), key=lambda h: h["restored"], default=None)
    head = f"; the head that restores most: {best['layer']}.{best['head']} ({best['restored']:.2f})" if best else ""
    return (f"patching: clean answer {visible(patch['answer_text'])!r}, logit {patch['clean_logit']:.3f} clean, "
            f"{patch['corrupt_logit']:.3f} corrupt{head}")
