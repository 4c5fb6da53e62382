"""A run is never lost or doubled: SIGTERM saves like Ctrl-C, one process per run folder, a full disk
keeps the last good checkpoint, and a killed run's half-written files go at its next start."""

import errno
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT, TINY_MODEL, TINY_TEXT, compose
from lightning.pytorch.utilities.exceptions import SIGTERMException

from tinylm.run_folder import MARKER
from tinylm.runs import job, lock
from tinylm.runs.job import main as train_main
from tinylm.training import safety

FAST = [*TINY_MODEL, "trainer.max_steps=4", "trainer.val_check_interval=2", "logger=none", "callbacks=minimal"]
# trains until stopped; a validation (and last.ckpt) every 5 steps shows that training is under way
ENDLESS = [*TINY_MODEL, "data.repeat=30", "logger=none", "callbacks=minimal", "trainer.max_steps=1000000",
           "trainer.val_check_interval=5"]


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text(TINY_TEXT * 30, encoding="utf-8")
    return f"data.path={path}"


def snapshot(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def start(*args):
    cmd = [sys.executable, str(ROOT / "train.py"), *args]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def terminate_once_written(proc, path, timeout=120):
    """SIGTERM ``proc`` once ``path`` exists (training is under way); return (stdout, stderr)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=60)


# --------------------------------------------------------------------------------------------
# SIGTERM does what the first Ctrl-C does


@pytest.mark.slow  # a whole process (or several) from start to end
def test_sigterm_saves_last_checkpoint_says_how_to_resume_and_exits_143(tmp_path, text):
    run = tmp_path / "run"
    last = run / "checkpoints" / "last.ckpt"
    proc = start(f"hydra.run.dir={run}", *ENDLESS, text)
    out, err = terminate_once_written(proc, last)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert "SIGTERM: stopping after this step and saving last.ckpt" in out
    step = torch.load(last, weights_only=True)["global_step"]
    assert step > 5  # saved again by the stop, after the validation that the test waited for
    assert f"interrupted at step {step}: saved {last}; resume with `python train.py ckpt_path={last}`" in out
    metrics = json.loads((run / "metrics.json").read_text())
    assert (metrics["steps"], metrics["interrupted"], metrics["interrupted_by"]) == (step, True, "SIGTERM")
    assert not (run / MARKER).exists()


@pytest.mark.slow  # a sweep of train.py jobs; the quick subset keeps SIGTERM on a single run
def test_sigterm_stops_a_sweep_which_says_so_and_exits_143(tmp_path, text):
    sweep = tmp_path / "sweep"
    proc = start("-m", f"hydra.sweep.dir={sweep}", "seed=1,2", *ENDLESS, text)
    out, err = terminate_once_written(proc, sweep / "0" / "checkpoints" / "last.ckpt")
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert "This sweep was stopped by SIGTERM." in (sweep / "interrupted.txt").read_text()
    assert json.loads((sweep / "0" / "metrics.json").read_text())["interrupted_by"] == "SIGTERM"
    assert "job 1: not started, the sweep was stopped" in err
    assert not (sweep / "1" / "checkpoints").exists() and not (sweep / "1" / "metrics.json").exists()
    assert f"sweep {sweep} stopped by SIGTERM: finish it by running the same command with hydra.sweep.dir=" in err


def test_sigterm_while_the_trainer_starts_exits_143(tmp_path, monkeypatch, capsys):
    """Before tinylm's handler takes over, Lightning's turns SIGTERM into SIGTERMException (exit 0)."""

    def terminated(cfg):
        raise SIGTERMException

    monkeypatch.setattr(job, "run", terminated)
    with pytest.raises(SystemExit) as info:
        train_main(compose(*FAST, output_dir=tmp_path / "run"))
    assert info.value.code == 143
    assert "SIGTERM before training started: nothing was trained or saved" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# One process per run folder


@pytest.fixture
def finished_run(tmp_path, text):
    run = tmp_path / "run"
    train_main(compose(*FAST, text, output_dir=run))
    return run


def resume(run, text, steps=6):
    return compose(*FAST, text, f"trainer.max_steps={steps}", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
                   output_dir=run)


def test_a_run_folder_in_use_is_refused_naming_its_process_and_host(finished_run, text):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        marker = {"pid": holder.pid, "host": socket.gethostname(), "started": time.time()}
        (finished_run / MARKER).write_text(json.dumps(marker))
        before = snapshot(finished_run)
        with pytest.raises(SystemExit) as info:
            train_main(resume(finished_run, text))
    finally:
        holder.kill()
        holder.wait()
    message = str(info.value)
    assert message.startswith(f"error: run folder {finished_run} is in use by process {holder.pid} on host "
                              f"{socket.gethostname()} (since ") and "\n" not in message
    assert snapshot(finished_run) == before  # nothing written, the holder's marker kept


def test_a_stale_claim_is_taken_over_and_half_written_checkpoints_removed(finished_run, text):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    marker = {"pid": int(gone.stdout), "host": socket.gethostname(), "started": time.time() - 10}
    (finished_run / MARKER).write_text(json.dumps(marker))  # as kill -9 leaves it
    tmp = finished_run / "checkpoints" / "best-step000003.ckpt.tmp"  # a write that kill -9 cut short
    tmp.write_bytes(b"half a checkpoint")
    train_main(resume(finished_run, text))
    assert json.loads((finished_run / "metrics.json").read_text())["steps"] == 6
    assert not tmp.exists()
    assert not (finished_run / MARKER).exists()  # released at the end


def test_a_claim_holds_until_released(tmp_path):
    folder = tmp_path / "run"
    with lock.holding(folder):
        held = json.loads((folder / MARKER).read_text())
        assert (held["pid"], held["host"]) == (os.getpid(), socket.gethostname())
        with pytest.raises(lock.FolderInUse, match=f"in use by process {os.getpid()} on host"):
            lock.claim(folder)
    assert sorted(p.name for p in folder.iterdir()) == []  # no marker, no private files left
    with lock.holding(folder):  # free again
        pass


# --------------------------------------------------------------------------------------------
# A full disk while a checkpoint is written


@pytest.fixture
def train_log(tmp_path):
    """A file handler on the root logger, as Hydra gives each run its train.log."""
    path = tmp_path / "train.log"
    handler = logging.FileHandler(path)
    logging.getLogger().addHandler(handler)
    yield path
    logging.getLogger().removeHandler(handler)
    handler.close()


def disk_full():
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def disk_full_in_torch_save():
    """What torch.save raises on a full disk: the OSError of the write, then a RuntimeError from
    closing its zip archive while handling it (seen on a 200 KiB tmpfs)."""
    try:
        disk_full()
    except OSError:
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")  # noqa: B904


@pytest.mark.parametrize("fail", [disk_full, disk_full_in_torch_save])
def test_a_full_disk_gives_one_line_keeps_the_previous_last_checkpoint_and_logs_it(
        tmp_path, text, train_log, monkeypatch, fail):
    run = tmp_path / "run"
    last = run / "checkpoints" / "last.ckpt"
    real_save, kept = torch.save, {}

    def save(checkpoint, f):
        if f.name.endswith("last.ckpt.tmp") and checkpoint["global_step"] == 4:  # the second last.ckpt
            kept["bytes"] = last.read_bytes()
            f.write(b"the first bytes of a checkpoint")
            fail()
        real_save(checkpoint, f)

    monkeypatch.setattr(safety.torch, "save", save)
    with pytest.raises(SystemExit) as info:
        train_main(compose(*FAST, text, "trainer.max_steps=6", output_dir=run))
    message = str(info.value)
    assert message.startswith(f"error: could not write checkpoint {last}: No space left on device (errno 28), ")
    assert "free on that disk; the previous last.ckpt is kept unchanged. Free some space, then resume with " \
           f"`python train.py ckpt_path={last}`" in message and "\n" not in message
    assert last.read_bytes() == kept["bytes"]
    assert torch.load(last, weights_only=True)["global_step"] == 2
    assert not list(run.rglob("*.tmp"))
    assert message in train_log.read_text()


# --------------------------------------------------------------------------------------------
# Lightning's warning about a non-empty checkpoint folder


def test_a_resume_into_its_own_folder_does_not_warn_about_its_checkpoints(finished_run, text, recwarn):
    train_main(resume(finished_run, text))
    assert not [w for w in recwarn if "exists and is not empty" in str(w.message)]
    train_main(compose(*FAST, text, output_dir=finished_run))  # a new run into that folder is still warned
    assert [w for w in recwarn if "exists and is not empty" in str(w.message)]


def test_a_claim_of_an_earlier_attempt_of_a_requeued_slurm_job_is_taken_over(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    folder.mkdir()
    elsewhere = {"pid": 1, "host": "node-a", "started": time.time(), "slurm_job": "77", "slurm_restart": 0}
    (folder / MARKER).write_text(json.dumps(elsewhere))  # left by the attempt SLURM ended
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # another task of the same attempt: it holds the run
    with pytest.raises(lock.FolderInUse, match="in use by process 1 on host node-a .* if that process is gone, "
                                                   "delete"):
        lock.claim(folder)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # the requeued job
    with lock.holding(folder):
        assert json.loads((folder / MARKER).read_text())["slurm_restart"] == 1


def test_taking_over_gives_back_a_claim_made_since_it_was_judged_stale(tmp_path):
    marker = tmp_path / MARKER
    marker.write_bytes(b'{"fresh": "claim"}')
    lock._take_over(tmp_path, seen=b'{"the": "stale one"}')  # another process claimed in between
    assert marker.read_bytes() == b'{"fresh": "claim"}'
    lock._take_over(tmp_path, seen=b'{"fresh": "claim"}')
    assert not marker.exists() and not list(tmp_path.iterdir())
