"""Time to quality, side by side: nanoGPT's CPU recipe against `experiment=shakespeare_speedrun`.

    python bench/bench_speedrun.py --nanogpt ~/nanoGPT                      # A B A B, about 8 minutes on 2 cores
    python bench/bench_speedrun.py --nanogpt ~/nanoGPT --data input.txt --turns 3
    python bench/bench_speedrun.py --skip-nanogpt model.n_embd=96           # try a recipe (overrides for train.py)

Both train on the same text (--data, default ../shared/data/tinyshakespeare.txt: Tiny Shakespeare,
nanoGPT's shakespeare_char data) with the same split: the last 10% of the characters are validation.
nanoGPT runs its README's recipe for a MacBook, exactly as the issue quotes it, in a copy of its
train files (the checkout is only read; its data is prepared from --data as its prepare.py does):

    train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20
      --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128
      --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0

tinylm runs `python train.py experiment=shakespeare_speedrun data.path=<--data>`. They take turns
(nanoGPT, tinylm, nanoGPT, tinylm, ...), so both see the same machine load. Each prints one JSON line:

- nanoGPT: wall seconds of its train.py (start-up, training and its evaluations every 250 steps
  included), and its own val loss at the last step: the mean of --eval_iters=20 random batches of
  12 windows of 64 characters of the validation split (15,360 positions, a sample), as it reports it;
- tinylm: wall seconds of train.py (start-up, training, its one validation and checkpoint included;
  `evaluate.py` not), the training's loss/val (20 fixed batches, a sample too), and its best
  checkpoint scored by `python evaluate.py run_dir=...`: every position of the validation split
  once (the full split, about 111,500 positions; tinylm/tasks/text/evaluation.py says how windows cover it).

The last lines: the means per side, the wall-time ratio (tinylm / nanoGPT) and the target: tinylm's
evaluate.py loss at most nanoGPT's val loss, in at most 0.35x its wall time.
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

from bench_train import SHAKESPEARE, nanogpt_workdir, processor_name, write_json_lines

ROOT = Path(__file__).resolve().parents[1]
NANOGPT_ARGS = ["--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1", "--block_size=64",
                "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128", "--max_iters=2000",
                "--lr_decay_iters=2000", "--dropout=0.0"]
TARGET_RATIO = 0.35
VAL_LINE = re.compile(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)")


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    """Wall seconds and stdout of a command; its stderr on failure."""
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return wall, proc.stdout


def machine_load() -> float:
    return round(os.getloadavg()[0], 2)


def run_nanogpt(nanogpt: Path, text: Path, work: Path, turn: int) -> dict:
    val_chars = nanogpt_workdir(nanogpt, work, text)
    load = machine_load()
    wall, out = timed([sys.executable, "train.py", "config/train_shakespeare_char.py", *NANOGPT_ARGS], work)
    evals = [(int(s), float(tr), float(v)) for s, tr, v in VAL_LINE.findall(out)]
    step, _, val = evals[-1]
    return {"bench": "speedrun", "side": "nanogpt", "turn": turn, "wall_seconds": round(wall, 1), "steps": step,
            "val_loss": val, "best_val_loss": min(v for _, _, v in evals), "val_chars": val_chars,
            "loss_measured_by": "nanoGPT's estimate_loss: 20 random batches x 12 windows x 64 chars of val.bin",
            "load_before": load}


def run_tinylm(text: Path, run_dir: Path, turn: int, overrides: list[str]) -> dict:
    load = machine_load()
    wall, _ = timed([sys.executable, "train.py", "experiment=shakespeare_speedrun", f"data.path={text}",
                     f"hydra.run.dir={run_dir}", "trainer.enable_progress_bar=false", *overrides], ROOT)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    _, out = timed([sys.executable, "evaluate.py", f"run_dir={run_dir}"], ROOT)
    scored = json.loads(out.strip().splitlines()[-1])
    val_chars = int(len(text.read_text(encoding="utf-8")) * 0.1)  # tinylm's data.val_fraction split
    return {"bench": "speedrun", "side": "tinylm", "turn": turn, "wall_seconds": round(wall, 1),
            "steps": metrics["steps"], "train_val_loss": round(metrics["val_loss"], 4),
            "evaluate_loss": round(scored["loss"], 4), "evaluate_tokens": scored["tokens"], "val_chars": val_chars,
            "loss_measured_by": "evaluate.py: every position of the validation split once (best checkpoint)",
            "overrides": overrides, "load_before": load}


def summary(results: list[dict]) -> dict:
    nano = [r for r in results if r["side"] == "nanogpt"]
    ours = [r for r in results if r["side"] == "tinylm"]
    line = {"bench": "speedrun summary", "cpu": processor_name(), "cores": os.cpu_count(),
            "load_after": machine_load(),
            "tinylm_wall_seconds": round(statistics.mean(r["wall_seconds"] for r in ours), 1),
            "tinylm_evaluate_loss": round(statistics.mean(r["evaluate_loss"] for r in ours), 4)}
    if nano:
        nano_wall = statistics.mean(r["wall_seconds"] for r in nano)
        nano_loss = statistics.mean(r["val_loss"] for r in nano)
        ratio = line["tinylm_wall_seconds"] / nano_wall
        line |= {"nanogpt_wall_seconds": round(nano_wall, 1), "nanogpt_val_loss": round(nano_loss, 4),
                 "wall_ratio": round(ratio, 3),
                 "same_split": all(r["val_chars"] == ours[0]["val_chars"] for r in nano),
                 "target": f"tinylm evaluate.py loss <= nanoGPT val loss in <= {TARGET_RATIO}x its wall time",
                 "met": line["tinylm_evaluate_loss"] <= nano_loss and ratio <= TARGET_RATIO}
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nanogpt", type=Path, help="a nanoGPT checkout (read only)")
    parser.add_argument("--skip-nanogpt", action="store_true", help="time tinylm's recipe alone")
    parser.add_argument("--data", type=Path, default=SHAKESPEARE, help="the text both train on (Tiny Shakespeare)")
    parser.add_argument("--turns", type=int, default=2, help="runs of each side, taking turns (default 2)")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench" / "speedrun.jsonl")
    parser.add_argument("overrides", nargs="*", help="train.py overrides on top of the experiment (to try recipes)")
    args = parser.parse_args()
    if not args.skip_nanogpt and args.nanogpt is None:
        parser.error("give --nanogpt PATH (a nanoGPT checkout), or --skip-nanogpt")
    text = args.data.expanduser().resolve()
    if not text.is_file():
        parser.error(f"--data {args.data}: no such file (Tiny Shakespeare's input.txt)")
    print(f"{processor_name()}, {os.cpu_count()} cores; load {machine_load()}",
          flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for turn in range(args.turns):
            if not args.skip_nanogpt:
                results.append(run_nanogpt(args.nanogpt.expanduser().resolve(), text, Path(tmp) / f"nano-{turn}",
                                           turn))
                print(f"nanoGPT: {results[-1]['wall_seconds']} s, val loss {results[-1]['val_loss']}", flush=True)
            results.append(run_tinylm(text, Path(tmp) / f"tinylm-{turn}", turn, args.overrides))
            print(f"tinylm: {results[-1]['wall_seconds']} s, evaluate.py loss {results[-1]['evaluate_loss']}",
                  flush=True)
    results.append(summary(results))
    write_json_lines(results, args.out)


if __name__ == "__main__":
    main()
