"""Each head's OV and QK circuits (``tinylm.analysis.circuits.ov_qk``): ``circuits.json``, a grid of the heads'
copying scores and of their positional previous-token scores, the OV circuit of the head that copies most."""

from __future__ import annotations

from tinylm.analysis.circuit_figures import head_scores_grid, ov_heatmap
from tinylm.analysis.circuits.ov_qk import head_circuits, ov_circuit
from tinylm.analysis.registry import ReportFigure, Result, Subject, register

COPYING = (
    "Copying scores (OV circuits)", "For each head, its OV circuit: the token embedding of a character a, through "
    "the head's W_V and W_O and the output head, gives the logits the head writes when it attends to a. The cell "
    "is the fraction of the vocabulary whose largest such logit is the character itself (1: the head copies "
    "whatever it attends to, as an induction head does; about 1/V: no copying). circuits.json's folded says "
    "what the circuits leave out.")
POSITIONAL = (
    "Positional previous-token scores (positional QK)", "Each head's query/key scores between the position "
    "table's rows alone (no characters): row i's softmax over the keys 0..i, read at key i - 1, averaged over the "
    "rows. Near 1: the head looks one position back by position alone, the previous-token head of an induction "
    "circuit. Grey: no position table (rope) or a cross-attention head.")
OV = (
    "OV circuit of the head that copies most", "Rows: the character the head attends to; columns: the logit it "
    "writes for each character (red up, blue down). A copying head draws a red diagonal: attending to a raises a.")


@register("circuits", models=("decoder", "encoder-decoder"), order=50)
def circuits_analysis(subject: Subject) -> Result:
    model, note = subject.model, subject.note
    circuits = head_circuits(model, subject.tokenizer)
    rows = circuits["heads"]
    figures = [ReportFigure("circuits_copying", head_scores_grid(rows, "copying", ["Copying score: the fraction of "
                            "characters whose largest OV output is itself", note]), *COPYING)]
    if any(r["positional_previous_token"] is not None for r in rows):
        figures.append(ReportFigure("circuits_positional", head_scores_grid(
            rows, "positional_previous_token", ["Positional previous-token score (positional QK alone)", note]),
            *POSITIONAL))
    best = max(rows, key=lambda r: r["copying"])
    prefix = "cross" if best["name"].startswith("cross") else ""
    ov = ov_circuit(model, best["layer"], best["head"], prefix).numpy()
    figures.append(ReportFigure("circuits_ov", ov_heatmap(ov, circuits["tokens"], [
        f"OV circuit of head {best['name']} (copying {best['copying']:.2f})", note]), *OV))
    lines = [f"circuits: head {best['name']} copies most ({best['copying']:.3f} of the characters)"]
    positional = [r for r in rows if r["positional_previous_token"] is not None]
    if positional:
        top = max(positional, key=lambda r: r["positional_previous_token"])
        lines.append(f"circuits: head {top['name']} looks one position back most by position alone "
                     f"({top['positional_previous_token']:.3f})")
    return Result(circuits, figures, lines)
