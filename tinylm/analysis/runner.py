"""``analyze.py``'s work on a loaded checkpoint: its ``Subject`` (the options checked against the
checkpoint before anything is written), then every registered analysis that applies
(``tinylm.analysis.experiments.registered()``), its files, ``REPORT.md`` and the table it prints.

    <name>.json       each analysis's value: heads.json (one object per layer and head: layer, head,
                      previous_token, induction, entropy, ablation_loss_delta: the names scripts read,
                      keep them), logit_lens.json ({"tokens": [...], "layers": [{"layer", "top1", "prob",
                      "loss"}, ...]}), patching.json (with a corrupt text)
    <figure>.png      each analysis's figures
    REPORT.md         the table, which analyses ran, each figure with a paragraph on how to read it
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tinylm.analysis.probe import Probe
from tinylm.analysis.registry import Analysis, ReportFigure, Subject
from tinylm.analysis.translation import first_pair_probe, pairs_of
from tinylm.cli import encode_text
from tinylm.console import checkpoint_name
from tinylm.errors import TinyLMError
from tinylm.plots.figures import save_png
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


def subject(loaded, cfg) -> Subject:
    """What the analyses read, checked before anything is written: a decoder's text ids and corrupt ids,
    or an encoder-decoder's (source, reference) pairs."""
    model, tokenizer = loaded.model, loaded.tokenizer
    if is_encoder_decoder(model):
        if cfg.corrupt_text is not None:
            raise TinyLMError("corrupt_text: activation patching runs on decoders (the GPT); an encoder-decoder's "
                              "cross-attention heads are scored and switched off instead")
        pairs = pairs_of(loaded, "" if cfg.text is None else str(cfg.text), cfg.target)
        return Subject(loaded, cfg, first_pair_probe(model, pairs), f"{len(pairs)} source line(s)", pairs=pairs)
    ids, corrupt = decoder_inputs(loaded, cfg)
    return Subject(loaded, cfg, Probe.of_text(model, torch.tensor(ids)[None]),
                   f"the text {tokenizer.decode(ids)!r} ({len(ids)} tokens)", ids=ids, corrupt=corrupt)


def analyze(subject: Subject, analyses: list[Analysis], out_dir: Path) -> dict:
    """Each of ``analyses`` that applies, run on ``subject`` in their order and written into ``out_dir``;
    returns each one's value under its name (None for those that did not run), the files and the text
    to print."""
    loaded, kind = subject.loaded, subject.model.kind
    ran = [(analysis, analysis.run(subject)) for analysis in analyses if analysis.applies(kind, subject.cfg)]
    files = [write_json(out_dir / f"{analysis.name}.json", result.value) for analysis, result in ran
             if result.value is not None]
    figures = [figure for _, result in sorted(ran, key=lambda pair: pair[0].report_order) for figure in result.figures]
    files += [save_png(figure.figure, out_dir / f"{figure.name}.png") for figure in figures]
    table = "\n".join(line for _, result in ran for line in result.lines)
    header = (f"`{loaded.path}` (step {loaded.global_step}, {subject.model.num_params():,} parameters) on "
              f"{subject.what}; ablation: {subject.cfg.ablation}.")
    skipped = [f"{analysis.name} ({analysis.why_not(kind)})" for analysis in analyses
               if not analysis.applies(kind, subject.cfg)]
    ran_line = f"Analyses: {', '.join(analysis.name for analysis, _ in ran)}" + (
        f"; not run here: {', '.join(skipped)}." if skipped else ".")
    files.append(write_report(out_dir, [header, "", ran_line], figures, table))
    name = checkpoint_name(loaded.path, loaded.why, f"step {loaded.global_step}")
    printed = "\n".join([f"analyzed {name} on {subject.what}", table, *(str(f) for f in files)])
    values = {analysis.name: None for analysis in analyses} | {analysis.name: result.value for analysis, result in ran}
    return {**values, "files": files, "printed": printed}


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return path


def write_report(out_dir: Path, header: list[str], figures: list[ReportFigure], table: str) -> Path:
    """``REPORT.md``: the header, the printed table, then each figure with how to read it."""
    parts = ["# What the model does with its heads", "", *header, "", "```", table, "```", ""]
    for figure in figures:
        parts += [f"## {figure.title}", "", f"![{figure.title}]({figure.name}.png)", "", figure.reading, ""]
    path = out_dir / "REPORT.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
