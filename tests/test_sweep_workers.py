"""Parallel sweep jobs in workers forked from a warm fork server, or in this process when one at a time
(tinylm.runs.sweep_workers): in this process, through Hydra's joblib launcher and train.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import ROOT, TINY_MODEL, train_py
from hydra._internal.callbacks import Callbacks
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.hydra_config import HydraConfig
from hydra.types import HydraContext, RunMode
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
from omegaconf import DictConfig
from test_resumable_sweeps import JOBLIB, metrics, sweep_cmd, wait_for

from tinylm.api.training import logging_state, restore_logging
from tinylm.runs import job
from tinylm.runs.sweep_fork_server import SERVER_ENV
from tinylm.runs.sweep_launch import ComposedOnce
from tinylm.runs.sweep_workers import AT_ONCE_ENV, launch_jobs, start_warm_workers


def job_facts(cfg: DictConfig) -> dict:
    """A sweep's task: where and how its job ran."""
    return {"num": HydraConfig.get().job.num, "pid": os.getpid(), "at_once": os.environ.get(AT_ONCE_ENV),
            "mark": os.environ.get("TINYLM_TEST_MARK"), "server": os.environ.get(SERVER_ENV),
            "preloaded": {"lightning", "tinylm.runs.sweep_fork_server"} <= set(sys.modules)}


@pytest.fixture
def joblib_launcher(tmp_path):
    """Hydra's joblib launcher (n_jobs=2) set up for a sweep into ``tmp_path`` whose task is ``job_facts``;
    the logging Hydra's jobs set up is undone afterwards."""
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(ROOT / "conf")))
    config = loader.load_configuration("train", overrides=[f"hydra.sweep.dir={tmp_path}", "hydra/launcher=joblib",
                                                           "hydra.launcher.n_jobs=2"], run_mode=RunMode.MULTIRUN)
    launcher = JoblibLauncher(**{k: v for k, v in config.hydra.launcher.items() if k != "_target_"})
    launcher.setup(hydra_context=HydraContext(config_loader=ComposedOnce(loader), callbacks=Callbacks(config)),
                   task_function=job_facts, config=config)
    loggers = logging_state()
    yield launcher
    restore_logging(loggers)


def test_jobs_side_by_side_run_in_workers_forked_from_the_warm_server(joblib_launcher, monkeypatch):
    assert start_warm_workers()  # Linux: there is a fork server
    monkeypatch.setenv("TINYLM_TEST_MARK", "set after the server started")
    done = launch_jobs(joblib_launcher, [(1, ["model.n_embd=32"]), (0, ["model.n_embd=64"])])
    facts = [ret.return_value for ret in done]
    assert [f["num"] for f in facts] == [1, 0]  # in the order given, each with its own number
    for f in facts:
        assert f["pid"] != os.getpid() and f["preloaded"]  # a worker with torch and Lightning imported by the server
        assert f["at_once"] == "2" and f["mark"] == "set after the server started"  # this process's environment
        assert f["server"] is None  # the server's own setting stays the server's
    assert AT_ONCE_ENV not in os.environ


def test_one_job_at_a_time_runs_in_this_process(joblib_launcher, capsys):
    done = launch_jobs(joblib_launcher, [(3, ["model.n_embd=32"])])
    assert [(ret.return_value["num"], ret.return_value["pid"], ret.return_value["at_once"]) for ret in done] == [
        (3, os.getpid(), "1")]
    assert "hydra.launcher.n_jobs=2 and 1 job(s) to launch: one at a time, so it runs in this process" in (
        capsys.readouterr().out)
    assert AT_ONCE_ENV not in os.environ  # only while its jobs ran


@pytest.mark.parametrize("at_once, share", [(None, 2), ("2", 2), ("4", 1), ("1", None)])
def test_a_sweep_job_shares_the_cores_with_the_jobs_running_at_once(monkeypatch, at_once, share):
    monkeypatch.setattr(job, "sweep_dir_of_job", lambda: ROOT)  # a sweep job
    launcher = {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", "n_jobs": 2}
    hydra = SimpleNamespace(launcher=SimpleNamespace(get=launcher.get, n_jobs=2))
    monkeypatch.setattr(job, "HydraConfig", SimpleNamespace(get=lambda: hydra))
    monkeypatch.setattr(job, "usable_cores", lambda: 4)
    if at_once is None:  # launched by a sweeper of its own (Optuna's): hydra.launcher.n_jobs
        monkeypatch.delenv(AT_ONCE_ENV, raising=False)
    else:
        monkeypatch.setenv(AT_ONCE_ENV, at_once)
    assert job.thread_share() == share  # None: alone, PyTorch's default threads


def test_a_sweep_of_one_job_on_the_joblib_launcher_trains_it_in_this_process_with_all_threads(
        tmp_path, tiny_text_file):
    done = train_py("-m", f"hydra.sweep.dir={tmp_path}", *TINY_MODEL, f"data.path={tiny_text_file}",
                    "data.repeat=30", "logger=none", "trainer.max_steps=4", "trainer.val_check_interval=2",
                    "threads=null", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    assert "1 job(s) to launch: one at a time, so it runs in this process" in done.stdout + done.stderr
    log = (tmp_path / "0" / "train.log").read_text()
    assert "final val loss" in log and "sweep job:" not in log  # no share: every core's threads


def test_a_parallel_sweep_runs_in_warm_workers_each_job_with_its_lines_and_its_share(tmp_path, tiny_text_file):
    done = train_py("-m", f"hydra.sweep.dir={tmp_path}", *TINY_MODEL, f"data.path={tiny_text_file}",
                    "data.repeat=30", "logger=none", "trainer.max_steps=4", "trainer.val_check_interval=2",
                    "threads=null", "model.num_layers=1,2", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    assert "is launching 2 jobs, the largest first, 2 at a time" in done.stdout + done.stderr
    for num in ("0", "1"):
        log = (tmp_path / num / "train.log").read_text()
        assert f"sweep job: {max(1, len(os.sched_getaffinity(0)) // 2)} thread(s), an even share of the cores " \
               "for the 2 jobs running at once" in log
        assert log.count("final val loss") == 1  # its own lines only
        assert "`Trainer.fit` stopped" in log  # Lightning's too, though the fork server imported it


@pytest.mark.slow
def test_sigterm_to_a_parallel_sweeps_process_group_saves_the_running_jobs_and_starts_no_other(
        tmp_path, tiny_text_file):
    """The fork server is in the sweep's process group too: SIGTERM ends it, and the sweep stops as before."""
    sweep = tmp_path / "sweep"
    cmd = sweep_cmd(sweep, tiny_text_file, *JOBLIB, "model.n_embd=16,24,32", "trainer.max_steps=800",
                    "trainer.val_check_interval=20")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    running = [sweep / job / "checkpoints" / "last.ckpt" for job in ("1", "2")]  # the largest two start first
    wait_for(lambda: all(p.exists() for p in running), proc)
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    for num in ("1", "2"):
        assert metrics(sweep / num)["interrupted"] is True and metrics(sweep / num)["steps"] < 800
    assert not (sweep / "0" / "metrics.json").exists()  # queued when the sweep stopped: never started
    assert f"hydra.sweep.dir={sweep}" in err


@pytest.mark.slow
def test_ctrl_c_while_a_worker_waits_for_a_job_saves_the_running_one(tmp_path, tiny_text_file):
    """One job done, its worker idle, the other job running: Ctrl-C to the process group stops the sweep with
    exit 130 and the running job's save (an idle worker ignores Ctrl-C; it raised KeyboardInterrupt there and
    broke the launcher, and the running job lost its save)."""
    sweep = tmp_path / "sweep"
    cmd = sweep_cmd(sweep, tiny_text_file, *JOBLIB, "trainer.max_steps=20,3000", "trainer.val_check_interval=20")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_for(lambda: (sweep / "0" / "metrics.json").exists() and (sweep / "1" / "checkpoints" / "last.ckpt").exists(),
             proc)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert metrics(sweep / "0")["steps"] == 20
    assert metrics(sweep / "1")["interrupted"] is True and metrics(sweep / "1")["steps"] < 3000
