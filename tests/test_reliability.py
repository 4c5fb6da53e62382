"""Bad input gets one clear line; interrupted runs lose nothing; results reproduce exactly."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT, TINY_MODEL, compose, run_train, train_py

from tinylm.runs.job import main as train_main

FAST = [*TINY_MODEL, "trainer.max_steps=4", "trainer.val_check_interval=2", "logger=none"]


def weights(path):
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


@pytest.fixture
def earlier_run(gpt_run):
    """A finished run (the session's, tests/conftest.py) whose files must survive every failure below untouched."""
    return gpt_run.path


def snapshot(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def bad_files(tmp_path, earlier):
    """name -> (data/ckpt overrides, expected message) for every bad-input row."""
    (tmp_path / "no_texts").mkdir()
    (tmp_path / "no_texts" / "notes.md").write_text("not a .txt file", encoding="utf-8")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "short.txt").write_text("abc", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("café ".encode("latin-1") * 100)
    (tmp_path / "few.txt").write_text("abcdefghij" * 10, encoding="utf-8")
    good = earlier / "checkpoints" / "last.ckpt"
    (tmp_path / "truncated.ckpt").write_bytes(good.read_bytes()[:1000])
    (tmp_path / "garbage.ckpt").write_bytes(os.urandom(4096))
    text = f"data.path={tmp_path / 'tiny.txt'}"
    return {
        "missing file": ([f"data.path={tmp_path / 'nope.txt'}"], "data file not found"),
        "directory": ([f"data.path={tmp_path / 'no_texts'}"], "is a directory without .txt files"),
        "empty file": ([f"data.path={tmp_path / 'empty.txt'}"], "data file is empty"),
        "too short": ([f"data.path={tmp_path / 'short.txt'}"], "has 3 tokens but block_size=16 needs at least 17"),
        "not utf-8": ([f"data.path={tmp_path / 'latin1.txt'}"], "is not valid utf-8: byte 3"),
        "batch too large": ([f"data.path={tmp_path / 'few.txt'}", "data.batch_size=80", "data.val_fraction=0.2"],
                            "data.batch_size=80 is larger than the 64 training windows"),
        "bad heads": ([text, "data.repeat=30", "model.num_heads=3"], "not divisible by model.num_heads=3"),
        "zero size": ([text, "data.repeat=30", "model.num_layers=0"], "model.num_layers=0 must be a positive"),
        "bad dropout": ([text, "data.repeat=30", "model.dropout=-0.1"], "model.dropout=-0.1 must be in [0, 1)"),
        "ckpt missing": ([text, "data.repeat=30", f"ckpt_path={tmp_path / 'no.ckpt'}"], "does not exist"),
        "ckpt truncated": ([text, "data.repeat=30", f"ckpt_path={tmp_path / 'truncated.ckpt'}"],
                           "corrupted or truncated"),
        "ckpt garbage": ([text, "data.repeat=30", f"ckpt_path={tmp_path / 'garbage.ckpt'}"],
                         "corrupted or truncated"),
        "ckpt other model": ([text, "data.repeat=30", "model.num_layers=2", "model.n_embd=32", f"ckpt_path={good}"],
                             "trained with a different model: n_embd=16 (config: 32)"),
    }


ROWS = ["missing file", "directory", "empty file", "too short", "not utf-8", "batch too large", "bad heads",
        "zero size", "bad dropout", "ckpt missing", "ckpt truncated", "ckpt garbage", "ckpt other model"]


@pytest.mark.parametrize("row", ROWS)
def test_bad_input_gets_one_clear_line(tmp_path, tiny_text_file, earlier_run, row):
    before = snapshot(earlier_run)
    overrides, message = bad_files(tmp_path, earlier_run)[row]
    cfg = compose(*FAST, *overrides, output_dir=tmp_path / "new")
    with pytest.raises(SystemExit) as info:
        train_main(cfg)
    assert snapshot(earlier_run) == before
    assert str(info.value).startswith("error: ") and "\n" not in str(info.value)
    assert message in str(info.value)
    assert not (tmp_path / "new" / "checkpoints").exists()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.n_layers=2", "error: invalid config: model.n_layers is unknown: did you mean model.num_layers?"),
        ("model=transformer_xl", "error: invalid config: model=transformer_xl is not a config of conf/model/"),
        ("data.path=/does/not/exist.txt", "error: invalid config: data file not found: /does/not/exist.txt"),
    ],
)
def test_cli_errors_exit_nonzero_without_traceback(tmp_path, override, message):
    proc = run_train(tmp_path / "run", override, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_huge_single_line_file_trains(tmp_path):
    path = tmp_path / "oneline.txt"
    path.write_text(("自注意力可以让序列看到前面的位置 attention " * 200_000), encoding="utf-8")  # ~5 M chars
    assert path.stat().st_size > 10_000_000
    run_train(tmp_path / "run", *FAST, f"data.path={path}", in_process=True)


@pytest.mark.slow
def test_divergence_stops_with_a_clear_message_and_keeps_the_good_checkpoint(tmp_path, tiny_text_file):
    run = tmp_path / "run"
    common = [*TINY_MODEL, f"data.path={tiny_text_file}", "data.repeat=30", "logger=none",
              "trainer.val_check_interval=2"]
    run_train(run, *common, "trainer.max_steps=4", in_process=True)
    good = weights(run / "checkpoints" / "last.ckpt")
    proc = run_train(run, *common, "trainer.max_steps=50", "optim.lr=1e12",
                     f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", check=False, in_process=True)
    assert proc.returncode != 0
    assert "training diverged; lower optim.lr" in proc.stderr
    assert "Traceback" not in proc.stderr
    kept = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert all(torch.isfinite(t).all() for t in kept["state_dict"].values())
    assert kept["global_step"] >= 4
    assert kept["global_step"] > 4 or all(torch.equal(good[k], kept["state_dict"][k]) for k in good)


@pytest.mark.slow
def test_same_seed_gives_bit_identical_runs(tmp_path, tiny_text_file):
    common = [*TINY_MODEL, f"data.path={tiny_text_file}", "data.repeat=30", "logger=none",
              "trainer.max_steps=12", "trainer.val_check_interval=6"]
    # in one process: nothing but the seed may carry from one run to the next
    run_train(tmp_path / "a", *common, in_process=True)
    run_train(tmp_path / "b", *common, in_process=True)
    a, b = weights(tmp_path / "a/checkpoints/last.ckpt"), weights(tmp_path / "b/checkpoints/last.ckpt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    c = run_train(tmp_path / "c", *common, "seed=7", in_process=True)
    assert c.returncode == 0
    assert not all(torch.equal(a[k], v) for k, v in weights(tmp_path / "c/checkpoints/last.ckpt").items())


def start_train(run_dir, *overrides):
    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", *overrides]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(predicate, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path, tiny_text_file):
    common = [*TINY_MODEL, f"data.path={tiny_text_file}", "data.repeat=30", "logger=none",
              "trainer.max_steps=300", "trainer.val_check_interval=20"]
    run_train(tmp_path / "whole", *common, in_process=True)

    broken = tmp_path / "broken"  # the killed run: a process of its own
    last = broken / "checkpoints" / "last.ckpt"
    proc = start_train(broken, *common)

    def past_step_60():
        try:
            return torch.load(last, weights_only=True)["global_step"] >= 60
        except Exception:  # not written yet
            return False

    wait_for(past_step_60, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    step = torch.load(last, weights_only=True)["global_step"]
    assert 60 <= step < 300
    run_train(broken, *common, f"ckpt_path={last}", in_process=True)  # resume in the same folder
    a, b = weights(tmp_path / "whole/checkpoints/last.ckpt"), weights(last)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_ctrl_c_saves_last_checkpoint_and_resume_last_continues(tmp_path, tiny_text_file):
    common = [*TINY_MODEL, f"data.path={tiny_text_file}", "data.repeat=30", "trainer.val_check_interval=20",
              f"paths.log_dir={tmp_path}"]
    run = tmp_path / "runs" / "first"
    last = run / "checkpoints" / "last.ckpt"
    proc = start_train(run, *common, "trainer.max_steps=1000000")
    wait_for(last.exists, proc)  # step 20's validation wrote it: training is under way
    written_at = last.stat().st_mtime_ns
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert last.stat().st_mtime_ns != written_at  # saved again by the interrupt
    assert f"interrupted at step {torch.load(last, weights_only=True)['global_step']}: saved {last}" in out
    assert f"resume with `python train.py ckpt_path={last}`" in out
    step = torch.load(last, weights_only=True)["global_step"]
    assert step > 0

    # `ckpt_path=last` finds that run and continues it in its own folder, with its own settings:
    # the command line names only where to look and what changes
    done = train_py("ckpt_path=last", f"paths.log_dir={tmp_path}", f"trainer.max_steps={step + 5}")
    assert f"resuming run {run} from last.ckpt in its own folder" in done.stdout
    assert torch.load(last, weights_only=True)["global_step"] == step + 5
    writers = {p.name.split(".")[-2] for p in run.glob("events.*")}  # by process id
    assert len(writers) == 2  # the same TensorBoard run, continued by the resume (this process)
    assert len(list(tmp_path.glob("runs/*"))) == 1


def loads_torch(proc) -> bool:
    """Whether the process has mapped torch's C++ library: it is importing torch, then Lightning."""
    return "libtorch_cpu" in Path(f"/proc/{proc.pid}/maps").read_text()


@pytest.mark.parametrize("importing", ["Python packages", "torch and Lightning"])
def test_ctrl_c_while_starting_exits_130_without_a_traceback(tmp_path, importing):
    # a run far too long to end before the signal, on any machine (4 steps end in 2.9 s on a fast Xeon)
    proc = start_train(tmp_path / "run", *FAST, "data.repeat=30", "trainer.max_steps=100000")
    try:
        if importing == "Python packages":
            time.sleep(0.3)
        else:
            wait_for(lambda: loads_torch(proc), proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # the signal was lost: the long run must not outlive the test
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.splitlines()) <= 2
    assert not (tmp_path / "run" / "checkpoints").exists()  # stopped before training: nothing to save


@pytest.mark.slow
def test_one_clean_log_and_errors_kept_in_the_run_folder(tmp_path, tiny_text_file):
    ok = run_train(tmp_path / "ok", *FAST, f"data.path={tiny_text_file}", "data.repeat=30")
    lines = [line for line in (ok.stdout + ok.stderr).splitlines() if line.strip()]
    messages = [line.split("] - ", 1)[-1] for line in lines]  # without Hydra's time stamp
    assert "GPU available: False, used: False" in "\n".join(messages)
    assert len(messages) == len(set(messages)), "a line is printed twice"
    assert not [line for line in lines if "Tip:" in line or "deprecated" in line]
    bad = run_train(tmp_path / "bad", *FAST, f"data.path={tmp_path / 'nope.txt'}", check=False, in_process=True)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert bad.stderr.startswith(f"error: invalid config: data file not found: {tmp_path / 'nope.txt'}")
    assert not (tmp_path / "bad").exists()  # refused before training: no run folder
