"""A decoder's heads (``tinylm.analysis.heads``): ``heads.json``, a layer × head grid of each score, a
table line per head and the strongest heads by name."""

from __future__ import annotations

import torch

from tinylm.analysis.figures import head_grid
from tinylm.analysis.heads import head_table, strongest
from tinylm.analysis.registry import ReportFigure, Result, Subject, register

READING = {
    "previous_token": (
        "Previous-token heads", "One cell per head (rows: layers, columns: heads): the mean attention from "
        "each position to the one just before it, on the text. A value near 1 marks a head that always "
        "looks exactly one token back, the first half of an induction circuit."),
    "induction": (
        "Induction heads", "The text here is random tokens written twice. In the second copy, an induction "
        "head looks at the token that followed the current token's earlier occurrence, so that it can predict "
        "it again. The cell is the mean attention to exactly that token (1: always; chance is about "
        "1 / position)."),
    "entropy": (
        "Attention entropy", "The mean entropy of each head's attention rows on the text, in nats: 0 means "
        "every query looks at a single key, larger values mean attention spread over many keys (at most ln(i + 1) "
        "for the row of position i)."),
    "ablation_loss_delta": (
        "Head ablation", "How much the next-token loss on the text rises when that one head is switched off "
        "(its output set to zero, or to its mean with ablation=mean) and everything else runs as before. Red "
        "heads matter for this text; white heads could be removed at no cost; blue heads were hurting."),
}


@register("heads", order=10)
def heads(subject: Subject) -> Result:
    cfg = subject.cfg
    rows = head_table(subject.model, torch.tensor(subject.ids), cfg.induction_length, cfg.induction_draws,
                      cfg.seed, cfg.ablation)
    return head_result(rows, subject.note, READING)


def head_result(rows: list[dict], note: str, reading: dict[str, tuple[str, str]]) -> Result:
    """``rows`` as heads.json; a grid and a table column for each score of ``reading`` the rows hold
    (not null), in its order; the strongest heads."""
    scores = [score for score in reading if rows[0].get(score) is not None]
    figures = [ReportFigure(score, head_grid(rows, score, note), *reading[score]) for score in scores]
    lines = ["layer head " + " ".join(f"{score:>19}" for score in scores)]
    lines += [f"{row['layer']:>5} {row['head']:>4} " + " ".join(f"{row[score]:>19.4f}" for score in scores)
              for row in rows]
    named = named_heads(rows)
    return Result(rows, figures, [*lines, *([named] if named else [])])


def named_heads(rows: list[dict]) -> str:
    """The strongest previous-token and induction heads, and the head whose ablation costs the most."""
    parts = []
    for score, what in (("previous_token", "previous-token head"), ("induction", "induction head"),
                        ("ablation_loss_delta", "most needed head")):
        if rows[0][score] is None:
            continue
        row = strongest(rows, score)
        parts.append(f"{what}: {row['layer']}.{row['head']} ({row[score]:.3f})")
    return "; ".join(parts)
