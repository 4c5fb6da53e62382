"""A real SLURM on this machine (tools/slurm_localhost.sh: slurmctld, slurmd and munge, one node): ``srun``
and ``sbatch`` jobs of ``train.py trainer=ddp`` make one run folder, a layout Lightning cannot use is one
``error:`` line, a sweep through submitit runs each job as 2 DDP tasks and ends with its table, and
``scontrol requeue`` makes a job save and continue from its last checkpoint.

Skipped, with one reason, where SLURM is not installed or does not answer (CI installs and starts it first).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT, TINY_MODEL, TINY_TEXT

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STATE = Path(os.environ.get("TINYLM_SLURM_STATE", "/var/lib/tinylm-slurm"))
RUN = [*TINY_MODEL, "callbacks=minimal", "data.repeat=40", "trainer=ddp", "trainer.max_steps=6",
       "trainer.val_check_interval=3"]
ON_SLURM = ["hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1",
            "hydra.launcher.timeout_min=10"]


def slurm_answers() -> str | None:
    """None when SLURM runs here with an idle node; else why not (the skip reason)."""
    if shutil.which("srun") is None or shutil.which("sinfo") is None:
        return "SLURM is not installed (sudo tools/slurm_localhost.sh installs and starts a one-machine cluster)"
    try:
        state = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"sinfo does not answer ({e}): start SLURM with sudo tools/slurm_localhost.sh"
    if not re.search(r"\b(idle|mix|alloc)", state):
        return f"SLURM has no usable node (sinfo: {state.strip() or 'no answer'}): sudo tools/slurm_localhost.sh"
    return None


@pytest.fixture(scope="module")
def slurm_env(tmp_path_factory) -> dict:
    why = slurm_answers()
    if why:
        pytest.skip(why)
    path = f"{STATE / 'bin'}{os.pathsep}{os.environ['PATH']}" if (STATE / "bin" / "sacct").exists() else \
        os.environ["PATH"]
    # the jobs run where the tests run (a shared folder: this machine), with this Python and token cache
    return {**os.environ, "PATH": path, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "tiny.txt"
    path.write_text(TINY_TEXT, encoding="utf-8")
    return path


def train_cmd(*overrides: str) -> list[str]:
    flags = [o for o in overrides if o.startswith("-")]  # -m precedes the overrides
    return [sys.executable, str(ROOT / "train.py"), *flags, *RUN, *(o for o in overrides if o not in flags)]


def one_run(log_dir: Path) -> Path:
    runs = [p for p in (log_dir / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def assert_one_ddp_run(run: Path) -> None:
    assert [p.name for p in (run / "checkpoints").glob("last*")] == ["last.ckpt"]
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 6
    log = (run / "train.log").read_text()
    assert "GLOBAL_RANK: 0, MEMBER: 1/2" in log and "GLOBAL_RANK: 1" not in log  # 2 ranks; rank 1 wrote nothing here
    assert (run / "metrics.json").is_file() and not (run / "running.json").exists()


def test_srun_and_sbatch_jobs_make_one_run_folder_and_a_layout_lightning_cannot_use_is_one_line(slurm_env, text,
                                                                                                tmp_path):
    # srun -n2 (no --ntasks-per-node, which Lightning alone refuses): 2 tasks on the one node, one run folder
    started = time.monotonic()
    proc = subprocess.run(["srun", "-n2", *train_cmd("trainer.devices=2", f"data.path={text}",
                                                     f"paths.log_dir={tmp_path / 'srun'}")],
                          capture_output=True, text=True, env=slurm_env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_one_ddp_run(one_run(tmp_path / "srun"))

    # sbatch: a batch script whose srun starts the 2 tasks; requeued by SLURM mid-run, it saves and its next
    # attempt continues the same run folder from that checkpoint
    script, steps = tmp_path / "job.sh", 300
    command = " ".join(f"'{a}'" for a in train_cmd("trainer.devices=2", f"data.path={text}",
                                                   f"trainer.max_steps={steps}", "trainer.val_check_interval=10",
                                                   f"paths.log_dir={tmp_path / 'sbatch'}"))
    script.write_text(f"#!/bin/bash\n#SBATCH --nodes=1 --ntasks-per-node=2 --requeue --output={tmp_path}/job-%j.out\n"
                      f"srun {command}\n")
    job = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, env=slurm_env,
                         check=True).stdout.strip()
    requeue_once_saved(job, tmp_path / "sbatch", "runs/*/checkpoints/last.ckpt", slurm_env)
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True, env=slurm_env).stdout.strip():
        time.sleep(0.5)
    run = one_run(tmp_path / "sbatch")
    log = (run / "train.log").read_text()
    resumed = re.search(r"resuming from step (\d+) of .*last\.ckpt", log)
    assert resumed and 0 < int(resumed.group(1)) < steps, log + "".join(p.read_text() for p in tmp_path.glob("job-*"))
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == steps
    assert "GLOBAL_RANK: 1" not in log

    # 2 tasks for a trainer of 1 device: one error line (rank 0's) naming the layout to use, and no folder
    proc = subprocess.run(["srun", "-n2", *train_cmd("trainer.devices=1", f"data.path={text}",
                                                     f"paths.log_dir={tmp_path / 'bad'}")],
                          capture_output=True, text=True, env=slurm_env, timeout=600)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr
    assert "SLURM started 2 tasks" in errors[0] and "--ntasks-per-node=2 with trainer.devices=2" in errors[0]
    assert "Traceback" not in proc.stderr and not (tmp_path / "bad" / "runs").exists()
    print(f"srun, sbatch and the refused layout: {time.monotonic() - started:.1f} s")


def requeue_once_saved(job: str, folder: Path, checkpoint: str, env: dict) -> None:
    """``scontrol requeue`` the running ``job`` once ``folder`` holds ``checkpoint``; then let the requeued job
    start at once (SLURM holds a requeued job back a while)."""
    for _ in range(6000):  # up to 5 minutes
        if list(folder.glob(checkpoint)):
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"job {job} saved no {checkpoint} in {folder}")
    subprocess.run(["scontrol", "requeue", job], check=True, env=env, timeout=60)
    for _ in range(600):
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, env=env)
        if "JobState=PENDING" in shown.stdout:
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env, timeout=60)
            return
        time.sleep(0.1)


def sweep_files(sweep: Path, pattern: str) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(sweep.glob(pattern)))


def test_a_sweep_on_slurm_runs_each_job_as_two_ddp_tasks_and_ends_with_its_table(slurm_env, text, tmp_path):
    sweep = tmp_path / "sweep"
    proc = subprocess.run(train_cmd("-m", *ON_SLURM, "trainer.devices=2", f"data.path={text}", "model.n_embd=16,32",
                                    f"hydra.sweep.dir={sweep}", f"paths.log_dir={tmp_path}"),
                          capture_output=True, text=True, env=slurm_env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Jobs: 2 finished" in proc.stdout and proc.stdout.count("| finished |") == 2, proc.stdout
    for job in ("0", "1"):
        tasks = sweep_files(sweep, f".submitit/*_{job}/*_log.out") + sweep_files(sweep, f".submitit/*_{job}/*_log.err")
        assert "GLOBAL_RANK: 0, MEMBER: 1/2" in tasks and "GLOBAL_RANK: 1, MEMBER: 2/2" in tasks  # SLURM's ranks
        assert "GLOBAL_RANK: 1" not in (sweep / job / "train.log").read_text()
        assert (sweep / job / "checkpoints" / "last.ckpt").is_file()


def test_scontrol_requeue_saves_and_the_job_continues_from_its_last_checkpoint(slurm_env, text, tmp_path):
    sweep, steps = tmp_path / "sweep", 400  # far more steps than pass before the requeue
    proc = subprocess.Popen(train_cmd("-m", *ON_SLURM, "trainer.devices=2", f"data.path={text}",
                                      f"trainer.max_steps={steps}", "trainer.val_check_interval=10",
                                      f"hydra.sweep.dir={sweep}", f"paths.log_dir={tmp_path}"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=slurm_env)
    try:
        while not (sweep / "0" / "checkpoints" / "last.ckpt").is_file():
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        job = next(sweep.glob(".submitit/*/*_submitted.pkl")).name.split("_")[0]
        requeue_once_saved(job, sweep, "0/checkpoints/last.ckpt", slurm_env)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert "Jobs: 1 finished" in out and "| finished |" in out, out
    log = (sweep / "0" / "train.log").read_text()
    resumed = re.search(r"resuming from step (\d+) of .*last\.ckpt", log)
    assert resumed and 0 < int(resumed.group(1)) < steps, log
    assert "SLURM requeued it" in sweep_files(sweep, ".submitit/*/*_log.err")
    assert torch.load(sweep / "0" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == steps
