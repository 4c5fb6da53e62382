"""Figures of the model's internals: attention heatmaps and the causal mask, as matplotlib figures.

Figures are plain ``matplotlib.figure.Figure`` objects drawn by the Agg canvas, never pyplot:
pyplot keeps every figure in a global registry until closed, which leaks memory over a long run,
and it would pick an interactive backend on a desktop. A figure here is garbage once unreferenced.

Chinese labels need a font with CJK glyphs. Rather than relying on system font packages, we
register the OFL Noto Sans SC font shipped by the PyPI package ``pylopdf-fonts-zh-cn`` with
matplotlib's font manager, in this process only (nothing is written into matplotlib's folders),
and draw with the family list ``DejaVu Sans, Noto Sans SC``: Latin text keeps matplotlib's usual
font, and any glyph DejaVu lacks (Chinese characters, CJK punctuation) falls back to Noto.
"""

from __future__ import annotations

import functools
import math
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from matplotlib import colormaps, font_manager, rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Polygon
from matplotlib.transforms import offset_copy

from tinylm.errors import TinyLMError
from tinylm.generation import eval_no_grad
from tinylm.models import LanguageModel

FONT_PACKAGE = "pylopdf_fonts_zh_cn"
LATIN_FAMILY = "DejaVu Sans"  # matplotlib's bundled default font

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
# Fonts


def cjk_font_path() -> Path:
    """The Noto Sans SC font file inside the installed ``pylopdf-fonts-zh-cn`` package."""
    try:
        package = resources.files(FONT_PACKAGE)
    except ModuleNotFoundError:
        raise TinyLMError(
            "the Chinese font package is not installed: pip install pylopdf-fonts-zh-cn"
        ) from None
    fonts = sorted(
        Path(str(entry)) for entry in package.iterdir()
        if entry.name.startswith("NotoSansSC") and entry.name.endswith((".otf", ".ttf"))
    )
    if not fonts:
        raise TinyLMError(
            f"no NotoSansSC font file found in {package}: reinstall pylopdf-fonts-zh-cn"
        )
    return fonts[0]


@functools.cache
def register_cjk_font() -> str:
    """Add Noto Sans SC to matplotlib's font manager (once per process); return its family name."""
    path = cjk_font_path()
    font_manager.fontManager.addfont(str(path))
    return font_manager.FontProperties(fname=str(path)).get_name()


@contextmanager
def cjk_style() -> Iterator[None]:
    """Draw with Latin + Chinese fonts. Text objects take their font when created, so build and
    render figures inside this context; matplotlib's global settings are left as they were."""
    family = register_cjk_font()
    with rc_context({"font.family": [LATIN_FAMILY, family]}):
        yield


# --------------------------------------------------------------------------------------------
# Getting pixels out of a figure


def render_rgb(fig: Figure) -> np.ndarray:
    """Draw ``fig`` with Agg and return its pixels, (H, W, 3) uint8, for TensorBoard's add_image."""
    canvas = FigureCanvasAgg(fig)
    with cjk_style():
        canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()  # (H, W, 4) -> (H, W, 3)


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG file (creating its folder), drawn by Agg like ``render_rgb``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)  # attaches itself to the figure: savefig then never touches pyplot
    with cjk_style():
        fig.savefig(path, format="png")
    return path


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
    corners = [(0.5, -0.5), (T - 0.5, -0.5), (T - 0.5, T - 1.5)]
    for k in range(T - 1, 0, -1):  # walk the stairs back up to the top-left
        corners += [(k - 0.5, k - 0.5), (k - 0.5, k - 1.5)]
    return Polygon(corners, closed=True, fill=False, hatch="///", edgecolor="0.55", linewidth=0)


LABEL_PT = 9  # font size of the position labels


def _text_inches(text: str) -> float:
    """Rough width of ``text`` at LABEL_PT: wide (CJK) glyphs 1 em, others at most 0.75 em."""
    em = LABEL_PT / 72
    return sum(em if unicodedata.east_asian_width(c) in "WF" else 0.75 * em for c in text)


class _Grid:
    """Fixed page layout in inches (no constrained layout: it re-measures every text per draw).

    Margins are sized from the labels: short labels (a character) go under the columns as two
    lines, "char" over "position"; longer ones (e.g. "0xE8" bytes) are rotated to stay apart.
    """

    top, gap = 0.8, 0.3  # title space; horizontal gap (rows share column 0's query labels)

    def __init__(self, panels: int, labels: Sequence[str], colorbar: bool = True,
                 max_cols: int = 4):
        self.rotate = max(map(len, labels)) > 2
        self.row_labels = max(_text_inches(f"{i} {ch}") for i, ch in enumerate(labels))
        self.column_labels = self.row_labels if self.rotate else 2.4 * LABEL_PT / 72
        self.left = self.row_labels + 0.55  # labels, then the axis title
        self.bottom = self.column_labels + 0.55
        self.hgap = self.bottom + 0.4  # the next row's panel titles
        self.right = 1.1 if colorbar else 0.3
        self.cols = min(panels, max_cols)
        self.rows = math.ceil(panels / self.cols)
        self.side = max(2.0, 0.3 * len(labels))  # inches per panel
        self.width = self.left + self.cols * self.side + (self.cols - 1) * self.gap + self.right
        self.height = self.bottom + self.rows * self.side + (self.rows - 1) * self.hgap + self.top

    def rect(self, row: int, col: int) -> list[float]:
        """[x0, y0, w, h] in figure fractions of the panel at (row, col), row 0 on top."""
        x = self.left + col * (self.side + self.gap)
        y = self.height - self.top - (row + 1) * self.side - row * self.hgap
        return [x / self.width, y / self.height, self.side / self.width, self.side / self.height]

    def colorbar_rect(self) -> list[float]:
        x = self.width - self.right + 0.25
        span = self.height - self.top - self.bottom
        return [x / self.width, self.bottom / self.height, 0.15 / self.width, span / self.height]


def _label_cells(ax, labels: Sequence[str], grid: _Grid, rows: bool = True) -> None:
    """Label columns (keys) and, if ``rows``, rows (queries) with position and character.

    Plain text artists instead of matplotlib ticks: a labelled tick costs several artists and a
    layout pass each, which made a figure several times slower to draw.
    """
    ax.set_xticks([])
    ax.set_yticks([])
    fig, pad = ax.figure, 0.05  # inches between the panel and its labels
    # x in data (column) units, y in axes units (0 = bottom edge), then nudged down; likewise y
    columns = offset_copy(ax.get_xaxis_transform(), fig, y=-pad, units="inches")
    rows_at = offset_copy(ax.get_yaxis_transform(), fig, x=-pad, units="inches")
    for i, ch in enumerate(labels):
        text = f"{i} {ch}" if grid.rotate else f"{ch}\n{i}"
        ax.text(i, 0, text, transform=columns, ha="center", va="top", fontsize=LABEL_PT,
                rotation=90 if grid.rotate else 0)
    below = offset_copy(ax.transAxes, fig, y=-(pad + grid.column_labels + 0.1), units="inches")
    ax.text(0.5, 0, "key position (attended to)", transform=below, ha="center", va="top")
    if rows:
        for i, ch in enumerate(labels):
            ax.text(0, i, f"{i} {ch}", transform=rows_at, ha="right", va="center",
                    fontsize=LABEL_PT)
        left = offset_copy(ax.transAxes, fig, x=-(pad + grid.row_labels + 0.1), units="inches")
        ax.text(0, 0.5, "query position (attending)", transform=left, rotation=90, ha="right",
                va="center")


def attention_figure(weights: torch.Tensor, labels: Sequence[str], layer: int,
                     note: str = "") -> Figure:
    """One layer's attention, a panel per head: rows are queries, columns keys, colour = weight.

    ``weights``: (h, T, T), each row a probability distribution over keys 0..i. The cells above
    the diagonal (future keys) are masked grey and hatched: the model can never look there.
    """
    heads, T, _ = weights.shape
    if len(labels) != T:
        raise ValueError(f"{len(labels)} labels for {T} positions")
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    cmap = colormaps["viridis"].with_extremes(bad="0.85")
    grid = _Grid(heads, labels)
    with cjk_style():
        fig = Figure(figsize=(grid.width, grid.height), dpi=90)
        for head in range(heads):
            ax = fig.add_axes(grid.rect(head // grid.cols, head % grid.cols))
            cells = np.ma.masked_array(weights[head].numpy(), mask=future)
            image = ax.imshow(cells, cmap=cmap, vmin=0.0, vmax=1.0)
            if T > 1:
                ax.add_patch(_future_outline(T))
            _label_cells(ax, labels, grid, rows=head % grid.cols == 0)
            ax.set_title(f"layer {layer} · head {head}", fontsize=10)
        fig.colorbar(image, cax=fig.add_axes(grid.colorbar_rect()),
                     label="attention weight (each row sums to 1)")
        title = f"Layer {layer} attention: query attends to key (grey = future, masked)"
        fig.suptitle(f"{title}{'  ·  ' + note if note else ''}", y=1 - 0.2 / grid.height)
    return fig


def causal_mask_figure(mask: torch.Tensor, labels: Sequence[str]) -> Figure:
    """The additive causal mask: 0 where query i may see key j (j <= i), -inf above the diagonal.

    ``mask``: (T, T) bool, True = visible, exactly the model's ``causal_mask`` buffer.
    """
    T = len(labels)
    visible_cells = mask.cpu().numpy()
    grid = _Grid(1, labels, colorbar=False)
    with cjk_style():
        fig = Figure(figsize=(grid.width, grid.height), dpi=90)
        ax = fig.add_axes(grid.rect(0, 0))
        ax.imshow(visible_cells, cmap=ListedColormap(["0.85", "#9ecae1"]),
                  vmin=0, vmax=1)
        if T > 1:
            ax.add_patch(_future_outline(T))
        if T <= 24:  # cell text stays readable up to about this size
            for i in range(T):
                for j in range(T):
                    ax.text(j, i, "0" if visible_cells[i, j] else "−∞", ha="center",
                            va="center", fontsize=7)
        _label_cells(ax, labels, grid)
        ax.set_title("causal mask added to the scores:\n0 = may attend, −∞ = future (masked)",
                     fontsize=10)
    return fig
