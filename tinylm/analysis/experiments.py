"""``analyze.py``'s work on a loaded checkpoint: every experiment on one text, its files, its table."""

from __future__ import annotations

from pathlib import Path

import torch

from tinylm.analysis import report
from tinylm.analysis.heads import head_table, strongest
from tinylm.analysis.lens import logit_lens
from tinylm.analysis.patching import patching
from tinylm.analysis.probe import Probe
from tinylm.plots.figures import visible


def analyze(loaded, ids: list[int], corrupt: list[int] | None, out_dir: Path, cfg) -> dict:
    """A decoder's heads, logit lens and (with ``corrupt``) patching on the text ``ids``, written into
    ``out_dir``; returns what was computed, the files and the text to print."""
    model, tokenizer = loaded.model, loaded.tokenizer
    text = torch.tensor(ids)  # (T,)
    probe = Probe.of_text(model, text[None])
    rows = head_table(model, text, cfg.induction_length, cfg.induction_draws, cfg.seed, cfg.ablation)
    lens = logit_lens(probe, tokenizer)
    files = [report.write_json(out_dir / "heads.json", rows), report.write_json(out_dir / "logit_lens.json", lens)]
    patch, answer = None, ""
    if corrupt is not None:
        patch = patching(probe, Probe.of_text(model, torch.tensor(corrupt)[None]))
        answer = tokenizer.decode_piece([patch["answer"]])
        patch["answer_text"] = answer
        files.append(report.write_json(out_dir / "patching.json", patch))
    note = f"{loaded.path.name}, step {loaded.global_step}"
    figures = report.write_figures(out_dir, rows, lens, patch, answer, note)
    table = "\n".join(part for part in (report.head_rows_table(rows), named_heads(rows), report.lens_table(lens),
                                        patch_line(patch)) if part)
    header = (f"`{loaded.path}` (step {loaded.global_step}, {model.num_params():,} parameters) on the text "
              f"{tokenizer.decode(ids)!r} ({len(ids)} tokens); ablation: {cfg.ablation}.")
    files += [path for _, path in figures]
    files.append(report.write_report(out_dir, header, figures, table))
    printed = "\n".join([f"analyzed {loaded.path} (step {loaded.global_step}) on {len(ids)} tokens", table,
                         *(str(f) for f in files)])
    return {"heads": rows, "logit_lens": lens, "patching": patch, "files": files, "printed": printed}


def named_heads(rows: list[dict]) -> str:
    """The strongest previous-token and induction heads, and the head whose ablation costs the most."""
    parts = []
    for score, what in (("previous_token", "previous-token head"), ("induction", "induction head"),
                        ("ablation_loss_delta", "most needed head")):
        row = strongest(rows, score)
        parts.append(f"{what}: {row['layer']}.{row['head']} ({row[score]:.3f})")
    return "; ".join(parts)


def patch_line(patch: dict | None) -> str:
    if patch is None:
        return ""
    best = max((h for h in patch["heads"] if h["restored"] is not None), key=lambda h: h["restored"], default=None)
    head = f"; the head that restores most: {best['layer']}.{best['head']} ({best['restored']:.2f})" if best else ""
    return (f"patching: clean answer {visible(patch['answer_text'])!r}, logit {patch['clean_logit']:.3f} clean, "
            f"{patch['corrupt_logit']:.3f} corrupt{head}")
