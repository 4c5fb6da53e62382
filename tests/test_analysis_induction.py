"""A known answer from training: a 2-layer GPT trained 600 steps on random strings written twice
(`experiment=induction_heads`) grows a previous-token head in layer 0 and an induction head in layer 1,
the circuit that copies what followed the current token last time; analyze.py names both, and
switching either off raises the loss on the repeated half.

The circuit forms in a phase change whose step varies with the seed, and some seeds miss it (their
layer-1 heads learn to look one token back instead). Of 12 runs measured on the AMD EPYC dev VM
(seeds, threads and texts of 200,000 to 1,000,000 characters varied), 9 had it by step 600
(docs/experiments.md). The test trains seeds 1, 2, ... until one has it, at most four (each about
30 s): on another CPU the seeds land elsewhere, so the circuit's every test (the heads analyze.py names,
the loss each one costs) decides whether a seed has it, and four misses in a row at that rate is a
1-in-250 event: a failure means the recipe broke, not bad luck."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from conftest import compose_config, entry_point, train_in_process

from tinylm.analysis.heads import strongest
from tinylm.analysis.hooks import heads_switched_off
from tinylm.analysis.probe import Probe
from tinylm.checkpoint import load_model
from tinylm.run_folder import checkpoint_in_run

pytestmark = pytest.mark.slow

LETTERS = "abcdefghijklmnopqrstuvwxyz012345"  # 32 characters: ln 32 = 3.47 nats for a token never seen
SHORTEST, LONGEST = 5, 10
N = 8  # the probes' strings: n characters written twice
RUN = ["experiment=induction_heads", "trainer.val_check_interval=600", "callbacks=minimal", "logger=none", "threads=1"]
SEEDS = (1, 2, 3, 4)


def random_string(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(length))


def repeated_strings(characters: int, seed: int) -> str:
    """Random strings of SHORTEST to LONGEST letters, each written twice, back to back: abcab c..."""
    rng, parts, size = random.Random(seed), [], 0
    while size < characters:
        string = random_string(rng, rng.randint(SHORTEST, LONGEST))
        parts.append(string + string)
        size += 2 * len(string)
    return "".join(parts)


def circuit_losses(run: Path, previous: tuple[int, int], induction: tuple[int, int]) -> dict[str, float]:
    """The run's loss on fresh strings written twice: on the first copy, on the second (``clean``), and on
    the second with the previous-token head, the induction head or both switched off."""
    loaded = load_model(checkpoint_in_run(run).path)
    model, tokenizer = loaded.model, loaded.tokenizer
    rng = random.Random(2)
    ids = torch.tensor([tokenizer.encode(random_string(rng, N) * 2) for _ in range(32)])  # (32, 2N)
    probe = Probe.of_text(model, ids)
    repeated = slice(N, None)  # targets N.. are tokens N+1 .. 2N-1: the second copy after its first token

    def without(*heads: tuple[int, int]) -> float:
        with heads_switched_off(model, [f"{layer}.{head}" for layer, head in heads]):
            return probe.loss(repeated)

    return {"first_copy": probe.loss(slice(0, N - 1)), "clean": probe.loss(repeated),
            "without_previous": without(previous), "without_induction": without(induction),
            "without_both": without(previous, induction)}


def has_the_circuit(previous, induction, scores, losses) -> bool:
    """A previous-token head in layer 0 and an induction head in layer 1 that the repeated half needs: the
    second copy is predicted, the first is not (ln 32 = 3.47), and switching either head off costs loss.
    (A head attending uniformly over 16 positions scores about 0.1 on both detectors.)"""
    clean = losses["clean"]
    return (previous[0] == 0 and induction[0] == 1 and scores[0] > 0.5 and scores[1] > 0.4
            and clean < 1.5 < 3.0 < losses["first_copy"]
            and losses["without_previous"] > clean + 0.5 and losses["without_induction"] > clean + 0.5
            and losses["without_both"] > clean + 1.0)


def trained_with_a_circuit(tmp_path) -> tuple[Path, dict, tuple[int, int]]:
    """The first seed's run that has the circuit (``has_the_circuit``) as analyze.py names it: its folder,
    analyze.py's result and the induction head."""
    text = tmp_path / "repeats.txt"
    text.write_text(repeated_strings(200_000, seed=0), encoding="utf-8")
    probe_text = random_string(random.Random(1), N) * 2  # a string the training text is unlikely to hold
    analyze, found = entry_point("analyze.py"), []
    for seed in SEEDS:
        run = tmp_path / f"seed{seed}"
        train_in_process(run, *RUN, f"seed={seed}", f"data.path={text}")
        result = analyze.run(compose_config("analyze", f"run_dir={run}", f"text={probe_text}",
                                            f"out_dir={run / 'analysis'}", f"induction_length={N}"))
        rows, printed = result["heads"], result["printed"]
        top_previous, top_induction = strongest(rows, "previous_token"), strongest(rows, "induction")
        previous = (top_previous["layer"], top_previous["head"])
        induction = (top_induction["layer"], top_induction["head"])
        assert f"previous-token head: {previous[0]}.{previous[1]} (" in printed, printed  # analyze.py names them
        assert f"induction head: {induction[0]}.{induction[1]} (" in printed, printed
        scores = (top_previous["previous_token"], top_induction["induction"])
        losses = circuit_losses(run, previous, induction)
        found.append((previous, induction, scores, {k: round(v, 3) for k, v in losses.items()}))
        if has_the_circuit(previous, induction, scores, losses):
            return run, result, induction
    pytest.fail(f"no circuit in seeds {SEEDS}: {found}")


def test_a_two_layer_model_grows_a_previous_token_and_an_induction_head(tmp_path):
    run, result, induction = trained_with_a_circuit(tmp_path)
    assert json.loads((run / "analysis" / "heads.json").read_text(encoding="utf-8")) == result["heads"]
    final = {(r["layer"], r["head"]): r for r in json.loads((run / "metrics.json").read_text())["head_scores"]}
    assert final[induction]["induction"] > 0.4  # what the training logged at its last step says the same
