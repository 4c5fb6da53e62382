"""What the HeadScores callback costs the default run: `python train.py` with it and with
`callbacks.head_scores=null`, side by side.

    python bench/bench_head_scores.py                 # one pair, run at the same time (same machine load)
    python bench/bench_head_scores.py --repeats 3     # three pairs, one after the other
    python bench/bench_head_scores.py --sequential    # within a pair, one run after the other

Each pair trains the default run (1000 steps) twice, with and without the callback, both at once by
default so that both see the same load on a shared machine. It prints each pair's wall times
(metrics.json's wall_seconds) and their ratio, and the callback's own time as the run's log reports
it ("HeadScores: N call(s), X s in total") as a share of that run's wall time: the second number
does not depend on the other processes on the machine. The target is at most 3%.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=1, help="pairs of runs, one after the other")
    parser.add_argument("--sequential", action="store_true", help="the two runs of a pair one after the other")
    parser.add_argument("--keep", type=Path, default=None, help="keep the run folders here (default: deleted)")
    args = parser.parse_args()
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
