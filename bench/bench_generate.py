"""Characters per second of generation with and without the KV cache, side by side:

    .venv/bin/python bench/bench_generate.py [--repeats 5] [--threads 1]

Two randomly initialised models (speed does not depend on the weights): the reference model
(n_embd 64, 4 heads, 4 layers, block 32) and a 4-layer, 128-wide model with block 256, both with
a 350-symbol vocabulary. Each generates block_size - 1 tokens after a 1-token prompt, so the text
stays inside the block, where the cache encodes one token per step instead of the whole context.
One char = one token (the character tokenizer). Prints a table, then one JSON line per result.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from tinylm.generation.sampling import generate
from tinylm.models.gpt import GPT, GPTConfig

MODELS = {
    "reference": GPTConfig(vocab_size=350, block_size=32, n_embd=64, num_heads=4, num_layers=4),
    "wide-256": GPTConfig(vocab_size=350, block_size=256, n_embd=128, num_heads=4, num_layers=4),
}


def seconds_to_generate(model: GPT, new_tokens: int, repeats: int) -> dict[bool, float]:
    """Best wall time without and with the cache, over ``repeats`` runs after one warm-up.

    The two settings take turns, so both see the same load from anything else on the machine.
    """
    prompt = torch.zeros(1, 1, dtype=torch.long)  # (1, 1)
    times = {False: [], True: []}
    for _ in range(repeats + 1):
        for use_cache in times:
            generator = torch.Generator().manual_seed(0)
            started = time.perf_counter()
            generate(model, prompt, new_tokens, generator=generator, use_cache=use_cache)
            times[use_cache].append(time.perf_counter() - started)
    return {use_cache: min(runs[1:]) for use_cache, runs in times.items()}


def measure(repeats: int = 5, threads: int = 1) -> list[dict]:
    """One result per (model, cache on/off), timed side by side."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    results = []
    for name, config in MODELS.items():
        model = GPT(config).eval()
        new_tokens = config.block_size - 1
        timings = seconds_to_generate(model, new_tokens, repeats)
        for cache, seconds in timings.items():
            results.append({
                "bench": "generate", "model": name, "block_size": config.block_size,
                "n_embd": config.n_embd, "num_layers": config.num_layers, "params": model.num_params(),
                "use_cache": cache, "new_tokens": new_tokens, "seconds": round(seconds, 4),
                "chars_per_second": round(new_tokens / seconds, 1),
                "speedup": round(timings[False] / seconds, 2), "threads": threads,
            })
    return results


def print_table(results: list[dict]) -> None:
    print(f"{'model':<10} {'block':>5} {'params':>9} {'cache':>5} {'chars/s':>9} {'speedup':>7}")
    for r in results:
        print(f"{r['model']:<10} {r['block_size']:>5} {r['params']:>9,} {str(r['use_cache']):>5} "
              f"{r['chars_per_second']:>9,.0f} {r['speedup']:>6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per setting (best wins)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    results = measure(args.repeats, args.threads)
    print_table(results)
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
