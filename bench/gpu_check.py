"""tinylm on NVIDIA GPUs against the CPU path, in one command (bench/gpu_check.sh runs it):

    python bench/gpu_check.py                 # on a machine with a CUDA GPU: about 5-10 minutes
    python bench/gpu_check.py --skip-cpu      # GPU figures only (no ratios)

1. the reference step (bench/bench_train.py's reference and larger configs, the real Lightning step):
   bf16-mixed on the GPU against fp32 on the CPU, ms/step;
2. the default run, ``python train.py``: ``trainer=gpu`` against the CPU default, wall time and tokens/s;
3. the speedrun, ``experiment=shakespeare_speedrun`` (Tiny Shakespeare: --data, else the cache's, else the
   copy shipped in tinylm/corpus, else the embedded corpus, said so): the same;
4. with two GPUs or more: ``torchrun --nproc_per_node=2 train.py trainer=ddp trainer.devices=2`` (bf16)
   against one GPU, tokens/s of all ranks.

Each line says the figure and its ratio (CPU time / GPU time: how many times faster the GPU is), then one
JSON line per figure. Without a CUDA GPU visible to PyTorch it prints one ``error:`` line and exits 1,
having run nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["trainer.enable_progress_bar=false"]


def no_gpu() -> str | None:
    """Why there is nothing to check here, or None when PyTorch sees a CUDA GPU."""
    try:
        import torch
    except ImportError as e:
        return f"PyTorch cannot be imported ({e})"
    if not torch.cuda.is_available():
        build = "a CPU-only PyTorch build" if torch.version.cuda is None else f"CUDA {torch.version.cuda} build"
        return f"no CUDA GPU visible to PyTorch ({torch.__version__}, {build}): run this on a machine with NVIDIA GPUs"
    return None


def train(overrides: list[str], work: Path, launcher: list[str] | None = None) -> dict:
    """Run train.py; its metrics.json plus the command's wall time."""
    run = Path(tempfile.mkdtemp(dir=work)) / "run"
    cmd = [*(launcher or [sys.executable]), str(ROOT / "train.py"), *overrides, *QUIET, f"hydra.run.dir={run}",
           f"paths.log_dir={run.parent}"]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed ({proc.returncode}): "
                 f"{(proc.stderr.strip().splitlines() or [''])[-1]}")
    return {**json.loads((run / "metrics.json").read_text()), "command_seconds": wall}


def report(name: str, gpu: dict, cpu: dict | None, key: str, lower_is_better: bool) -> dict:
    ratio = None if cpu is None else (cpu[key] / gpu[key] if lower_is_better else gpu[key] / cpu[key])
    shown = f"{gpu[key]:,.2f}" + ("" if cpu is None else f" (CPU {cpu[key]:,.2f}): {ratio:.1f}x")
    print(f"{name}: {key} {shown}", flush=True)
    return {"check": name, "key": key, "gpu": gpu[key], "cpu": None if cpu is None else cpu[key], "ratio": ratio}


def reference_steps(skip_cpu: bool) -> list[dict]:
    sys.path.insert(0, str(ROOT / "bench"))
    import torch
    from bench_train import CONFIGS, bench_config, matmul_peak_gflops

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg in CONFIGS.items():
            gpu = bench_config(name, cfg, 200, 2, matmul_peak_gflops(device="cuda", bf16=True), tmp, device="cuda",
                               bf16=True)[0]
            cpu = None
            if not skip_cpu:
                cpu = bench_config(name, cfg, 40, 1, matmul_peak_gflops(), tmp)[0]
            results.append(report(f"reference step ({name}, {torch.cuda.get_device_name()} bf16)", gpu, cpu,
                                  "ms_per_step", True))
    return results


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-cpu", action="store_true", help="GPU figures only, no CPU runs and ratios")
    parser.add_argument("--data", help="Tiny Shakespeare for the speedrun (default: the cache's, else the corpus)")
    args = parser.parse_args()
    why = no_gpu()
    if why:
        sys.exit(f"error: gpu_check: {why}")
    import torch

    results = reference_steps(args.skip_cpu)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        gpu = train(["trainer=gpu"], work)
        cpu = None if args.skip_cpu else train([], work)
        results.append(report("default run (python train.py)", gpu, cpu, "command_seconds", True))
        results.append(report("default run (python train.py)", gpu, cpu, "tokens_per_second", False))

        speedrun = ["experiment=shakespeare_speedrun"]
        shipped = ROOT / "tinylm" / "corpus" / "tinyshakespeare.txt"  # no network needed
        if args.data:
            speedrun.append(f"data.path={Path(args.data).resolve()}")
        elif (ROOT / ".cache" / "tinyshakespeare.txt").is_file():
            pass
        elif shipped.is_file():
            speedrun.append(f"data.path={shipped}")
        else:
            speedrun.append("data=corpus")
            print("speedrun: no Tiny Shakespeare here (and no --data): on the embedded corpus", flush=True)
        gpu = train([*speedrun, "trainer=gpu"], work)
        cpu = None if args.skip_cpu else train(speedrun, work)
        results.append(report("speedrun", gpu, cpu, "command_seconds", True))

        if torch.cuda.device_count() >= 2:
            launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
                        "--master_addr=127.0.0.1", f"--master_port={free_port()}"]
            ddp = train(["trainer=ddp", "trainer.devices=2", "trainer.precision=bf16-mixed"], work, launcher)
            ddp["tokens_per_second"] *= 2  # metrics.json counts one rank's windows
            one = train(["trainer=gpu"], work)
            results.append(report("2-GPU DDP against 1 GPU", ddp, one, "tokens_per_second", False))
        else:
            print("2-GPU DDP: skipped, one GPU here", flush=True)
    for result in results:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
