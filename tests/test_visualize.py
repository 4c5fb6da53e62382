"""visualize.py: a checkpoint's attention as one PNG per layer, without TensorBoard or run folders."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest
from conftest import ROOT, TINY_MODEL, run_train

PROBE = "自注意力可以让序列"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny 2-layer run on the default corpus, checkpoints only."""
    run = tmp_path_factory.mktemp("visualize") / "run"
    run_train(run, *TINY_MODEL, "model.num_layers=2", "trainer.max_steps=2",
              "trainer.val_check_interval=2", "callbacks=minimal", "logger=none")
    return run


def visualize(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, str(ROOT / "visualize.py"), *overrides], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=env)


def test_writes_one_png_per_layer_and_nothing_else(run_dir, tmp_path):
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = visualize(cwd, f"ckpt_path={ckpt}", f"text={PROBE}", "out_dir=pngs")
    assert proc.returncode == 0, proc.stderr
    out = cwd / "pngs"  # relative out_dir: relative to where the command ran
    expected = [out / "attention_layer0.png", out / "attention_layer1.png"]
    assert sorted(out.iterdir()) == expected
    assert proc.stdout.split() == [str(p) for p in expected]
    assert sorted(p.name for p in cwd.iterdir()) == ["pngs"]  # no outputs/, .hydra/ or logs
    for png in expected:
        pixels = matplotlib.image.imread(png)  # (H, W, 4) floats
        height, width = pixels.shape[:2]
        assert height * 1.4 >= width > 300  # the head panels in a near-square grid, with a colour bar
        assert pixels[..., :3].std() > 0.1  # a picture, not a blank page


@pytest.mark.slow
def test_default_out_dir_is_next_to_the_checkpoint(run_dir, tmp_path):
    proc = visualize(tmp_path, f"run_dir={run_dir}")  # the default text is the Chinese probe
    assert proc.returncode == 0, proc.stderr
    (best,) = (run_dir / "checkpoints").glob("best-*.ckpt")
    out = best.parent / f"{best.stem}-attention"
    assert sorted(p.name for p in out.iterdir()) == ["attention_layer0.png", "attention_layer1.png"]


@pytest.mark.slow
@pytest.mark.parametrize(("text", "message"), [
    ("自注意力☃", "error: text has 1 character(s) outside the checkpoint's vocabulary: '☃'"),
    ("自注意力可以让序列中的每个位置看到前面", "error: text is 19 tokens long but the model sees at "
                                  "most block_size=16"),
], ids=["unknown-character", "too-long"])
def test_bad_text_is_one_error_line(run_dir, tmp_path, text, message):
    proc = visualize(tmp_path, f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", f"text={text}")
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(message)
    assert list(tmp_path.iterdir()) == []


def test_missing_checkpoint_is_one_error_line(tmp_path):
    proc = visualize(tmp_path, f"ckpt_path={tmp_path / 'nope.ckpt'}")
    assert proc.returncode != 0
    assert proc.stderr.strip() == f"error: checkpoint file {tmp_path / 'nope.ckpt'} does not exist: " \
                                  "check ckpt_path=..."


@pytest.mark.slow
def test_paths_need_no_hydra_quoting_and_text_is_literal(run_dir, tmp_path):
    folder = tmp_path / "my 模型 dir"
    folder.mkdir()
    ckpt = folder / "last copy.ckpt"
    shutil.copy(run_dir / "checkpoints" / "last.ckpt", ckpt)
    proc = visualize(tmp_path, f"ckpt_path={ckpt}", f"text={PROBE[:4]}", "out_dir=注意力 pngs")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "注意力 pngs").iterdir()) == [
        "attention_layer0.png", "attention_layer1.png"]

    proc = visualize(tmp_path, f"ckpt_path={ckpt}", "text=${oc.env:HOME}")
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()  # the characters $ { ... themselves, not $HOME's
    assert line.startswith("error: text has") and "'$' '{'" in line


def test_help_shows_only_its_own_options(tmp_path):
    proc = visualize(tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    for key in ("ckpt_path", "run_dir", "paths.log_dir", "text", "out_dir"):
        assert f"\n{key}=" in proc.stdout
    for group in ("data", "model", "optim", "trainer", "Configuration groups"):
        assert group + ":" not in proc.stdout and group + "=" not in proc.stdout
