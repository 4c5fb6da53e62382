"""The circuits of a trained induction circuit (tests/test_analysis_induction.py's recipe and seeds: the first of
seeds 1-4 whose run has the circuit as analyze.py names it): the induction head K-composes with the
previous-token head more than with any other earlier head, and copies what it attends to.

What is robust, measured on the AMD EPYC dev VM (seeds 1 and 2 of the docs' text have the circuit, seed 3 not):
the previous-token head's K-composition with layer 1's induction heads is 0.27-0.29, twice the other layer-0 head's
(0.13-0.15) and the random baseline (0.125), while Q- and V-composition stay at or below the baseline. Both of
layer 1's heads often become induction heads (induction scores 0.614 and 0.613 in seed 1), so which of the two
analyze.py names, and which copies most (copying 0.56-0.66, chance 1/32), is decided by a hair: the copying check
asks that the head of layer 1 that copies most is one of its induction heads (induction > 0.4), and that the
named one copies far above chance and more than every layer-0 head, rather than that the named one is first."""

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
