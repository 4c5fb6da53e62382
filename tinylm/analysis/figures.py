"""The experiments' figures: a grid of coloured cells with a value or a character in each
(``grid_figure``), and the layer × head grid of one head score (``head_grid``), which the
``HeadScores`` callback draws too. The logit lens and activation patching draw theirs in their own
modules (``tinylm.analysis.experiments``).

Drawn like the attention heatmaps (``tinylm.plots``): plain matplotlib figures on the Agg canvas,
the CJK font, sizes in ems of the labels' font (``tinylm.plots.layout``), one axes over the page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tinylm.plots.figures import visible
from tinylm.plots.layout import DPI, EM, LABEL_PT, LINE, PAD, TICK_PAD, TITLE_PT

if TYPE_CHECKING:
    from matplotlib.figure import Figure

BAR = 0.8  # the colour bar's height, in label ems
SCORE_TITLES = {
    "previous_token": "Previous-token score: mean attention from i to i − 1",
    "induction": "Induction score: attention to the token after the earlier occurrence",
    "entropy": "Attention entropy (nats): low = focused, high = spread out",
    "ablation_loss_delta": "Loss increase when the head is switched off",
    "ablation_exact_match_delta": "Exact-match change when the head is switched off",
    "restored": "Head patching: share of the clean answer's logit restored",
}


def _em(text: str, pt: float = LABEL_PT) -> float:
    from tinylm.plots.rendering import char_em

    return max((sum(map(char_em, line)) for line in text.split("\n")), default=0.0) * pt / LABEL_PT


def grid_figure(values: np.ndarray, rows: Sequence[str], cols: Sequence[str], title: Sequence[str],
                axis_titles: tuple[str, str], bar_label: str, vmin: float, vmax: float, cmap: str = "viridis",
                cell_text: Sequence[Sequence[str]] | None = None, reuse: dict | None = None) -> Figure:
    """Cells ``values`` (R, C) coloured on [vmin, vmax] (NaN: grey), rows and columns labelled,
    ``cell_text`` (R x C strings) written in the cells, a colour bar under the grid.
    ``axis_titles``: the columns' and the rows'.

    ``reuse``: a dict the caller keeps between calls (the training callback keeps one). A grid
    without ``cell_text`` whose titles and labels were drawn before is that figure again with its
    cells filled in: drawing it renders only the cells, not the text and the colour bar
    (``tinylm.plots.rendering.ReusableFigure``), in about a tenth of the time. Draw the figure
    before the next call: that call changes it."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    from tinylm.plots.rendering import ReusableFigure, cjk_style

    R, C = values.shape
    texts = [t for line in (cell_text or []) for t in line]
    cell = max(1.6, *(_em(t) + 0.5 for t in texts), *(_em(c) + 0.3 for c in cols))
    row_w = max(_em(r) for r in rows)
    col_h = max(c.count("\n") + 1 for c in cols) * LINE
    left = PAD + LINE + row_w + TICK_PAD
    grid_w, grid_h = C * cell, R * cell
    width = max(left + grid_w + PAD, 2 * PAD + max(_em(t, TITLE_PT) for t in title),
                left + _em(axis_titles[0]) + PAD, left + max(_em(bar_label), 6.0) + PAD + 1.5)
    left += max(0.0, width - left - max(grid_w, _em(bar_label), 6.0) - PAD - 1.5) / 2  # centred under the title
    top = PAD + len(title) * LINE * TITLE_PT / LABEL_PT + 0.5
    bar_top = top + grid_h + TICK_PAD + col_h + LINE + 0.5
    height = max(bar_top + BAR + TICK_PAD + 2 * LINE + PAD, top + grid_h + 2 * LINE)
    reusable = reuse is not None and cell_text is None
    key = (R, C, tuple(rows), tuple(cols), tuple(title), axis_titles, bar_label, vmin, vmax, cmap)
    if reusable and key in reuse:  # the same text: new cells, the rest as drawn
        fig, image = reuse[key]
        image.set_data(np.ma.masked_invalid(values))
        return fig
    colours = colormaps[cmap].with_extremes(bad="0.85")
    with cjk_style():
        fig = (ReusableFigure if reusable else Figure)(figsize=(width * EM, height * EM), dpi=DPI)
        fig.suptitle("\n".join(title), y=1 - PAD / height, fontsize=TITLE_PT)
        ax = fig.add_axes((0, 0, 1, 1), xlim=(0, width), ylim=(height, 0))
        ax.set_axis_off()
        image = ax.imshow(np.ma.masked_invalid(values), cmap=colours, vmin=vmin, vmax=vmax, aspect="auto",
                          extent=(left, left + grid_w, top + grid_h, top), interpolation="nearest")
        outline = ax.add_patch(Rectangle((left, top), grid_w, grid_h, fill=False, linewidth=0.8))
        if reusable:  # in matplotlib's drawing order: the image, then the outline over it
            fig.changing = [image, outline]
            reuse[key] = fig, image
        norm = (values - vmin) / (vmax - vmin or 1)
        for i in range(R):
            ax.text(left - TICK_PAD, top + (i + 0.5) * cell, rows[i], ha="right", va="center", fontsize=LABEL_PT)
            for j in range(C if cell_text else 0):
                shade = colours(norm[i, j]) if math.isfinite(norm[i, j]) else (0.85, 0.85, 0.85, 1)
                dark = 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2] < 0.5
                ax.text(left + (j + 0.5) * cell, top + (i + 0.5) * cell, cell_text[i][j], ha="center",
                        va="center", fontsize=LABEL_PT, color="white" if dark else "black")
        for j, label in enumerate(cols):
            ax.text(left + (j + 0.5) * cell, top + grid_h + TICK_PAD, label, ha="center", va="top", fontsize=LABEL_PT)
        ax.text(left + grid_w / 2, top + grid_h + TICK_PAD + col_h, axis_titles[0], ha="center", va="top",
                fontsize=LABEL_PT)
        ax.text(left - TICK_PAD - row_w - LINE, top + grid_h / 2, axis_titles[1], rotation=90, ha="left",
                va="center", fontsize=LABEL_PT)
        x0, x1 = left, left + max(grid_w, _em(bar_label), 6.0)
        ax.imshow(np.linspace(0, 1, 256)[None], cmap=colours, extent=(x0, x1, bar_top + BAR, bar_top), aspect="auto")
        ax.add_patch(Rectangle((x0, bar_top), x1 - x0, BAR, fill=False, linewidth=0.8))
        for end, value in ((x0, vmin), (x1, vmax)):
            ax.text(end, bar_top + BAR + TICK_PAD, f"{value:.2g}", ha="center", va="top", fontsize=LABEL_PT)
        ax.text((x0 + x1) / 2, bar_top + BAR + TICK_PAD + LINE, bar_label, ha="center", va="top", fontsize=LABEL_PT)
    return fig


def positions(tokens: Sequence[str]) -> list[str]:
    """Column labels for a text's positions: each token (shown visibly) over its index."""
    return [f"{visible(t) or '?'}\n{i}" for i, t in enumerate(tokens)]


def head_grid(rows: list[dict], score: str, note: str = "", vmax: float | None = None, numbers: bool = True,
              reuse: dict | None = None) -> Figure:
    """A layer × head grid of ``score`` (a key of ``heads.json``'s rows), its value in each cell
    (``numbers=False``: colours only; then ``reuse`` (see ``grid_figure``) redraws only the cells)."""
    layers, heads = max(r["layer"] for r in rows) + 1, max(r["head"] for r in rows) + 1
    values = np.full((layers, heads), np.nan)
    for r in rows:
        values[r["layer"], r["head"]] = np.nan if r[score] is None else r[score]
    finite = values[np.isfinite(values)]
    if score.startswith("ablation"):
        reach = max(float(np.abs(finite).max(initial=0.0)), 1e-6)
        vmin, vmax, cmap = -reach, reach, "RdBu_r"
    else:
        vmin, cmap = 0.0, "viridis"
        vmax = vmax if vmax is not None else (1.0 if score != "entropy" else max(float(finite.max(initial=0)), 1e-6))
    fmt = "{:+.3f}" if score.startswith("ablation") else "{:.2f}"
    text = [["–" if math.isnan(v) else fmt.format(v) for v in row] for row in values]
    return grid_figure(values, [f"layer {i}" for i in range(layers)], [f"head {j}" for j in range(heads)],
                       [SCORE_TITLES.get(score, score), *([note] if note else [])], ("head", "layer"),
                       SCORE_TITLES.get(score, score).split(":")[0], vmin, vmax, cmap=cmap,
                       cell_text=text if numbers else None, reuse=reuse)
