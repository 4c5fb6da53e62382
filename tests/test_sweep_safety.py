"""Sweep re-runs that must not train over what they cannot read or do not own (issue 23): claims on
jobs, refusals that write nothing, damaged records, a sweep report that cannot write its files."""

from __future__ import annotations

import builtins
import fcntl
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.types import RunMode
from omegaconf import OmegaConf

import hydra_plugins.tinylm_sweeper.resumable_sweeper  # noqa: F401 - registers hydra/sweeper=tinylm
from tinylm.errors import TinyLMError
from tinylm.runs.folder import original_overrides
from tinylm.runs.job import already_finished
from tinylm.runs.job_files import job_status
from tinylm.runs.lock import holding
from tinylm.runs.resume import plan_resume, record_resume, saved_overrides
from tinylm.runs.sweep_report import main as report_main
from tinylm.runs.sweep_resume import ResumingLauncher

FINISHED = {"val_loss": 2.0, "best_val_loss": 1.9, "num_params": 1000, "steps": 10, "interrupted": False}
JOBS = [["seed=1"], ["seed=2"], ["seed=3"]]


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def make_job(sweep: Path, name: str, overrides: list[str], metrics: dict | str | None = None,
             killed: bool = False) -> Path:
    """A job folder as a sweep leaves it: its record, and metrics.json (finished) or a last.ckpt and
    the running.json of a process that is gone (killed)."""
    folder = sweep / name
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(overrides))
    (folder / ".hydra" / "hydra.yaml").write_text("hydra: {}\n")
    if metrics is not None:
        (folder / "metrics.json").write_text(metrics if isinstance(metrics, str) else json.dumps(metrics))
    if killed:
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
        (folder / "running.json").write_text(json.dumps({"pid": dead_pid(), "host": socket.gethostname(),
                                                         "started": time.time()}))
    return folder


@pytest.fixture
def killed_sweep(tmp_path) -> Path:
    """Job 0 finished, job 1 killed after a checkpoint, job 2 never started."""
    sweep = tmp_path / "sweep"
    make_job(sweep, "0", JOBS[0], FINISHED)
    make_job(sweep, "1", JOBS[1], killed=True)
    return sweep


def planner(sweep: Path) -> ResumingLauncher:
    """The sweep's planner as ``python train.py -m hydra.sweep.dir=<sweep>`` builds it (no launcher under it)."""
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(ROOT / "conf")))
    config = loader.load_configuration("train", overrides=[f"hydra.sweep.dir={sweep}"], run_mode=RunMode.MULTIRUN)
    return ResumingLauncher(None, SimpleNamespace(config_loader=loader), config)


def refusal(sweep: Path, jobs=JOBS) -> str:
    with pytest.raises(SystemExit) as refused, planner(sweep).claimed(jobs):
        pass
    message = str(refused.value.code)
    assert message.startswith(f"error: cannot finish sweep {sweep}: ") and "\n" not in message
    return message


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.rglob("*")
            if p.is_file()}


# --------------------------------------------------------------------------------------------
# 5: two re-runs of one killed sweep at once


def test_a_second_rerun_does_not_continue_the_jobs_the_first_one_claimed(killed_sweep, capsys):
    first = planner(killed_sweep)
    with first.claimed(JOBS):
        assert [action for action, _ in first.planned] == ["keep", "continue", "new"]
        assert "1 job(s) finished (kept as they are), 1 interrupted" in capsys.readouterr().out
        claims = [killed_sweep / job / "claim.json" for job in ("1", "2")]
        assert [json.loads(c.read_text())["pid"] for c in claims] == [os.getpid()] * 2
        assert not (killed_sweep / "0" / "claim.json").exists()  # a finished job is kept, not claimed
        assert [job_status(killed_sweep / job) for job in ("0", "1", "2")] == ["finished", "queued", "queued"]

        message = refusal(killed_sweep)  # the second re-run, while the first one holds its jobs
        for job in ("1", "2"):
            assert (f"job {job} ({killed_sweep / job}) is claimed by another run of this sweep (pid {os.getpid()} "
                    f"on {socket.gethostname()}, since ") in message
            assert f"delete {killed_sweep / job / 'claim.json'}" in message
        assert "job 0" not in message

        # the job takes its sweep's claim over when it starts: running.json, then no claim.json
        with holding(killed_sweep / "1"):
            assert not claims[0].exists() and job_status(killed_sweep / "1") == "running"
            assert "job 1 (" in refusal(killed_sweep) and "is still running" in refusal(killed_sweep)
    assert not list(killed_sweep.rglob("claim.json"))  # the first re-run ended: its claims are gone


def test_claims_of_a_killed_rerun_count_for_nothing(killed_sweep):
    stale = {"pid": dead_pid(), "host": socket.gethostname(), "started": time.time()}
    (killed_sweep / "2").mkdir()
    for job in ("1", "2"):
        (killed_sweep / job / "claim.json").write_text(json.dumps(stale))
    assert [job_status(killed_sweep / job) for job in ("1", "2")] == ["interrupted", "not started"]
    rerun = planner(killed_sweep)
    with rerun.claimed(JOBS):
        assert [action for action, _ in rerun.planned] == ["keep", "continue", "new"]
        assert json.loads((killed_sweep / "2" / "claim.json").read_text())["pid"] == os.getpid()


def test_two_reruns_plan_one_after_the_other(killed_sweep):
    """While one re-run looks at the jobs and claims them (it holds the sweep folder's flock), another
    waits: two re-runs replacing the same stale claim at once cannot both get it."""
    held = os.open(killed_sweep, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # another re-run, planning
    rerun = planner(killed_sweep)
    planned = threading.Event()

    def plan() -> None:
        with rerun.claimed(JOBS):
            planned.set()

    thread = threading.Thread(target=plan)
    thread.start()
    try:
        assert not planned.wait(1.0) and not list(killed_sweep.rglob("claim.json"))
    finally:
        os.close(held)
    thread.join(30)
    assert planned.is_set()


# --------------------------------------------------------------------------------------------
# 8: a refused re-run writes nothing


@pytest.mark.slow  # a whole process (or several) from start to end
def test_a_refused_rerun_leaves_the_sweep_folder_and_its_multirun_yaml_as_they_were(tmp_path):
    sweep = tmp_path / "sweep"
    for job, overrides in enumerate(JOBS[:2]):
        make_job(sweep, str(job), overrides, FINISHED)
    (sweep / "multirun.yaml").write_text("hydra:\n  overrides:\n    task: [seed=1,2]\n")
    (sweep / "interrupted.txt").write_text("stopped by Ctrl-C\n")
    before = snapshot(sweep)
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", f"hydra.sweep.dir={sweep}", "seed=1,2,3",
           "trainer.max_steps=20"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 1 and "holds a run of other settings" in proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.strip()][-1].startswith("error: cannot finish sweep")
    assert snapshot(sweep) == before  # multirun.yaml byte for byte, its time stamp, and nothing else written
    assert sorted(p.name for p in sweep.iterdir()) == ["0", "1", "interrupted.txt", "multirun.yaml"]


# --------------------------------------------------------------------------------------------
# 7: a damaged metrics.json of a finished job


@pytest.mark.parametrize("after", ["damaged", "a failed re-run of old"])
def test_a_job_whose_metrics_json_cannot_be_read_is_refused_not_trained_again(tmp_path, after):
    sweep = tmp_path / "sweep"
    make_job(sweep, "0", JOBS[0], FINISHED)
    damaged = make_job(sweep, "1", JOBS[1], '{"val_loss": 2.0, "num_par')
    (damaged / "checkpoints").mkdir()
    (damaged / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    if after != "damaged":  # what the crash of an earlier version left: error.txt made the job "failed", then "new"
        (damaged / "error.txt").write_text("JSONDecodeError: Unterminated string\n")
    before = snapshot(sweep)
    message = refusal(sweep, JOBS[:2])
    assert (f"job 1 ({damaged}): its metrics.json cannot be read (not JSON: Unterminated string starting at: "
            f"line 1 column 19 (char 18)); restore that file, or delete the folder {damaged} to train the job "
            "again") in message
    assert snapshot(sweep) == before


def test_already_finished_reports_a_damaged_metrics_json_in_one_line(tmp_path, capsys):
    (tmp_path / "metrics.json").write_text('{"val_loss": ')
    assert already_finished(tmp_path, "last.ckpt", 10, 10) == {}
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"run {tmp_path} is already finished")
    assert out[1] == (f"its {tmp_path / 'metrics.json'} cannot be read (not JSON: Expecting value: line 1 column 14 "
                      "(char 13)), so its results are not reported: restore that file (its checkpoints and train.log "
                      "are untouched)")
    (tmp_path / "metrics.json").write_text(json.dumps(FINISHED))
    assert already_finished(tmp_path, "last.ckpt", 10, 10) == FINISHED


# --------------------------------------------------------------------------------------------
# 13: a damaged .hydra/overrides.yaml or .hydra/resumes.yaml

DAMAGED_OVERRIDES = {
    "not YAML": (b"- [seed=1\n", "not YAML (expected ',' or ']', but got '<stream end>' at line 2)"),
    "a mapping": (b"seed: 1\n", "an object instead of a list of overrides"),
    "a number in it": (b"- seed=1\n- 7\n", "item 2 is a number, not an override"),
    "empty": (b"", "empty"),
    "not UTF-8": (b"- seed=\xff\n", "not UTF-8 text"),
    "a folder": (None, "Is a directory"),
}


def damage(record: Path, content: bytes | None) -> None:
    record.parent.mkdir(parents=True, exist_ok=True)
    record.unlink(missing_ok=True)
    if content is None:
        record.mkdir()
    else:
        record.write_bytes(content)


@pytest.mark.parametrize("kind", DAMAGED_OVERRIDES)
def test_original_overrides_turns_a_damaged_record_into_one_line(tmp_path, kind):
    content, why = DAMAGED_OVERRIDES[kind]
    record = tmp_path / ".hydra" / "overrides.yaml"
    damage(record, content)
    with pytest.raises(TinyLMError) as error:
        original_overrides(tmp_path)
    assert str(error.value) == (f"cannot read {record}: {why}; it lists the run's command-line overrides: restore it "
                                f"(the same list is hydra.overrides.task in {tmp_path / '.hydra' / 'hydra.yaml'})")
    record.unlink() if record.is_file() else record.rmdir()
    assert original_overrides(tmp_path) is None  # no record: a loose checkpoint, not an error


DAMAGED_RESUMES = {
    "not YAML": (b"- {time: [\n", "not YAML (expected the node content, but found '<stream end>' at line 2)"),
    "a mapping": (b"overrides: [trainer.max_steps=8]\n", "not a list of resumes"),
    "an entry that is a string": (b"- trainer.max_steps=8\n",
                                  "entry 1 is not a resume (time, checkpoint, from_step, overrides)"),
    "overrides that are no list": (b"- {from_step: 4, overrides: trainer.max_steps=8}\n",
                                   "a string instead of a list of overrides"),
    "not UTF-8": (b"- {overrides: [\xff]}\n", "not UTF-8 text"),
    "a folder": (None, "Is a directory"),
}


def resumes_error(record: Path, why: str) -> str:
    return (f"cannot read {record}: {why}; it records what the run's earlier resumes changed: restore it, or delete it "
            "to resume with the run's own settings (its .hydra/overrides.yaml) and this command's changes only")


@pytest.mark.parametrize("kind", DAMAGED_RESUMES)
def test_saved_overrides_and_record_resume_turn_a_damaged_resumes_yaml_into_one_line(tmp_path, kind):
    content, why = DAMAGED_RESUMES[kind]
    run = make_job(tmp_path, "run", ["model.n_embd=32"])
    record = run / ".hydra" / "resumes.yaml"
    damage(record, content)
    for read in (lambda: saved_overrides(run),
                 lambda: record_resume(run, run / "checkpoints" / "last.ckpt", 4, ["trainer.max_steps=8"])):
        with pytest.raises(TinyLMError) as error:
            read()
        assert str(error.value) == resumes_error(record, why)
    assert (record.read_bytes() == content) if content is not None else record.is_dir()  # left as it was


def test_record_resume_appends_to_a_sound_resumes_yaml(tmp_path):
    run = make_job(tmp_path, "run", ["model.n_embd=32", "trainer.max_steps=4"])
    record_resume(run, run / "checkpoints" / "last.ckpt", 4, ["model.n_embd=32", "trainer.max_steps=8"])
    record_resume(run, run / "checkpoints" / "last.ckpt", 8, ["model.n_embd=32", "trainer.max_steps=16"])
    assert saved_overrides(run) == ["model.n_embd=32", "trainer.max_steps=16"]


@pytest.mark.parametrize("damaged", ["overrides.yaml", "resumes.yaml"])
def test_a_resume_of_a_run_with_a_damaged_record_is_one_line(tmp_path, damaged):
    run = make_job(tmp_path, "run", ["model.n_embd=32"], killed=True)
    damage(run / ".hydra" / damaged, b"- [")
    with pytest.raises(TinyLMError, match=f"^cannot read {run / '.hydra' / damaged}: not YAML"):
        plan_resume(["train.py", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "trainer.max_steps=8"],
                    ROOT / "conf")


@pytest.mark.parametrize("damaged", ["overrides.yaml", "resumes.yaml"])
def test_a_sweep_rerun_refuses_a_job_with_a_damaged_record(killed_sweep, damaged):
    record = killed_sweep / "1" / ".hydra" / damaged  # the killed job: it would continue from its last.ckpt
    damage(record, b"- [")
    before = snapshot(killed_sweep)
    message = refusal(killed_sweep)
    assert f": job 1: cannot read {record}: not YAML" in message and "job 0" not in message
    assert snapshot(killed_sweep) == before


def test_sweep_report_lists_a_job_with_a_damaged_record_as_unreadable(killed_sweep, capsys):
    record = killed_sweep / "0" / ".hydra" / "overrides.yaml"
    damage(record, b"seed: 1\n")
    assert report_main([str(killed_sweep)]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("|") and "| 0 " in line]
    assert "| unreadable .hydra/overrides.yaml |" in row
    assert f"cannot read {record}: an object instead of a list of overrides" in row
    assert "1.9000" in row  # its metrics.json is still shown
    assert "Jobs: 1 unreadable .hydra/overrides.yaml, 1 interrupted" in out


def test_sweep_report_shows_a_damaged_error_txt_as_far_as_it_reads(killed_sweep, capsys):
    (killed_sweep / "2").mkdir()
    (killed_sweep / "2" / "error.txt").write_bytes(b"invalid config: \xff\xfe broken\nsecond line\n")
    assert report_main([str(killed_sweep)]) == 0
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in capsys.readouterr().out.splitlines()
            if line.startswith("|")]
    (row,) = [row for row in rows if row[1] == "2"]
    assert row[-2:] == ["failed", "invalid config: \ufffd\ufffd broken second line"]


# --------------------------------------------------------------------------------------------
# 12: sweep_report where it cannot write


def test_sweep_report_prints_its_table_when_a_folder_is_in_the_way(killed_sweep, capsys):
    (killed_sweep / "summary.csv").mkdir()
    assert report_main([str(killed_sweep)]) == 1
    out, err = capsys.readouterr()
    assert "| rank | job |" in out and "Jobs: 1 finished, 1 interrupted" in out
    assert f"wrote summary.md, val_loss_vs_params.png in {killed_sweep}" in out
    assert err == (f"error: could not write summary.csv (Is a directory) in {killed_sweep}: make that folder "
                   "writable, or move what is in the way; the table above is complete\n")


def test_sweep_report_prints_its_table_in_a_read_only_folder(killed_sweep, capsys, monkeypatch):
    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    real_open = builtins.open

    def read_only_open(file, mode="r", *args, **kwargs):  # as root, chmod does not stop a write
        if isinstance(file, str | os.PathLike) and Path(file).parent == killed_sweep and set(mode) & set("wax+"):
            refused()
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", read_only_open)
    monkeypatch.setattr(io, "open", read_only_open)
    monkeypatch.setattr(os, "unlink", refused)
    assert report_main([str(killed_sweep)]) == 1
    out, err = capsys.readouterr()
    assert "| rank | job |" in out and "wrote" not in out
    assert err == (f"error: could not write summary.csv (Permission denied), summary.md (Permission denied), "
                   f"val_loss_vs_params.png (Permission denied) in {killed_sweep}: make that folder writable, or "
                   "move what is in the way; the table above is complete\n")


# --------------------------------------------------------------------------------------------
# Low: settings written out, and a marker left by another host


def test_an_override_equal_to_the_default_is_the_same_setting(tmp_path):
    sweep = tmp_path / "sweep"
    make_job(sweep, "0", ["model.n_embd=16"], FINISHED)
    make_job(sweep, "1", ["model.n_embd=24", "seed=1337"], FINISHED)  # its command wrote the default out
    rerun = planner(sweep)
    with rerun.claimed([["model.n_embd=16", "seed=1337"], ["model.n_embd=24"]]):
        assert [action for action, _ in rerun.planned] == ["keep", "keep"]
    message = refusal(sweep, [["model.n_embd=16", "seed=7"], ["model.n_embd=24", "seed=1337"]])
    assert "job 0 " in message and "it has (none) where this command gives seed=7" in message
    assert "job 1 " not in message


def test_a_marker_of_another_host_is_refused_with_how_to_clear_it(killed_sweep):
    marker = killed_sweep / "1" / "running.json"
    marker.write_text(json.dumps({"pid": 4242, "host": "node7", "started": time.time()}))
    message = refusal(killed_sweep)
    assert f"job 1 ({killed_sweep / '1'}) is still running (pid 4242 on node7, since " in message
    assert (f"if it is no longer running (a process on another host cannot be checked from here), delete {marker}. "
            "Run this again once it has stopped.") in message
