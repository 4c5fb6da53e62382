"""Figures: the CJK font from the pip package, heatmaps with Chinese labels, the masked future,
and a layout that stays legible in TensorBoard's Time Series card (about 400 px wide)."""

import io
import itertools
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.text import Text

from tinylm.models.gpt import GPT, GPTConfig
from tinylm.plots import figures as plotting
from tinylm.plots import rendering
from tinylm.tokenizer import BPETokenizer, ByteTokenizer, CharTokenizer

PROBE = "自注意力可以让序列"
TEXT = "自注意力可以让序列中的每个位置看到前面的所有位置。Attention is all you need.\n"

# The card: TensorBoard 2.21's Time Series tab shows an image about CARD px wide. A label's height
# is measured as its font size (the em) in PNG pixels, scaled to that width; a CJK glyph's ink is
# about one em tall (test_a_cjk_glyph_is_about_one_em_tall), so this is the height of 自 as seen.
CARD, MIN_LABEL_PX, MAX_ASPECT = 400, 11, 1.4


def causal_weights(heads: int, T: int, seed: int = 0) -> torch.Tensor:
    """Random attention weights shaped like a model's: (h, T, T), zero above the diagonal."""
    scores = torch.randn(heads, T, T, generator=torch.Generator().manual_seed(seed))
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return scores.masked_fill(future, float("-inf")).softmax(-1)


def causal_mask(T: int) -> torch.Tensor:
    return torch.tril(torch.ones(T, T, dtype=torch.bool))


def texts(fig: Figure) -> dict[str, Text]:
    """Every non-empty text artist of the figure (labels, titles, colour bar), by its string."""
    return {t.get_text(): t for t in fig.findobj(Text) if t.get_text()}


def card_px(fig: Figure, text: Text, png_width: int) -> float:
    """Font size of ``text`` in PNG pixels when the PNG is shown CARD px wide."""
    return text.get_fontsize() * fig.dpi / 72 * CARD / png_width


def label_texts(fig: Figure, labels: list[str]) -> tuple[list[Text], list[Text]]:
    """The query (row) labels and the first panel's key (column) labels, in position order."""
    found = fig.findobj(Text)
    rows = [next(t for t in found if t.get_text() == f"{i} {ch}" and t.get_rotation() == 0)
            for i, ch in enumerate(labels)]
    keys = [next(t for t in found if t.get_text() in (f"{ch}\n{i}", f"{i} {ch}")
                 and (t.get_rotation() == 90 or "\n" in t.get_text()))
            for i, ch in enumerate(labels)]
    return rows, keys


def panels(fig: Figure) -> list:
    """The heatmap images, one per head (the colour bar's gradient left out)."""
    return [im for im in fig.axes[0].images if im.get_gid() != "colour bar"]


def grid_shape(fig: Figure) -> tuple[int, int]:
    extents = [im.get_extent() for im in panels(fig)]  # (left, right, bottom, top)
    return len({round(e[3], 3) for e in extents}), len({round(e[0], 3) for e in extents})


def pixel(fig: Figure, image: np.ndarray, x: float, y: float) -> np.ndarray:
    """The median colour of the 5x5 pixels around data point (x, y) of the figure's axes."""
    col, row = fig.axes[0].transData.transform((x, y))
    row = image.shape[0] - int(row)
    return np.median(image[row - 2:row + 3, int(col) - 2:int(col) + 3].reshape(-1, 3), axis=0)


def assert_fits_the_card(fig: Figure, labels: list[str], min_px: float = MIN_LABEL_PX) -> None:
    """Aspect at most 1.4, every text (labels, titles, colour bar) at least ``min_px`` in the
    card, every label drawn, and neighbouring labels apart."""
    image = plotting.render_rgb(fig)
    height, width, _ = image.shape
    assert width / height <= MAX_ASPECT
    found = texts(fig)
    for i, ch in enumerate(labels):  # rows = queries "i ch"; columns = keys "ch\ni" or "i ch"
        assert f"{i} {ch}" in found and (f"{ch}\n{i}" in found or f"{i} {ch}" in found)
    for text in found.values():
        if text.get_text() not in ("0", "−∞"):  # the mask's cell values are no labels
            assert card_px(fig, text, width) >= min_px, text.get_text()
    renderer = fig.canvas.get_renderer()
    rows, keys = label_texts(fig, labels)
    for group in (rows, keys):
        boxes = [t.get_window_extent(renderer) for t in group]
        assert not any(a.overlaps(b) for a, b in itertools.pairwise(boxes))


def tokenized(kind: str) -> list[str]:
    """Labels of a real probe: a character, byte or BPE tokenizer on a Chinese + English text."""
    if kind == "char":
        tokenizer, probe = CharTokenizer.from_text(TEXT), "自注意力 Attention"
    elif kind == "byte":
        tokenizer, probe = ByteTokenizer(), "注意力 Attention"
    else:
        tokenizer, probe = BPETokenizer.train(TEXT * 20, 300), "自注意力 Attention is all you need."
    return plotting.token_labels(tokenizer, tokenizer.encode(probe))


def test_font_is_the_pip_package_noto_sans_sc_registered_in_process():
    path = rendering.cjk_font_path()
    assert path.name.startswith("NotoSansSC") and path.suffix in (".otf", ".ttf")
    assert "pylopdf_fonts_zh_cn" in path.parts  # the installed package, not a system font
    assert rendering.register_cjk_font() == "Noto Sans SC"
    registered = [f.fname for f in matplotlib.font_manager.fontManager.ttflist
                  if f.name == "Noto Sans SC"]
    assert registered == [str(path)]  # used where pip put it: nothing copied into matplotlib
    # drawing outside cjk_style() still uses matplotlib's own default family
    assert matplotlib.rcParams["font.family"] == ["sans-serif"]


def test_heatmap_with_chinese_labels_renders_without_any_warning():
    labels = list(PROBE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing glyph ("Glyph ... missing from font") fails
        fig = plotting.attention_figure(causal_weights(4, len(labels)), labels, layer=2,
                                        note="step 100")
        image = plotting.render_rgb(fig)
    assert isinstance(fig, Figure) and fig.canvas.__class__.__name__ == "FigureCanvasAgg"
    height, width, channels = image.shape
    assert channels == 3 and height >= width / MAX_ASPECT and width > 400
    assert grid_shape(fig) == (2, 2)  # four heads in a square, not a row
    found = texts(fig)
    assert "0 自" in found and "列\n8" in found  # query labels and key labels: char + position
    assert [f"head {h}" in found for h in range(4)] == [True] * 4
    assert "key position (attended to)" in found and "query position (attending)" in found
    assert "attention weight (each row sums to 1)" in found  # the colour bar's label
    assert "Layer 2 attention" in fig.get_suptitle() and "step 100" in fig.get_suptitle()


def test_default_probe_fits_the_card_with_room_to_spare():
    """The default probe (9 characters, 4 heads): labels about 14 px tall in a 400 px card."""
    labels = list(PROBE)
    fig = plotting.attention_figure(causal_weights(4, 9), labels, layer=0, note="step 500")
    assert_fits_the_card(fig, labels, min_px=13)
    assert_fits_the_card(plotting.causal_mask_figure(causal_mask(9), labels), labels, min_px=13)


@pytest.mark.parametrize("kind", ["char", "byte", "bpe"])
def test_every_tokenizers_figures_fit_the_card(kind):
    """Real probes of 14-20 tokens: long labels ("0xE8", "Atten") rotated, nothing overlaps; the
    heads stay a 2x2 grid with labels of 6.9-10 px in the card rather than grow into a column the
    card shrinks to its height."""
    labels = tokenized(kind)
    assert 14 <= len(labels) <= 20
    if kind != "char":
        assert any(len(label) > 2 for label in labels)  # labels that need rotating
    T = len(labels)
    fig = plotting.attention_figure(causal_weights(4, T), labels, layer=1, note="step 500")
    assert_fits_the_card(fig, labels, min_px=6.5)
    assert len(panels(fig)) == 4 and grid_shape(fig) == (2, 2)
    assert_fits_the_card(plotting.causal_mask_figure(causal_mask(T), labels), labels)


def test_masked_cells_are_grey_and_the_colour_bar_is_drawn():
    T = 9
    fig = plotting.attention_figure(causal_weights(4, T), list(PROBE), layer=0)
    image = plotting.render_rgb(fig)
    for im in panels(fig):
        left, right, bottom, top = im.get_extent()
        cell = (right - left) / T
        grey = pixel(fig, image, left + (T - 0.5) * cell, top + 0.5 * cell)  # key 8, query 0
        assert np.allclose(grey, 0.85 * 255, atol=8)  # grey, as drawn between the hatch lines
        first = pixel(fig, image, left + 0.5 * cell, top + 0.5 * cell)  # key 0, query 0: not grey
        assert np.ptp(first) > 30
    (bar,) = [im for im in fig.axes[0].images if im.get_gid() == "colour bar"]
    left, right, bottom, top = bar.get_extent()
    ends = [pixel(fig, image, x, (top + bottom) / 2) for x in (left + 0.2, right - 0.2)]
    viridis = matplotlib.colormaps["viridis"]
    np.testing.assert_allclose(ends, [np.array(viridis(v)[:3]) * 255 for v in (0.0, 1.0)], atol=12)
    found = texts(fig)
    assert all(f"{v:.1f}" in found for v in np.linspace(0, 1, 6))  # its ticks


def test_chinese_characters_render_as_distinct_glyphs_not_boxes():
    """A missing glyph renders as the same empty box for every character; real glyphs differ."""

    def glyph(ch: str) -> np.ndarray:
        with rendering.cjk_style():
            fig = Figure(figsize=(0.6, 0.6), dpi=50)
            fig.text(0.5, 0.5, ch, ha="center", va="center", fontsize=20)
        return plotting.render_rgb(fig)

    a, b, c = glyph("自"), glyph("注"), glyph("力")
    assert (a < 128).any()  # ink on the page
    assert not np.array_equal(a, b) and not np.array_equal(b, c)


def test_a_cjk_glyph_is_about_one_em_tall():
    """Why the font size stands for a label's height: the ink of 自 spans about one em."""
    em = 40  # px
    with rendering.cjk_style():
        fig = Figure(figsize=(1, 1), dpi=72)
        fig.text(0.5, 0.5, "自", ha="center", va="center", fontsize=em)
    ink = np.flatnonzero((plotting.render_rgb(fig) < 128).any(axis=(1, 2)))
    assert 0.85 * em <= ink[-1] - ink[0] + 1 <= 1.05 * em


def test_future_cells_are_masked_and_hatched():
    T = 6
    fig = plotting.attention_figure(causal_weights(2, T), list("abcdef"), layer=0)
    shown = panels(fig)[0].get_array()
    np.testing.assert_array_equal(shown.mask, np.triu(np.ones((T, T), dtype=bool), k=1))
    hatch = next(p for p in fig.axes[0].patches if p.get_hatch())
    assert hatch.get_hatch() == "///"
    # the hatched outline covers exactly the cells above the diagonal
    inside = [hatch.get_path().contains_point((j, i)) for i in range(T) for j in range(T)]
    assert sum(inside) == T * (T - 1) // 2
    assert hatch.get_path().contains_point((T - 1, 0)) and not hatch.get_path().contains_point((0, 0))


@pytest.mark.parametrize(("heads", "shape"), [
    (1, (1, 1)), (2, (1, 2)), (3, (2, 2)), (4, (2, 2)), (6, (3, 2)), (8, (4, 2)), (16, (4, 4)),
])
def test_heads_form_a_near_square_grid_that_fits_the_card(heads, shape):
    """The squarest grid whose labels stay 11 px: 3 columns (8 heads: 3x3) would make them
    10 px, so 6 and 8 heads take two columns and grow taller; 16 heads in two columns would be
    too tall for the card, so 4x4 (labels 7.6 px)."""
    labels = list(PROBE)
    fig = plotting.attention_figure(causal_weights(heads, 9), labels, layer=1, note="step 1")
    assert grid_shape(fig) == shape and len(panels(fig)) == heads
    assert_fits_the_card(fig, labels, min_px=7.5 if heads == 16 else MIN_LABEL_PX)
    rows, _ = label_texts(fig, labels)
    assert len(rows) == len(labels)


def test_a_block_size_probe_of_32_tokens_stays_a_grid_and_apart():
    """T = 32 (the default block_size): 4 heads in a 2x2 grid, labels rotated one line apart.
    Labels are then 4.6 px in a 400 px card (one column would be 3843 px tall, shrunk to the
    card's height); the 11 px hold up to 12 tokens for 4 heads, to about 24 for one panel."""
    labels = [plotting.visible(c) for c in (TEXT * 2)[:32]]
    fig = plotting.attention_figure(causal_weights(4, 32), labels, layer=0, note="step 1")
    assert grid_shape(fig) == (2, 2)
    assert_fits_the_card(fig, labels, min_px=4.5)
    assert_fits_the_card(plotting.causal_mask_figure(causal_mask(32), labels), labels,
                         min_px=8.5)
    short = list(TEXT[:12])
    assert_fits_the_card(plotting.attention_figure(causal_weights(4, 12), short, 0), short)


def test_causal_mask_figure_shows_minus_infinity_above_the_diagonal():
    T = 5
    fig = plotting.causal_mask_figure(causal_mask(T), list("注意力机制"))
    cells = [t.get_text() for t in fig.axes[0].texts if t.get_text() in ("0", "−∞")]
    assert cells.count("−∞") == T * (T - 1) // 2 and cells.count("0") == T * (T + 1) // 2
    assert "−∞ = future (masked)" in fig.get_suptitle()


def test_labels_make_whitespace_and_partial_bytes_visible():
    assert [plotting.visible(c) for c in " \n\tx"] == ["␣", "↵", "⇥", "x"]
    assert plotting.visible("\x00") == "U+0000"
    chars = CharTokenizer.from_text("a b\n")
    assert plotting.token_labels(chars, chars.encode("a b\n")) == ["a", "␣", "b", "↵"]
    # byte tokenizer: the 3 bytes of 自 are not characters on their own
    assert plotting.token_labels(ByteTokenizer(), list("A自".encode())) == [
        "A", "0xE8", "0x87", "0xAA"]


@pytest.mark.parametrize("attn_impl", ["sdpa", "explicit"])
def test_attention_weights_are_causal_rows_and_leave_the_mode_alone(attn_impl):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, block_size=16, n_embd=16, num_heads=2, num_layers=3,
                          attn_impl=attn_impl))
    model.train()
    weights = plotting.attention_weights(model, torch.arange(7))
    assert model.training  # restored
    assert len(weights) == 3 and weights[0].shape == (2, 7, 7)
    for w in weights:
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 7))
        assert torch.all(torch.triu(w, diagonal=1) == 0)
    again = plotting.attention_weights(model, torch.arange(7))  # no dropout: deterministic
    torch.testing.assert_close(weights, again)


def test_save_png_writes_the_same_pixels_as_tensorboard_gets(tmp_path: Path):
    fig = plotting.attention_figure(causal_weights(4, 9), list(PROBE), layer=0)
    path = plotting.save_png(fig, tmp_path / "sub" / "a.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    png = matplotlib.image.imread(path)  # visualize.py's files: the same size, so the same rule
    assert png.shape[:2] == plotting.render_rgb(fig).shape[:2]


# --------------------------------------------------------------------------------------------
# The training callback's figure: built once, then only its cells and title change


def test_a_reused_figure_draws_the_same_pixels_as_a_fresh_one():
    """Two calls on one figure (other weights, layer and note), each drawn like a figure built
    afresh and drawn in full: a figure per layout, a longer note (two lines) makes another."""
    labels, reuse = list(PROBE), {}
    calls = [(causal_weights(4, 9, seed=0), 0, "step 500"), (causal_weights(4, 9, seed=1), 3, "step 1000"),
             (causal_weights(4, 9, seed=2), 1, "run 20240101-120000, checkpoint last.ckpt, step 1500")]
    figures = []
    for weights, layer, note in calls:
        fig = plotting.attention_figure(weights, labels, layer, note=note, reuse=reuse)
        reused = plotting.render_rgb(fig)
        fresh = plotting.attention_figure(weights, labels, layer, note=note)
        assert type(fresh) is Figure  # a plain figure, drawn in full by matplotlib
        np.testing.assert_array_equal(reused, plotting.render_rgb(fresh))
        assert fig.get_suptitle() == fresh.get_suptitle()
        assert " ".join(fig.get_suptitle().split()).endswith(note)  # the note, wrapped
        figures.append(fig)
    assert isinstance(figures[0], rendering.ReusableFigure)
    assert figures[1] is figures[0]  # the same figure, refilled
    assert figures[2] is not figures[0] and len(reuse) == 2  # the title's extra line: another page
    # the second call's cells are the second weights, not the first
    assert panels(figures[1])[0].get_array()[8, 0] == pytest.approx(calls[1][0][0, 8, 0].item())


def test_a_reused_figure_keeps_its_labels_and_masked_cells():
    """After two calls: every panel's key labels, each row's query labels, the titles, and the
    masked future cells drawn grey and hatched in every panel."""
    T, heads, labels, reuse = 9, 4, list(PROBE), {}
    plotting.render_rgb(plotting.attention_figure(causal_weights(heads, T, 0), labels, 0, reuse=reuse))
    fig = plotting.attention_figure(causal_weights(heads, T, 1), labels, 2, note="step 9", reuse=reuse)
    image = plotting.render_rgb(fig)
    strings = [t.get_text() for t in fig.axes[0].texts]
    for i, ch in enumerate(labels):
        assert strings.count(f"{ch}\n{i}") == heads  # under each panel
        assert strings.count(f"{i} {ch}") == 2  # left of each row of the 2 x 2 grid
    assert [strings.count(f"head {h}") for h in range(heads)] == [1] * heads
    assert fig.get_suptitle().startswith("Layer 2 attention") and "step 9" in fig.get_suptitle()
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    hatches = [p for p in fig.axes[0].patches if p.get_hatch() == "///"]
    assert len(hatches) == heads and all(h in fig.changing for h in hatches)  # drawn on the cells
    for im in panels(fig):
        np.testing.assert_array_equal(im.get_array().mask, future)
        left, right, bottom, top = im.get_extent()
        cell = (right - left) / T
        future_pixels = np.concatenate([  # inside each future cell, its edges left out
            image_region(fig, image, left + j * cell, top + i * cell, cell).reshape(-1, 3)
            for i, j in np.argwhere(future)])
        assert np.ptp(future_pixels, axis=1).max() <= 2  # shades of grey: no weight's colour
        shade = future_pixels[:, 0].astype(int)
        grey, hatch = np.abs(shade - round(0.85 * 255)) <= 2, shade <= round(0.55 * 255) + 20
        assert (shade <= round(0.85 * 255) + 2).all()  # nothing lighter than the mask's grey
        assert grey.mean() > 0.5 and 0.05 < hatch.mean() < 0.5, (grey.mean(), hatch.mean())
        for i in range(T):  # the diagonal: coloured by its weight, not grey
            assert np.ptp(pixel(fig, image, left + (i + 0.5) * cell, top + (i + 0.5) * cell)) > 30


def image_region(fig: Figure, image: np.ndarray, x: float, y: float, size: float) -> np.ndarray:
    """The pixels of the square of ``size`` data units whose top-left corner is (x, y)."""
    (c0, r0), (c1, r1) = fig.axes[0].transData.transform([(x, y), (x + size, y + size)])
    rows = sorted(image.shape[0] - int(r) for r in (r0, r1))
    return image[rows[0] + 2:rows[1] - 2, int(c0) + 2:int(c1) - 2]


def test_importing_the_plotting_functions_loads_neither_matplotlib_nor_the_font():
    """A fresh process: tinylm.plots.figures imports no matplotlib, and the callback's module adds no
    matplotlib module to those lightning imports itself (torchmetrics, when matplotlib is
    installed, imports pyplot), and not tinylm.plots.rendering, which registers the font."""
    code = """if True:
        import sys
        import tinylm.plots.figures
        assert "matplotlib" not in sys.modules, "tinylm.plots.figures imported matplotlib"
        import lightning
        before = {m for m in sys.modules if m.startswith("matplotlib")}
        import tinylm.tasks.text.attention
        added = sorted(m for m in sys.modules if m.startswith("matplotlib") and m not in before)
        assert not added, added
        assert "tinylm.plots.rendering" not in sys.modules
        """
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_the_callbacks_png_holds_the_rendered_pixels():
    from tinylm.callbacks.attention import png

    fig = plotting.attention_figure(causal_weights(4, 9), list(PROBE), layer=0, note="step 1")
    image = plotting.render_rgb(fig)
    data = png(image)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    decoded = matplotlib.image.imread(io.BytesIO(data), format="png")
    np.testing.assert_array_equal(np.round(decoded * 255).astype(np.uint8), image)
