"""Does the default run still train the same weights, bit for bit? Checked against a recorded hash.

    python bench/bit_identity.py           # train `python train.py trainer.max_steps=30 logger=none`, compare
    python bench/bit_identity.py --record  # add (or replace) this machine's hash in the fixture

Bit-identity holds on one machine, not across CPUs: each CPU family, SIMD level (PyTorch, MKL and
oneDNN pick kernels by it) and thread count sums floats in its own order. So the fixture
(tests/fixtures/default_run_weights.json) holds one entry per machine it was recorded on, keyed by
what decides the kernels; on a machine it has no entry for, the check says so and compares nothing.
A change that must keep the default run's arithmetic (a refactor, a move of modules) is checked by
recording on the old code and checking on the new, on the same machine.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "default_run_weights.json"
COMMAND = ["train.py", "trainer.max_steps=30", "logger=none"]
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")  # forced kernels


def machine() -> str:
    """What decides the kernels a run uses: the CPU (its model and flags), the SIMD level PyTorch
    picked (and any forced by environment variables), PyTorch's version and the run's thread count."""
    model, flags = "unknown CPU", ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown CPU":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = " ".join(sorted(value.split()))
    forced = [f"{k}={os.environ[k]}" for k in KERNEL_ENV if os.environ.get(k)]
    return " | ".join([model, "flags " + hashlib.sha256(flags.encode()).hexdigest()[:12],
                       torch.backends.cpu.get_cpu_capability(), f"torch {torch.__version__}",
                       f"{default_threads()} threads", *forced])


@functools.cache
def default_threads() -> int:
    """PyTorch's thread count in a new process, which the default run gets (the calling process, a test
    worker say, may have set its own)."""
    done = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                          capture_output=True, text=True, check=True, timeout=120)
    return int(done.stdout)


def weights_hash(checkpoint: Path) -> str:
    """sha256 over the checkpoint's weights: every tensor's name and bytes, in name order."""
    state = torch.load(checkpoint, weights_only=True, map_location="cpu")["state_dict"]
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].contiguous().numpy().tobytes())
    return digest.hexdigest()


def train_default(run_dir: Path) -> tuple[str, str]:
    """Run the default command in ``run_dir``; return its weights' hash and its final log line."""
    done = subprocess.run([sys.executable, *COMMAND, f"hydra.run.dir={run_dir}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise SystemExit(f"error: the default run failed:\n{done.stderr[-2000:]}")
    final = next(line for line in reversed((done.stdout + done.stderr).splitlines()) if "final val loss" in line)
    return weights_hash(run_dir / "checkpoints" / "last.ckpt"), final.split("] - ", 1)[-1].split("; run folder")[0]


def recorded() -> dict:
    return json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}


def check(run_dir: Path) -> tuple[bool | None, str]:
    """(True: the same weights, False: different, None: no entry for this machine; what to print)."""
    entry = recorded().get(machine())
    if entry is None:
        return None, f"no recorded hash for this machine ({machine()}): nothing to compare"
    digest, final = train_default(run_dir)
    if digest == entry["sha256"]:
        return True, f"bit-identical to the recording of {entry['commit']}: {final}"
    return False, (f"the weights differ from the recording of {entry['commit']} on this machine: "
                   f"{digest} != {entry['sha256']} (now: {final}; then: {entry['final']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="record this machine's hash in the fixture")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if not args.record:
            same, message = check(Path(tmp) / "run")
            print(message)
            raise SystemExit(1 if same is False else 0)
        digest, final = train_default(Path(tmp) / "run")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    entries = recorded()
    entries[machine()] = {"sha256": digest, "final": final, "commit": commit, "command": " ".join(COMMAND)}
    FIXTURE.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")
    print(f"recorded {digest} for {machine()}: {final}")


if __name__ == "__main__":
    main()
