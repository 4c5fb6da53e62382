"""The scale-out benches: bench/gpu_check.sh says in one line that there is no GPU, and runs nothing;
bench/scale_out.py gives no ratio or DDP cost where the load took the cores or the cost came out 0 or less."""

from __future__ import annotations

import subprocess
import sys

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


def test_scale_out_says_not_measurable_when_the_load_took_the_cores():
    sys.path.insert(0, str(ROOT / "bench"))
    from scale_out import measured

    assert measured("+22.0 ms", 0.022, load=1.5, cores=2) == "+22.0 ms"
    assert measured("-8.6 ms", -0.0086, load=1.5, cores=2).startswith("not measurable at this load")
    assert measured("27.03x", 1.0, load=3.7, cores=2) == "not measurable at this load (load average 3.7 on 2 CPU(s))"
