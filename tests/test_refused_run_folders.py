"""A command refused before training leaves no run folder: none in outputs/runs, so none in TensorBoard or as
"the newest run". A folder that was there before (a resume's) is never removed, and a run that failed after
training started keeps its folder, its log with the error, and its checkpoints."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import TINY_MODEL, compose, train_py

from tinylm.errors import TinyLMError
from tinylm.runs import folder, job


def runs_under(log_dir) -> list:
    return sorted(p.name for p in (log_dir / "runs").iterdir()) if (log_dir / "runs").is_dir() else []


def test_a_run_refused_by_the_whole_check_leaves_no_folder(tmp_path):
    """The check that needs torch (an encoder-decoder on plain text) runs after Hydra made the folder."""
    done = train_py(f"paths.log_dir={tmp_path}", "model=seq2seq", check=False)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "error: invalid config: model.arch=seq2seq translates source<TAB>target pairs: add data=pairs (data.path=FILE, "
        "or none for the generated demo), or use experiment=numbers_zh"]
    assert runs_under(tmp_path) == []


def test_a_callback_refused_before_training_leaves_no_folder(tmp_path, tiny_text_file):
    """Refused while the Trainer is built, after the data is read and the parameter table printed."""
    done = train_py(f"paths.log_dir={tmp_path}", *TINY_MODEL, f"data.path={tiny_text_file}", "data.repeat=30",
                    "logger=none", "callbacks.attention_maps.every_n_steps=0", check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "error: AttentionMaps.every_n_steps=0 must be a positive integer, or null to run only when training ends")
    assert runs_under(tmp_path) == []


def test_a_new_folder_named_by_hydra_run_dir_goes_too_an_existing_one_stays(tmp_path):
    new = tmp_path / "new"
    train_py(f"hydra.run.dir={new}", "model=seq2seq", check=False)
    assert not new.exists()
    (tmp_path / "mine").mkdir()
    train_py(f"hydra.run.dir={tmp_path / 'mine'}", "model=seq2seq", check=False)
    assert "error: invalid config: model.arch=seq2seq" in (tmp_path / "mine" / "train.log").read_text()


@pytest.fixture
def claimed(tmp_path):
    """A run folder claimed by this process, as ``hydra.run.dir``'s resolver claims a new run's, with the
    train.log handler Hydra opens in it."""
    run = folder.claim_unique_dir(str(tmp_path / "runs" / "2026-12-05_10-00-00"))
    handler = logging.FileHandler(f"{run}/train.log")
    logging.getLogger().addHandler(handler)
    yield run
    logging.getLogger().removeHandler(handler)
    handler.close()


def nothing_built(monkeypatch) -> None:
    """``job.run``'s data and model steps, building nothing."""
    monkeypatch.setattr(job, "build_datamodule", lambda run: SimpleNamespace(prepare=lambda: None))
    monkeypatch.setattr(job, "build_module", lambda run, datamodule: None)


def fail_fit(start: bool):
    def fit(cfg, datamodule, module, output_dir, ckpt_path, starting=None):
        if start:
            starting()
        raise TinyLMError("loss became nan at step 3: training diverged")
    return fit


@pytest.mark.parametrize("started", [False, True])
def test_a_failure_after_training_started_keeps_the_folder_and_its_error(tmp_path, monkeypatch, claimed, started):
    nothing_built(monkeypatch)
    monkeypatch.setattr(job, "fit", fail_fit(started))
    with pytest.raises(TinyLMError):
        job.run(compose(*TINY_MODEL, output_dir=claimed))
    run = tmp_path / "runs" / "2026-12-05_10-00-00"
    assert run.is_dir() == started
    if started:
        assert "error: loss became nan at step 3" in (run / "train.log").read_text()
    into_run = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)
                and h.baseFilename.startswith(claimed)]
    assert bool(into_run) == started  # the log of a removed folder is closed: nothing writes there again


def test_a_resumes_folder_is_never_removed(monkeypatch, claimed):
    """Not even in the process that made it (the tests train and resume in one process)."""
    run = Path(claimed)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"not read: build fails first")
    monkeypatch.setattr(job, "build_datamodule", lambda run: (_ for _ in ()).throw(TinyLMError("the text changed")))
    with pytest.raises(TinyLMError):
        job.run(compose(*TINY_MODEL, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", output_dir=run))
    assert (run / "checkpoints" / "last.ckpt").is_file()


def test_a_folder_whose_training_started_is_kept_by_a_later_refusal_in_the_same_process(monkeypatch, claimed):
    nothing_built(monkeypatch)
    monkeypatch.setattr(job, "fit", fail_fit(start=True))
    with pytest.raises(TinyLMError):
        job.run(compose(*TINY_MODEL, output_dir=claimed))
    monkeypatch.setattr(job, "fit", fail_fit(start=False))
    with pytest.raises(TinyLMError):
        job.run(compose(*TINY_MODEL, output_dir=claimed))
    assert not folder.discard_new_folder(claimed) and Path(claimed).is_dir()
