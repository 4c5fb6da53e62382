"""The matplotlib side of ``tinylm.plots.figures``: the CJK font, and a figure's pixels drawn by Agg.

This module imports matplotlib; ``tinylm.plots.figures`` imports it on the first figure drawn, so that
importing the plotting functions (the training callbacks do) costs nothing until a figure is made.

Chinese labels need a font with CJK glyphs. Rather than relying on system font packages, we
register the OFL Noto Sans SC font shipped by the PyPI package ``pylopdf-fonts-zh-cn`` with
matplotlib's font manager, in this process only (nothing is written into matplotlib's folders),
and draw with the family list ``DejaVu Sans, Noto Sans SC``: Latin text keeps matplotlib's usual
font, and any glyph DejaVu lacks (Chinese characters, CJK punctuation) falls back to Noto.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

import numpy as np
from matplotlib import font_manager, rc_context
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.textpath import TextToPath

from tinylm.errors import TinyLMError

FONT_PACKAGE = "pylopdf_fonts_zh_cn"
LATIN_FAMILY = "DejaVu Sans"  # matplotlib's bundled default font


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


@functools.cache
def char_em(ch: str) -> float:
    """One character's advance width in ems, measured in the fonts the figures draw with."""
    font = font_manager.FontProperties(family=[LATIN_FAMILY, register_cjk_font()], size=10)
    return TextToPath().get_text_width_height_descent(ch, font, ismath=False)[0] / 10


class ReusableFigure(Figure):
    """A figure drawn again and again with only a few artists changed: the attention maps,
    where each call changes the heatmaps and the title while the labels stay.

    The first draw renders everything but ``changing`` and keeps those pixels; every draw then
    restores them and draws the ``changing`` artists over them, in their order. That order must be
    matplotlib's (by z-order, then as added) for artists that overlap, e.g. an image before the
    outline over it; the rest must not overlap them. Then the pixels are exactly those of a full
    draw, without laying out and rendering every label's text again. Artists not in ``changing``
    must not change after the first draw.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.changing: list[Artist] = []
        self._background = None  # (renderer size, its pixels without the changing artists)

    def draw(self, renderer) -> None:
        if not hasattr(renderer, "copy_from_bbox"):  # a vector backend: nothing to keep
            return super().draw(renderer)
        size = (renderer.width, renderer.height)
        if self._background is None or self._background[0] != size:
            for artist in self.changing:
                artist.set_visible(False)
            try:
                super().draw(renderer)
            finally:
                for artist in self.changing:
                    artist.set_visible(True)
            self._background = size, renderer.copy_from_bbox(self.bbox)
        else:
            renderer.restore_region(self._background[1])
        for artist in self.changing:
            artist.draw(renderer)
        self.stale = False


def _agg_canvas(fig: Figure) -> FigureCanvasAgg:
    """The figure's Agg canvas, attached on first use (then savefig never touches pyplot)."""
    return fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)


def render_rgb(fig: Figure) -> np.ndarray:
    """Draw ``fig`` with Agg and return its pixels, (H, W, 3) uint8, for TensorBoard's add_image."""
    canvas = _agg_canvas(fig)
    with cjk_style():
        canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()  # (H, W, 4) -> (H, W, 3)


def save_png(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as a PNG file (creating its folder), drawn by Agg like ``render_rgb``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _agg_canvas(fig)
    with cjk_style():
        fig.savefig(path, format="png")
    return path
