#!/usr/bin/env bash
# tinylm on NVIDIA GPUs against the CPU path: the reference step in bf16, the default run, the speedrun and
# 2-GPU DDP when there are two GPUs, with ratios (bench/gpu_check.py says what each figure is).
#   bench/gpu_check.sh [--skip-cpu] [--data tinyshakespeare.txt]
# Without a CUDA GPU: one error line, exit 1.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then
    # shellcheck disable=SC1091
    source .venv/bin/activate
fi
if command -v nvidia-smi >/dev/null; then nvidia-smi -L || true; fi
exec python bench/gpu_check.py "$@"
