"""The circuits' figures (``tinylm.analysis.circuits``), drawn with ``figures.grid_figure``: the layer × head
grid of a direct logit attribution (an MLP column beside the heads), the heads' scores, a head's OV circuit
over the characters, the composition matrices and the neurons' strongest characters."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import numpy as np

from tinylm.analysis.figures import grid_figure
from tinylm.plots.figures import visible

if TYPE_CHECKING:
    from matplotlib.figure import Figure

HEAD = re.compile(r"^(cross)?L(\d+)H(\d+)$")


def _symmetric(values: np.ndarray) -> tuple[float, float]:
    reach = max(float(np.nanmax(np.abs(values), initial=0.0)), 1e-6)
    return -reach, reach


def dla_grid(parts: dict[str, float], title: list[str]) -> Figure:
    """Rows: layers (a cross-attention's heads in rows of their own); columns: the heads, then the MLP. The
    embeddings and the bias are in the last row."""
    rows: dict[str, dict[str, float]] = {}
    heads = 0
    for name, value in parts.items():
        match = HEAD.match(name)
        if match:
            prefix, layer, head = match.group(1) or "", int(match.group(2)), int(match.group(3))
            rows.setdefault(f"{prefix + ' ' if prefix else ''}layer {layer}", {})[f"head {head}"] = value
            heads = max(heads, head + 1)
        elif name.startswith("mlp"):
            rows.setdefault(f"layer {int(name[3:])}", {})["MLP"] = value
    cols = [f"head {j}" for j in range(heads)] + ["MLP"]
    labels = sorted(rows, key=lambda r: (int(r.split()[-1]), r.startswith("cross")))
    values = np.array([[rows[r].get(c, np.nan) for c in cols] for r in labels])
    rest = {name: parts[name] for name in ("embed", "pos_embed", "bias")}
    extra = np.full((1, len(cols)), np.nan)
    for j, name in enumerate(rest):
        if j < len(cols):
            extra[0, j] = rest[name]
    values = np.vstack([values, extra])
    text = [["–" if math.isnan(v) else f"{v:+.2f}" for v in row] for row in values]
    if len(cols) >= 3:
        text[-1][: len(rest)] = [f"{name}\n{value:+.2f}" for name, value in rest.items()]
    vmin, vmax = _symmetric(values)
    return grid_figure(values, [*labels, "embed, pos, bias"], cols, title, ("head (and the MLP)", "layer"),
                       "logit contributed", vmin, vmax, cmap="RdBu_r", cell_text=text)


def head_scores_grid(rows: list[dict], score: str, title: list[str]) -> Figure:
    """A layer × head grid of one circuits.json score (None: grey)."""
    layers = sorted({(r.get("name", "")[:5] == "cross", r["layer"]) for r in rows}, key=lambda x: (x[1], x[0]))
    heads = max(r["head"] for r in rows) + 1
    values = np.full((len(layers), heads), np.nan)
    for r in rows:
        i = layers.index((r.get("name", "")[:5] == "cross", r["layer"]))
        values[i, r["head"]] = np.nan if r[score] is None else r[score]
    text = [["–" if math.isnan(v) else f"{v:.2f}" for v in row] for row in values]
    labels = [f"{'cross ' if cross else ''}layer {layer}" for cross, layer in layers]
    return grid_figure(values, labels, [f"head {j}" for j in range(heads)], title, ("head", "layer"), score,
                       0.0, 1.0, cell_text=text)


def ov_heatmap(ov: np.ndarray, tokens: list[str], title: list[str]) -> Figure:
    """The V × V OV circuit: rows the character attended to, columns the logit written."""
    labels = [visible(t) or "?" for t in tokens]
    vmin, vmax = _symmetric(ov)
    return grid_figure(ov, labels, labels, title, ("the logit it raises (output character)", "character attended to"),
                       "logit written", vmin, vmax, cmap="RdBu_r")


def composition_grid(matrix: list[list[float | None]], heads: list[str], baseline: float, title: list[str]) -> Figure:
    """[earlier head][later head]; grey where the later head is not in a later layer."""
    values = np.array([[np.nan if v is None else v for v in row] for row in matrix], dtype=float)
    text = [["" if math.isnan(v) else f"{v:.2f}" for v in row] for row in values]
    vmax = max(float(np.nanmax(values, initial=0.0)), baseline * 2, 1e-6)
    return grid_figure(values, heads, heads, [*title, f"random baseline {baseline:.3f}"],
                       ("later head (reads)", "earlier head (writes)"), "composition score", 0.0, vmax,
                       cell_text=text)


def neurons_grid(neurons: dict, shown: int = 8) -> Figure:
    """Per layer the ``shown`` neurons with the largest activation: their top examples' characters, coloured by
    activation."""
    rows, values, text = [], [], []
    for layer in neurons["layers"]:
        ranked = sorted(layer["neurons"], key=lambda n: -max((e["activation"] for e in n["examples"]), default=0))
        for neuron in ranked[:shown]:
            rows.append(f"L{layer['layer']}N{neuron['neuron']} → " + "".join(visible(p["char"]) or "?"
                                                                          for p in neuron["pushes"][:3]))
            values.append([e["activation"] for e in neuron["examples"]])
            text.append([visible(e["char"]) or "?" for e in neuron["examples"]])
    k = max(len(v) for v in values)
    grid = np.array([v + [np.nan] * (k - len(v)) for v in values])
    text = [t + [""] * (k - len(t)) for t in text]
    return grid_figure(grid, rows, [f"#{i + 1}" for i in range(k)],
                       ["MLP neurons: the characters they fire on most", "row: neuron → the characters it pushes up"],
                       ("rank of the example", "neuron"), "activation", 0.0, float(np.nanmax(grid, initial=1.0)),
                       cell_text=text)
