"""Figures of the model's internals: attention heatmaps and the causal mask, as matplotlib figures.

The heatmaps show a GPT's causal self-attention, and an encoder-decoder's encoder self-attention
and cross-attention (target characters on the rows, source characters on the columns); where
each part of a figure goes is ``tinylm.plots.layout``. Each task draws its own figures with these
(``tinylm.tasks.translation.figures``: a translation's).

Figures are plain ``matplotlib.figure.Figure`` objects drawn by the Agg canvas, never pyplot:
pyplot keeps every figure in a global registry until closed, which leaks memory over a long run,
and it would pick an interactive backend on a desktop. A figure here is garbage once unreferenced.

matplotlib and the Chinese font (see ``tinylm.plots.rendering``) are loaded when the first figure is
made, not when this module is imported: the training callbacks import it for every run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from tinylm.models import LanguageModel
from tinylm.models.base import eval_no_grad
from tinylm.plots.layout import COLORBAR_LABEL, KEY_TITLE, LABEL_PT, QUERY_TITLE, Layout, choose_layout

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.text import Text

# Characters that would be invisible (or break a TSV/table) as labels, and what to show instead:
# symbols the figures' fonts have (neither DejaVu Sans nor Noto Sans SC has the control pictures
# such as U+240D ␍, which would be drawn as a missing glyph, with a warning), or an escape.
VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "\\r"}


def visible(piece: str) -> str:
    """A label for one token's text that can be seen: whitespace and control characters named
    (``\\r``, ``U+001B``), never drawn as themselves."""
    if piece in VISIBLE:
        return VISIBLE[piece]
    if len(piece) == 1:
        return piece if piece.isprintable() else f"U+{ord(piece):04X}"
    return "".join(ch if ch.isprintable() else visible(ch) for ch in piece)  # a BPE piece such as "a\r\n"


def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """One visible label per token id. Bytes that are only part of a UTF-8 character show as hex."""
    return [visible(tokenizer.decode_piece([i])) or f"0x{i:02X}" for i in ids]


# --------------------------------------------------------------------------------------------
# Pixels, drawn by tinylm.plots.rendering: the first call loads matplotlib and the font


def render_rgb(fig: Figure) -> np.ndarray:
    """Draw ``fig`` with Agg and return its pixels, (H, W, 3) uint8, for TensorBoard's add_image."""
    from tinylm.plots.rendering import render_rgb
    return render_rgb(fig)


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG file (creating its folder), drawn by Agg like ``render_rgb``."""
    from tinylm.plots.rendering import save_png
    return save_png(fig, path)


# --------------------------------------------------------------------------------------------
# Attention


def attention_weights(model: LanguageModel, ids: torch.Tensor) -> list[torch.Tensor]:
    """The model's attention maps for ``ids`` (T,): one (h, T, T) per layer.

    The pass runs in eval mode (no dropout) without autograd, and the model's own mode is
    restored afterwards.
    """
    with eval_no_grad(model):
        weights = model.attention_maps(ids.unsqueeze(0))  # per layer (1, h, T, T)
    return [w[0].float().cpu() for w in weights]  # (h, T, T) each


# kind -> (title lines, with the layer's number; axis titles of the keys and the queries; future keys masked)
KINDS = {
    "causal": (("Layer {layer} attention: query attends to key", "(grey = future, masked)"),
               (KEY_TITLE, QUERY_TITLE), True),
    "encoder": (("Encoder layer {layer} self-attention:", "each source character attends to all of them"),
                ("source character (attended to)", "source character (attending)"), False),
    "cross": (("Decoder layer {layer} cross-attention:", "each target character looks at the source"),
              ("source character (attended to)", "target character (attending)"), False),
}


def attention_figure(weights: torch.Tensor, labels: Sequence[str], layer: int,
                     note: str = "", reuse: dict | None = None, row_labels: Sequence[str] | None = None,
                     kind: str = "causal") -> Figure:
    """One layer's attention, a panel per head: rows are queries, columns keys, colour = weight.

    ``weights``: (h, T, S), each row a probability distribution over the keys, named by
    ``labels`` (S); the rows are named by ``row_labels`` (T), the same as ``labels`` when None.
    ``kind`` (``KINDS``): "causal" (a GPT's self-attention, S = T) masks the cells above the
    diagonal grey and hatched (future keys: the model can never look there); "encoder" (an
    encoder's self-attention) and "cross" (target rows, source columns) mask nothing. The
    panels form a near-square grid (see ``choose_layout``) with a colour bar under it.

    ``reuse``: a dict kept by the caller between calls (the training callback keeps one), holding
    a figure per layout. A call with the same labels, heads and title size then fills that figure
    with its cells and title instead of building one, and drawing it renders only those again,
    not the labels (``tinylm.plots.rendering.ReusableFigure``): the same pixels in about a sixth of the
    time. Draw the figure before the next call: that call changes it.
    """
    heads, T, S = weights.shape
    rows = labels if row_labels is None else row_labels
    if len(labels) != S or len(rows) != T:
        raise ValueError(f"{len(labels)} labels for {S} positions" if len(labels) != S
                         else f"{len(rows)} row labels for {T} positions")
    title_lines, axis_titles, causal = KINDS[kind]
    title = [line.format(layer=layer) for line in title_lines]
    layout = choose_layout(heads, labels, title, note=note, colorbar=COLORBAR_LABEL, queries=rows,
                           axis_titles=axis_titles, causal=causal)
    key = (heads, tuple(labels), tuple(rows), kind, layout.width, len(layout.title))  # all the layout depends on
    if reuse is not None and key in reuse:
        fig, title_text, images = reuse[key]
    else:
        fig, title_text, images = _attention_page(layout, heads, reusable=reuse is not None)
        if reuse is not None:
            reuse[key] = fig, title_text, images
    title_text.set_text("\n".join(layout.title))
    for image, cells in zip(images, weights.numpy(), strict=True):
        image.set_data(np.ma.masked_array(cells, mask=_hidden(layout)))
    return fig


def _hidden(layout: Layout) -> np.ndarray:
    """The cells drawn grey, (queries, keys): the future keys of a causal map; none of the others."""
    shape = (len(layout.queries), len(layout.labels))
    return np.triu(np.ones(shape, dtype=bool), k=1) if layout.causal else np.zeros(shape, dtype=bool)


def _attention_page(layout: Layout, heads: int, reusable: bool) -> tuple[Figure, Text, list]:
    """An attention figure with its cells still blank: the figure, its title and the panels'
    images, to be filled in. A reusable one redraws the artists on the cells and the title."""
    from matplotlib import colormaps

    from tinylm.plots.rendering import cjk_style

    hidden = _hidden(layout)
    blank = np.ma.masked_array(np.zeros(hidden.shape), mask=hidden)
    cmap = colormaps["viridis"].with_extremes(bad="0.85")
    with cjk_style():
        fig, ax, title = layout.page(reusable)
        on_cells = [layout.panel(ax, head, blank, cmap, title=f"head {head}")
                    for head in range(heads)]
        layout.colour_bar(ax, cmap)
    images = [artists[0] for artists in on_cells]
    if reusable:  # in matplotlib's drawing order: images, then patches (as added), then the title
        fig.changing = [*images, *(a for artists in on_cells for a in artists[1:]), title]
    return fig, title, images


def causal_mask_figure(mask: torch.Tensor, labels: Sequence[str]) -> Figure:
    """The additive causal mask: 0 where query i may see key j (j <= i), -inf above the diagonal.

    ``mask``: (T, T) bool, True = visible, exactly the model's ``causal_mask`` buffer.
    """
    from matplotlib.colors import ListedColormap

    from tinylm.plots.rendering import cjk_style

    T = len(labels)
    visible_cells = mask.cpu().numpy()
    title = ["Causal mask added to the scores:", "0 = may attend, −∞ = future (masked)"]
    layout = choose_layout(1, labels, title, head_titles=False, max_cell=2.4)
    with cjk_style():
        fig, ax, _ = layout.page()
        layout.panel(ax, 0, visible_cells, ListedColormap(["0.85", "#9ecae1"]))
        if T <= 24:  # cell text stays readable up to about this size
            x, y = layout.corner(0)
            size = LABEL_PT * min(0.9, 0.55 * layout.cell)  # "−∞" is 1.7 em wide
            for i in range(T):
                for j in range(T):
                    ax.text(x + (j + 0.5) * layout.cell, y + (i + 0.5) * layout.cell,
                            "0" if visible_cells[i, j] else "−∞", ha="center", va="center",
                            fontsize=size)
    return fig
