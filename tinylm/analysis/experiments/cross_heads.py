"""An encoder-decoder's cross-attention heads (``tinylm.analysis.translation``), scored and switched off
on the source lines: its ``heads.json``, grids and table, with the exact-match column."""

from __future__ import annotations

from tinylm.analysis.experiments.heads import READING, head_result
from tinylm.analysis.registry import Result, Subject, register
from tinylm.analysis.translation import cross_head_table

EXACT_MATCH = (
    "Head ablation, exact match", "The change in the share of sources translated exactly (greedy decoding) "
    "when that one cross-attention head is switched off: negative for the heads the translation needs.")


@register("heads", models=("encoder-decoder",), order=10)
def cross_heads(subject: Subject) -> Result:
    rows = cross_head_table(subject.model, subject.pairs, subject.cfg.ablation)
    return head_result(rows, subject.note, {**READING, "ablation_exact_match_delta": EXACT_MATCH})
