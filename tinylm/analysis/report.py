"""What ``analyze.py`` leaves in its folder: the JSON files, the figures, ``REPORT.md``, and the table
it prints.

    heads.json        one object per layer and head: layer, head, previous_token, induction,
                      entropy, ablation_loss_delta (the names scripts read: keep them)
    logit_lens.json   {"tokens": [...], "layers": [{"layer", "top1", "prob", "loss"}, ...]}
    patching.json     with a corrupt text: the clean answer and what each patch restores
    *.png, REPORT.md  a figure per result, with a paragraph on how to read it
"""

from __future__ import annotations

import json
from pathlib import Path

from tinylm.analysis import figures
from tinylm.plots.figures import save_png, visible

READING = {
    "logit_lens": (
        "Logit lens", "Each row is the model cut short after one block: its residual stream read through the "
        "final LayerNorm and the output head, as if no block followed. Each column is a position of the text; "
        "the cell shows the character predicted to come next and is coloured by that prediction's probability. "
        "The last row is the model's own prediction. Where a column turns bright only in the later rows, the "
        "later blocks are what make that prediction; the loss on the left falls as the rows get better."),
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
    "patching_residual": (
        "Activation patching, residual stream", "The model reads the corrupt text, but the residual stream "
        "after one block at one position is copied from the clean text's run. The cell is the share of the "
        "clean answer's logit (after the last position) that this one copy brings back: 1 means the "
        "information the answer needs is all there, 0 that it is not used. The bright path shows where the "
        "information travels from the changed position to the last one."),
    "ablation_exact_match_delta": (
        "Head ablation, exact match", "The change in the share of sources translated exactly (greedy decoding) "
        "when that one cross-attention head is switched off: negative for the heads the translation needs."),
    "patching_heads": (
        "Activation patching, heads", "As above, but copying one head's output (at every position) from the "
        "clean run: the heads whose cells are bright move the information the clean answer needs."),
}


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return path


def write_figures(out_dir: Path, rows: list[dict], lens: dict | None, patch: dict | None, answer: str,
                  note: str) -> list[tuple[str, Path]]:
    """Every figure as ``<name>.png`` in ``out_dir``: (name, path), in the report's order."""
    drawn = []
    if lens is not None:
        drawn.append(("logit_lens", figures.lens_figure(lens, note)))
    drawn += [(score, figures.head_grid(rows, score, note)) for score in figures.SCORE_TITLES
              if rows[0].get(score) is not None]
    if patch is not None:
        drawn += figures.patching_figures(patch, lens["tokens"] if lens else [], answer, note)
    return [(name, save_png(figure, out_dir / f"{name}.png")) for name, figure in drawn]


def write_report(out_dir: Path, header: str, written: list[tuple[str, Path]], table: str) -> Path:
    """``REPORT.md``: the header, the printed table, then each figure with how to read it."""
    parts = ["# What the model does with its heads", "", header, "", "```", table, "```", ""]
    for name, path in written:
        title, paragraph = READING[name]
        parts += [f"## {title}", "", f"![{title}]({path.name})", "", paragraph, ""]
    path = out_dir / "REPORT.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def head_rows_table(rows: list[dict], extra: str | None = None) -> str:
    """The short table analyze.py prints: one line per head, its scores side by side (those not null)."""
    names = [key for key in ("previous_token", "induction", "entropy", "ablation_loss_delta", extra)
             if key and rows[0].get(key) is not None]
    lines = ["layer head " + " ".join(f"{name:>19}" for name in names)]
    for row in rows:
        lines.append(f"{row['layer']:>5} {row['head']:>4} " + " ".join(
            f"{row[name]:>19.4f}" for name in names))
    return "\n".join(lines)


def lens_table(lens: dict) -> str:
    """One line per block: its loss on the text and what it predicts after the last token."""
    return "\n".join(f"after block {layer['layer']}: loss {layer['loss']:.4f}, predicts "
                     f"{visible(layer['top1'][-1])!r} ({layer['prob'][-1]:.2f}) after the last token"
                     for layer in lens["layers"])
