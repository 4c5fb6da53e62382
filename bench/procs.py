"""What the benches share that needs neither torch nor Lightning: the processor's name, a child process's
wall time and peak RSS, nanoGPT's train files beside its data. A bench that times child processes imports
these alone, so that it stays small: a child's peak RSS, as getrusage reports it, starts at its parent's
size (Linux keeps the high-water mark across exec)."""

from __future__ import annotations

import platform
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"  # nanoGPT's dataset, for --nanogpt


def processor_name(device: str = "cpu") -> str:
    """The processor's name (a CPU's from /proc/cpuinfo on Linux), for the record: MFU depends on it."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def peak_rss_kib(pid: int) -> int:
    """A running process's own peak RSS (VmHWM in /proc/PID/status; 0 where there is none)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def time_command(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of a child process.

    The peak is the child's VmHWM, read while it runs: getrusage (or wait4) would report at least
    this benchmark's own size, because a forked child's maximum RSS counts the pages it shares with
    its parent until it execs.
    """
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        peak = 0
        while True:
            peak = max(peak, peak_rss_kib(proc.pid))  # before poll(): poll reaps the process
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            stderr.seek(0)
            raise SystemExit(f"{' '.join(cmd)} failed:\n{stderr.read()}")
    return wall, peak / 1024


def nanogpt_workdir(nanogpt: Path, work: Path, text_path: Path = SHAKESPEARE) -> int:
    """A copy of nanoGPT's train.py, model.py, configurator.py and shakespeare_char config in ``work``, with
    its data/shakespeare_char prepared from ``text_path`` as its prepare.py does (characters sorted into ids,
    the first 90% for training, the rest for validation); the checkout is only read. Returns the number of
    validation characters."""
    import pickle

    import numpy as np

    text = text_path.read_text(encoding="utf-8")
    data = work / "data" / "shakespeare_char"
    data.mkdir(parents=True)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    n = int(0.9 * len(ids))
    ids[:n].tofile(data / "train.bin")
    ids[n:].tofile(data / "val.bin")
    with open(data / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}, f)
    for name in ("train.py", "model.py", "configurator.py"):
        (work / name).write_bytes((nanogpt / name).read_bytes())
    (work / "config").mkdir()
    (work / "config" / "train_shakespeare_char.py").write_bytes(
        (nanogpt / "config" / "train_shakespeare_char.py").read_bytes())
    return len(ids) - n
