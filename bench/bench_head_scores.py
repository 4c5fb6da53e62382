"""What the HeadScores callback costs the default run: `python train.py` with it and with
`callbacks.head_scores=null`, side by side.

    python bench/bench_head_scores.py                 # one pair, run at the same time (same machine load)
    python bench/bench_head_scores.py --repeats 3     # three pairs, one after the other
    python bench/bench_head_scores.py --sequential    # within a pair, one run after the other (A B A B)
    python bench/bench_head_scores.py trainer.max_steps=300   # overrides for both runs: a shorter check
    python bench/bench_head_scores.py --projected     # a minute: the callback's calls against training steps

Each pair trains the default run (1000 steps) twice, with and without the callback, both at once by
default so that both see the same load on a shared machine. It prints each pair's wall times
(metrics.json's wall_seconds) and their ratio, each run's CPU time (user + system, all its threads:
on a shared machine it moves less with the load than the wall time does), the machine's load, and
the callback's own time as the run's log reports it ("HeadScores: N call(s), X s in total") as a
share of that run's wall time. The target is at most 3% more wall time.

``--projected`` (for a machine too busy for two whole runs) times, in one process and taking turns,
the default model's training step (bench_train's plain loop: no Lightning, no validation, so faster
than a real step and the share an upper bound) and the callback's two kinds of call: the scores (every
50 steps) and the three grid images (every 250 steps, and when training ends), and projects them onto
the default run's 1000 steps.
"""

from __future__ import annotations

import argparse
import json
import os
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
    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", "trainer.enable_progress_bar=false",
           *overrides]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def finished(run_dir: Path, proc: subprocess.Popen) -> dict:
    _, status, usage = os.wait4(proc.pid, 0)  # the run's own CPU time, its threads included
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"error: train.py failed in {run_dir}; see {run_dir / 'train.log'}")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics["cpu_seconds"] = usage.ru_utime + usage.ru_stime
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    found = re.search(r"HeadScores: (\d+) call\(s\), ([\d.]+) s in total", log)
    metrics["callback_seconds"] = float(found.group(2)) if found else 0.0
    metrics["callback_calls"] = int(found.group(1)) if found else 0
    return metrics


def pair(folder: Path, sequential: bool, overrides: list[str]) -> tuple[dict, dict]:
    runs = {"with": (folder / "with", overrides),
            "without": (folder / "without", [*overrides, "callbacks.head_scores=null"])}
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
    from torch.utils.tensorboard import SummaryWriter

    from tinylm.analysis.callback import HeadScores, add_scalars, scalar_tags
    from tinylm.analysis.figures import head_grid
    from tinylm.analysis.heads import SCORES, attention_scores
    from tinylm.callbacks.attention import add_rgb_image
    from tinylm.plots.figures import render_rgb

    cfg = bench_train.CONFIGS["reference"]  # the default run's model and batch
    callback, steps = HeadScores(), 1000
    steps_timed, best_step, best_scores, best_images = 20, float("inf"), float("inf"), float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        writer = SummaryWriter(tmp)
        for _ in range(repeats):  # taking turns: each sees the same machine load
            seconds, model = bench_train.plain_loop_seconds(cfg, steps=steps_timed, warmup=3)
            best_step = min(best_step, seconds / steps_timed)
            ids = torch.randint(model.config.vocab_size, (model.config.block_size,))
            started = time.perf_counter()
            rows = attention_scores(model, ids, callback.induction_length, callback.draws, callback.seed)
            add_scalars(writer, scalar_tags(rows), 1)
            writer.flush()  # the checksums: TensorBoard's writer thread computes them
            best_scores = min(best_scores, time.perf_counter() - started)
            started = time.perf_counter()
            for score in SCORES:  # as the callback draws them: the figures reused after the first round
                grid = head_grid(rows, score, numbers=False, vmax=1.0, reuse=callback._figures)
                add_rgb_image(writer, f"maps/heads_{score}", render_rgb(grid), 1)
            writer.flush()
            best_images = min(best_images, time.perf_counter() - started)
        writer.close()
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
    parser.add_argument("overrides", nargs="*", help="train.py overrides for both runs, e.g. trainer.max_steps=300")
    args = parser.parse_args()
    if args.projected:
        print(f"CPU: {processor_name()}; the HeadScores callback's calls against the default run's training steps")
        share = projected(max(args.repeats, 3))
        print(f"target at most {TARGET:.0%}: {'met' if share <= TARGET else 'NOT met'}")
        return
    print(f"CPU: {processor_name()}; default run (`python train.py`), with and without callbacks.head_scores, "
          f"{'one after the other' if args.sequential else 'at the same time'}")
    ratios, cpu_ratios, shares = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        for repeat in range(args.repeats):
            load = os.getloadavg()[0]
            on, off = pair(base / f"pair{repeat}", args.sequential, args.overrides)
            ratios.append(on["wall_seconds"] / off["wall_seconds"])
            cpu_ratios.append(on["cpu_seconds"] / off["cpu_seconds"])
            shares.append(on["callback_seconds"] / on["wall_seconds"])
            print(f"pair {repeat} (load {load:.1f} -> {os.getloadavg()[0]:.1f}): with {on['wall_seconds']:.1f} s, "
                  f"without {off['wall_seconds']:.1f} s, ratio {ratios[-1]:.3f}; CPU {on['cpu_seconds']:.1f} s vs "
                  f"{off['cpu_seconds']:.1f} s, ratio {cpu_ratios[-1]:.3f}; the callback's own time "
                  f"{on['callback_seconds']:.2f} s in {on['callback_calls']} calls = {shares[-1]:.2%} of its run",
                  flush=True)
    ratio, cpu_ratio, share = (statistics.median(x) for x in (ratios, cpu_ratios, shares))
    print(f"median wall-time ratio {ratio:.3f} ({ratio - 1:+.1%}); median CPU-time ratio {cpu_ratio:.3f} "
          f"({cpu_ratio - 1:+.1%}); median callback share {share:.2%}; "
          f"target at most {TARGET:.0%} more wall time: {'met' if ratio - 1 <= TARGET else 'NOT met'}")
    print(json.dumps({"cpu": processor_name(), "ratios": ratios, "cpu_ratios": cpu_ratios, "shares": shares,
                      "median_ratio": ratio, "median_cpu_ratio": cpu_ratio, "median_share": share}))


if __name__ == "__main__":
    main()
