"""``analyze.py``'s work on a loaded checkpoint: every experiment on one text, its files, its table."""

from __future__ import annotations

from pathlib import Path

import torch

from tinylm.analysis import report
from tinylm.analysis.heads import head_table, strongest
from tinylm.analysis.lens import logit_lens
from tinylm.analysis.patching import patching
from tinylm.analysis.probe import Probe
from tinylm.analysis.translation import cross_head_table, first_pair_probe, pairs_of
from tinylm.cli import encode_text
from tinylm.console import checkpoint_name
from tinylm.errors import TinyLMError
from tinylm.plots.figures import visible
from tinylm.tasks import is_encoder_decoder


def decoder_inputs(loaded, cfg) -> tuple[list[int], list[int] | None]:
    """The text's ids and the corrupt text's (None without one), or one TinyLMError."""
    block_size = loaded.model.config.block_size
    ids = encode_text(loaded.tokenizer, "" if cfg.text is None else str(cfg.text), block_size)
    corrupt = None
    if cfg.corrupt_text is not None:
        corrupt = encode_text(loaded.tokenizer, str(cfg.corrupt_text), block_size)
        if len(corrupt) != len(ids):
            raise TinyLMError(f"corrupt_text is {len(corrupt)} tokens long and text {len(ids)}: patching copies "
                              "position by position, so pass texts of the same length")
    if len(ids) < 2:
        raise TinyLMError("text is one token long: pass at least two, so that there is a next token to predict")
    return ids, corrupt


def check_inputs(loaded, cfg):
    """What the experiments read, checked before anything is written: a decoder's text ids and corrupt ids,
    or an encoder-decoder's (source, reference) pairs."""
    if is_encoder_decoder(loaded.model):
        if cfg.corrupt_text is not None:
            raise TinyLMError("corrupt_text: activation patching runs on decoders (the GPT); an encoder-decoder's "
                              "cross-attention heads are scored and switched off instead")
        return pairs_of(loaded, "" if cfg.text is None else str(cfg.text), cfg.target)
    return decoder_inputs(loaded, cfg)


def analyze(loaded, inputs, out_dir: Path, cfg) -> dict:
    """The experiments on ``inputs`` (``check_inputs``), written into ``out_dir``; returns what was
    computed, the files and the text to print."""
    if is_encoder_decoder(loaded.model):
        rows = cross_head_table(loaded.model, inputs, cfg.ablation)
        probe = first_pair_probe(loaded.model, inputs)
        what = f"{len(inputs)} source line(s)"
        return written(loaded, rows, logit_lens(probe, loaded.tokenizer), None, out_dir, cfg, what)
    ids, corrupt = inputs
    model, tokenizer = loaded.model, loaded.tokenizer
    text = torch.tensor(ids)  # (T,)
    probe = Probe.of_text(model, text[None])
    rows = head_table(model, text, cfg.induction_length, cfg.induction_draws, cfg.seed, cfg.ablation)
    lens = logit_lens(probe, tokenizer)
    patch = None
    if corrupt is not None:
        patch = patching(probe, Probe.of_text(model, torch.tensor(corrupt)[None]))
        patch["answer_text"] = tokenizer.decode_piece([patch["answer"]])
    return written(loaded, rows, lens, patch, out_dir, cfg, f"the text {tokenizer.decode(ids)!r} ({len(ids)} tokens)")


def written(loaded, rows: list[dict], lens: dict, patch: dict | None, out_dir: Path, cfg, what: str) -> dict:
    """The JSON files, figures and REPORT.md of the results, and the table to print."""
    model = loaded.model
    files = [report.write_json(out_dir / "heads.json", rows), report.write_json(out_dir / "logit_lens.json", lens)]
    answer = ""
    if patch is not None:
        answer = patch["answer_text"]
        files.append(report.write_json(out_dir / "patching.json", patch))
    note = f"{loaded.path.name}, step {loaded.global_step}"
    figures = report.write_figures(out_dir, rows, lens, patch, answer, note)
    extra = "ablation_exact_match_delta" if is_encoder_decoder(model) else None
    table = "\n".join(part for part in (report.head_rows_table(rows, extra), named_heads(rows),
                                        report.lens_table(lens), patch_line(patch)) if part)
    header = (f"`{loaded.path}` (step {loaded.global_step}, {model.num_params():,} parameters) on {what}; "
              f"ablation: {cfg.ablation}.")
    files += [path for _, path in figures]
    files.append(report.write_report(out_dir, header, figures, table))
    name = checkpoint_name(loaded.path, loaded.why, f"step {loaded.global_step}")
    printed = "\n".join([f"analyzed {name} on {what}", table,
                         *(str(f) for f in files)])
    return {"heads": rows, "logit_lens": lens, "patching": patch, "files": files, "printed": printed}


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


def patch_line(patch: dict | None) -> str:
    if patch is None:
        return ""
    best = max((h for h in patch["heads"] if h["restored"] is not None), key=lambda h: h["restored"], default=None)
    head = f"; the head that restores most: {best['layer']}.{best['head']} ({best['restored']:.2f})" if best else ""
    return (f"patching: clean answer {visible(patch['answer_text'])!r}, logit {patch['clean_logit']:.3f} clean, "
            f"{patch['corrupt_logit']:.3f} corrupt{head}")
