"""What the named hook points cost: the reference step of this checkout beside another commit's, taking turns.

    python bench/bench_hook_points.py --against 6a2c549          # the commit before the hook points
    python bench/bench_hook_points.py --against 6a2c549 --rounds 8 --steps 300

The other commit is checked out in a temporary git worktree. Each round runs one worker process per
checkout, in turns (so both see the same machine load); a worker trains the reference GPT (V=73,
B=32, T=32, n_embd 64, 4 heads, 4 layers, dropout 0.1, AdamW lr 1e-3, seed 1337) on fixed random
batches with the plain loop (forward, backward, optimizer step: what Lightning's step wraps) and
times the eval forward (SDPA) too. It prints the best round's ms per step of each, the ratio of
the two bests and the median of each round's ratio (the two runs of a round are neighbours in time,
so a busy moment of the machine touches both), and whether the weights after the timed steps are the same bit
for bit (same machine, same code path: they must be).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(steps: int) -> dict:
    import torch

    from tinylm.models.gpt import GPT, GPTConfig

    torch.manual_seed(1337)
    model = GPT(GPTConfig(vocab_size=73))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, 73, (64, 32, 33), generator=torch.Generator().manual_seed(0))  # 64 batches (B, T+1)

    def train_step(i: int) -> None:
        batch = data[i % len(data)]
        _, loss = model(batch[:, :-1], batch[:, 1:])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    model.train()
    for i in range(20):  # warm up the allocator and the kernels
        train_step(i)
    start = time.perf_counter()
    for i in range(steps):
        train_step(20 + i)
    train_ms = (time.perf_counter() - start) / steps * 1e3

    model.eval()
    with torch.no_grad():
        for i in range(10):
            model(data[i][:, :-1])
        start = time.perf_counter()
        for i in range(steps):
            model(data[i % len(data)][:, :-1])
        eval_ms = (time.perf_counter() - start) / steps * 1e3
    weights = b"".join(t.detach().contiguous().numpy().tobytes() for t in model.state_dict().values())
    return {"train_ms": train_ms, "eval_ms": eval_ms, "weights": hashlib.sha256(weights).hexdigest()[:16]}


def run_worker(tree: Path, steps: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", "--steps", str(steps)],
                         cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", help="the git commit to compare with (checked out in a temporary worktree)")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per worker")
    parser.add_argument("--rounds", type=int, default=6, help="worker runs per checkout, taking turns")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.steps)))
        return
    if not args.against:
        parser.error("--against COMMIT is required (e.g. the commit before the hook points)")
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "other"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(other), args.against],
                       check=True)
        try:
            results: dict[str, list[dict]] = {"this": [], "other": []}
            for _ in range(args.rounds):
                results["other"].append(run_worker(other, args.steps))
                results["this"].append(run_worker(ROOT, args.steps))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], check=True)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").exists() else "unknown CPU"
    print(f"{cpu}, {os.cpu_count()} cores; {args.rounds} rounds x {args.steps} steps, best round counts")
    best = {name: {key: min(r[key] for r in rows) for key in ("train_ms", "eval_ms")} for name, rows in results.items()}
    for key, what in (("train_ms", "training step (fwd+bwd+AdamW)"), ("eval_ms", "eval forward (SDPA)")):
        ratio = best["this"][key] / best["other"][key]
        # each round's two runs are neighbours in time: the median of their ratios shrugs off a busy moment
        paired = statistics.median(t[key] / o[key] for t, o in zip(results["this"], results["other"], strict=True))
        print(f"{what:32s} this {best['this'][key]:7.3f} ms   {args.against} {best['other'][key]:7.3f} ms   "
              f"ratio of the best {ratio:.3f}, median of the rounds' ratios {paired:.3f}")
    same = {r["weights"] for r in results["this"]} == {r["weights"] for r in results["other"]}
    print(f"weights after the timed steps: {'bit-identical' if same else 'DIFFERENT'} "
          f"({results['this'][0]['weights']} vs {results['other'][0]['weights']})")


if __name__ == "__main__":
    main()
