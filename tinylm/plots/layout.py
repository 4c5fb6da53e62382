"""Where everything of an attention figure goes: the page layout of ``tinylm.plots.figures``'s heatmaps.

TensorBoard's Time Series tab shows an image about CARD_PX wide whatever its pixel size, so text
of LABEL_PT is CARD_PX / (figure width in ems of LABEL_PT) pixels tall there. Sizes below are in
these "label ems"; a figure at most WIDTH_EM of them wide keeps its labels MIN_LABEL_PX tall.
The card also fits the image into its height (``object-fit: contain``), so a figure more than
MAX_TALL times as tall as wide (one column of heads for a text of 17 characters: 639 x 2782 px)
is scaled down by its height instead, and its labels with it: a near-square grid of smaller
cells beats that strip.
A figure is one axes over the whole page in label ems, y pointing down, holding the panels as
images and the labels and colour bar as plain artists: an axes per head and a matplotlib
colour bar (each with its tick machinery) drew the same picture about 30% slower.

A heatmap panel has one row per query (the attending position) and one column per key (the
position attended to): square for self-attention, rectangular for cross-attention, whose queries
are target characters and keys source characters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.patches import Polygon
    from matplotlib.text import Text

CARD_PX = 400  # about the width at which TensorBoard 2.21's Time Series card shows an image
MIN_LABEL_PX = 11  # label font size (em) in the card, at least; a CJK glyph's ink is about 1 em
MAX_ASPECT = 1.4  # width / height at most: a wider image is scaled down further in the card
MAX_TALL = 2.0  # height / width beyond which the card's height, not its width, sets the scale
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
    from tinylm.plots.rendering import char_em  # measured in the fonts the figures draw with

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


class Layout:
    """Where everything goes, in label ems from the top-left corner, fixed before drawing
    (constrained layout would re-measure every text at each draw).

    Left to right: the query axis title, the query labels (first column of panels only), the
    panels. Top to bottom: the title (its lines, then the note wrapped); per row of panels: head
    titles, panels, key labels under each; the key axis title; the colour bar and its label. Key
    labels stand upright as two lines (character over position) or, rotated, as one ("12 0xE8").
    Cells are square, as wide as a key label needs, or up to ``max_cell`` while the figure stays
    WIDTH_EM wide. The figure is at least as wide as its title lines.

    ``labels`` name the keys (columns); ``queries`` the rows, the same as the keys when None (a
    square map). ``axis_titles``: the keys' and the queries'. ``causal``: the cells above the
    diagonal (future keys) are hatched.
    """

    def __init__(self, panels: int, labels: Sequence[str], cols: int, rotate: bool,
                 title: Sequence[str], note: str = "", colorbar: str = "",
                 head_titles: bool = True, max_cell: float = 0.0, queries: Sequence[str] | None = None,
                 axis_titles: tuple[str, str] = (KEY_TITLE, QUERY_TITLE), causal: bool = True):
        T = len(labels)
        self.labels, self.cols, self.rows, self.rotate = labels, cols, math.ceil(panels / cols), rotate
        self.queries = labels if queries is None else queries
        self.axis_titles, self.causal = axis_titles, causal
        self.row_labels = max(_em(f"{i} {ch}") for i, ch in enumerate(self.queries))
        if rotate:  # neighbours one line height apart
            self.key_labels, cell = max(_em(f"{i} {ch}") for i, ch in enumerate(labels)), 1.2
        else:
            self.key_labels, cell = 2 * LINE, max(_em(s) + 0.3 for s in [*labels, str(T - 1)])
        margins = 2 * PAD + LINE + self.row_labels + TICK_PAD
        room = (WIDTH_EM - 1 - margins - (cols - 1) * GAP) / (cols * T)
        cell = max(cell, 1.25, min(max_cell, room))
        self.head = LINE * TITLE_PT / LABEL_PT if head_titles else 0.0
        between = self.head + TICK_PAD + self.key_labels + 0.6  # panel rows apart
        axis_title = max(map(_em, axis_titles)) + 1  # each spans the whole grid
        self.cell = max(cell, (axis_title - (cols - 1) * GAP) / cols / T,
                        (axis_title - (self.rows - 1) * between) / self.rows / len(self.queries))
        self.side, self.height_side = T * self.cell, len(self.queries) * self.cell  # a panel's width, height
        self.pitch = self.height_side + between
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
        """The labels' font size in pixels when the image is shown CARD_PX wide, or CARD_PX * MAX_TALL
        tall when it is taller than that."""
        return CARD_PX / max(self.width, self.height / MAX_TALL)

    def corner(self, panel: int) -> tuple[float, float]:
        """The top-left corner of panel number ``panel``, row by row."""
        row, col = divmod(panel, self.cols)
        return self.left + col * (self.side + GAP), self.top + row * self.pitch + self.head

    def page(self, reusable: bool = False) -> tuple[Figure, Axes, Text]:
        """A figure of this size, its one axes in label ems, and its title; the axis titles
        drawn. ``reusable``: a ``ReusableFigure``, to be drawn again with other cells."""
        from matplotlib.figure import Figure

        from tinylm.plots.rendering import ReusableFigure

        figure_class = ReusableFigure if reusable else Figure
        fig = figure_class(figsize=(self.width * EM, self.height * EM), dpi=DPI)
        title = fig.suptitle("\n".join(self.title), y=1 - PAD / self.height, fontsize=TITLE_PT)
        # limits set first are fixed: the images placed in it do not rescale it
        ax = fig.add_axes((0, 0, 1, 1), xlim=(0, self.width), ylim=(self.height, 0))
        ax.set_axis_off()
        ax.text(self.left + self.span / 2, self.key_title, self.axis_titles[0], ha="center", va="top",
                fontsize=LABEL_PT)
        middle = self.top + self.head + ((self.rows - 1) * self.pitch + self.height_side) / 2
        ax.text(self.left - TICK_PAD - self.row_labels - LINE, middle, self.axis_titles[1],
                rotation=90, ha="left", va="center", fontsize=LABEL_PT)
        return fig, ax, title

    def panel(self, ax: Axes, panel: int, cells: np.ndarray, cmap, title: str = "") -> list:
        """Draw ``cells`` (queries, keys) as panel number ``panel``: the image, its hatched future
        cells (``causal``), a frame, the title above and the labels: keys under it, queries left of
        the first column. Returns the artists drawn on the cells, in drawing order: the image first."""
        from matplotlib.patches import Rectangle
        from matplotlib.transforms import Affine2D

        x, y = self.corner(panel)
        T, side, height = len(self.labels), self.side, self.height_side
        on_cells = [ax.imshow(cells, cmap=cmap, vmin=0, vmax=1, extent=(x, x + side, y + height, y),
                              aspect="auto", interpolation="nearest")]
        if self.causal and T > 1:  # the outline in cell units, moved into place
            cell_units = Affine2D().scale(self.cell).translate(x + self.cell / 2, y + self.cell / 2)
            on_cells.append(ax.add_patch(future_outline(T)))
            on_cells[-1].set_transform(cell_units + ax.transData)
        on_cells.append(ax.add_patch(Rectangle((x, y), side, height, fill=False, linewidth=0.8)))
        if title:
            ax.text(x + side / 2, y - 0.3, title, ha="center", va="bottom", fontsize=TITLE_PT)
        for i, ch in enumerate(self.labels):
            at = (i + 0.5) * self.cell  # the middle of column i
            ax.text(x + at, y + height + TICK_PAD, f"{i} {ch}" if self.rotate else f"{ch}\n{i}",
                    ha="center", va="top", fontsize=LABEL_PT, rotation=90 if self.rotate else 0)
        for i, ch in enumerate(self.queries if panel % self.cols == 0 else ()):
            ax.text(x - TICK_PAD, y + (i + 0.5) * self.cell, f"{i} {ch}", ha="right", va="center",
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


def choose_layout(panels: int, labels: Sequence[str], title: Sequence[str], **options) -> Layout:
    """The squarest grid, upright key labels before rotated ones, whose labels stay MIN_LABEL_PX
    tall in the card; failing that (a long probe), the one with the largest labels there: fewer
    columns while the figure stays at most MAX_TALL times as tall as wide, then smaller cells."""
    layouts = [Layout(panels, labels, cols, rotate, title, **options)
               for cols in range(math.ceil(math.sqrt(panels)), 0, -1) for rotate in (False, True)]
    fitting = (layout for layout in layouts if layout.label_px >= MIN_LABEL_PX)
    return next(fitting, max(layouts, key=lambda layout: layout.label_px))




def future_outline(T: int) -> Polygon:
    """The staircase outline of the cells above the diagonal (key j > query i), for hatching.

    Cell (i, j) of an imshow covers x in [j - 0.5, j + 0.5] and y in [i - 0.5, i + 0.5].
    """
    from matplotlib.patches import Polygon

    corners = [(0.5, -0.5), (T - 0.5, -0.5), (T - 0.5, T - 1.5)]
    for k in range(T - 1, 0, -1):  # walk the stairs back up to the top-left
        corners += [(k - 0.5, k - 0.5), (k - 0.5, k - 1.5)]
    return Polygon(corners, closed=True, fill=False, hatch="///", edgecolor="0.55", linewidth=0)
