"""The benchmark's own arithmetic and plumbing (its timings are never asserted: they are noisy)."""

import sys

import pytest
import torch
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import bench_train  # noqa: E402

from tinylm.models.gpt import GPT, GPTConfig  # noqa: E402


def test_matmul_flops_count_every_linear_and_both_attention_products():
    cfg = {"block_size": 32, "n_embd": 64, "num_heads": 4, "num_layers": 4, "vocab_size": 73}
    model = GPT(GPTConfig(**cfg))
    linear_weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    B, T, C, L = 32, 32, 64, 4
    attention = L * 2 * (2 * T * T * C)  # q k^T and weights @ v, per sequence
    forward = 2 * linear_weights * B * T + attention * B
    assert bench_train.matmul_flops_per_step(cfg, B) == 3 * forward  # backward = 2 x forward


@pytest.mark.parametrize("bf16", [False, True])
def test_lightning_and_plain_paths_run_the_same_steps(tmp_path, bf16):
    """Both timed paths train the same model on the same batches: the same weights after 5 steps."""
    cfg = {**bench_train.CONFIGS["reference"], "num_layers": 1}
    _, lightning = bench_train.lightning_seconds(cfg, steps=3, warmup=2, log_dir=str(tmp_path), bf16=bf16)
    _, plain = bench_train.plain_loop_seconds(cfg, steps=3, warmup=2, bf16=bf16)
    torch.manual_seed(0)  # as both paths start
    before = bench_train.make_module(cfg, bench_train.make_datamodule(cfg)).model.state_dict()
    for name, weight in plain.state_dict().items():
        assert not torch.equal(weight, before[name])  # it trained
        torch.testing.assert_close(lightning.state_dict()[name], weight)


def test_target_checks_compare_each_figure_with_its_target():
    results = [
        {"bench": "train", "config": "reference", "path": "lightning", "mfu": 0.31, "lightning_vs_plain": 0.94,
         "lightning_speedup_vs_nanogpt": 1.3},
        {"bench": "train", "config": "larger", "path": "lightning", "mfu": 0.44, "lightning_vs_plain": 1.0,
         "lightning_speedup_vs_nanogpt": 1.2},  # the issue sets no speed-up target for the larger size
        {"bench": "train.py", "data": "tinyshakespeare", "wall_seconds": 26.0, "peak_rss_mib": 900},
        {"bench": "train.py", "data": "tinyshakespeare", "wall_seconds": 23.0, "peak_rss_mib": 900},
        {"bench": "train.py", "data": "default", "wall_seconds": 20.0, "peak_rss_mib": 449},
        {"bench": "nanogpt train.py", "wall_seconds": 30.0},
        {"bench": "nanogpt train.py", "wall_seconds": 29.0},
    ]
    checks = {c["target"]: (c["value"], c["met"]) for c in bench_train.target_checks(results)}
    assert checks == {  # MFU is no target; the fastest of the runs that took turns count
        "reference: step >= 1.36x as fast as nanoGPT's (kept)": (1.3, False),
        "python train.py wall <= 0.8x nanoGPT's train.py": (round(23 / 29, 3), True),
        "python train.py peak RSS <= 450 MiB": (449, True),
    }
