"""Composition scores between a decoder's heads (``tinylm.analysis.circuits.composition``): ``composition.json``,
a grid each for Q-, K- and V-composition with the random baseline, the strongest pair of each."""

from __future__ import annotations

from tinylm.analysis.circuit_figures import composition_grid
from tinylm.analysis.circuits.composition import composition_scores
from tinylm.analysis.registry import ReportFigure, Result, Subject, register

WHAT = {"q": "its queries", "k": "its keys", "v": "its values"}
READING = (
    "How much each later head (column) reads the output of each earlier head (row) through {what}: the Frobenius "
    "norm of the product of the earlier head's W_OV and the later head's {matrix}, over the product of their "
    "norms (\"A Mathematical Framework for Transformer Circuits\"). Grey: not a later layer. Compare with the "
    "random baseline in the title, the score of unrelated random heads of the same shapes. An induction head "
    "K-composes with a previous-token head: it finds the key whose previous character matches its query.")


@register("composition", order=60)
def composition_analysis(subject: Subject) -> Result:
    comp = composition_scores(subject.model, subject.cfg.get("seed", 0))
    heads, base = comp["heads"], comp["baseline"]
    figures, lines = [], []
    for kind in ("q", "k", "v"):
        matrix = "W_OV" if kind == "v" else ("W_QK" if kind == "q" else "W_QKᵀ")
        title = [f"{kind.upper()}-composition: earlier head (row) → later head (column)", subject.note]
        figures.append(ReportFigure(f"composition_{kind}", composition_grid(comp[kind], heads, base, title),
                                    f"{kind.upper()}-composition", READING.format(what=WHAT[kind], matrix=matrix)))
        pairs = [(v, a, b) for a, row in enumerate(comp[kind]) for b, v in enumerate(row) if v is not None]
        if pairs:
            v, a, b = max(pairs)
            lines.append(f"composition {kind}: strongest {heads[a]} → {heads[b]} {v:.3f} (baseline {base:.3f})")
    return Result(comp, figures, lines)
