"""python -m tinylm.compare tricks: seeds per variant, evaluate.py at equal steps, the curves at equal
wall time, the cost per step, and the combination of what helped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TINY_TEXT, train_py
from omegaconf import OmegaConf
from torch.utils.tensorboard import SummaryWriter

from tinylm import compare
from tinylm.compare import runner
from tinylm.compare.report import comparison_section
from tinylm.compare.scores import EVALUATION, mean_sd, value_at
from tinylm.compare.spec import Comparison

COMPARISON = Comparison("Tricks", "loss", {"baseline": [], "fast": ["model.activation=relu2"],
                                           "slow": ["model.qk_norm=true"]}, "note", seeds=2, combine=True)


def fake_seed_run(run_dir: Path, overrides: list[str], wall: float, steps: int, evaluated: float,
                  curve: list[float]) -> None:
    """A finished seed run as train.py and evaluate.py leave it, reduced to what the report reads: its
    validations evenly spread over ``wall`` seconds of training."""
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(overrides), run_dir / ".hydra" / "overrides.yaml")
    config = {"seed": 1, "data": {"path": "text.txt", "batch_size": 32}, "model": {"block_size": 32},
              "optim": {"lr": 1e-3}, "trainer": {"max_steps": steps}}
    OmegaConf.save(OmegaConf.create(config), run_dir / ".hydra" / "config.yaml")
    (run_dir / "metrics.json").write_text(json.dumps({"steps": steps, "wall_seconds": wall, "interrupted": False}))
    (run_dir / EVALUATION).write_text(json.dumps({"loss": evaluated, "bpc": 1.0, "tokens": 100}))
    writer = SummaryWriter(str(run_dir))
    for i, value in enumerate(curve, start=1):
        writer.add_scalar("loss/val", value, i * steps // len(curve), walltime=1000.0 + i * wall / len(curve))
    writer.close()


def test_curves_are_read_at_a_time_between_validations():
    assert value_at([10.0, 20.0, 30.0], [3.0, 2.0, 1.5], 15.0) == pytest.approx(2.5)
    assert value_at([10.0, 20.0], [3.0, 2.0], 5.0) == 3.0 and value_at([10.0, 20.0], [3.0, 2.0], 99.0) == 2.0
    assert mean_sd([1.0, 3.0]) == (2.0, pytest.approx(2**0.5)) and mean_sd([4.0]) == (4.0, 0.0)


def test_seeded_report_gives_mean_and_sd_at_equal_steps_and_equal_time(tmp_path):
    out = tmp_path / "out"
    # baseline: 20 s per run; fast: 10 s (the equal time), a better curve; slow: 40 s, worse at equal steps
    runs = {"baseline": (20.0, [2.0, 2.2], [3.0, 2.0, 1.8]), "fast": (10.0, [1.8, 1.9], [2.5, 1.5]),
            "slow": (40.0, [2.4, 2.6], [3.0, 2.5, 2.0, 1.0])}
    for variant, (wall, evaluated, curve) in runs.items():
        for k, loss in enumerate(evaluated, start=1):
            fake_seed_run(out / "tricks" / variant / f"seed{k}", [f"seed={k}", *COMPARISON.variants[variant]],
                          wall, 100, loss, curve)
    section = comparison_section("tricks", COMPARISON, out)
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in section.splitlines() if
            line.startswith("| ") and "---" not in line and "variant" not in line}
    # the baseline validates at 6.7, 13.3 and 20 s: at 10 s half-way from 3.0 to 2.0
    assert rows["baseline"][2:5] == ["2.1000 ± 0.1414", "+0.0000", "2.5000 ± 0.0000"]
    assert rows["fast"][2:5] == ["1.8500 ± 0.0707", "-0.2500", "1.5000 ± 0.0000"]
    assert rows["slow"][2:5] == ["2.5000 ± 0.1414", "+0.4000", "3.0000 ± 0.0000"]  # its first validation is at 10 s
    assert rows["fast"][6].startswith("100.0 ± 0.0") and rows["slow"][6].startswith("400.0 ± 0.0")  # ms per step
    assert "Equal wall time: 10.0 s" in section and "seeds 1-2" in section
    assert (out / "tricks" / "curves.png").stat().st_size > 10_000
    # the combination: every variant that beat the baseline at equal steps
    assert runner.combination("tricks", COMPARISON, out) == ["model.activation=relu2"]


@pytest.mark.slow
def test_tricks_end_to_end_on_a_tiny_budget(tmp_path, capsys, monkeypatch):
    text = tmp_path / "tiny.txt"
    text.write_text(TINY_TEXT * 30, encoding="utf-8")
    small = Comparison("Tricks", "loss", {"baseline": [], "relu2": ["model.activation=relu2"],
                                         "tied_head": ["model.tied_head=true"]}, "note", seeds=2, combine=True)
    monkeypatch.setattr(compare.command, "comparisons", lambda *args: {"tricks": small})

    def train(run_dir: Path, overrides: list[str]) -> None:  # train.py in this process; it raises if a run fails
        train_py(f"hydra.run.dir={run_dir}", *overrides)

    monkeypatch.setattr(runner, "train", train)
    out = tmp_path / "report"
    tiny = ["model.n_embd=16", "model.num_layers=1", "model.block_size=16", "data.batch_size=8",
            "data.val_batches=2", "threads=1", "callbacks=minimal"]
    code = compare.main(["tricks", "--steps", "6", "--seeds", "2", "--data", str(text), "--out", str(out), *tiny])
    stdout = capsys.readouterr().out
    assert code == 0
    for variant in ("baseline", "relu2", "tied_head", "combined"):
        for k in (1, 2):
            run = out / "tricks" / variant / f"seed{k}"
            scored = json.loads((run / EVALUATION).read_text())
            assert scored["step"] == 6 and 0 < scored["loss"] < 7 and scored["tokens"] > 0
    seeds = [json.loads((out / "tricks" / "baseline" / f"seed{k}" / EVALUATION).read_text())["loss"] for k in (1, 2)]
    assert seeds[0] != seeds[1]  # two seeds, two runs
    assert "| baseline | (reference) |" in stdout and "| combined |" in stdout
    assert (out / "tricks" / "curves.png").is_file()
