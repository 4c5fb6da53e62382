"""``compile=true`` on this CPU: what compiling costs, what a compiled step saves, and after how many steps it pays.

    python bench/bench_compile.py                        # the reference, speedrun and larger shapes (about 4 minutes)
    python bench/bench_compile.py --configs reference --steps 100

For each configuration the plain training step (bench/bench_step_floor.py's: forward, backward, AdamW)
runs eager, then on a fresh copy of the same model compiled as ``compile=true`` compiles it
(``module.model.compile()``, in place). Compiling happens in the first compiled steps (the forward and
backward graphs), so their wall time less an eager step's is the compile cost. Steady steps: the best of
``--repeats`` runs of ``--steps`` steps each, eager and compiled taking turns. A run of N steps pays
for compiling when N x (eager - compiled) > compile cost: the break-even N is printed, or "never"
when a compiled step is not faster. One JSON line per configuration.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from bench_step_floor import step_fn
from bench_train import CONFIGS, processor_name

SHAPES = {
    "reference": CONFIGS["reference"],
    # the speedrun's model (conf/experiment/shakespeare_speedrun.yaml), stepped with AdamW here
    "speedrun": dict(batch_size=16, block_size=64, n_embd=128, num_heads=4, num_layers=3, dropout=0.0),
    "larger": CONFIGS["larger"],
}


def seconds(step, steps: int) -> float:
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - started) / steps


def bench(name: str, cfg: dict, steps: int, repeats: int) -> dict:
    eager = step_fn(cfg)
    seconds(eager, 5)  # warm
    compiled = step_fn(cfg, compiled=True)
    started = time.perf_counter()
    compiled()
    compiled()  # the second step may compile again (the optimizer's first step changes no graph, but guards run)
    first_two = time.perf_counter() - started
    best = {"eager": float("inf"), "compiled": float("inf")}
    for _ in range(repeats):
        for kind, step in (("eager", eager), ("compiled", compiled)):
            best[kind] = min(best[kind], seconds(step, steps))
    compile_cost = first_two - 2 * best["compiled"]
    saving = best["eager"] - best["compiled"]
    return {"bench": "compile", "config": name, "cpu": processor_name(), "threads": torch.get_num_threads(),
            "eager_step_ms": round(1000 * best["eager"], 2), "compiled_step_ms": round(1000 * best["compiled"], 2),
            "compile_seconds": round(compile_cost, 1),
            "pays_after_steps": round(compile_cost / saving) if saving > 0 else "never"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--steps", type=int, default=50, help="steps per timed run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each, taking turns (the best counts)")
    args = parser.parse_args()
    for name in args.configs.split(","):
        result = bench(name, SHAPES[name], args.steps, args.repeats)
        print(json.dumps(result), flush=True)
        after = result["pays_after_steps"]
        print(f"{name}: eager {result['eager_step_ms']} ms, compiled {result['compiled_step_ms']} ms a step, "
              f"{result['compile_seconds']} s to compile: "
              + ("never pays" if after == "never" else f"pays for runs over {after} steps"), flush=True)


if __name__ == "__main__":
    main()
