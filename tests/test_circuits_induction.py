"""The circuits of a trained induction circuit (tests/test_analysis_induction.py's recipe and seeds: the first of
seeds 1-4 whose run has the circuit as analyze.py names it): the induction head K-composes with the
previous-token head more than with any other earlier head, and copies what it attends to.

What is robust, measured on the AMD EPYC dev VM (seeds 1 and 2 of the docs' text have the circuit, seed 3 not):
the previous-token head's K-composition with layer 1's induction heads is 0.27-0.29, twice the other layer-0 head's
(0.13-0.15) and the random baseline (0.125), while Q- and V-composition stay at or below the baseline.

What is not: the issue's known answer also asks that the induction head analyze.py names have the largest copying score
of its layer. Measured, it does not hold reliably: both of layer 1's heads become induction heads, often of nearly equal
score, and analyze.py names the one whose score is larger by a hair, which need not be the one that copies more. On the
dev VM, seed 1: it names L1H1 (induction 0.614; L1H0 0.613), which copies 0.5625 of the 32 characters while L1H0 copies
0.656 (an outside review found seed 2 the same there). Runs are not bit-identical across machines: on the machine this
fix was made on, seed 1 names L1H1 (0.679; L1H0 0.634) with copying 0.5625 for both, a tie, and seed 2 names L1H1
(0.677; L1H0 0.510), which does copy most (0.656; L1H0 0.531). So this test does not assert it; it asks that the head of
layer 1 that copies most is one of its induction heads (induction > 0.4), and that the named one copies far above chance
(1/32) and more than every layer-0 head."""

from __future__ import annotations

import pytest
from test_analysis_induction import trained_with_a_circuit

from tinylm.analysis.heads import strongest

pytestmark = pytest.mark.slow


def test_the_induction_head_k_composes_with_the_previous_token_head_and_copies(tmp_path):
    _, result, induction = trained_with_a_circuit(tmp_path)
    rows = result["heads"]
    top_previous = strongest(rows, "previous_token")
    previous = f"L{top_previous['layer']}H{top_previous['head']}"
    named = f"L{induction[0]}H{induction[1]}"

    composition = result["composition"]
    heads, k = composition["heads"], composition["k"]
    later = heads.index(named)
    earlier = [i for i, row in enumerate(k) if row[later] is not None]
    scores = {heads[i]: k[i][later] for i in earlier}
    assert max(scores, key=scores.get) == previous, scores
    assert scores[previous] > 1.5 * composition["baseline"], (scores, composition["baseline"])
    i = heads.index(previous)
    assert k[i][later] > max(composition["q"][i][later], composition["v"][i][later])  # it is K that composes

    circuits = {h["name"]: h for h in result["circuits"]["heads"]}
    induction_scores = {f"L{r['layer']}H{r['head']}": r["induction"] for r in rows}
    layer = [name for name, h in circuits.items() if h["layer"] == induction[0]]
    copies_most = max(layer, key=lambda name: circuits[name]["copying"])
    assert induction_scores[copies_most] > 0.4, (copies_most, induction_scores)
    assert circuits[named]["copying"] > 0.3  # chance: 1 / 32
    assert all(circuits[named]["copying"] > h["copying"] for h in circuits.values() if h["layer"] < induction[0])
