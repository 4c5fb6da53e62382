"""A single run's folder (and so its TensorBoard run) is named by what its command line changed:
``runs/<date>_<time>_<settings>``, as the real training config resolves ``hydra.run.dir``; unique
for runs started in the same second, safe as a file and TensorBoard name, capped in length; a
resume finds its run and continues in its own folder."""

import json
import multiprocessing
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GPT_RUN, ROOT, TINY_MODEL, TINY_TEXT

from tinylm.cli import TRAIN_PATH_KEYS, quote_values
from tinylm.runs.folder import NAME_BYTES, claim_unique_dir, register_resolvers, run_name
from tinylm.runs.resume import plan_resume

STAMP = r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}"
SAFE = re.compile(r"[\w.+@=,~-]*")  # what a name part may hold: no /, spaces, quotes, brackets, ...


def run_dir(log_dir: Path, *overrides: str) -> Path:
    """``hydra.run.dir`` as ``python train.py <overrides> paths.log_dir=<log_dir>`` resolves it (claimed)."""
    from hydra import compose, initialize_config_dir

    register_resolvers()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[*overrides, f"paths.log_dir={log_dir}"], return_hydra_config=True)
        return Path(cfg.hydra.run.dir)


@pytest.mark.parametrize(("overrides", "settings"), [
    ([], ""),  # a plain `python train.py`: the time alone
    (["model.n_embd=32", "optim.lr=3e-4"], "model.n_embd=32,optim.lr=3e-4"),  # as typed: 3e-4, not 0.0003
    (["experiment=numbers_zh", "trainer.max_steps=300", "seed=7"],
     "experiment=numbers_zh,trainer.max_steps=300,seed=7"),
    # where it writes, how it runs and shows its progress: not in the name
    ([*TINY_MODEL[:2], "trainer.enable_progress_bar=false", "threads=1", "logger=none",
      "callbacks.sample_text.every_n_steps=5", "compile=false", "paths.cache_dir=/tmp/cache"],
     "model.n_embd=16,model.num_heads=2"),
    # a text file by its name, spaces and CJK as they are safe
    (["data.path='/tmp/my dir/模型 v1.txt'", "model=lstm"], "data.path=模型_v1.txt,model=lstm"),
    (["model.n_embd=32", "model.num_layers=2", "model.n_embd=64"], "model.num_layers=2,model.n_embd=64"),  # last wins
])
def test_a_run_folder_is_named_by_its_time_and_the_settings_its_command_line_changed(tmp_path, overrides, settings):
    folder = run_dir(tmp_path, *overrides)
    assert folder.parent == tmp_path / "runs" and folder.is_dir()
    assert re.fullmatch(STAMP + (f"_{re.escape(settings)}" if settings else ""), folder.name), folder.name


@pytest.mark.parametrize(("override", "part"), [
    ("model.attn_impl='a/b c'", "model.attn_impl=a_b_c"),  # / would be a folder (and a TensorBoard run) level
    ("model.attn_impl='自注意力 / 序列'", "model.attn_impl=自注意力_序列"),
    ("optim.betas=[0.9,0.95]", "optim.betas=0.9_0.95"),  # a comma inside a value is not a new setting
    ("model.attn_impl='it\\'s \"$HOME\" *?<>|:;&'", "model.attn_impl=it_s_HOME"),  # nothing a shell would expand
    ("~seed", "~seed"),
    ("+trainer.limit_val_batches=0.5", "trainer.limit_val_batches=0.5"),
])
def test_a_name_holds_only_characters_safe_in_file_names_shells_and_tensorboard(override, part):
    assert run_name([override]) == part
    assert SAFE.fullmatch(part)


def test_a_long_command_line_is_cut_at_a_whole_setting_and_a_hash_stands_for_the_rest():
    many = [f"model.setting{i}={i}" for i in range(40)]
    name = run_name(many)
    assert len(name.encode()) <= NAME_BYTES and name.startswith("model.setting0=0,model.setting1=1,")
    kept, digest = re.fullmatch(r"(.*),\.\.\.([0-9a-f]{8})", name).groups()
    assert all(item in many for item in kept.split(","))  # no setting cut in half
    assert run_name([*many[:-1], "model.setting39=other"]) != name  # another rest, another hash
    # one value longer than the cap: cut between characters, never inside one (3 bytes each here)
    cjk = run_name([f"model.attn_impl='{'注意力' * 60}'"])
    assert len(cjk.encode()) <= NAME_BYTES and re.fullmatch(r"model\.attn_impl=(注意力)+注?意?\.\.\.[0-9a-f]{8}", cjk)
    assert len(f"2026-12-02_07-32-18-99_{cjk}".encode()) < 255  # the longest file name most file systems take


def _claim(path, name, queue):
    queue.put(claim_unique_dir(path, name))


def test_runs_started_in_the_same_second_with_the_same_settings_get_their_own_folders(tmp_path):
    stamp = str(tmp_path / "runs" / "2026-12-02_07-32-18")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    workers = [ctx.Process(target=_claim, args=(stamp, "model.n_embd=32", queue)) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    # the number goes with the time (the settings stay readable: not "model.n_embd=32-2")
    assert sorted(queue.get() for _ in workers) == [f"{stamp}-2_model.n_embd=32", f"{stamp}-3_model.n_embd=32",
                                                    f"{stamp}_model.n_embd=32"]
    assert claim_unique_dir(stamp, "model.n_embd=64") == f"{stamp}_model.n_embd=64"  # other settings: no number
    assert claim_unique_dir(stamp, "model.n_embd=64") == claim_unique_dir(stamp, "model.n_embd=64")  # one process


def test_a_resume_finds_a_named_run_and_continues_in_its_own_folder(tmp_path, gpt_run):
    """The run as train.py names it (its record: GPT_RUN and a CJK, spaced data.path), copied from the
    shared run; ``ckpt_path=last`` and ``ckpt_path=<its last.ckpt>`` both resume it where it is."""
    overrides = [*GPT_RUN, f"data.path='{tmp_path / 'my texts' / '语料 1.txt'}'"]
    folder = run_dir(tmp_path, *overrides)
    assert folder.name.endswith(f"_{run_name(overrides)}") and SAFE.fullmatch(folder.name)
    assert not {"logger", "callbacks", "threads"} & set(re.findall(r"[\w.]+(?==)", folder.name))  # GPT_RUN's
    folder.rmdir()
    shutil.copytree(gpt_run.path, folder)
    (folder / ".hydra" / "overrides.yaml").write_text(json.dumps(overrides, ensure_ascii=False), encoding="utf-8")
    for ckpt in ("last", str(folder / "checkpoints" / "last.ckpt")):
        argv = quote_values(["train.py", f"ckpt_path={ckpt}", "trainer.max_steps=30", f"paths.log_dir={tmp_path}"],
                            TRAIN_PATH_KEYS)  # as train.py quotes its command line first
        resumed = plan_resume(argv, ROOT / "conf")
        assert run_dir(tmp_path, *resumed[1:]) == folder
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [folder.name]  # nothing new, nothing renamed


@pytest.mark.slow
def test_train_py_names_its_folder_and_a_resume_trains_on_in_it(tmp_path):
    """The command line as a shell passes it (a path with a space, CJK and a slash: no quoting),
    through train.py's quoting and Hydra into the folder's name; then a resume by that folder's path."""
    text = tmp_path / "my texts" / "语料 1.txt"
    text.parent.mkdir()
    text.write_text(TINY_TEXT, encoding="utf-8")
    common = [f"paths.log_dir={tmp_path / 'outputs'}", "logger=none", "callbacks=minimal", "threads=1"]
    first = subprocess.run([sys.executable, str(ROOT / "train.py"), "model.n_embd=16", "model.block_size=16",
                            "data.repeat=30", f"data.path={text}", "trainer.max_steps=2",
                            "trainer.val_check_interval=2", "trainer.enable_progress_bar=false", *common],
                           capture_output=True, text=True, timeout=300, check=True)
    (folder,) = (tmp_path / "outputs" / "runs").iterdir()
    assert re.fullmatch(STAMP + r"_model\.n_embd=16,model\.block_size=16,data\.repeat=30,data\.path=语料_1\.txt,"
                        r"trainer\.max_steps=2,trainer\.val_check_interval=2", folder.name), folder.name
    assert (first.stdout + first.stderr).rstrip().endswith(f"run folder {folder}")
    again = subprocess.run([sys.executable, str(ROOT / "train.py"), f"ckpt_path={folder}/checkpoints/last.ckpt",
                            "trainer.max_steps=4", *common], capture_output=True, text=True, timeout=300, check=True)
    assert (again.stdout + again.stderr).rstrip().endswith(f"run folder {folder}")
    assert list((tmp_path / "outputs" / "runs").iterdir()) == [folder]
    assert json.loads((folder / "metrics.json").read_text())["steps"] == 4
