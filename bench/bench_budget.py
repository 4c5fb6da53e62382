"""The default run's budget: where `python train.py`'s wall time and peak RSS go, beside nanoGPT's train.py.

    python bench/bench_budget.py --nanogpt ~/nanoGPT              # 2 turns, then the budget (about 4 minutes)
    python bench/bench_budget.py --nanogpt ~/nanoGPT --turns 3 --shakespeare
    python bench/bench_budget.py --steps 200                      # a shorter run, tinylm alone

Each turn runs, one after the other, nanoGPT's own train.py at the reference configuration on Tiny
Shakespeare (as bench/bench_train.py does: CPU, no compile, 1000 steps, its evaluation every 250 steps)
and the default ``python train.py`` (with --shakespeare also ours on nanoGPT's text). Wall time and
peak RSS (VmHWM, read while each process runs) of each; the fastest turn counts, and the ratios are
printed. Then one more default run through bench/budget_probe.py, which gives every second and every
MiB of the peak to one part of the run (imports, building, each callback, the optimizer steps,
validation, checkpoints, TensorBoard writes, Lightning's loop), printed as a table with each part's
share of the run and its cost per call. The probe run's total is printed beside the plain runs' wall
time: the difference is what the probe itself costs.
Run it in the virtualenv whose footprint you want: RSS depends on what is installed (torchmetrics
imports transformers and scipy where they are installed).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from procs import SHAKESPEARE, nanogpt_workdir, processor_name, time_command

ROOT = Path(__file__).resolve().parents[1]
NANOGPT_ARGS = ["--device=cpu", "--compile=False", "--block_size=32", "--batch_size=32", "--n_layer=4",
                "--n_head=4", "--n_embd=64", "--dropout=0.1", "--eval_iters=20", "--log_interval=100",
                "--always_save_checkpoint=False"]
TARGET_WALL, TARGET_RSS = 0.6, 450  # issue 46: the default run against nanoGPT's, and its peak MiB


def tinylm_command(run_dir: Path, steps: int | None, shakespeare: bool, probe: Path | None = None) -> list[str]:
    overrides = ["trainer.enable_progress_bar=false", f"hydra.run.dir={run_dir}"]
    if steps:
        overrides.append(f"trainer.max_steps={steps}")
    if shakespeare:
        overrides.append(f"data.path={SHAKESPEARE}")
    script = ["bench/budget_probe.py", str(probe)] if probe else ["train.py"]
    return [sys.executable, *script, *overrides]


def nanogpt_run(nanogpt: Path, work: Path, steps: int) -> dict:
    nanogpt_workdir(nanogpt, work)
    args = [*NANOGPT_ARGS, f"--max_iters={steps}", f"--lr_decay_iters={steps}", f"--eval_interval={max(1, steps // 4)}"]
    wall, rss = time_command([sys.executable, "train.py", "config/train_shakespeare_char.py", *args], work)
    return {"run": "nanoGPT train.py", "wall_seconds": round(wall, 2), "peak_rss_mib": round(rss, 1)}


def tinylm_run(run_dir: Path, steps: int | None, shakespeare: bool, probe: Path | None = None) -> dict:
    wall, rss = time_command(tinylm_command(run_dir, steps, shakespeare, probe), ROOT)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    name = "train.py" + (" data.path=tinyshakespeare.txt" if shakespeare else "") + (" (probe)" if probe else "")
    return {"run": name, "wall_seconds": round(wall, 2), "peak_rss_mib": round(rss, 1), "steps": metrics["steps"],
            "val_loss": round(metrics["val_loss"], 4), "num_params": metrics["num_params"]}


def print_budget(budget: dict, wall: float, plain_wall: float) -> list[dict]:
    """The probe's parts as a table, largest first; returns them as rows."""
    parts = budget["parts"]
    other = wall - budget["total_seconds"]  # before the probe's first line runs, and after its last
    rows = [{"part": name, **p} for name, p in parts.items()]
    rows.append({"part": "interpreter start and exit", "seconds": other, "calls": 1, "rss_kib": 0})
    rows.sort(key=lambda r: -r["seconds"])
    print(f"\nbudget of one default run (probe: {wall:.1f} s, peak {budget['peak_rss_kib'] / 1024:.0f} MiB; "
          f"the plain runs' fastest: {plain_wall:.1f} s)")
    print(f"{'part':<58} {'seconds':>8} {'share':>6} {'calls':>7} {'ms/call':>8} {'peak MiB +':>10}")
    for r in rows:
        if r["seconds"] < 0.005 and r["rss_kib"] < 512:
            continue
        per_call = 1000 * r["seconds"] / r["calls"] if r["calls"] else 0
        print(f"{r['part']:<58} {r['seconds']:>8.2f} {r['seconds'] / wall:>6.1%} {r['calls']:>7} {per_call:>8.2f} "
              f"{r['rss_kib'] / 1024:>10.1f}")
    print(f"{'TensorBoard writer thread (beside the main thread)':<58} {budget['tensorboard_thread_seconds']:>8.2f}")
    print("the views' own count of their inspections (the calls above count every hook call):")
    for name, view in budget.get("views", {}).items():
        per_call = 1000 * view["seconds"] / view["calls"] if view["calls"] else 0
        print(f"  {name:<30} {view['calls']:>4} inspection(s), {view['seconds']:.2f} s, {per_call:.1f} ms each")
    rows.append({"part": "views", **budget.get("views", {})})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nanogpt", type=Path, help="a nanoGPT checkout: its train.py side by side")
    parser.add_argument("--turns", type=int, default=2, help="runs of each, taking turns (the fastest counts)")
    parser.add_argument("--steps", type=int, help="training steps of every run (default: the configs' 1000)")
    parser.add_argument("--shakespeare", action="store_true", help="also our train.py on nanoGPT's text")
    parser.add_argument("--no-probe", action="store_true", help="only the side-by-side wall times")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench" / "results.jsonl")
    args = parser.parse_args()
    print(f"{processor_name()}; {sys.executable}")
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for turn in range(args.turns):
            if args.nanogpt:
                nanogpt = args.nanogpt.expanduser().resolve()
                results.append(nanogpt_run(nanogpt, work / f"nano-{turn}", args.steps or 1000))
                print(json.dumps(results[-1]))
            for shakespeare in (False, True) if args.shakespeare else (False,):
                results.append(tinylm_run(work / f"run-{turn}-{shakespeare}", args.steps, shakespeare))
                print(json.dumps(results[-1]))
        plain = min(r["wall_seconds"] for r in results if r["run"] == "train.py")
        rows = []
        if not args.no_probe:
            probe_file = work / "budget.json"
            results.append(tinylm_run(work / "probe", args.steps, False, probe_file))
            print(json.dumps(results[-1]))
            budget = json.loads(probe_file.read_text())
            rows = print_budget(budget, results[-1]["wall_seconds"], plain)

    print("\nfastest of each (wall s, peak MiB):")
    best = {}
    for r in results:
        if r["run"] not in best or r["wall_seconds"] < best[r["run"]]["wall_seconds"]:
            best[r["run"]] = r
    for name, r in best.items():
        print(f"  {name:<44} {r['wall_seconds']:>7.1f} s {r['peak_rss_mib']:>6.0f} MiB")
    summary = {"bench": "budget", "cpu": processor_name(), "python": sys.executable, "turns": args.turns,
               "runs": results, "parts": rows}
    nano = best.get("nanoGPT train.py")
    default = best["train.py"]
    rss_peak = max(r["peak_rss_mib"] for r in results if r["run"] == "train.py")
    print(f"\ntarget: default run's peak RSS <= {TARGET_RSS} MiB: {rss_peak:.0f} MiB "
          f"({'met' if rss_peak <= TARGET_RSS else 'NOT met'})")
    if nano:
        ratio = default["wall_seconds"] / nano["wall_seconds"]
        ratios = [round(a["wall_seconds"] / b["wall_seconds"], 3) for a, b in zip(
            [r for r in results if r["run"] == "train.py"], [r for r in results if r["run"] == "nanoGPT train.py"],
            strict=True)]
        summary.update(wall_ratio=round(ratio, 3), ratio_per_turn=ratios)
        print(f"target: default run <= {TARGET_WALL}x nanoGPT's wall time: {ratio:.3f}x, per turn {ratios} "
              f"({'met' if ratio <= TARGET_WALL else 'NOT met'})")
        shakespeare = best.get("train.py data.path=tinyshakespeare.txt")
        if shakespeare:
            summary["shakespeare_wall_ratio"] = round(shakespeare["wall_seconds"] / nano["wall_seconds"], 3)
            print(f"        ours on nanoGPT's text: {summary['shakespeare_wall_ratio']:.3f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as f:
        f.write(json.dumps(summary, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
