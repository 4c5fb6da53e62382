"""Scaling out on one machine: 2 processes x 1 thread (DDP over gloo, as torchrun starts them) against
1 process x 2 threads, and what DDP costs per step, side by side.

    python bench/scale_out.py                       # about 4 minutes on 2 cores
    python bench/scale_out.py --steps 20,60 --repeats 1 --model n_embd=64,num_layers=2

Each layout runs the real ``train.py`` (no validation until the end, no loggers or callbacks) twice, with
two step counts: the difference of the two wall times of ``Trainer.fit`` (metrics.json's ``wall_seconds``)
over the difference of the steps is the time of one step, without the DDP set-up or the final validation
(when the load changed so much between the two runs that the longer one was not slower, the longer run's
wall per step stands for it: an upper bound). The layouts take turns and the fastest repeat counts, so
all see the same machine load (the load average is printed: on a busy machine every figure is slower).

- ``1 proc x 2 threads``: one process, PyTorch's intra-op threads on both cores;
- ``1 proc x 1 thread``: the same on one core (DDP's per-rank work);
- ``2 procs x 1 thread``: torchrun --nproc_per_node=2, ``trainer=ddp_sim``: each rank trains its own batch
  (data.batch_size per process, so a step trains twice the windows) and all-reduces the gradients.

Throughput is training windows' tokens per second (every rank's); DDP's cost per step is its step time
over the one-thread process's, whose work per rank it is. The per-process step times come first: the ratio
and the cost are "not measurable at this load" when the 1-minute load average went above the core count
(other work had the cores) or the cost came out 0 or less.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["callbacks=minimal", "logger=none", "trainer.enable_progress_bar=false", "data.val_batches=1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def layouts() -> dict[str, tuple[list[str], list[str], int]]:
    """name -> (launcher, overrides, ranks)."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
                "--master_addr=127.0.0.1"]
    return {
        "1 proc x 2 threads": ([sys.executable], ["threads=2"], 1),
        "1 proc x 1 thread": ([sys.executable], ["threads=1"], 1),
        "2 procs x 1 thread (DDP)": (torchrun, ["threads=1", "trainer=ddp_sim", "trainer.devices=2"], 2),
    }


def wall_seconds(launcher: list[str], overrides: list[str], steps: int, work: Path) -> float:
    run = Path(tempfile.mkdtemp(dir=work))
    port = [f"--master_port={free_port()}"] if "torch.distributed.run" in launcher else []
    cmd = [*launcher, *port, str(ROOT / "train.py"), *overrides, *QUIET, f"trainer.max_steps={steps}",
           f"trainer.val_check_interval={steps}", f"paths.log_dir={run}", f"hydra.run.dir={run / 'run'}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads((run / "run" / "metrics.json").read_text())["wall_seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="30,90", help="the two step counts, e.g. 30,90")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default="n_embd=128,num_heads=4,num_layers=4,block_size=128",
                        help="model settings, key=value,... (model.<key>)")
    parser.add_argument("--batch-size", type=int, default=16, help="data.batch_size (per process)")
    args = parser.parse_args()
    short, long = (int(s) for s in args.steps.split(","))
    model = [f"model.{kv}" for kv in args.model.split(",") if kv]
    block = int(next((kv.split("=")[1] for kv in args.model.split(",") if kv.startswith("block_size=")), 32))
    common = [*model, f"data.batch_size={args.batch_size}", "data.repeat=20"]
    print(f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.1f} at the start; model {args.model}, "
          f"batch {args.batch_size} per process, steps {short} and {long}, best of {args.repeats}", flush=True)
    best: dict[str, float] = {}  # layout -> the fastest step time of the repeats
    loads = [os.getloadavg()[0]]  # the 1-minute load average, at the start and after every run
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for name, (launcher, overrides, _ranks) in layouts().items():
                walls = [wall_seconds(launcher, [*common, *overrides], steps, Path(tmp)) for steps in (short, long)]
                # the difference leaves out what every run pays once; when the load changed too much between
                # the two runs for that, the long run's wall per step (an upper bound) stands for it
                step = (walls[1] - walls[0]) / (long - short) if walls[1] > walls[0] else walls[1] / long
                best[name] = min(best.get(name, float("inf")), step)
                loads.append(os.getloadavg()[0])
                print(f"  {name}: {step * 1000:.1f} ms/step ({short} steps {walls[0]:.2f} s, {long} steps "
                      f"{walls[1]:.2f} s)", flush=True)
    load = max(loads)
    ranks = {name: r for name, (_, _, r) in layouts().items()}
    rates = {name: ranks[name] * args.batch_size * block / step for name, step in best.items()}
    ddp, one = best["2 procs x 1 thread (DDP)"], best["1 proc x 1 thread"]
    print(f"\nper process: {one * 1000:.1f} ms/step alone on one thread, {ddp * 1000:.1f} ms/step as one of 2 DDP "
          "ranks")
    print(f"\n{'layout':<26} {'ms/step':>8} {'tokens/s':>10} {'vs 1x2':>7}")
    ratios = measured("shown", 1.0, load) == "shown"  # the column too only where the ratio below is measurable
    for name, step in best.items():
        vs = f"{rates[name] / rates['1 proc x 2 threads']:.2f}x" if ratios else "-"
        print(f"{name:<26} {step * 1000:8.1f} {rates[name]:10,.0f} {vs:>7}")
    ratio = rates["2 procs x 1 thread (DDP)"] / rates["1 proc x 2 threads"]
    print(f"\nthroughput, 2 procs x 1 thread / 1 proc x 2 threads: {measured(f'{ratio:.2f}x', 1.0, load)}")
    print("DDP's cost per step: " + measured(f"{(ddp - one) * 1000:+.1f} ms ({ddp / one:.2f}x the one-thread "
          "process's step, the same work per rank) for the gradient all-reduce and the ranks waiting for each "
          "other", ddp - one, load))
    print(f"load average {os.getloadavg()[0]:.1f} at the end (highest seen {load:.1f}, {os.cpu_count()} CPU(s))")


def measured(figure: str, cost: float, load: float, cores: int | None = None) -> str:
    """``figure``, or why it is not one: a cost of 0 or less, or a 1-minute load average above the core count
    (other work took the cores, so the layouts' figures say how busy the machine was, not what they cost)."""
    cores = cores or os.cpu_count() or 1
    if cost <= 0 or load > cores:
        return f"not measurable at this load (load average {load:.1f} on {cores} CPU(s))"
    return figure


if __name__ == "__main__":
    main()
