"""Figures of the model's internals: attention heatmaps and the causal mask, as matplotlib figures.

Figures are plain ``matplotlib.figure.Figure`` objects drawn by the Agg canvas, never pyplot:
pyplot keeps every figure in a global registry until closed, which leaks memory over a long run,
and it would pick an interactive backend on a desktop. A figure here is garbage once unreferenced.

matplotlib and the Chinese font (see ``tinylm.rendering``) are loaded when the first figure is
made, not when this module is imported: the training callbacks import it for every run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from tinylm.generation import eval_no_grad
from tinylm.models import LanguageModel

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.patches import Polygon
    from matplotlib.text import Text

# Characters that would be invisible (or break a TSV/table) as labels, and what to show instead.
VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def visible(piece: str) -> str:
    """A label for one token's text that can be seen: whitespace and control characters named."""
    if piece in VISIBLE:
        return VISIBLE[piece]
    if len(piece) == 1 and not piece.isprintable():
        return f"U+{ord(piece):04X}"
    return piece


def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """One visible label per token id. Bytes that are only part of a UTF-8 character show as hex."""
    return [visible(tokenizer.decode_piece([i])) or f"0x{i:02X}" for i in ids]


# --------------------------------------------------------------------------------------------
# Pixels, drawn by tinylm.rendering: the first call loads matplotlib and the font


def render_rgb(fig: Figure) -> np.ndarray:
    """Draw ``fig`` with Agg and return its pixels, (H, W, 3) uint8, for TensorBoard's add_image."""
    from tinylm.rendering import render_rgb
    return render_rgb(fig)


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG file (creating its folder), drawn by Agg like ``render_rgb``."""
    from tinylm.rendering import save_png
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


def _future_outline(T: int) -> Polygon:
    """The staircase outline of the cells above the diagonal (key j > query i), for hatching.

    Cell (i, j) of an imshow covers x in [j - 0.5, j + 0.5] and y in [i - 0.5, i + 0.5].
    """
    from matplotlib.patches import Polygon

    corners = [(0.5, -0.5), (T - 0.5, -0.5), (T - 0.5, T - 1.5)]
    for k in range(T - 1, 0, -1):  # walk the stairs back up to the top-left
        corners += [(k - 0.5, k - 0.5), (k - 0.5, k - 1.5)]
    return Polygon(corners, closed=True, fill=False, hatch="///", edgecolor="0.55", linewidth=0)


# --------------------------------------------------------------------------------------------
# Page layout, sized for TensorBoard's image card
#
# TensorBoard's Time Series tab shows an image about CARD_PX wide whatever its pixel size, so text
# of LABEL_PT is CARD_PX / (figure width in ems of LABEL_PT) pixels tall there. Sizes below are in
# these "label ems"; a figure at most WIDTH_EM of them wide keeps its labels MIN_LABEL_PX tall.
# A figure is one axes over the whole page in label ems, y pointing down, holding the panels as
# images and the labels and colour bar as plain artists: an axes per head and a matplotlib
# colour bar (each with its tick machinery) drew the same picture about 30% slower.

CARD_PX = 400  # about the width at which TensorBoard 2.21's Time Series card shows an image
MIN_LABEL_PX = 11  # label font size (em) in the card, at least; a CJK glyph's ink is about 1 em
MAX_ASPECT = 1.4  # width / height at most: a wider image is scaled down further in the card
WIDTH_EM = CARD_PX / MIN_LABEL_PX
LABEL_PT, TITLE_PT = 10, 12  # labels, axis titles and colour bar; head titles and the title
DPI = 144  # 20 px per label em: the default figure is ~600 px wide, sharp in a card on a 2x screen
EM = LABEL_PT / 72  # inches
LINE = 1.3  # height of a line of text, in ems of its font
PAD, TICK_PAD, GAP, BAR = 0.5, 0.35, 1.0, 0.8  # edges; labels to panel; panel columns; colour bar
KEY_TITLE, QUERY_TITLE = "key position (attended to)", "query position (attending)"
COLORBAR_LABEL = "attention weight (each row sums to 1)"


def _em(text: str, pt: float = LABEL_PT) -> float:
    """Width of one line of ``text`` drawn at ``pt`` points, in label ems (kerning left out)."""
    from tinylm.rendering import char_em  # measured in the fonts the figures draw with

    return sum(map(char_em, text)) * pt / LABEL_PT


def _wrap(text: str, width: float, pt: float = LABEL_PT) -> list[str]:
    """``text`` in lines at most ``width`` label ems wide, broken between words."""
    lines: list[str] = []
    for word in text.split():
        if lines and _em(f"{lines[-1]} {word}", pt) <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines


class _Layout:
    """Where everything goes, in label ems from the top-left corner, fixed before drawing
    (constrained layout would re-measure every text at each draw).

    Left to right: the query axis title, the query labels (first column of panels only), the
    panels. Top to bottom: the title (its lines, then the note wrapped); per row of panels: head
    titles, panels, key labels under each; the key axis title; the colour bar and its label. Key
    labels stand upright as two lines (character over position) or, rotated, as one ("12 0xE8").
    Cells are square, as wide as a key label needs, or up to ``max_cell`` while the figure stays
    WIDTH_EM wide. The figure is at least as wide as its title lines.
    """

    def __init__(self, panels: int, labels: Sequence[str], cols: int, rotate: bool,
                 title: Sequence[str], note: str = "", colorbar: str = "",
                 head_titles: bool = True, max_cell: float = 0.0):
        T = len(labels)
        self.labels, self.cols, self.rows, self.rotate = labels, cols, math.ceil(panels / cols), rotate
        self.row_labels = max(_em(f"{i} {ch}") for i, ch in enumerate(labels))
        if rotate:  # neighbours one line height apart
            self.key_labels, cell = self.row_labels, 1.2
        else:
            self.key_labels, cell = 2 * LINE, max(_em(s) + 0.3 for s in [*labels, str(T - 1)])
        margins = 2 * PAD + LINE + self.row_labels + TICK_PAD
        room = (WIDTH_EM - 1 - margins - (cols - 1) * GAP) / (cols * T)
        cell = max(cell, 1.25, min(max_cell, room))
        self.head = LINE * TITLE_PT / LABEL_PT if head_titles else 0.0
        between = self.head + TICK_PAD + self.key_labels + 0.6  # panel rows apart
        axis_title = max(_em(KEY_TITLE), _em(QUERY_TITLE)) + 1  # each spans the whole grid
        self.side = max(T * cell, (axis_title - (cols - 1) * GAP) / cols,
                        (axis_title - (self.rows - 1) * between) / self.rows)
        self.cell, self.pitch = self.side / T, self.side + between
        self.span = cols * self.side + (cols - 1) * GAP  # the panels' width
        self.width = max(margins + self.span, 2 * PAD + max(_em(t, TITLE_PT) for t in title))
        self.left = margins - PAD + (self.width - margins - self.span) / 2  # content centred
        self.title = [*title, *_wrap(note, self.width - 2 * PAD, TITLE_PT)]
        self.colorbar = _wrap(colorbar, 2 * (self.width - PAD - self.left - self.span / 2))
        self.top = PAD + len(self.title) * LINE * TITLE_PT / LABEL_PT + 0.5  # first row
        self.key_title = self.top + self.rows * self.pitch  # its line's top
        self.bar = self.key_title + LINE + 0.5  # the colour bar's top
        bar = BAR + TICK_PAD + LINE + len(self.colorbar) * LINE if colorbar else 0.0
        self.height = max(self.bar + bar + PAD, self.width / MAX_ASPECT)

    @property
    def label_px(self) -> float:
        """The labels' font size in pixels when the image is shown CARD_PX wide."""
        return CARD_PX / self.width

    def corner(self, panel: int) -> tuple[float, float]:
        """The top-left corner of panel number ``panel``, row by row."""
        row, col = divmod(panel, self.cols)
        return self.left + col * (self.side + GAP), self.top + row * self.pitch + self.head

    def page(self, reusable: bool = False) -> tuple[Figure, Axes, Text]:
        """A figure of this size, its one axes in label ems, and its title; the axis titles
        drawn. ``reusable``: a ``ReusableFigure``, to be drawn again with other cells."""
        from matplotlib.figure import Figure

        from tinylm.rendering import ReusableFigure

        figure_class = ReusableFigure if reusable else Figure
        fig = figure_class(figsize=(self.width * EM, self.height * EM), dpi=DPI)
        title = fig.suptitle("\n".join(self.title), y=1 - PAD / self.height, fontsize=TITLE_PT)
        # limits set first are fixed: the images placed in it do not rescale it
        ax = fig.add_axes((0, 0, 1, 1), xlim=(0, self.width), ylim=(self.height, 0))
        ax.set_axis_off()
        ax.text(self.left + self.span / 2, self.key_title, KEY_TITLE, ha="center", va="top",
                fontsize=LABEL_PT)
        middle = self.top + self.head + ((self.rows - 1) * self.pitch + self.side) / 2
        ax.text(self.left - TICK_PAD - self.row_labels - LINE, middle, QUERY_TITLE,
                rotation=90, ha="left", va="center", fontsize=LABEL_PT)
        return fig, ax, title

    def panel(self, ax: Axes, panel: int, cells: np.ndarray, cmap, title: str = "") -> list:
        """Draw ``cells`` (T, T) as panel number ``panel``: the image, its hatched future cells,
        a frame, the title above and the labels: keys under it, queries left of the first
        column. Returns the artists drawn on the cells, in drawing order: the image first."""
        from matplotlib.patches import Rectangle
        from matplotlib.transforms import Affine2D

        x, y = self.corner(panel)
        T, side = len(self.labels), self.side
        on_cells = [ax.imshow(cells, cmap=cmap, vmin=0, vmax=1, extent=(x, x + side, y + side, y),
                              aspect="auto", interpolation="nearest")]
        if T > 1:  # the outline in cell units, moved into place
            cell_units = Affine2D().scale(self.cell).translate(x + self.cell / 2, y + self.cell / 2)
            on_cells.append(ax.add_patch(_future_outline(T)))
            on_cells[-1].set_transform(cell_units + ax.transData)
        on_cells.append(ax.add_patch(Rectangle((x, y), side, side, fill=False, linewidth=0.8)))
        if title:
            ax.text(x + side / 2, y - 0.3, title, ha="center", va="bottom", fontsize=TITLE_PT)
        for i, ch in enumerate(self.labels):
            at = (i + 0.5) * self.cell  # the middle of column / row i
            ax.text(x + at, y + side + TICK_PAD, f"{i} {ch}" if self.rotate else f"{ch}\n{i}",
                    ha="center", va="top", fontsize=LABEL_PT, rotation=90 if self.rotate else 0)
            if panel % self.cols == 0:
                ax.text(x - TICK_PAD, y + at, f"{i} {ch}", ha="right", va="center",
                        fontsize=LABEL_PT)
        return on_cells

    def colour_bar(self, ax: Axes, cmap) -> None:
        """The colour scale 0..1 under the panels, with ticks and the wrapped label."""
        from matplotlib.patches import Rectangle

        x0, x1, y = self.left + 1, self.left + self.span - 1, self.bar  # room for "1.0" at its end
        ax.imshow(np.linspace(0, 1, 256)[None], cmap=cmap, extent=(x0, x1, y + BAR, y),
                  aspect="auto", gid="colour bar")
        ax.add_patch(Rectangle((x0, y), x1 - x0, BAR, fill=False, linewidth=0.8))
        ticks = np.linspace(0, 1, 6 if x1 - x0 >= 12 else 3)
        ax.vlines(x0 + ticks * (x1 - x0), y + BAR, y + BAR + 0.25, color="black", linewidth=0.8)
        for tick in ticks:
            ax.text(x0 + tick * (x1 - x0), y + BAR + TICK_PAD, f"{tick:.1f}", ha="center",
                    va="top", fontsize=LABEL_PT)
        ax.text((x0 + x1) / 2, y + BAR + TICK_PAD + LINE, "\n".join(self.colorbar),
                ha="center", va="top", fontsize=LABEL_PT)


def _layout(panels: int, labels: Sequence[str], title: Sequence[str], **options) -> _Layout:
    """The squarest grid, upright key labels before rotated ones, whose labels stay MIN_LABEL_PX
    tall in the card; failing that (a long probe), the one with the largest labels: fewer
    columns, so a taller figure rather than smaller labels."""
    layouts = [_Layout(panels, labels, cols, rotate, title, **options)
               for cols in range(math.ceil(math.sqrt(panels)), 0, -1) for rotate in (False, True)]
    fitting = (layout for layout in layouts if layout.label_px >= MIN_LABEL_PX)
    return next(fitting, max(layouts, key=lambda layout: layout.label_px))


def attention_figure(weights: torch.Tensor, labels: Sequence[str], layer: int,
                     note: str = "", reuse: dict | None = None) -> Figure:
    """One layer's attention, a panel per head: rows are queries, columns keys, colour = weight.

    ``weights``: (h, T, T), each row a probability distribution over keys 0..i. The cells above
    the diagonal (future keys) are masked grey and hatched: the model can never look there. The
    panels form a near-square grid (see ``_layout``) with a colour bar under it.

    ``reuse``: a dict kept by the caller between calls (the training callback keeps one), holding
    a figure per layout. A call with the same labels, heads and title size then fills that figure
    with its cells and title instead of building one, and drawing it renders only those again,
    not the labels (``tinylm.rendering.ReusableFigure``): the same pixels in about a sixth of the
    time. Draw the figure before the next call: that call changes it.
    """
    heads, T, _ = weights.shape
    if len(labels) != T:
        raise ValueError(f"{len(labels)} labels for {T} positions")
    title = [f"Layer {layer} attention: query attends to key", "(grey = future, masked)"]
    layout = _layout(heads, labels, title, note=note, colorbar=COLORBAR_LABEL)
    key = (heads, tuple(labels), layout.width, len(layout.title))  # all the layout depends on
    if reuse is not None and key in reuse:
        fig, title_text, images = reuse[key]
    else:
        fig, title_text, images = _attention_page(layout, heads, reusable=reuse is not None)
        if reuse is not None:
            reuse[key] = fig, title_text, images
    title_text.set_text("\n".join(layout.title))
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    for image, cells in zip(images, weights.numpy(), strict=True):
        image.set_data(np.ma.masked_array(cells, mask=future))
    return fig


def _attention_page(layout: _Layout, heads: int, reusable: bool) -> tuple[Figure, Text, list]:
    """An attention figure with its cells still blank: the figure, its title and the panels'
    images, to be filled in. A reusable one redraws the artists on the cells and the title."""
    from matplotlib import colormaps

    from tinylm.rendering import cjk_style

    T = len(layout.labels)
    blank = np.ma.masked_array(np.zeros((T, T)), mask=np.triu(np.ones((T, T), dtype=bool), k=1))
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

    from tinylm.rendering import cjk_style

    T = len(labels)
    visible_cells = mask.cpu().numpy()
    title = ["Causal mask added to the scores:", "0 = may attend, −∞ = future (masked)"]
    layout = _layout(1, labels, title, head_titles=False, max_cell=2.4)
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
