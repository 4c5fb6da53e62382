"""visualize.py: a checkpoint's attention as one PNG per layer, without TensorBoard or run folders."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest
from conftest import ROOT, compose_config, entry_point, script_in_process

PROBE = "自注意力可以让序列"


@pytest.fixture
def run_dir(gpt_run) -> Path:
    """The session's tiny 2-layer GPT run (tests/conftest.py), checkpoints only: read, never written."""
    return gpt_run.path


def visualize(cwd: Path, *overrides: str, in_process: bool = True):
    """``python visualize.py OVERRIDES`` launched from ``cwd``: the command in this process
    (conftest.script_in_process: its argv, Hydra app and exit status), or a process of its own."""
    if in_process:
        return script_in_process("visualize.py", *overrides, check=False, cwd=cwd)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, str(ROOT / "visualize.py"), *overrides], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.slow  # a whole process (or several) from start to end
def test_writes_one_png_per_layer_and_nothing_else(run_dir, tmp_path):
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = visualize(cwd, f"ckpt_path={ckpt}", f"text={PROBE}", "out_dir=pngs", in_process=False)
    assert proc.returncode == 0, proc.stderr
    out = cwd / "pngs"  # relative out_dir: relative to where the command ran
    expected = [out / "attention_layer0.png", out / "attention_layer1.png"]
    assert sorted(out.iterdir()) == expected
    assert proc.stdout.split() == [str(p) for p in expected]
    assert sorted(p.name for p in cwd.iterdir()) == ["pngs"]  # no outputs/, .hydra/ or logs
    for png in expected:
        pixels = matplotlib.image.imread(png)  # (H, W, 4) floats
        height, width = pixels.shape[:2]
        assert height * 1.4 >= width > 300  # the head panels in a near-square grid, with a colour bar
        assert pixels[..., :3].std() > 0.1  # a picture, not a blank page


def test_default_out_dir_is_next_to_the_checkpoint(run_dir, tmp_path):
    run = tmp_path / "run"  # a copy: the PNGs are written into the run folder
    shutil.copytree(run_dir, run)
    written = visualize_in_process(f"run_dir={run}")  # the default text is the Chinese probe
    (best,) = (run / "checkpoints").glob("best-*.ckpt")
    out = best.parent / f"{best.stem}-attention"
    assert sorted(p.name for p in out.iterdir()) == ["attention_layer0.png", "attention_layer1.png"]
    assert sorted(written) == sorted(out.iterdir())


@pytest.mark.parametrize(("text", "message"), [
    ("自注意力☃", "text has 1 character(s) outside the checkpoint's vocabulary: '☃'"),
    ("自注意力可以让序列中的每个位置看到前面", "text is 19 tokens long but the model sees at most block_size=16"),
], ids=["unknown-character", "too-long"])
def test_bad_text_is_one_error_line(run_dir, tmp_path, monkeypatch, text, message):
    from tinylm.errors import TinyLMError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(TinyLMError, match=r"^[^\n]+$") as info:
        visualize_in_process(f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", f"text='{text}'")
    assert str(info.value).startswith(message)
    assert list(tmp_path.iterdir()) == []


def test_missing_checkpoint_is_one_error_line(tmp_path):
    proc = visualize(tmp_path, f"ckpt_path={tmp_path / 'nope.ckpt'}")
    assert proc.returncode != 0
    assert proc.stderr.strip() == f"error: checkpoint file {tmp_path / 'nope.ckpt'} does not exist: " \
                                  "check ckpt_path=..."


@pytest.mark.slow
def test_paths_need_no_hydra_quoting_and_text_is_literal(run_dir, tmp_path):
    folder = tmp_path / "my 模型 dir"
    folder.mkdir()
    ckpt = folder / "last copy.ckpt"
    shutil.copy(run_dir / "checkpoints" / "last.ckpt", ckpt)
    proc = visualize(tmp_path, f"ckpt_path={ckpt}", f"text={PROBE[:4]}", "out_dir=注意力 pngs")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "注意力 pngs").iterdir()) == [
        "attention_layer0.png", "attention_layer1.png"]

    proc = visualize(tmp_path, f"ckpt_path={ckpt}", "text=${oc.env:HOME}")
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()  # the characters $ { ... themselves, not $HOME's
    assert line.startswith("error: text has") and "'$' '{'" in line


def test_help_shows_only_its_own_options(tmp_path):
    proc = visualize(tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    for key in ("ckpt_path", "run_dir", "paths.log_dir", "text", "out_dir"):
        assert f"\n{key}=" in proc.stdout
    for group in ("data", "model", "optim", "trainer", "Configuration groups"):
        assert group + ":" not in proc.stdout and group + "=" not in proc.stdout


# --------------------------------------------------------------------------------------------
# Where the PNGs go (in-process): a file in the way or a folder that cannot be written is one line


def visualize_in_process(*overrides: str):
    """visualize.py's ``run`` on its composed config; the TinyLMError it raises is the one error line."""
    return entry_point("visualize.py").run(compose_config("visualize", *overrides))


@pytest.mark.parametrize("where", ["a file", "a file/below it"])
def test_a_file_in_the_way_is_one_line_before_anything_is_drawn(run_dir, tmp_path, where):
    from tinylm.errors import TinyLMError

    (tmp_path / "a file").write_text("mine")
    with pytest.raises(TinyLMError) as info:
        visualize_in_process(f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", f"out_dir={tmp_path / where}")
    assert str(info.value) == (f"cannot write the PNGs into {tmp_path / where}: {tmp_path / 'a file'} is a file, "
                               "not a folder; pass out_dir=DIR, a folder (or a new name)")
    assert (tmp_path / "a file").read_text() == "mine" and sorted(tmp_path.iterdir()) == [tmp_path / "a file"]


def test_a_folder_that_cannot_be_written_is_one_line(run_dir, tmp_path, monkeypatch):
    """As root chmod blocks nothing: the checks are told no (os.access), the writes fail with EACCES."""
    import errno

    from tinylm.errors import TinyLMError
    from tinylm.plots import figures as plotting

    ckpt, out = f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", tmp_path / "pngs"
    with monkeypatch.context() as patch:
        patch.setattr(os, "access", lambda path, mode: False)
        with pytest.raises(TinyLMError) as info:
            visualize_in_process(ckpt, f"out_dir={out}")
    assert str(info.value) == (f"cannot write the PNGs into {out}: {tmp_path} is not writable; pass out_dir=DIR, "
                               "a folder you can write to")

    def refused(fig, path):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr(plotting, "save_png", refused)
    with pytest.raises(TinyLMError) as info:
        visualize_in_process(ckpt, f"out_dir={out}")
    png = out / "attention_layer0.png"
    assert str(info.value) == (f"could not write the PNGs into {out}: Permission denied ({png}); pass out_dir=DIR, "
                               "a folder you can write to")
    assert list(tmp_path.iterdir()) == []
