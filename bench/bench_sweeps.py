"""A small sweep run job after job against the same sweep on the joblib launcher, side by side:

    python bench/bench_sweeps.py [--repeats 2] [--steps 400]     # about 4 minutes on 2 cores

The sweep is 2 x 2 small models (n_embd 32/64 x 2/4 heads, 2 layers) on the default corpus, without
logger or callbacks: what a quick size sweep on a laptop looks like. Jobs run in order, two at a
time: a sweep whose last job is much the largest (n_embd x layers) ends with that job alone on
its share of the cores, and gains less. Sequential: Hydra's basic launcher,
one process, each job with PyTorch's default threads (one per core). Parallel:
``hydra/launcher=joblib hydra.launcher.n_jobs=<cores>``, each job with cores // n_jobs threads. The
two take turns and the fastest of each counts. Prints one JSON line per run and a summary with the
ratio (target: parallel at most 0.75x the sequential wall time on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_startup import cpu_name

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["model.n_embd=32,64", "model.num_heads=2,4", "model.num_layers=2", "logger=none", "callbacks=none",
         "trainer.enable_progress_bar=false"]


def sweep_seconds(sweep_dir: Path, steps: int, *launcher: str) -> float:
    cmd = [sys.executable, "train.py", "-m", f"hydra.sweep.dir={sweep_dir}", *SWEEP, f"trainer.max_steps={steps}",
           f"trainer.val_check_interval={steps // 4}", *launcher]
    started = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    seconds = time.perf_counter() - started
    done = [json.loads(p.read_text()) for p in sweep_dir.glob("*/metrics.json")]
    assert len(done) == 4 and all(m["steps"] == steps for m in done), f"{sweep_dir}: not every job finished"
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs of each, taking turns (the fastest counts)")
    parser.add_argument("--steps", type=int, default=400, help="training steps of each job")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    modes = {"sequential": [], "parallel": ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={cores}"]}
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for turn in range(args.repeats):
            for mode, launcher in modes.items():
                times[mode].append(sweep_seconds(Path(tmp) / f"{mode}-{turn}", args.steps, *launcher))
                print(json.dumps({"bench": "sweep", "mode": mode, "jobs": 4, "steps": args.steps,
                                  "wall_seconds": round(times[mode][-1], 1)}), flush=True)
    sequential, parallel = min(times["sequential"]), min(times["parallel"])
    print(json.dumps({"bench": "sweep-summary", "cpu": cpu_name(), "cores": cores, "n_jobs": cores,
                      "sequential_s": round(sequential, 1), "parallel_s": round(parallel, 1),
                      "ratio": round(parallel / sequential, 3), "target": 0.75, "met": parallel / sequential <= 0.75}))


if __name__ == "__main__":
    main()
