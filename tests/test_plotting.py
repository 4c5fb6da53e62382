"""Figures: the CJK font from the pip package, heatmaps with Chinese labels, the masked future."""

import warnings
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from tinylm import plotting
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.tokenizer import ByteTokenizer, CharTokenizer

PROBE = "自注意力可以让序列"


def causal_weights(heads: int, T: int, seed: int = 0) -> torch.Tensor:
    """Random attention weights shaped like a model's: (h, T, T), zero above the diagonal."""
    scores = torch.randn(heads, T, T, generator=torch.Generator().manual_seed(seed))
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return scores.masked_fill(future, float("-inf")).softmax(-1)


def test_font_is_the_pip_package_noto_sans_sc_registered_in_process():
    path = plotting.cjk_font_path()
    assert path.name.startswith("NotoSansSC") and path.suffix in (".otf", ".ttf")
    assert "pylopdf_fonts_zh_cn" in path.parts  # the installed package, not a system font
    assert plotting.register_cjk_font() == "Noto Sans SC"
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
    assert channels == 3 and width > 2 * height > 400  # four panels side by side
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "0 自" in texts and "列\n8" in texts  # query labels and key labels: char + position
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[:4] == [f"layer 2 · head {h}" for h in range(4)]
    assert fig.axes[-1].get_ylabel().startswith("attention weight")  # the colour bar
    assert "step 100" in fig.get_suptitle()


def test_chinese_characters_render_as_distinct_glyphs_not_boxes():
    """A missing glyph renders as the same empty box for every character; real glyphs differ."""

    def glyph(ch: str) -> np.ndarray:
        with plotting.cjk_style():
            fig = Figure(figsize=(0.6, 0.6), dpi=50)
            fig.text(0.5, 0.5, ch, ha="center", va="center", fontsize=20)
        return plotting.render_rgb(fig)

    a, b, c = glyph("自"), glyph("注"), glyph("力")
    assert (a < 128).any()  # ink on the page
    assert not np.array_equal(a, b) and not np.array_equal(b, c)


def test_future_cells_are_masked_and_hatched():
    T = 6
    fig = plotting.attention_figure(causal_weights(2, T), list("abcdef"), layer=0)
    ax = fig.axes[0]
    shown = ax.images[0].get_array()
    np.testing.assert_array_equal(shown.mask, np.triu(np.ones((T, T), dtype=bool), k=1))
    (hatch,) = ax.patches
    assert hatch.get_hatch() == "///"
    # the hatched outline covers exactly the cells above the diagonal
    inside = [hatch.get_path().contains_point((j, i)) for i in range(T) for j in range(T)]
    assert sum(inside) == T * (T - 1) // 2
    assert hatch.get_path().contains_point((T - 1, 0)) and not hatch.get_path().contains_point((0, 0))


def test_six_heads_wrap_onto_two_rows():
    fig = plotting.attention_figure(causal_weights(6, 5), list("abcde"), layer=1)
    heads = [ax for ax in fig.axes if ax.images and ax.get_title()]
    assert len(heads) == 6
    rows = sorted({round(ax.get_position().y0, 3) for ax in heads})
    assert len(rows) == 2


def test_causal_mask_figure_shows_minus_infinity_above_the_diagonal():
    T = 5
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    fig = plotting.causal_mask_figure(mask, list("注意力机制"))
    cells = [t.get_text() for t in fig.axes[0].texts if t.get_text() in ("0", "−∞")]
    assert cells.count("−∞") == T * (T - 1) // 2 and cells.count("0") == T * (T + 1) // 2


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


def test_save_png_writes_a_png(tmp_path: Path):
    fig = plotting.attention_figure(causal_weights(1, 3), list("abc"), layer=0)
    path = plotting.save_png(fig, tmp_path / "sub" / "a.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
