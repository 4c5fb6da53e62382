"""Which folders of a logdir the tinylm tab lists as runs, and which names it refuses (no training: folders only)."""

from __future__ import annotations

import os

import pytest

from tinylm.explorer.runs import Runs, UnknownRun, scan


def folder(path, *parts: str) -> None:
    for part in parts:
        (path / part).mkdir(parents=True, exist_ok=True)


def test_runs_and_sweep_jobs_are_found_by_their_checkpoints_and_record(tmp_path):
    folder(tmp_path / "runs" / "a", "checkpoints", ".hydra")
    folder(tmp_path / "multirun" / "t" / "0", "checkpoints", ".hydra", "tensorboard/model.n_embd=32")
    folder(tmp_path / "runs" / "events-only", "checkpoints", "tensorboard")
    (tmp_path / "runs" / "events-only" / "tensorboard" / "events.out.tfevents.1.host").write_bytes(b"")
    folder(tmp_path / "runs" / "no-record", "checkpoints")  # neither .hydra nor events: not a tinylm run
    folder(tmp_path / "a" / "b" / "c" / "d" / "too-deep", "checkpoints", ".hydra")
    folder(tmp_path / ".hidden" / "run", "checkpoints", ".hydra")
    os.symlink(tmp_path / "runs" / "a", tmp_path / "runs" / "link")  # not followed: a's name is enough
    assert [run.name for run in scan(tmp_path)] == ["multirun/t/0", "runs/a", "runs/events-only"]
    assert [run.name for run in scan(tmp_path / "runs" / "a")] == ["."]  # the logdir is the run folder


@pytest.mark.parametrize(("name", "bad_name"), [("../x", True), ("/etc", True), ("runs/../runs/a", True),
                                                ("C:\\x", True), ("runs\\a", True), ("runs/a\n", True),
                                                ("runs/b", False), ("runs", False), ("", False)])
def test_a_name_not_listed_is_refused_a_path_as_a_bad_name(tmp_path, name, bad_name):
    folder(tmp_path / "runs" / "a", "checkpoints", ".hydra")
    runs = Runs(tmp_path)
    assert runs.find("runs/a").path == tmp_path.resolve() / "runs" / "a"
    with pytest.raises(UnknownRun) as refused:
        runs.find(name)
    assert refused.value.bad_name is bad_name


def test_a_new_run_is_found_at_once(tmp_path):
    runs = Runs(tmp_path)
    assert runs.list() == []
    folder(tmp_path / "runs" / "new", "checkpoints", ".hydra")
    assert runs.find("runs/new").name == "runs/new"  # not in the listing of a moment ago: looked for again
