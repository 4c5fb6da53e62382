"""Sweeps in parallel (joblib launcher) and sweeps that finish after an interruption: real train.py processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT, TINY_MODEL, train_py
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.types import RunMode
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
from omegaconf import OmegaConf

import hydra_plugins.tinylm_sweeper.resumable_sweeper  # noqa: F401 - registers hydra/sweeper=tinylm
from tinylm.runs.job import continue_requeued, thread_share
from tinylm.runs.job_files import job_status
from tinylm.runs.sweep_launch import ComposedOnce, job_work
from tinylm.runs.sweep_resume import ResumingLauncher

JOBLIB = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]


def sweep_cmd(sweep_dir: Path, text: Path, *overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), "-m", f"hydra.sweep.dir={sweep_dir}", *TINY_MODEL,
            f"data.path={text}", "data.repeat=30", "logger=none", *overrides]


def run(cmd: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``folder``: its modification time and bytes."""
    files = (p for p in folder.rglob("*") if p.is_file())
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes()) for p in files}


def weights(path: Path) -> dict:
    return torch.load(path, weights_only=True)["state_dict"]


def metrics(job: Path) -> dict:
    return json.loads((job / "metrics.json").read_text())


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Until ``predicate()``; a sweep that fails the wait is killed with its jobs, never left running."""
    deadline = time.monotonic() + timeout
    try:
        while not predicate():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.05)
    except AssertionError:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        raise


def step_of(ckpt: Path) -> int:
    try:
        return torch.load(ckpt, weights_only=True)["global_step"]
    except Exception:  # not written yet, or being replaced
        return -1


@pytest.mark.slow
def test_parallel_jobs_keep_their_own_folders_results_errors_and_thread_share(tmp_path, tiny_text_file):
    sweep = tmp_path / "sweep"
    # model.num_heads=3 does not divide n_embd=16: that job fails alone, with its own error.txt
    # threads=null: each job takes its share of the cores (thread_share)
    cmd = sweep_cmd(sweep, tiny_text_file, *JOBLIB, "model.num_heads=2,3", "model.num_layers=1,2",
                    "trainer.max_steps=20", "trainer.val_check_interval=10", "logger=tensorboard", "threads=null")
    done = run(cmd)
    assert done.returncode == 0, done.stderr
    launched = re.findall(r"\t#(\d) : ", done.stdout + done.stderr)
    assert launched == ["1", "0", "2", "3"]  # the largest first (2 layers), the impossible ones last, in order
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0", "1", "2", "3"]
    ok = [job for job in jobs if (job / "metrics.json").is_file()]
    failed = [job for job in jobs if (job / "error.txt").is_file()]
    assert len(ok) == 2 and len(failed) == 2 and not set(ok) & set(failed)
    for job in failed:
        assert "num_heads" in (job / "error.txt").read_text()
    for job in ok:
        assert metrics(job)["steps"] == 20
        assert (job / "checkpoints" / "last.ckpt").is_file()
        assert list(job.rglob("events.*"))  # its own TensorBoard run
        log = (job / "train.log").read_text()
        cores = len(os.sched_getaffinity(0))
        assert f"sweep job: {max(1, cores // 2)} thread(s)" in log  # cores // n_jobs
        assert log.count("final val loss") == 1  # each job's log holds only its own lines

    kept = {job.name: snapshot(job) for job in ok}
    again = train_py(*cmd[2:])  # the same command again, in this process
    assert "2 job(s) finished (kept as they are), 0 interrupted (continue from their last.ckpt), 2 to run" in (
        again.stdout)  # the failed ones run again (and fail again: their config is still impossible)
    assert {job.name: snapshot(job) for job in ok} == kept
    assert all((job / "error.txt").is_file() for job in failed)


def test_a_requeued_slurm_job_continues_from_its_own_last_checkpoint(tmp_path, monkeypatch):
    last = tmp_path / "checkpoints" / "last.ckpt"
    cfg = OmegaConf.create({"ckpt_path": None, "paths": {"output_dir": str(tmp_path)}})
    monkeypatch.setattr("tinylm.runs.job.sweep_dir_of_job", lambda: tmp_path.parent)  # a sweep job
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert continue_requeued(cfg) is None  # requeued before its first checkpoint: a new start
    last.parent.mkdir()
    last.write_bytes(b"")
    assert continue_requeued(cfg) == str(last)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # its first run
    assert continue_requeued(cfg) is None
    monkeypatch.setattr("tinylm.runs.job.sweep_dir_of_job", lambda: None)  # a single run is resumed with ckpt_path
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert continue_requeued(cfg) is None


def test_thread_share_is_none_outside_a_joblib_sweep():
    assert thread_share() is None


@pytest.mark.slow
def test_a_killed_sweep_finishes_with_the_numbers_of_an_uninterrupted_one(tmp_path, tiny_text_file):
    # job 1 is killed between its step-20 checkpoint and its end at 100: 80 steps of margin
    common = ["model.n_embd=16,24,32", "trainer.max_steps=100", "trainer.val_check_interval=10", "threads=1"]
    train_py(*sweep_cmd(tmp_path / "whole", tiny_text_file, *common)[2:])  # uninterrupted, in this process

    broken = tmp_path / "logs" / "multirun" / "broken"  # where hydra.sweep.dir=last looks, under paths.log_dir
    cmd = sweep_cmd(broken, tiny_text_file, *common)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    second = broken / "1" / "checkpoints" / "last.ckpt"
    wait_for(lambda: step_of(second) >= 20, proc)  # job 0 is done, job 1 is in the middle
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert not (broken / "1" / "metrics.json").exists()
    assert job_status(broken / "2") == "not started"  # its folder holds only the claim of the killed sweep
    finished = snapshot(broken / "0")

    done = train_py(*cmd[2:])  # the same command again (in this process): finishes the sweep
    assert "1 job(s) finished (kept as they are), 1 interrupted (continue from their last.ckpt), 1 to run" in (
        done.stdout)
    assert snapshot(broken / "0") == finished  # not trained again, not touched
    for job in ("0", "1", "2"):
        assert metrics(broken / job)["val_loss"] == metrics(tmp_path / "whole" / job)["val_loss"]
        a = weights(tmp_path / "whole" / job / "checkpoints/last.ckpt")
        b = weights(broken / job / "checkpoints/last.ckpt")
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert "hydra.sweep.dir" not in (broken / "1" / ".hydra" / "overrides.yaml").read_text()  # its record is kept

    again = train_py(cmd[2], "hydra.sweep.dir=last", *cmd[4:], f"paths.log_dir={tmp_path / 'logs'}")
    assert f"finishing sweep {broken}: 3 job(s) finished" in again.stdout  # nothing left to do


@pytest.mark.slow
def test_ctrl_c_stops_a_parallel_sweep_with_every_job_saved_and_a_rerun_finishes_it(tmp_path, tiny_text_file):
    sweep = tmp_path / "sweep"
    cmd = sweep_cmd(sweep, tiny_text_file, *JOBLIB, "model.n_embd=16,24", "trainer.max_steps=800",
                    "trainer.val_check_interval=20")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lasts = [sweep / job / "checkpoints" / "last.ckpt" for job in ("0", "1")]
    wait_for(lambda: all(p.exists() for p in lasts), proc)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C: the whole process group
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert f"hydra.sweep.dir={sweep}" in err and (sweep / "interrupted.txt").is_file()
    for job in ("0", "1"):
        saved = metrics(sweep / job)
        assert saved["interrupted"] is True
        assert 0 < step_of(sweep / job / "checkpoints" / "last.ckpt") == saved["steps"] < 800

    other = [*cmd[2:-2], "trainer.max_steps=3000", cmd[-1]]
    refused = train_py(*other, check=False)  # not this sweep's own settings: nothing is launched, nothing changes
    assert refused.returncode != 0 and "holds a run of other settings" in refused.stderr
    assert metrics(sweep / "0")["interrupted"] is True

    done = train_py(*cmd[2:])  # the same command again, in this process
    assert "0 job(s) finished (kept as they are), 2 interrupted" in done.stdout
    assert not (sweep / "interrupted.txt").exists()
    for job in ("0", "1"):
        assert metrics(sweep / job)["steps"] == 800 and metrics(sweep / job)["interrupted"] is False


def sweep_planner(tmp_path: Path) -> ResumingLauncher:
    """A sweep's planner on the joblib launcher, as ``python train.py -m hydra/launcher=joblib`` sets it up."""
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(ROOT / "conf")))
    config = loader.load_configuration("train", overrides=[f"hydra.sweep.dir={tmp_path}", *JOBLIB],
                                       run_mode=RunMode.MULTIRUN)
    return ResumingLauncher(JoblibLauncher(), SimpleNamespace(config_loader=ComposedOnce(loader)), config)


def test_each_job_config_is_composed_once_and_every_caller_gets_its_own_copy(tmp_path):
    planner = sweep_planner(tmp_path)
    loader = planner.hydra_context.config_loader
    composed = []
    real = loader.loader.load_sweep_config
    loader.loader = SimpleNamespace(load_sweep_config=lambda master, overrides: composed.append(overrides) or real(
        master, overrides))
    jobs = [["model.n_embd=32"], ["model.n_embd=64"]]
    with planner.claimed(jobs):  # the planning composes each job
        first = planner.job_config(jobs[0], 0)
    first.model.n_embd = 1  # a copy: the next caller (the launcher) still gets the job's own config
    again = loader.load_sweep_config(planner.config, jobs[0])
    assert again.model.n_embd == 32 and again.hydra.sweep.dir == str(tmp_path)
    assert composed == jobs  # once each, however often asked


def test_the_largest_jobs_are_sized_largest_and_an_impossible_one_smallest(tmp_path):
    planner = sweep_planner(tmp_path)
    assert planner.largest_first  # the joblib launcher: jobs in parallel

    def size(*overrides: str) -> float:
        return job_work(planner.job_config(list(overrides), 0))

    small, deep, long, both = (size(*o) for o in (["model.num_layers=2"], ["model.num_layers=4"],
                                                   ["model.num_layers=2", "trainer.max_steps=2000"],
                                                   ["model.num_layers=4", "trainer.max_steps=2000"]))
    assert 0 < small < deep < both and long == 2 * small and both == 2 * deep
    assert size("model=lstm") > 0 and size("model=seq2seq", "data=pairs") > 0  # every kind of model is sized
    assert size("model.num_heads=3") == 0  # 64 is not divisible by 3: that job fails at once
    assert not ResumingLauncher(None, planner.hydra_context, planner.config).largest_first  # basic launcher: in order
