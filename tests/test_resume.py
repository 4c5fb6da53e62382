"""Resuming never damages a run: it continues from the run's own config, in its own folder, and
writes nothing until every check has passed (a failed or pointless resume leaves every file as it was)."""

import json
import multiprocessing

import pytest
import torch
import yaml
from conftest import ROOT, TINY_MODEL, TINY_TEXT, run_train, train_py

from tinylm.errors import TinyLMError
from tinylm.runs.folder import claim_unique_dir
from tinylm.runs.resume import check_resume, merge_overrides, plan_resume

CONF = ROOT / "conf"
FAST = [*TINY_MODEL, "data.repeat=30", "trainer.max_steps=4", "trainer.val_check_interval=2", "logger=none"]


def snapshot(folder):
    """Every file's bytes and modification time: "untouched" means both are equal."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A run at step 4 of trainer.max_steps=4, with a model other than the default one."""
    root = tmp_path_factory.mktemp("finished")
    (root / "tiny.txt").write_text(TINY_TEXT, encoding="utf-8")
    run = root / "runs" / "first"
    run_train(run, *FAST, f"data.path={root / 'tiny.txt'}", f"paths.log_dir={root}", in_process=True)
    return run


def resume(*overrides, check=False):
    """`python train.py ckpt_path=... <overrides>`, without run_train's own hydra.run.dir: the command's
    argv, resume plan and Hydra app in this process (conftest.train_py; no signal here needs a process)."""
    return train_py(*overrides, check=check)


def fake_run(folder, overrides, step_file=True):
    """A run folder as train.py leaves it, with an empty last.ckpt (plan_resume only looks at names)."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (folder / "checkpoints").mkdir()
    if step_file:
        (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
    return folder / "checkpoints" / "last.ckpt"


# --------------------------------------------------------------------------------------------
# The command line a resume runs with (in-process)


def test_resume_takes_the_runs_own_settings_and_only_allowed_changes(tmp_path):
    last = fake_run(tmp_path / "runs" / "a", ["model.n_embd=32", "data.path=/t.txt", "trainer.max_steps=100"])
    argv = plan_resume(["train.py", "ckpt_path=last", f"paths.log_dir={tmp_path}", "trainer.max_steps=300",
                        "optim.lr=3e-4", "model.n_embd=32"], CONF)
    assert argv == ["train.py", f"hydra.run.dir='{last.parent.parent}'", "hydra.output_subdir=null",
                    "model.n_embd=32", "data.path=/t.txt", "trainer.max_steps=300", "optim.lr=3e-4",
                    f"ckpt_path='{last}'"]


def test_a_key_given_twice_resumes_with_its_last_value_as_hydra_applies_it(tmp_path):
    # the command line a requeued SLURM job runs again: the same words, a key given twice included
    last = fake_run(tmp_path / "runs" / "a", ["trainer.max_steps=6", "model.n_embd=16", "trainer.max_steps=300"])
    argv = plan_resume(["train.py", "trainer.max_steps=6", "model.n_embd=16", "trainer.max_steps=300",
                        f"ckpt_path={last}"], CONF)
    assert [a for a in argv if a.startswith("trainer.max_steps=")][-1] == "trainer.max_steps=300"


@pytest.mark.parametrize("change", ["model.n_embd=64", "data.path=/other.txt", "seed=1", "model=lstm",
                                    "data.tokenizer=byte"])
def test_resume_refuses_to_change_what_the_run_must_keep(tmp_path, change):
    last = fake_run(tmp_path / "runs" / "a", ["model.n_embd=32", "data.path=/t.txt"])
    with pytest.raises(TinyLMError) as info:
        plan_resume(["train.py", f"ckpt_path={last}", change], CONF)
    message = str(info.value)
    assert message.startswith(f"cannot change {change} when resuming {last.parent.parent}")
    assert "start a new run without ckpt_path" in message and "\n" not in message


def test_ckpt_path_last_is_found_where_hydra_would_put_runs(tmp_path):
    older = fake_run(tmp_path / "a" / "runs" / "x", [])
    newer = fake_run(tmp_path / "b" / "runs" / "y", [])
    fake_run(tmp_path / "root" / "outputs" / "runs" / "z", [])
    # the last paths.log_dir given wins, as in Hydra
    argv = plan_resume(["train.py", "ckpt_path=last", f"paths.log_dir={tmp_path / 'b'}",
                        f"paths.log_dir={tmp_path / 'a'}"], CONF)
    assert argv[-1] == f"ckpt_path='{older}'" and newer != older
    # paths.root_dir moves the default log_dir (root/outputs)
    argv = plan_resume(["train.py", "ckpt_path=last", f"paths.root_dir={tmp_path / 'root'}"], CONF)
    assert argv[-1] == f"ckpt_path='{tmp_path / 'root' / 'outputs' / 'runs' / 'z' / 'checkpoints' / 'last.ckpt'}'"
    with pytest.raises(TinyLMError, match="no run under .* has checkpoints/last.ckpt"):
        plan_resume(["train.py", "ckpt_path=last", f"paths.log_dir={tmp_path / 'none'}"], CONF)


def test_each_resume_adds_to_the_runs_settings_and_later_ones_win(tmp_path):
    last = fake_run(tmp_path / "run", ["trainer.max_steps=100", "model.n_embd=32"])
    (last.parent.parent / ".hydra" / "resumes.yaml").write_text(yaml.safe_dump(
        [{"overrides": ["trainer.max_steps=200"]}, {"overrides": ["optim.lr=1e-4"]}]))
    argv = plan_resume(["train.py", f"ckpt_path={last}"], CONF)
    assert argv[-4:] == ["model.n_embd=32", "trainer.max_steps=200", "optim.lr=1e-4", f"ckpt_path='{last}'"]
    assert merge_overrides(["a=1", "+b=2", "a=3"]) == ["+b=2", "a=3"]


def test_a_loose_checkpoint_or_a_new_folder_is_not_resumed_in_place(tmp_path):
    loose = tmp_path / "model.ckpt"
    loose.write_bytes(b"")
    argv = plan_resume(["train.py", f"ckpt_path={loose}", "model.n_embd=64"], CONF)
    assert argv == ["train.py", "model.n_embd=64", f"ckpt_path='{loose}'"]  # the command line says what to train
    last = fake_run(tmp_path / "run", ["model.n_embd=32"])
    argv = plan_resume(["train.py", f"hydra.run.dir={tmp_path / 'fork'}", f"ckpt_path={last}"], CONF)
    assert "hydra.output_subdir=null" not in argv and "model.n_embd=32" in argv  # the fork writes its own record
    assert plan_resume(["train.py", "-m", "ckpt_path=last"], CONF) == ["train.py", "-m", "ckpt_path=last"]
    assert plan_resume(["train.py", "model.n_embd=8"], CONF) == ["train.py", "model.n_embd=8"]


def test_check_resume_blames_the_data_when_the_vocabulary_differs(gpt_run):
    ckpt = gpt_run.path / "checkpoints" / "last.ckpt"  # the session's run, 20 steps (tests/conftest.py)
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert check_resume(ckpt, saved["model_config"], saved["tokenizer"]) == 20
    other = {**saved["model_config"], "vocab_size": 30}
    with pytest.raises(TinyLMError) as info:
        check_resume(ckpt, other, {"kind": "char", "itos": list("abc")})
    assert "trained on different data: its vocabulary (char, 37 symbols) differs" in str(info.value)
    assert "(char, 30 symbols)" in str(info.value) and "model.*" not in str(info.value)


# --------------------------------------------------------------------------------------------
# Real resumes (the train.py command, in this process: Hydra writes the run folder's record)


@pytest.mark.slow
def test_a_refused_or_failed_resume_changes_nothing_in_the_run(finished_run):
    before = snapshot(finished_run)
    last = finished_run / "checkpoints" / "last.ckpt"
    refused = resume(f"ckpt_path={last}", "model.n_embd=32", "trainer.max_steps=8")
    assert refused.returncode == 1 and refused.stderr.startswith("error: cannot change model.n_embd=32")
    # a check inside the job fails (the text changed since): still nothing written, train.log included
    text = finished_run.parent.parent / "tiny.txt"
    original = text.read_text(encoding="utf-8")
    text.write_text(original + "新", encoding="utf-8")
    try:
        failed = resume(f"ckpt_path={last}", "trainer.max_steps=8")
    finally:
        text.write_text(original, encoding="utf-8")
    assert failed.returncode == 1 and "trained on different data" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert snapshot(finished_run) == before


@pytest.mark.slow
def test_resuming_a_finished_run_says_so_and_keeps_its_results(finished_run):
    before = snapshot(finished_run)
    proc = resume("ckpt_path=last", f"paths.log_dir={finished_run.parent.parent}")
    assert proc.returncode == 0, proc.stderr
    assert f"run {finished_run} is already finished" in proc.stdout and "trainer.max_steps=8" in proc.stdout
    assert snapshot(finished_run) == before
    assert json.loads((finished_run / "metrics.json").read_text())["val_loss"] > 0


@pytest.mark.slow
def test_a_resume_keeps_the_original_record_and_adds_its_own(tmp_path, tiny_text_file):
    run = tmp_path / "runs" / "r"
    run_train(run, *FAST, f"data.path={tiny_text_file}", f"paths.log_dir={tmp_path}", in_process=True)
    record = {name: (run / ".hydra" / name).read_bytes() for name in ("config.yaml", "overrides.yaml")}
    first = resume("ckpt_path=last", f"paths.log_dir={tmp_path}", "trainer.max_steps=6", check=True)
    assert f"resuming run {run} from last.ckpt in its own folder" in first.stdout
    assert "changed now:  trainer.max_steps=6" in first.stdout
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 6
    assert {name: (run / ".hydra" / name).read_bytes() for name in record} == record
    history = yaml.safe_load((run / ".hydra" / "resumes.yaml").read_text())
    assert [(h["from_step"], h["overrides"]) for h in history] == [(4, ["trainer.max_steps=6"])]
    # the next resume remembers max_steps=6: with nothing changed, the run is finished
    again = resume("ckpt_path=last", f"paths.log_dir={tmp_path}")
    assert again.returncode == 0 and "already finished" in again.stdout
    assert json.loads((run / "metrics.json").read_text())["steps"] == 6
    assert "error" not in (run / "train.log").read_text()


# --------------------------------------------------------------------------------------------
# Unique run folders


def _claim(path, queue):
    queue.put(claim_unique_dir(path))


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path):
    name = str(tmp_path / "runs" / "2026-12-01_10-00-00")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    workers = [ctx.Process(target=_claim, args=(name, queue)) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    claimed = sorted(queue.get() for _ in workers)
    assert claimed == [name, f"{name}-2", f"{name}-3", f"{name}-4"]
    assert claim_unique_dir(name) == claim_unique_dir(name)  # one process: one folder per name


@pytest.mark.slow
def test_paths_with_spaces_and_cjk_need_no_hydra_quoting(tmp_path):
    text = tmp_path / "my 文本.txt"
    text.write_text(TINY_TEXT, encoding="utf-8")
    run = tmp_path / "运行 one"
    run_train(run, *FAST, f"data.path={text}", in_process=True)  # as the shell passes data.path="$tmp/my 文本.txt"
    resumed = resume(f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "trainer.max_steps=6", check=True)
    assert f"resuming run {run} from last.ckpt in its own folder" in resumed.stdout
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 6
