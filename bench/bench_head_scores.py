"""What the HeadScores callback costs the default run: `python train.py` with it and with
`callbacks.head_scores=null`, side by side.

    python bench/bench_head_scores.py                 # one pair, run at the same time (same machine load)
    python bench/bench_head_scores.py --repeats 3     # three pairs, one after the other
    python bench/bench_head_scores.py --sequential    # within a pair, one run after the other
    python bench/bench_head_scores.py --projected     # a minute: the callback's calls against training steps

Each pair trains the default run (1000 steps) twice, with and without the callback, both at once by
default so that both see the same load on a shared machine. It prints each pair's wall times
(metrics.json's wall_seconds) and their ratio, and the callback's own time as the run's log reports
it ("HeadScores: N call(s), X s in total") as a share of that run's wall time: the second number
does not depend on the other processes on the machine. The target is at most 3%.

``--projected`` (for a machine too busy for two whole runs) times, in one process and taking turns,
the default model's training step (bench_train's plain loop: no Lightning, no validation, so faster
than a real step and the share an upper bound) and the callback's two kinds of call: the scores (every
50 steps) and the three grid images (every 500 steps, and when training ends), and projects them onto
the default run's 1000 steps.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_train
import torch
from bench_train import processor_name

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.03


def start(run_dir: Path, *overrides: str) -> subprocess.Popen:
    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", *overrides]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def finished(run_dir: Path, proc: subprocess.Popen) -> dict:
    if proc.wait() != 0:
        raise SystemExit(f"error: train.py failed in {run_dir} (exit {proc.returncode}); see {run_dir / 'train.log'}")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    found = re.search(r"HeadScores: (\d+) call\(s\), ([\d.]+) s in total", log)
    metrics["callback_seconds"] = float(found.group(2)) if found else 0.0
    metrics["callback_calls"] = int(found.group(1)) if found else 0
    return metrics


def pair(folder: Path, sequential: bool) -> tuple[dict, dict]:
    runs = {"with": (folder / "with", ()), "without": (folder / "without", ("callbacks.head_scores=null",))}
    results = {}
    if sequential:
        for name, (run_dir, overrides) in runs.items():
            results[name] = finished(run_dir, start(run_dir, *overrides))
    else:
        procs = {name: start(run_dir, *overrides) for name, (run_dir, overrides) in runs.items()}
        results = {name: finished(runs[name][0], proc) for name, proc in procs.items()}
    return results["with"], results["without"]


def projected(repeats: int) -> float:
    """The callback's share of the default run, projected from timed steps and calls (see the docstring)."""
    from tinylm.analysis.callback import HeadScores
    from tinylm.analysis.figures import head_grid
    from tinylm.analysis.heads import SCORES, attention_scores
    from tinylm.plots.figures import render_rgb

    cfg = bench_train.CONFIGS["reference"]  # the default run's model and batch
    callback, steps = HeadScores(), 1000
    steps_timed, best_step, best_scores, best_images = 20, float("inf"), float("inf"), float("inf")
    for _ in range(repeats):  # taking turns: each sees the same machine load
        seconds, model = bench_train.plain_loop_seconds(cfg, steps=steps_timed, warmup=3)
        best_step = min(best_step, seconds / steps_timed)
        ids = torch.randint(model.config.vocab_size, (model.config.block_size,))
        started = time.perf_counter()
        rows = attention_scores(model, ids, callback.induction_length, callback.draws, callback.seed)
        best_scores = min(best_scores, time.perf_counter() - started)
        started = time.perf_counter()
        for score in SCORES:
            render_rgb(head_grid(rows, score, note="step 1000", numbers=False))  # as the callback draws them
        best_images = min(best_images, time.perf_counter() - started)
    calls, image_rounds = steps // callback.every_n_steps, steps // callback.images_every_n_steps
    cost = calls * best_scores + image_rounds * best_images
    share = cost / (steps * best_step)
    print(f"training step {best_step * 1000:.1f} ms; scores {best_scores * 1000:.1f} ms x {calls} calls; three "
          f"images {best_images * 1000:.0f} ms x {image_rounds}: {cost:.2f} s per {steps} steps = {share:.2%} of "
          f"{steps * best_step:.0f} s of training steps (an upper bound: a real run's steps are slower)")
    return share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=1, help="pairs of runs, one after the other")
    parser.add_argument("--sequential", action="store_true", help="the two runs of a pair one after the other")
    parser.add_argument("--keep", type=Path, default=None, help="keep the run folders here (default: deleted)")
    parser.add_argument("--projected", action="store_true", help="project the cost from timed steps and calls")
    args = parser.parse_args()
    if args.projected:
        print(f"CPU: {processor_name()}; the HeadScores callback's calls against the default run's training steps")
        share = projected(max(args.repeats, 3))
        print(f"target at most {TARGET:.0%}: {'met' if share <= TARGET else 'NOT met'}")
        return
    print(f"CPU: {processor_name()}; default run (`python train.py`), with and without callbacks.head_scores, "
          f"{'one after the other' if args.sequential else 'at the same time'}")
    ratios, shares = [], []
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        for repeat in range(args.repeats):
            on, off = pair(base / f"pair{repeat}", args.sequential)
            ratios.append(on["wall_seconds"] / off["wall_seconds"])
            shares.append(on["callback_seconds"] / on["wall_seconds"])
            print(f"pair {repeat}: with {on['wall_seconds']:.1f} s, without {off['wall_seconds']:.1f} s, "
                  f"ratio {ratios[-1]:.3f}; the callback's own time {on['callback_seconds']:.2f} s in "
                  f"{on['callback_calls']} calls = {shares[-1]:.2%} of its run", flush=True)
    ratio, share = statistics.median(ratios), statistics.median(shares)
    print(f"median wall-time ratio {ratio:.3f} ({ratio - 1:+.1%}); median callback share {share:.2%}; "
          f"target at most {TARGET:.0%}: {'met' if share <= TARGET else 'NOT met'}")
    print(json.dumps({"cpu": processor_name(), "ratios": ratios, "shares": shares, "median_ratio": ratio,
                      "median_share": share}))


if __name__ == "__main__":
    main()
