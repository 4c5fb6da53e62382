"""A small sweep run job after job against the same sweep on the joblib launcher, side by side:

    python bench/bench_sweeps.py [--repeats 2] [--steps 600]     # about 6 minutes on 2 cores
    python bench/bench_sweeps.py --sweep-dir                     # the command line of a sweep to finish
    python bench/bench_sweeps.py --order [--repeats 2] [--steps 200]    # grid order vs largest first

The sweep is 2 x 2 small models (n_embd 32/64 x 2/4 heads, 2 layers) on the default corpus, without
logger or callbacks: what a quick size sweep on a laptop looks like, its jobs short (600 steps:
5-12 s each on 2 cores), so that each process's start-up counts. Sequential: Hydra's basic launcher,
one process, each job with PyTorch's default threads (one per core). Parallel:
``hydra/launcher=joblib hydra.launcher.n_jobs=<cores>``, the largest jobs first, each with cores //
n_jobs threads, in workers forked from a fork server that imported torch and Lightning while the
sweep was planned (``tinylm.runs.sweep_workers``). Each sweep is the command a user types (its folder
under ``paths.log_dir``); ``--sweep-dir`` names the folder with ``hydra.sweep.dir=`` instead, as the
command that finishes an interrupted sweep does. The two take turns and the fastest of each counts.
Prints one JSON line per run and a summary with the ratio (target: parallel at most 0.85x the
sequential wall time on 2 cores, ``TARGET``).

``--order``: an unbalanced 2 x 2 grid (2 or 4 layers x STEPS or 2 x STEPS steps: its largest job
about 4x its smallest, and last in the grid's order) on the joblib launcher, jobs started in the
grid's order (``hydra.sweeper.largest_first=false``) against the largest first (the default),
taking turns. Prints each job's own wall time too, and the ratio largest-first / grid order.
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

from tinylm.runs.sweep_workers import usable_cores

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.85  # parallel / sequential wall time of the 2 x 2 sweep
SWEEP = ["model.n_embd=32,64", "model.num_heads=2,4", "model.num_layers=2", "logger=none", "callbacks=none",
         "trainer.enable_progress_bar=false"]


UNBALANCED = ["model.n_embd=64", "model.num_heads=4", "logger=none", "callbacks=none",
              "trainer.enable_progress_bar=false"]


def sweep_seconds(folder: Path, steps: int, sweep_dir: bool, *launcher: str) -> float:
    """Seconds the 2 x 2 sweep took, its folder named with ``hydra.sweep.dir=`` or under ``paths.log_dir``."""
    where = f"hydra.sweep.dir={folder}" if sweep_dir else f"paths.log_dir={folder}"
    cmd = [sys.executable, "train.py", "-m", where, *SWEEP, f"trainer.max_steps={steps}",
           f"trainer.val_check_interval={steps // 4}", *launcher]
    return timed(cmd, folder, [steps] * 4)


def timed(cmd: list[str], folder: Path, steps: list[int]) -> float:
    """Seconds ``cmd`` ran; every job of its sweep (in ``folder``, or the one sweep under its multirun/)
    must have finished its steps."""
    started = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    seconds = time.perf_counter() - started
    sweep_dir = next((folder / "multirun").iterdir()) if (folder / "multirun").is_dir() else folder
    done = [json.loads((sweep_dir / str(num) / "metrics.json").read_text()) for num in range(len(steps))]
    assert [m["steps"] for m in done] == steps, f"{sweep_dir}: not every job finished"
    return seconds


def order_bench(repeats: int, steps: int, cores: int) -> None:
    """Grid order against largest first on the unbalanced 2 x 2 grid, on the joblib launcher."""
    modes = {"grid-order": ["hydra.sweeper.largest_first=false"], "largest-first": []}
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for turn in range(repeats):
            for mode, order in modes.items():
                sweep_dir = Path(tmp) / f"{mode}-{turn}"
                cmd = [sys.executable, "train.py", "-m", f"hydra.sweep.dir={sweep_dir}", *UNBALANCED,
                       "model.num_layers=2,4", f"trainer.max_steps={steps},{2 * steps}",
                       f"trainer.val_check_interval={steps // 2}", "hydra/launcher=joblib",
                       f"hydra.launcher.n_jobs={cores}", *order]
                times[mode].append(timed(cmd, sweep_dir, [steps, 2 * steps] * 2))
                jobs = [json.loads((sweep_dir / str(n) / "metrics.json").read_text())["wall_seconds"] for n in range(4)]
                print(json.dumps({"bench": "sweep-order", "mode": mode, "jobs": 4, "steps": [steps, 2 * steps],
                                  "job_wall_seconds": [round(s, 1) for s in jobs],
                                  "largest_over_smallest": round(max(jobs) / min(jobs), 2),
                                  "wall_seconds": round(times[mode][-1], 1), "load": os.getloadavg()[0]}), flush=True)
    grid, largest = min(times["grid-order"]), min(times["largest-first"])
    print(json.dumps({"bench": "sweep-order-summary", "cpu": cpu_name(), "cores": cores, "n_jobs": cores,
                      "grid_order_s": round(grid, 1), "largest_first_s": round(largest, 1),
                      "ratio": round(largest / grid, 3)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs of each, taking turns (the fastest counts)")
    parser.add_argument("--steps", type=int, default=None, help="training steps of each job (default 600; "
                        "--order: 200, the longer jobs twice as many)")
    parser.add_argument("--sweep-dir", action="store_true", help="each sweep's folder given as hydra.sweep.dir= "
                        "(the command that finishes a sweep) rather than found under paths.log_dir")
    parser.add_argument("--order", action="store_true", help="grid order vs largest first on an unbalanced grid")
    args = parser.parse_args()
    cores = usable_cores()
    if args.order:
        order_bench(args.repeats, args.steps or 200, cores)
        return
    args.steps = args.steps or 600
    modes = {"sequential": [], "parallel": ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={cores}"]}
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for turn in range(args.repeats):
            for mode, launcher in modes.items():
                times[mode].append(sweep_seconds(Path(tmp) / f"{mode}-{turn}", args.steps, args.sweep_dir, *launcher))
                print(json.dumps({"bench": "sweep", "mode": mode, "jobs": 4, "steps": args.steps,
                                  "wall_seconds": round(times[mode][-1], 1), "load": os.getloadavg()[0]}), flush=True)
    sequential, parallel = min(times["sequential"]), min(times["parallel"])
    print(json.dumps({"bench": "sweep-summary", "cpu": cpu_name(), "cores": cores, "n_jobs": cores,
                      "steps": args.steps, "folder": "hydra.sweep.dir" if args.sweep_dir else "paths.log_dir",
                      "sequential_s": round(sequential, 1), "parallel_s": round(parallel, 1),
                      "ratio": round(parallel / sequential, 3), "target": TARGET,
                      "met": parallel / sequential <= TARGET}))


if __name__ == "__main__":
    main()
