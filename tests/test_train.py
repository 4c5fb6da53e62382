"""End-to-end training through the real train.py command (Hydra + Lightning; in this process where no
process is the point, conftest.train_py), on tiny models."""

import json
import math
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, TINY_MODEL, TINY_TEXT, compose, run_train

from tinylm.runs.job import main as train_main


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.mark.slow  # a whole process (or several) from start to end
def test_train_writes_a_complete_run_folder(tmp_path, tiny_text_file):
    run = tmp_path / "run"
    proc = run_train(
        run, *TINY_MODEL, f"data.path={tiny_text_file}", "data.repeat=30",
        "trainer.max_steps=40", "trainer.val_check_interval=20", "optim.lr=0.01", in_process=True,
    )
    assert "total" in proc.stdout and "lm_head" in proc.stdout  # the parameter table
    assert (run / ".hydra" / "config.yaml").exists()
    assert list(run.glob("events.out.tfevents.*"))
    assert (run / "checkpoints" / "last.ckpt").exists()
    assert len(list((run / "checkpoints").glob("best-step*.ckpt"))) == 1
    metrics = json.loads((run / "metrics.json").read_text())
    vocab = len(set(TINY_TEXT))
    assert metrics["steps"] == 40
    assert metrics["val_loss"] < math.log(vocab) - 1.0  # learned something real
    assert metrics["num_params"] > 0 and metrics["tokens_per_second"] > 0

    ckpt = load(run / "checkpoints" / "last.ckpt")  # plain data only
    assert ckpt["global_step"] == 40
    assert ckpt["tokenizer"] == {"kind": "char", "itos": sorted(set(TINY_TEXT))}
    assert ckpt["model_config"]["n_embd"] == 16


@pytest.mark.slow
def test_resume_continues_the_step_count(tmp_path, tiny_text_file):
    common = [*TINY_MODEL, f"data.path={tiny_text_file}", "data.repeat=30",
              "trainer.val_check_interval=10", "logger=none", "callbacks=minimal"]
    first = tmp_path / "first"
    train_main(compose(*common, "trainer.max_steps=10", output_dir=first))
    second = tmp_path / "second"
    train_main(compose(*common, "trainer.max_steps=20", f"ckpt_path={first / 'checkpoints' / 'last.ckpt'}",
                       output_dir=second))
    ckpt = load(second / "checkpoints" / "last.ckpt")
    assert ckpt["global_step"] == 20


@pytest.mark.slow
def test_relative_data_path_resolves_against_launch_directory(tmp_path, tiny_text_file, monkeypatch):
    monkeypatch.chdir(tiny_text_file.parent)
    run = tmp_path / "run"
    run_train(run, *TINY_MODEL, "data.path=tiny.txt", "data.repeat=30", "trainer.max_steps=2",
              "trainer.val_check_interval=2", in_process=True)
    assert (run / "metrics.json").exists()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.num_heads=3", "model.n_embd=64 is not divisible by model.num_heads=3"),
        ("model.n_embd=0", "model.n_embd=0 must be a positive integer"),
        ("model.dropout=1.5", "model.dropout=1.5 must be in [0, 1)"),
        ("data.batch_size=-1", "data.batch_size=-1 must be a positive integer"),
        ("optim.lr=0", "optim.lr=0 must be a positive number"),
    ],
)
def test_invalid_config_fails_before_training_with_one_line(tmp_path, override, message):
    with pytest.raises(SystemExit) as info:
        train_main(compose(override, output_dir=tmp_path / "run"))
    assert str(info.value).startswith(f"error: invalid config: {message}") and "\n" not in str(info.value)
    assert not (tmp_path / "run").exists()  # nothing read, built or written


@pytest.mark.slow
def test_multirun_gives_each_job_its_own_folder(tmp_path, tiny_text_file):
    sweep = tmp_path / "sweep"
    run_train(tmp_path / "unused", "-m", f"hydra.sweep.dir={sweep}", *TINY_MODEL,
              f"data.path={tiny_text_file}", "data.repeat=30", "trainer.max_steps=3",
              "trainer.val_check_interval=3", "model.n_embd=16,32", in_process=True)
    jobs = sorted(p.parent for p in sweep.glob("*/metrics.json"))
    assert [p.name for p in jobs] == ["0", "1"]
    params = [json.loads((p / "metrics.json").read_text())["num_params"] for p in jobs]
    assert params[0] < params[1]
    # each job's TensorBoard run is named by what the sweep varies, not by the settings all jobs share
    runs = sorted(str(p.parent.relative_to(sweep)) for p in sweep.glob("*/*/events.*"))
    assert sorted(set(runs)) == ["0/model.n_embd=16", "1/model.n_embd=32"]


@pytest.mark.slow
def test_last_checkpoint_is_the_final_state_even_when_the_best_is_older(tmp_path, tiny_text_file):
    run = tmp_path / "run"
    # lr so small that loss/val never improves after the first validation: best stays at step 5
    train_main(compose(*TINY_MODEL, f"data.path={tiny_text_file}", "data.repeat=30", "logger=none",
                       "trainer.max_steps=20", "trainer.val_check_interval=5", "optim.lr=1e-12", output_dir=run))
    assert [p.name for p in (run / "checkpoints").glob("best-*.ckpt")] == ["best-step000005.ckpt"]
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 20


def test_the_training_job_imports_nothing_of_the_run_manager():
    """A fresh process: the run manager (tinylm.runs) calls the training job, never the other way round."""
    code = "import sys, tinylm.training.fit; print(sorted(m for m in sys.modules if m.startswith('tinylm.runs')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert (proc.returncode, proc.stdout.strip()) == (0, "[]"), proc.stderr
