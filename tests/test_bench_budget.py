"""bench/budget_probe.py: a short default run through the probe trains as train.py does, and its budget
gives every second of the run to one part (the parts add up to the total; no part is counted twice)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_probe_runs_train_py_and_its_parts_add_up_to_the_run(tmp_path):
    out, run = tmp_path / "budget.json", tmp_path / "run"
    overrides = ["trainer.max_steps=4", "trainer.val_check_interval=2", "trainer.enable_progress_bar=false",
                 "callbacks.head_scores.every_n_steps=2", "threads=1", f"hydra.run.dir={run}"]
    done = subprocess.run([sys.executable, "bench/budget_probe.py", str(out), *overrides], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["steps"] == 4
    budget = json.loads(out.read_text())
    parts = budget["parts"]
    total = sum(p["seconds"] for p in parts.values())
    assert abs(total - budget["total_seconds"]) < 1e-3
    assert parts["steps (forward, backward, AdamW)"]["calls"] == 4
    assert parts["validation"]["calls"] == 2
    assert parts["checkpoint writes"]["calls"] >= 2
    assert parts["imports"]["seconds"] > 0 and parts["imports"]["rss_kib"] > 0
    assert budget["views"]["HeadScores"]["calls"] == 2  # steps 2 and 4 (the end is step 4: once)
    assert {"SampleText", "AttentionMaps", "NextTokenProbes", "EmbeddingProjector"} <= set(budget["views"])
    assert sum(p["rss_kib"] for p in parts.values()) <= budget["peak_rss_kib"]
