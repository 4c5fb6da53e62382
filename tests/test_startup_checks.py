"""A config error answers fast: train.py checks the composed config's values before torch or
Lightning is imported (``validate(cfg, quick=True)``), in the words of the whole check; and a run on
a machine busier than its cores says that ``threads=1`` may train faster."""

from __future__ import annotations

import logging
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from builders import ARCHITECTURES
from conftest import ROOT, TINY_MODEL, TINY_TEXT, compose

from tinylm.errors import TinyLMError
from tinylm.models import BUILT_IN, config_class
from tinylm.runs import job
from tinylm.training.config_checks import config_problems

NUM_HEADS = ("model.n_embd=64 is not divisible by model.num_heads=3: use model.num_heads=4 or a multiple of 3 "
             "for n_embd (e.g. 66)")


def refused(script: str, *args: str) -> tuple[list[str], set[str]]:
    """Run a command that is refused: (its stderr lines, the modules it imported). Import-time behaviour,
    so a process: every module it imported is in ``-X importtime``'s report."""
    proc = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / script), *args], capture_output=True,
                          text=True, timeout=300)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1
    imported = {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}
    return [line for line in lines if not line.startswith("import time:")], imported


def heavy(imported: set[str]) -> set[str]:
    return {name for name in imported if name.split(".")[0] in ("torch", "lightning", "numpy")}


def test_a_config_error_is_said_before_torch_or_lightning_is_imported(tmp_path):
    said, imported = refused("train.py", f"hydra.run.dir={tmp_path}", "model.num_heads=3")
    assert said == [f"error: invalid config: {NUM_HEADS}"]
    assert "tinylm.training.config_checks" in imported and not heavy(imported)
    assert list(tmp_path.iterdir()) == []  # refused before Hydra made anything: no train.log, no .hydra


@pytest.mark.parametrize("script, option, error", [
    ("generate.py", "temperature=-1", "error: temperature=-1 must be a number >= 0"),
    ("evaluate.py", "stride=0", "error: stride=0 must be an integer from 1"),
    ("export.py", "out=model.txt", "error: out=model.txt must end in .onnx"),
])
def test_the_other_commands_refuse_a_bad_option_before_torch_is_imported(script, option, error):
    said, imported = refused(script, option)
    assert len(said) == 1 and said[0].startswith(error) and not heavy(imported)


BAD = {  # override(s) -> the one line both checks give
    "model.num_heads=3": NUM_HEADS,
    "model=lstm model.hidden_size=0": "model.hidden_size=0 must be a positive integer",
    "model=seq2seq data=pairs model.dropout=1.5": "model.dropout=1.5 must be in [0, 1)",
    "model.arch=rnn": "model.arch='rnn' is not a GPT: use model=gpt",
    "optim.lr=0": "optim.lr=0 must be a positive number",
    "optim.betas=[0.9]": "optim.betas=[0.9] must be two numbers in [0, 1), e.g. [0.9, 0.99]",
    "trainer.max_steps=0": "trainer.max_steps=0 must be a positive integer",
    "trainer.val_check_interval=0.5": "trainer.val_check_interval=0.5 must be a positive integer",
    "data.batch_size=0": "data.batch_size=0 must be a positive integer",
    "data.path=/does/not/exist.txt": "data file not found: /does/not/exist.txt (set data.path to an existing text "
                                     "file)",
    "data.encoding=nope": "data.encoding='nope' must be a text encoding Python knows, e.g. utf-8, gbk or latin-1",
    "data=pairs data.demo=roman": "data.demo='roman' must be one of numbers_zh",
    "seed=-1": "seed=-1 must be an integer in [0, 4294967295]",
    "+optim.momentum=0.9": "optim.momentum is unknown: remove it (optim takes lr, weight_decay, betas, "
                           "warmup_steps, decay_steps, min_lr_ratio, decay)",
}


@pytest.mark.parametrize("overrides", BAD)
def test_the_quick_check_says_what_the_whole_check_says(tmp_path, overrides):
    cfg = compose(*overrides.split(), output_dir=tmp_path)
    assert config_problems(cfg, quick=True) == config_problems(cfg) == [BAD[overrides]]


def test_a_missing_data_file_is_checked_for_the_built_in_data_modules_only(tmp_path, monkeypatch):
    """The quick check reads data.path as TextDataModule and PairDataModule do (relative to where the command
    was launched); a data module of the user's own may make its path itself."""
    from tinylm.tasks import TASKS, get_task
    from tinylm.training.config_checks import READS_DATA_PATH, data_path_problem

    assert set(READS_DATA_PATH) == {get_task(name).data_target for name in TASKS}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here.txt").write_text(TINY_TEXT, encoding="utf-8")
    data = compose("data.path=here.txt", output_dir=tmp_path).data
    assert data_path_problem(data) is None
    data.path = "gone.txt"
    assert data_path_problem(data) == f"data file not found: {tmp_path / 'gone.txt'} (set data.path to an existing " \
                                      "text file)"
    data._target_ = "my_project.data.GeneratedText"
    assert data_path_problem(data) is None


PRESETS = [f"{group}={path.stem}" for group in ("experiment", "model", "data", "debug")
           for path in sorted((ROOT / "conf" / group).glob("*.yaml"))]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_passes_the_quick_check(tmp_path, preset):
    """It never refuses what the whole check lets through (model=seq2seq alone is the task's to refuse)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "chinese_large.txt").write_text(TINY_TEXT, encoding="utf-8")  # that preset's: the user's own
    assert config_problems(compose(preset, f"paths.root_dir={tmp_path}", output_dir=tmp_path), quick=True) == []


@pytest.mark.parametrize("overrides", ["trainer.accelerator=tpu", "model=seq2seq", "+model.n_emb=32",
                                       "+trainer.foo=1"])
def test_what_needs_torch_lightning_or_the_classes_is_left_to_the_whole_check(tmp_path, overrides):
    """The accelerator, the task (an encoder-decoder on text) and the keys the classes take."""
    cfg = compose(*overrides.split(), output_dir=tmp_path)
    assert config_problems(cfg, quick=True) == [] and len(config_problems(cfg)) == 1


def test_the_built_in_models_are_checked_by_their_config_classes_checks():
    """``BUILT_IN`` names each arch's class and its checks without importing torch: the same as the classes'."""
    bad = {"vocab_size": 1, "block_size": 0, "n_embd": 6, "num_heads": 4, "dropout": 2, "pos_encoding": "rope"}
    for arch, (target, checks) in BUILT_IN.items():
        config, model = ARCHITECTURES[arch]
        assert f"{model.__module__}.{model.__qualname__}" == target and config_class(model) is config
        assert checks({**bad, "arch": arch}) == config.problems({**bad, "arch": arch}) != []


# --------------------------------------------------------------------------------------------
# A busy machine


@pytest.fixture
def until_fit(monkeypatch):
    """``job.run`` up to ``fit``, with nothing built: the threads are set and said by then."""
    threads = torch.get_num_threads()

    def stop(*args, **kwargs):
        raise TinyLMError("stopped before fitting")

    monkeypatch.setattr(job, "build_datamodule", lambda run: SimpleNamespace(prepare=lambda: None))
    monkeypatch.setattr(job, "build_module", lambda run, datamodule: None)
    monkeypatch.setattr(job, "fit", stop)
    yield
    torch.set_num_threads(threads)


# the tiny model without its threads=1: the warning is about runs that leave the thread count to PyTorch
ANY_THREADS = [o for o in TINY_MODEL if not o.startswith("threads=")]


def busy(monkeypatch, load: float, cores: int = 2) -> None:
    monkeypatch.setattr(job.os, "getloadavg", lambda: (load, 0.0, 0.0))
    monkeypatch.setattr(job, "usable_cores", lambda: cores)


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == job.__name__ and r.levelno == logging.WARNING]


def test_a_run_on_a_busy_machine_says_threads_1_may_be_faster(tmp_path, monkeypatch, caplog, until_fit):
    busy(monkeypatch, load=3.5)
    with caplog.at_level(logging.WARNING), pytest.raises(TinyLMError):
        job.run(compose(*ANY_THREADS, output_dir=tmp_path))
    assert warnings_of(caplog) == [
        "this machine is busy: its load average over the last minute is 3.5 for 2 usable core(s), and PyTorch's "
        "threads wait for each other on busy cores: if training is slow, train with threads=1"]


@pytest.mark.parametrize("load, overrides, share", [(1.9, [], None), (3.5, ["threads=2"], None), (3.5, [], 1)])
def test_no_warning_when_idle_when_threads_are_chosen_or_in_a_sweep_jobs_share(
        tmp_path, monkeypatch, caplog, until_fit, load, overrides, share):
    busy(monkeypatch, load)
    monkeypatch.setattr(job, "thread_share", lambda: share)
    hydra = SimpleNamespace(launcher=SimpleNamespace(n_jobs=2))  # a joblib sweep's, for its own log line
    monkeypatch.setattr(job, "HydraConfig", SimpleNamespace(get=lambda: hydra))
    with caplog.at_level(logging.INFO), pytest.raises(TinyLMError):
        job.run(compose(*ANY_THREADS, *overrides, output_dir=tmp_path))
    assert warnings_of(caplog) == []
    assert any("sweep job: 1 thread(s)" in r.getMessage() for r in caplog.records) == (share is not None)


@pytest.mark.parametrize("script, options", [
    ("generate.py", ["max_new_tokens=5"]),
    pytest.param("visualize.py", ["text=Attention", "out_dir=figures"], marks=pytest.mark.slow),  # a process each
    pytest.param("analyze.py", ["text=Attention", "out_dir=analysis"], marks=pytest.mark.slow),
])
def test_answering_from_a_checkpoint_imports_no_lightning(gpt_run, tmp_path, script, options):
    """generate.py, visualize.py and analyze.py load a checkpoint and a task without the training stack:
    Lightning's import (its torch._dynamo and torchmetrics) is seconds of a user's wait."""
    proc = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / script), f"run_dir={gpt_run.path}",
                           f"hydra.run.dir={tmp_path}", *options], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "tinylm.checkpoint" in imported and not {"lightning", "torchmetrics", "torch._dynamo"} & imported
