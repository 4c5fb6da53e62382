"""Seconds per call of the ``AttentionMaps`` callback at the default configuration:

    .venv/bin/python bench/bench_attention_maps.py [--repeats 7] [--threads 1]

A randomly initialised default GPT (n_embd 64, 4 heads, 4 layers, block 32; the vocabulary of the
default corpus) and the default probe "自注意力可以让序列". One call is what the callback does every
``every_n_steps``: the attention pass, then one image per layer drawn to RGB and written with
``add_image`` to a real TensorBoard event file (in a temporary folder). The first call in the
process is timed apart ("cold": it loads matplotlib and the CJK font and builds the figure), then
the median of ``repeats`` further calls: wall seconds, as the callback logs them, and the CPU
seconds of this process, steadier on a machine shared with other work. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import tempfile
import time
from types import SimpleNamespace

import torch
from lightning.pytorch.loggers import TensorBoardLogger

from tinylm.models import build_model
from tinylm.tasks.data_file import default_corpus_path
from tinylm.tasks.text.attention import AttentionMaps
from tinylm.tokenizer import CharTokenizer
from tinylm.training.module import LitLanguageModel

TARGET_S = 0.25  # issue 15: at most this per call at the default configuration


def cpu_name() -> str:
    """lscpu's model name, or Python's idea of the processor where lscpu is missing."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or platform.machine()
    names = [line.split(":", 1)[1].strip() for line in out.splitlines()
             if line.startswith("Model name")]
    return names[0] if names else platform.machine()


def default_module() -> LitLanguageModel:
    """The default GPT on the default corpus' character vocabulary, random weights."""
    tokenizer = CharTokenizer.from_text(default_corpus_path().read_text(encoding="utf-8"))
    torch.manual_seed(0)
    return LitLanguageModel(net=build_model({"vocab_size": tokenizer.vocab_size}), tokenizer=tokenizer.state())


def call_seconds(repeats: int, log_dir: str) -> tuple[list[float], list[float], int]:
    """Wall and CPU seconds of ``repeats`` + 1 calls (the first one cold), and the layer count."""
    module = default_module()
    logger = TensorBoardLogger(log_dir, name="bench", version="")
    trainer = SimpleNamespace(is_global_zero=True, global_step=0, loggers=[logger], datamodule=None)
    maps = AttentionMaps(every_n_steps=1)
    wall, cpu = [], []
    for step in range(repeats + 1):
        trainer.global_step = step * 500  # a new note ("step N") in the title each call
        started, started_cpu = time.perf_counter(), time.process_time()
        maps.inspect(trainer, module)  # raises on failure, unlike the guarded callback
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    logger.experiment.flush()
    return wall, cpu, module.model.config.num_layers


def measure(repeats: int = 7, threads: int = 1) -> dict:
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as log_dir:
        wall, cpu, layers = call_seconds(repeats, log_dir)
    per_call = statistics.median(wall[1:])
    return {"bench": "attention_maps", "cpu": cpu_name(), "layers": layers,
            "cold_s": round(wall[0], 4), "per_call_s": round(per_call, 4),
            "min_s": round(min(wall[1:]), 4), "per_call_cpu_s": round(statistics.median(cpu[1:]), 4),
            "repeats": repeats, "threads": threads, "target_s": TARGET_S, "ok": per_call <= TARGET_S}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed calls after the first")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    print(json.dumps(measure(args.repeats, args.threads), ensure_ascii=False))


if __name__ == "__main__":
    main()
