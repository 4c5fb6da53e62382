"""Start-up as a user feels it, side by side with `python -c "import torch"`:

    python bench/bench_startup.py [--repeats 5]        # about a minute on 2 cores
    python bench/bench_startup.py --refusals-only      # only the commands that train nothing

Times, in fresh processes taking turns (so all see the same machine load), the median of
``--repeats`` runs of:

- ``import torch``: the yardstick; no PyTorch program starts faster;
- ``import lightning``: what Lightning alone costs before a run can start (for the record);
- ``python train.py debug=fast``: a whole 5-step run (no logger), target at most 2.5x ``import torch``;
- ``python generate.py``: until its first generated character reaches stdout, from a checkpoint of
  that debug run, target at most 1.5x ``import torch``;
- ``python train.py model.num_heads=3``: a config error (``error: invalid config: ...``), refused
  before torch is imported, target at most 1.0x ``import torch``;
- ``python train.py --help`` and ``python generate.py temperature=-1`` (a bad option), for the record.

Prints one JSON line per command and one per target (with the ratio and whether it is met).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"train.py debug=fast": 2.5, "generate.py first char": 1.5, "train.py model.num_heads=3": 1.0}


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def seconds_to_exit(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def seconds_to_refusal(cmd: list[str]) -> float:
    """Until a command that is refused has exited, with its one ``error:`` line."""
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 1 or not proc.stderr.startswith("error: "):
        raise SystemExit(f"{' '.join(cmd)} was not refused with one error line: {proc.stderr[-500:]}")
    return seconds


def seconds_to_first_byte(cmd: list[str]) -> float:
    """Until the first byte on stdout (then the process is stopped: the rest is not start-up)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    first = proc.stdout.read(1)
    seconds = time.perf_counter() - started
    proc.kill()
    proc.wait()
    if not first:
        raise SystemExit(f"{' '.join(cmd)} printed nothing")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each command, taking turns")
    parser.add_argument("--refusals-only", action="store_true",
                        help="only import torch, the refused commands and --help: no training run")
    args = parser.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        commands = {
            "import torch": (seconds_to_exit, [py, "-c", "import torch"]),
            "train.py model.num_heads=3": (seconds_to_refusal, [py, "train.py", "model.num_heads=3",
                                                                f"paths.log_dir={tmp}/runs"]),
            "train.py --help": (seconds_to_exit, [py, "train.py", "--help"]),
            "generate.py temperature=-1": (seconds_to_refusal, [py, "generate.py", "temperature=-1"]),
        }
        if not args.refusals_only:
            run_dir = Path(tmp) / "run"
            subprocess.run([py, "train.py", "debug=fast", f"hydra.run.dir={run_dir}"], cwd=ROOT, check=True,
                           capture_output=True)  # the checkpoint for generate.py
            train = [py, "train.py", "debug=fast", f"paths.log_dir={tmp}/runs"]  # a new folder each time
            generate = [py, "generate.py", f"run_dir={run_dir}", "max_new_tokens=50", "seed=0"]
            commands |= {
                "import lightning": (seconds_to_exit, [py, "-c", "import lightning"]),
                "train.py debug=fast": (seconds_to_exit, train),
                "generate.py first char": (seconds_to_first_byte, generate),
            }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeats):
            for name, (measure, cmd) in commands.items():
                times[name].append(measure(cmd))
    cpu = cpu_name()
    torch_s = statistics.median(times["import torch"])
    for name, runs in times.items():
        print(json.dumps({"bench": "startup", "command": name, "median_s": round(statistics.median(runs), 3),
                          "runs_s": [round(t, 3) for t in runs], "cpu": cpu}))
    ratios = {"import lightning": None, **TARGETS, "train.py --help": None, "generate.py temperature=-1": None}
    for name, limit in {name: limit for name, limit in ratios.items() if name in times}.items():
        ratio = statistics.median(times[name]) / torch_s
        line = {"bench": "startup", "ratio": f"{name} / import torch", "value": round(ratio, 2)}
        if limit is not None:
            line.update(target=limit, met=ratio <= limit)
        print(json.dumps(line))


if __name__ == "__main__":
    main()
