"""The reference step's parts against its floor: the same matmuls, timed alone.

    python bench/bench_step_floor.py                 # 2 threads (as train.py), about a minute
    python bench/bench_step_floor.py --threads 1
    python bench/bench_step_floor.py --nanogpt ~/nanoGPT   # and nanoGPT's step, taking turns

The plain training step of bench/bench_train.py (the reference model, AdamW, the same batches) is
timed without a profiler (best of --repeats runs of --steps steps), then profiled for a few steps:
every operator's own time, grouped into matmuls (mm, addmm, bmm, baddbmm: forward and backward),
the optimizer (AdamW's one fused kernel), dropout masks, and the elementwise and other ops. The
floor is each matmul of the step (the same op, the same shapes, as many calls) replayed alone on
cache-warm operands: what the step would take if it did its arithmetic and nothing else. It prints
the step, the floor, the distance between them and what fills it, as ms per step.
The profiler's own cost inflates small ops, so the parts are scaled to the unprofiled step.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from bench_train import CONFIGS, make_datamodule, make_module, nanogpt_loop_seconds, processor_name
from torch.profiler import ProfilerActivity, profile

MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
GROUPS = [  # (group, operator names): the first that holds an operator gets its time
    ("matmuls", MATMULS),
    ("AdamW (fused)", {"aten::_fused_adamw_"}),
    ("dropout masks", {"aten::randint", "aten::random_", "aten::ge"}),
    ("softmax and cross-entropy", {"aten::_softmax", "aten::_softmax_backward_data", "aten::_log_softmax",
                                   "aten::_log_softmax_backward_data", "aten::nll_loss_forward",
                                   "aten::nll_loss_backward"}),
    ("LayerNorm", {"aten::native_layer_norm", "aten::native_layer_norm_backward"}),
    ("copies (contiguous, flatten, transposes made dense)", {"aten::copy_", "aten::clone", "aten::_to_copy"}),
    ("elementwise (mul, add, relu, ...)", {"aten::mul", "aten::mul_", "aten::add", "aten::add_", "aten::relu",
                                            "aten::threshold_backward", "aten::fill_", "aten::zero_",
                                            "aten::sum", "aten::masked_fill", "aten::where"}),
    ("embeddings", {"aten::embedding", "aten::embedding_dense_backward", "aten::index",
                    "aten::index_select", "aten::index_add_", "aten::embedding_backward"}),
]


def step_fn(cfg: dict, compiled: bool = False):
    """One plain training step (forward, backward, AdamW) of a fresh, seeded model over its own batches;
    ``compiled``: the model compiled in place first, as ``compile=true`` does (bench/bench_compile.py)."""
    torch.manual_seed(0)
    datamodule = make_datamodule(cfg)
    module = make_module(cfg, datamodule)
    model = module.model.train()
    if compiled:
        model.compile()
    optimizer = module.configure_optimizers()
    batches = iter(datamodule.train_dataloader())

    def step():
        x, y = next(batches)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def step_ms(step, steps: int, repeats: int) -> float:
    for _ in range(10):
        step()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - started) / steps)
    return 1000 * best


def shape_of(shapes) -> list[list[int]]:
    return [list(s) for s in shapes if isinstance(s, list | tuple) and len(s) > 0]


def replay_ms(op: str, shapes: list[list[int]], calls: int) -> float:
    """One call of the matmul ``op`` on fresh contiguous operands of these shapes, best of many, in ms."""
    args = [torch.randn(*s) for s in shapes]
    fn = {"aten::mm": torch.mm, "aten::addmm": torch.addmm, "aten::bmm": torch.bmm,
          "aten::baddbmm": torch.baddbmm}[op]
    try:
        for _ in range(5):
            fn(*args)
    except RuntimeError:  # a shape the replay cannot rebuild (a broadcast bias): as the mm alone
        args = args[-2:]
        fn = torch.bmm if len(args[0]) == 3 else torch.mm
    best = float("inf")
    for _ in range(5):
        n = max(20, 4 * calls)
        started = time.perf_counter()
        for _ in range(n):
            fn(*args)
        best = min(best, (time.perf_counter() - started) / n)
    return 1000 * best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profiled-steps", type=int, default=10)
    parser.add_argument("--nanogpt", type=Path, help="a nanoGPT checkout: its model and loop body, taking turns")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = CONFIGS["reference"]
    step = step_fn(cfg)
    plain = step_ms(step, args.steps, 1)
    nano = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):  # taking turns: both see the same machine load
            plain = min(plain, step_ms(step, args.steps, 1))
            if args.nanogpt:
                nanogpt = args.nanogpt.expanduser().resolve()
                nano = min(nano, 1000 * nanogpt_loop_seconds(nanogpt, cfg, args.steps, 10, Path(tmp)) / args.steps)
    if args.nanogpt:
        print(f"nanoGPT's step {nano:.2f} ms, ours {plain:.2f} ms: ours {nano / plain:.2f}x as fast")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(args.profiled_steps):
            step()
    n = args.profiled_steps
    by_group: dict[str, float] = defaultdict(float)
    ops_per_step = 0
    floor = 0.0
    profiled_total = 0.0
    for event in prof.key_averages(group_by_input_shape=True):
        self_ms = event.self_cpu_time_total / 1000 / n
        profiled_total += self_ms
        if event.key.startswith("aten::"):
            ops_per_step += event.count / n
        group = next((g for g, names in GROUPS if event.key in names), "other (Python, autograd, views)")
        by_group[group] += self_ms
        if event.key in MATMULS:
            calls = event.count // n
            floor += calls * replay_ms(event.key, shape_of(event.input_shapes), calls)
    scale = plain / profiled_total
    rows = {group: ms * scale for group, ms in sorted(by_group.items(), key=lambda kv: -kv[1])}
    print(f"{processor_name()}, {args.threads} thread(s): reference step {plain:.2f} ms "
          f"(aten ops per step: {ops_per_step:.0f}); floor (its matmuls alone) {floor:.2f} ms: "
          f"{plain / floor:.1f}x the floor")
    print(f"{'part (scaled to the unprofiled step)':<52} {'ms/step':>8} {'share':>6}")
    for group, ms in rows.items():
        print(f"{group:<52} {ms:>8.2f} {ms / plain:>6.1%}")
    print(json.dumps({"bench": "step floor", "cpu": processor_name(), "threads": args.threads,
                      "step_ms": round(plain, 2),
                      "nanogpt_step_ms": round(nano, 2) if args.nanogpt else None,
                      "floor_ms": round(floor, 2), "aten_ops_per_step": round(ops_per_step),
                      "parts_ms": {g: round(ms, 2) for g, ms in rows.items()}}, ensure_ascii=False))


if __name__ == "__main__":
    main()
