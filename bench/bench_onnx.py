"""Peak memory and time to the first character of generate.py: a checkpoint (PyTorch) against its ONNX
export (ONNX Runtime, no torch), side by side:

    .venv/bin/python bench/bench_onnx.py [--repeats 5] [--ckpt path/to/last.ckpt]

Without --ckpt it trains the reference model (conf/model/gpt.yaml, the embedded corpus) for 50 steps
into a temporary folder: the weights do not change the cost. The checkpoint is exported with
export.py. Each measurement is a fresh ``generate.py ckpt_path=... temperature=0`` process (empty
prompt, so the first character on stdout is the first generated one), the two paths taking turns
(A B A B) so both see the same load from anything else on the machine. Peak memory is the child's
own ru_maxrss; the time runs from starting the process to the first character on its stdout.
Prints one JSON line per measurement, then a summary with the medians, their ratios and the issue's
targets (memory <= 0.40, first character <= 0.33 of the PyTorch path's), and the CPU; each line is
also appended to outputs/bench/results.jsonl.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_train import ROOT, peak_rss_kib, write_json_lines

TARGETS = {"memory_ratio": 0.40, "first_char_ratio": 0.33}


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def train_checkpoint(folder: Path) -> Path:
    """The reference model after 50 training steps, as train.py writes it."""
    run = folder / "run"
    subprocess.run([sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run}", "trainer.max_steps=50",
                    "trainer.val_check_interval=50", "trainer.enable_progress_bar=false", "logger=none"],
                   check=True, capture_output=True, timeout=1800)
    return run / "checkpoints" / "last.ckpt"


def export(ckpt: Path, out: Path) -> Path:
    subprocess.run([sys.executable, str(ROOT / "export.py"), f"ckpt_path={ckpt}", f"out={out}"], check=True,
                   capture_output=True, timeout=600)
    return out


def measure(ckpt: Path, max_new_tokens: int) -> dict:
    """One fresh generate.py process: seconds to its first character on stdout, its peak RSS, its text.

    The peak is the child's own VmHWM, read until it exits: its wait4 ru_maxrss would count this
    benchmark's pages too (see bench_train.time_command).
    """
    cmd = [sys.executable, str(ROOT / "generate.py"), f"ckpt_path={ckpt}", "temperature=0",
           f"max_new_tokens={max_new_tokens}", "seed=0"]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    peaks = [0]

    def watch() -> None:  # while it runs: VmHWM is the peak so far
        while proc.poll() is None:
            peaks.append(peak_rss_kib(proc.pid))
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    first = proc.stdout.read(1)
    first_char = time.perf_counter() - started
    out, err = first + proc.stdout.read(), proc.stderr.read()
    watcher.join()
    if proc.wait() != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{err.decode()}")
    return {"first_char_s": round(first_char, 4), "total_s": round(time.perf_counter() - started, 4),
            "peak_rss_mib": round(max(peaks) / 1024, 1), "text": out.decode()}


def bench(ckpt: Path, onnx: Path, repeats: int, max_new_tokens: int) -> list[dict]:
    results = []
    for repeat in range(repeats):
        for runtime, path in (("pytorch", ckpt), ("onnx", onnx)):
            results.append({"bench": "onnx", "runtime": runtime, "repeat": repeat, **measure(path, max_new_tokens)})
    return results


def summary(results: list[dict], ckpt: Path, onnx: Path) -> dict:
    def median(runtime: str, key: str) -> float:
        return statistics.median(r[key] for r in results if r["runtime"] == runtime)

    row = {"bench": "onnx-summary", "cpu": cpu_name(), "cores": os.cpu_count(),
           "repeats": len(results) // 2, "ckpt_mib": round(ckpt.stat().st_size / 2**20, 2),
           "onnx_mib": round(onnx.stat().st_size / 2**20, 2),
           "same_text": len({r["text"] for r in results}) == 1}
    for key in ("peak_rss_mib", "first_char_s", "total_s"):
        row[f"pytorch_{key}"], row[f"onnx_{key}"] = median("pytorch", key), median("onnx", key)
    row["memory_ratio"] = round(row["onnx_peak_rss_mib"] / row["pytorch_peak_rss_mib"], 3)
    row["first_char_ratio"] = round(row["onnx_first_char_s"] / row["pytorch_first_char_s"], 3)
    for key, target in TARGETS.items():
        row[f"{key}_target"], row[f"{key}_met"] = target, row[key] <= target
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="measurements of each path (medians reported)")
    parser.add_argument("--ckpt", type=Path, help="a checkpoint to use (default: train the reference model)")
    parser.add_argument("--max-new-tokens", type=int, default=100, help="tokens each generate.py run writes")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench" / "results.jsonl")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = args.ckpt.resolve() if args.ckpt else train_checkpoint(Path(tmp))
        onnx = export(ckpt, Path(tmp) / "model.onnx")
        results = bench(ckpt, onnx, args.repeats, args.max_new_tokens)
        rows = [{k: v for k, v in r.items() if k != "text"} for r in results] + [summary(results, ckpt, onnx)]
    write_json_lines(rows, args.out)


if __name__ == "__main__":
    main()
