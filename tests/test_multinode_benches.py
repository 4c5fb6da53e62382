"""The scale-out benches: bench/gpu_check.sh says in one line that there is no GPU, and runs nothing."""

from __future__ import annotations

import subprocess

import pytest
import torch
from conftest import ROOT


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is here: the check would run")
def test_gpu_check_without_a_gpu_is_one_error_line_and_runs_nothing(tmp_path):
    proc = subprocess.run([str(ROOT / "bench" / "gpu_check.sh")], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: gpu_check: no CUDA GPU visible to PyTorch"), proc.stderr
    assert not list(tmp_path.iterdir())
