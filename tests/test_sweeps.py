"""Sweeps and scale-out: a multirun with a bad job, its summary (also of a sweep still running or
killed), Optuna, DDP on 2 CPU processes, and the accelerator / cluster configs that cannot run here
but must compose."""

import csv
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT, TINY_MODEL, TINY_TEXT, compose, run_train
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from tinylm.models.gpt import GPT, GPTConfig
from tinylm.runs.folder import original_overrides
from tinylm.runs.job_files import expected_jobs, job_status
from tinylm.runs.sweep_report import main as report_main
from tinylm.tasks import model_class_of, task_of_config
from tinylm.training.fit import Run, build_datamodule

# tiny jobs: one torch thread each (a tiny model gains nothing from more, and extra threads spin
# on a busy machine), checkpoints but no visualisation callbacks
TINY = [*TINY_MODEL, "threads=1", "callbacks=minimal", "data.repeat=30"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def metrics_of(job):
    return json.loads((job / "metrics.json").read_text())


def read_csv(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def grid_sweep(tmp_path_factory):
    """A 2x2 grid, n_embd 24/32 x num_heads 2/3: 32 with 3 heads is impossible."""
    root = tmp_path_factory.mktemp("grid")
    (root / "tiny.txt").write_text(TINY_TEXT, encoding="utf-8")
    sweep = root / "sweep"
    proc = run_train(root / "unused", "-m", f"hydra.sweep.dir={sweep}", *TINY, f"data.path={root / 'tiny.txt'}",
                     "trainer.max_steps=4", "trainer.val_check_interval=4", "model.n_embd=24,32",
                     "model.num_heads=2,3", in_process=True)
    return sweep, proc


def test_grid_sweep_runs_every_job_and_fails_the_impossible_one_alone(grid_sweep):
    sweep, proc = grid_sweep
    jobs = {p.name: p for p in sweep.iterdir() if p.is_dir()}
    assert sorted(jobs) == ["0", "1", "2", "3"]  # Hydra's order: n_embd outer, num_heads inner
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1  # one line, for the one bad job
    assert errors[0].startswith(f"error: job 3 ({jobs['3']}): invalid config: model.n_embd=32 is not divisible by "
                                "model.num_heads=3")
    assert "Traceback" not in proc.stderr
    assert (jobs["3"] / "error.txt").read_text().startswith("invalid config: model.n_embd=32 is not divisible")
    assert not (jobs["3"] / "checkpoints").exists() and not (jobs["3"] / "metrics.json").exists()
    # the sweep ends with its table (tinylm.runs.sweep_report), and leaves it in the sweep folder
    table = proc.stdout[proc.stdout.rindex(f"# Sweep {sweep.name}"):]
    assert table.startswith((sweep / "summary.md").read_text(encoding="utf-8"))
    assert f"wrote summary.csv, summary.md, val_loss_vs_params.png in {sweep}" in table

    done = {name: metrics_of(jobs[name]) for name in ("0", "1", "2")}
    assert all(m["steps"] == 4 and math.isfinite(m["val_loss"]) and m["tokens_per_second"] > 0 for m in done.values())
    # one validation, at the last step: the best is the final one
    assert all((m["best_val_loss"], m["best_step"]) == (m["val_loss"], 4) for m in done.values())
    assert {name: job_status(folder) for name, folder in jobs.items()} == {
        "0": "finished", "1": "finished", "2": "finished", "3": "failed"}
    assert not list(sweep.rglob("running.json"))  # every job removed its marker
    # the jobs the sweep defines, expanded from its multirun.yaml as Hydra expanded them
    assert expected_jobs(sweep) == {name: original_overrides(folder) for name, folder in jobs.items()}
    # heads split the width, they add no weights: 24 wide costs the same with 2 or 3 heads
    assert done["0"]["num_params"] == done["1"]["num_params"] < done["2"]["num_params"]
    # TensorBoard's HParams view gets the same final numbers, in runs named by the swept settings
    names = {"0": "model.n_embd=24,model.num_heads=2", "1": "model.n_embd=24,model.num_heads=3",
             "2": "model.n_embd=32,model.num_heads=2"}
    for name, metrics in done.items():
        assert {p.parent.name for p in jobs[name].glob("*/events.out.tfevents.*")} == {names[name]}
        events = EventAccumulator(str(jobs[name] / names[name]))
        events.Reload()
        assert events.Scalars("summary/val_loss")[-1].value == pytest.approx(metrics["val_loss"])
        assert events.Scalars("summary/best_val_loss")[-1].value == pytest.approx(metrics["best_val_loss"])
        assert events.Scalars("summary/best_step")[-1].value == 4
        # its HParams columns: what the command line chose (the swept settings first), and the seed
        session = plugin_data_pb2.HParamsPluginData.FromString(
            events.PluginTagToContent("hparams")["_hparams_/session_start_info"]).session_start_info
        assert {"model/n_embd", "model/num_heads", "trainer/max_steps", "seed"} <= set(session.hparams)
        assert not [key for key in session.hparams if key.startswith(("callbacks", "paths", "logger"))]


def test_sweep_report_tables_and_plots_the_grid(grid_sweep, capsys):
    sweep, _ = grid_sweep
    assert report_main([str(sweep)]) == 0
    printed = capsys.readouterr().out

    rows = read_csv(sweep / "summary.csv")
    assert [r["job"] for r in rows][-1] == "3"  # the failed job last
    losses = [float(r["best_val_loss"]) for r in rows[:3]]
    assert losses == sorted(losses)
    for row in rows[:3]:
        metrics = metrics_of(sweep / row["job"])
        assert float(row["best_val_loss"]) == pytest.approx(metrics["best_val_loss"])
        assert float(row["val_loss"]) == pytest.approx(metrics["val_loss"]) and row["best_step"] == "4"
        assert row["status"] == "finished"
    assert [r["rank"] for r in rows] == ["1", "2", "3", "4"]
    assert {k for k in rows[0] if k.startswith("model.")} == {"model.n_embd", "model.num_heads"}  # only swept keys
    assert (rows[3]["model.n_embd"], rows[3]["model.num_heads"], rows[3]["status"]) == ("32", "3", "failed")
    assert rows[3]["note"].startswith("invalid config: model.n_embd=32 is not divisible")

    markdown = (sweep / "summary.md").read_text(encoding="utf-8")
    assert markdown in printed
    assert "Jobs: 3 finished, 1 failed" in markdown
    table = [line for line in markdown.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 4  # header, rule, one line per job
    assert "`trainer.max_steps=4`" in markdown  # shared settings listed once, above the table
    best = rows[0]
    assert table[2].split("|")[2].strip() == best["job"] and f"{float(best['best_val_loss']):.4f}" in table[2]

    png = (sweep / "val_loss_vs_params.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000


def write_job(sweep, name, overrides, metrics=None, error=None):
    job = sweep / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(overrides))
    if metrics is not None:
        (job / "metrics.json").write_text(json.dumps(metrics))
    if error is not None:
        (job / "error.txt").write_text(error + "\n")


def test_sweep_report_ranks_by_best_val_loss_and_unfinished_and_failed_jobs_last(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    base = {"num_params": 1000, "val_bpc": 1.0, "tokens_per_second": 1.0, "wall_seconds": 1.0, "steps": 5}
    write_job(sweep, "0", ["optim.lr=0.1", "seed=1"], {**base, "val_loss": None, "best_val_loss": None})
    write_job(sweep, "1", ["optim.lr=0.01", "seed=1"], {**base, "val_loss": 2.5, "interrupted": True})
    write_job(sweep, "2", ["optim.lr=0.001", "seed=1"], error="bad | value: fix it")
    write_job(sweep, "3", ["optim.lr=0.0001", "seed=1"])  # only Hydra's record: not started yet
    write_job(sweep, "10", ["optim.lr=0.00123456789", "seed=1"],
              {**base, "val_loss": 1.6, "best_val_loss": 1.4, "best_step": 300, "num_params": 10_000})
    # the lower final val loss, but the higher best: ranked second
    write_job(sweep, "11", ["optim.lr=0.005", "seed=1"],
              {**base, "val_loss": 1.5, "best_val_loss": 1.45, "best_step": 500, "stopped_early": True})
    (sweep / "val_loss_vs_params.png").write_bytes(b"stale")
    assert report_main([str(sweep)]) == 0
    rows = read_csv(sweep / "summary.csv")
    assert [(r["job"], r["status"], r["note"]) for r in rows] == [
        ("10", "finished", ""), ("11", "finished", "stopped early"),
        ("1", "interrupted", ""),  # metrics.json older than best_val_loss: ranked by its final val loss
        ("0", "finished", "no val loss (never validated)"), ("2", "failed", "bad | value: fix it"),
        ("3", "not started", "")]
    assert [r["best_step"] for r in rows[:2]] == ["300", "500"]
    assert [k for k in rows[0] if k not in ("rank", "job")][0] == "optim.lr"  # seed is shared, not a column
    markdown = (sweep / "summary.md").read_text()
    assert "bad \\| value: fix it" in markdown  # a | in an error cannot break the table
    assert "| 0.001235 " in markdown and "0.00123456789" not in markdown  # long decimals shortened
    assert "Settings shared by every job: `seed=1`" in markdown
    assert "Jobs: 3 finished, 1 interrupted, 1 failed, 1 not started" in markdown
    assert (sweep / "val_loss_vs_params.png").read_bytes().startswith(PNG_MAGIC)  # redrawn


def test_sweep_report_lists_corrupt_metrics_as_unreadable_and_null_val_loss_as_unfinished(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    good = {"val_loss": 2.0, "val_bpc": 3.0, "num_params": 1000, "tokens_per_second": 10.0, "wall_seconds": 1.0,
            "steps": 5, "interrupted": False}
    corrupt = {
        "1": ('{"val_loss": 2.0, "num_par', "not JSON: Unterminated string starting at: line 1 column 19 (char 18)"),
        "2": ("[2.0, 1000]", "an array instead of an object"),
        "3": ('"done"', "a string instead of an object"),
        "4": (json.dumps({**good, "val_loss": "2.0"}), "val_loss is a string, not a number"),
        "5": (json.dumps({**good, "num_params": True}), "num_params is a boolean, not a number"),
        "6": (json.dumps({**good, "steps": [5]}), "steps is an array, not a number"),
        "7": (json.dumps({**good, "interrupted": "no"}), "interrupted is a string, not true or false"),
        "8": (b"\xff\xfe{}", "not UTF-8 text"),
        "9": ("", "not JSON: Expecting value: line 1 column 1 (char 0)"),
    }
    write_job(sweep, "0", ["seed=0"], good)
    for name, (content, _) in corrupt.items():
        write_job(sweep, name, [f"seed={name}"])
        (sweep / name / "metrics.json").write_bytes(content if isinstance(content, bytes) else content.encode())
    write_job(sweep, "10", ["seed=10"], {**good, "val_loss": None, "val_bpc": None})  # the writer's NaN, fixed
    write_job(sweep, "11", ["seed=11"], {**good, "val_loss": 1.5, "num_params": 2000})
    write_job(sweep, "12", ["seed=12"], {**good, "val_loss": 1.8, "num_params": -1})  # tabled, not plotted
    assert report_main([str(sweep)]) == 0
    out = capsys.readouterr().out
    rows = read_csv(sweep / "summary.csv")
    assert [(r["job"], r["status"]) for r in rows[:3]] == [("11", "finished"), ("12", "finished"), ("0", "finished")]
    assert [float(r["val_loss"]) for r in rows[:3]] == [1.5, 1.8, 2.0]
    assert [(r["job"], r["status"], r["note"]) for r in rows[3:]] == [
        *[(name, "unreadable metrics.json", why) for name, (_, why) in corrupt.items()],
        ("10", "finished", "no val loss (never validated)"),
    ]
    assert all(r["val_loss"] == "" for r in rows[3:])
    (line,) = [line for line in out.splitlines() if "an array instead of an object" in line]
    assert re.search(r"\| 2 +\| .*\| unreadable metrics.json +\| an array instead of an object +\|$", line)
    assert (sweep / "val_loss_vs_params.png").read_bytes().startswith(PNG_MAGIC)  # jobs 11 and 0


def dead_pid():
    """The id of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_job_status_reads_what_the_job_left_in_its_folder(tmp_path):
    def job(name, marker=None, metrics=None, error=False, checkpoint=False):
        folder = tmp_path / name
        (folder / ".hydra").mkdir(parents=True)
        if marker is not None:
            (folder / "running.json").write_text(json.dumps({"host": socket.gethostname(), "started": time.time(),
                                                             **marker}))
        if metrics is not None:
            (folder / "metrics.json").write_text(metrics if isinstance(metrics, str) else json.dumps(metrics))
        if error:
            (folder / "error.txt").write_text("invalid config: ...\n")
        if checkpoint:
            (folder / "checkpoints").mkdir()
            (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
        return job_status(folder)

    me, gone = {"pid": os.getpid()}, {"pid": dead_pid()}
    assert job(".hydra only") == "not started"
    assert job("done", metrics={"val_loss": 2.0, "interrupted": False}) == "finished"
    assert job("stopped early", metrics={"val_loss": 2.0, "stopped_early": True}, checkpoint=True) == "finished"
    assert job("ctrl-c", metrics={"val_loss": 2.0, "interrupted": True}, checkpoint=True) == "interrupted"
    assert job("refused", error=True) == "failed"
    assert job("diverged", error=True, checkpoint=True) == "failed"
    assert job("training", marker=me, checkpoint=True) == "running"
    # a job resumed in its folder runs again: its earlier metrics.json does not make it finished
    assert job("resumed", marker=me, metrics={"val_loss": 2.0}, checkpoint=True) == "running"
    assert job("remote", marker={"pid": gone["pid"], "host": "another-host"}) == "running"  # cannot check: running
    # kill -9 leaves the marker behind: the job is not running
    assert job("killed", marker=gone, checkpoint=True) == "interrupted"
    assert job("killed early", marker=gone) == "failed"
    assert job("killed resume", marker=gone, metrics={"val_loss": 2.0}, checkpoint=True) == "interrupted"
    # a pid in use again, by a process that started after the marker was written
    assert job("pid reused", marker={"pid": os.getpid(), "started": 0.0}) == "failed"
    assert job("damaged marker", metrics={"val_loss": 2.0}) == "finished"
    (tmp_path / "damaged marker" / "running.json").write_text("{")
    assert job_status(tmp_path / "damaged marker") == "finished"
    # metrics.json is written whole or not at all: one that cannot be read was damaged after its job
    # ended, and nothing may train over it (a re-run refuses it, issue 23, 7)
    assert job("unreadable", metrics="{", checkpoint=True) == "unreadable metrics.json"
    assert job("unreadable early", metrics="[]") == "unreadable metrics.json"
    assert job("unreadable, killed", marker=gone, metrics="{", checkpoint=True) == "unreadable metrics.json"


def test_sweep_report_without_a_folder_reports_the_newest_sweep(grid_sweep, tmp_path, monkeypatch, capsys):
    from tinylm.runs.sweep_report import main as report_main

    monkeypatch.setenv("TINYLM_ROOT", str(tmp_path))  # paths.root_dir: <root>/outputs is the log folder
    assert report_main([]) == 1
    assert capsys.readouterr().err == (f"error: there is no sweep under {tmp_path / 'outputs' / 'multirun'}: "
                                       "run one with `python train.py -m ...`\n")
    older, newer = (tmp_path / "outputs" / "multirun" / name for name in ("2026-01-02_00-00-00", "2026-01-01_00-00-00"))
    for sweep in (older, newer):
        shutil.copytree(grid_sweep[0], sweep)
        (sweep / "summary.md").unlink()
    os.utime(older, (1_000_000_000, 1_000_000_000))  # older by its time, though its name sorts later
    assert report_main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"the newest sweep: {newer}\n\n# Sweep {newer.name}\n")
    assert (newer / "summary.md").is_file() and not (older / "summary.md").exists()


def test_sweep_report_lists_the_jobs_the_sweep_has_not_reached_as_missing(grid_sweep, tmp_path, capsys):
    sweep = tmp_path / "partial"
    shutil.copytree(grid_sweep[0], sweep)
    shutil.rmtree(sweep / "2")
    shutil.rmtree(sweep / "3")
    (sweep / "1" / "metrics.json").unlink()  # job 1 is training: its marker names this (live) process
    (sweep / "1" / "running.json").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                          "started": time.time()}))
    assert report_main([str(sweep)]) == 0
    rows = read_csv(sweep / "summary.csv")
    assert [(r["job"], r["model.n_embd"], r["model.num_heads"], r["status"]) for r in rows] == [
        ("0", "24", "2", "finished"), ("1", "24", "3", "running"), ("2", "32", "2", "missing"),
        ("3", "32", "3", "missing")]
    assert rows[1]["note"].startswith(f"pid {os.getpid()} on {socket.gethostname()}, since ")
    assert "Jobs: 2 missing, 1 finished, 1 running" in capsys.readouterr().out
    # an Optuna search writes no multirun.yaml: it has no fixed list of jobs, and nothing is missing
    (sweep / "multirun.yaml").unlink()
    assert expected_jobs(sweep) is None
    assert report_main([str(sweep)]) == 0
    assert [r["job"] for r in read_csv(sweep / "summary.csv")] == ["0", "1"]


def start_sweep(sweep, *overrides):
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", f"hydra.sweep.dir={sweep}", *overrides]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)


def statuses(sweep):
    assert report_main([str(sweep)]) == 0
    return [(r["job"], r["status"]) for r in read_csv(sweep / "summary.csv")]


@pytest.mark.slow
def test_sweep_report_while_the_sweep_runs_and_after_it_was_killed(tmp_path, tiny_text_file, capsys):
    sweep = tmp_path / "sweep"
    proc = start_sweep(sweep, *TINY, "logger=none", f"data.path={tiny_text_file}", "trainer.max_steps=1000000",
                       "trainer.val_check_interval=5", "model.n_embd=16,24", "seed=1,2")
    last = sweep / "0" / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 120
    try:
        while not last.exists():  # job 0 has validated once
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.1)
        marker = json.loads((sweep / "0" / "running.json").read_text())
        assert (marker["pid"], marker["host"]) == (proc.pid, socket.gethostname())
        # the sweep claimed every job before it started any: the others are queued
        assert statuses(sweep) == [("0", "running"), ("1", "queued"), ("2", "queued"), ("3", "queued")]
        assert read_csv(sweep / "summary.csv")[1]["note"].startswith(f"not started yet by the sweep of pid {proc.pid} ")
    finally:  # a failed check must not leave a sweep of a million steps behind
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert statuses(sweep) == [("0", "interrupted"), ("1", "not started"), ("2", "not started"), ("3", "not started")]
    assert read_csv(sweep / "summary.csv")[0]["note"] == "killed; resumable from checkpoints/last.ckpt"
    assert (sweep / "0" / "running.json").exists()  # what told the killed job from a running one


@pytest.mark.slow
def test_a_sweep_job_that_crashes_is_recorded_as_failed(tmp_path, tiny_text_file):
    """Not bad input but a crash (here a callback whose constructor raises; on a GPU, say, out of memory):
    Hydra's report of the exception stops the sweep as before, and the job's folder says that it failed."""
    sweep = tmp_path / "sweep"
    proc = run_train(tmp_path / "unused", "-m", f"hydra.sweep.dir={sweep}", *TINY, f"data.path={tiny_text_file}",
                     "trainer.max_steps=2", "+callbacks.broken._target_=json.loads", "+callbacks.broken.s=nope",
                     "seed=1,2", check=False, in_process=True)
    assert proc.returncode != 0 and "Error executing job with overrides" in proc.stderr
    assert (sweep / "0" / "error.txt").read_text().startswith("InstantiationException: Error in call to target "
                                                               "'json.loads'")
    assert not (sweep / "0" / "running.json").exists()
    assert job_status(sweep / "0") == "failed" and expected_jobs(sweep).keys() == {"0", "1"}


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_sweep_report_bad_folder_is_one_error_line(tmp_path, capsys, kind):
    folder = tmp_path / "sweep"
    if kind == "empty":
        folder.mkdir()
    assert report_main([str(folder)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert ("sweep folder not found" if kind == "missing" else "no job folders in") in err


@pytest.mark.slow
def test_optuna_search_runs_trials_and_keeps_the_best(tmp_path, tiny_text_file):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweep = tmp_path / "sweep"
    tiny = [o for o in TINY if not o.startswith("model.n_embd=")]  # a fixed value would leave the search space
    run_train(tmp_path / "unused", "hparams_search=optuna", f"hydra.sweep.dir={sweep}", "hydra.sweeper.n_trials=3",
              *tiny, f"data.path={tiny_text_file}", "trainer.max_steps=4", "trainer.val_check_interval=4",
              "model.n_embd=choice(16,32)", "model.num_layers=1", in_process=True)
    trials = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [p.name for p in trials] == ["0", "1", "2"]
    losses = [metrics_of(p)["best_val_loss"] for p in trials]  # what the search minimises
    result = OmegaConf.load(sweep / "optimization_results.yaml")
    assert result.best_value == pytest.approx(min(losses))
    for trial in trials:  # each trial's settings come from the search space
        chosen = dict(item.split("=", 1) for item in OmegaConf.load(trial / ".hydra" / "overrides.yaml"))
        assert 1e-4 <= float(chosen["optim.lr"]) <= 1e-2
        assert 0.0 <= float(chosen["model.dropout"]) <= 0.3
        assert chosen["model.n_embd"] in ("16", "32") and chosen["model.num_layers"] == "1"
        assert metrics_of(trial)["num_params"] == (4741 if chosen["model.n_embd"] == "16" else 15589)
    assert set(result.best_params) == {"optim.lr", "model.n_embd", "model.dropout"}


@pytest.mark.slow  # an Optuna sweep of train.py jobs; the quick subset keeps the grid sweep
def test_optuna_search_records_failed_trials_as_the_worst_and_goes_on(tmp_path, tiny_text_file):
    """An invalid config (lr 0) and a diverging loss (lr 1e12) fail their trial alone: Optuna gets +inf
    for it (a NaN would stop the search) and runs every trial; the report lists them as failed."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweep = tmp_path / "sweep"
    tiny = [o for o in TINY if not o.startswith("model.n_embd=")]
    # sampler seed 1 asks for 1e12, 0.003, 0: each outcome once
    proc = run_train(tmp_path / "unused", "hparams_search=optuna", f"hydra.sweep.dir={sweep}",
                     "hydra.sweeper.n_trials=3", "hydra.sweeper.sampler.seed=1", *tiny, f"data.path={tiny_text_file}",
                     "logger=none", "trainer.max_steps=4", "trainer.val_check_interval=2", "model.n_embd=16",
                     "model.num_layers=1", "model.dropout=0.0", "optim.lr=choice(0.003,1e12,0)", in_process=True)
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2
    assert "error: job 0" in errors[0] and "training diverged; lower optim.lr (now 1e+12)" in errors[0]
    assert errors[1].startswith(f"error: job 2 ({sweep / '2'}): invalid config: optim.lr=0 must be a positive number")
    assert [p.name for p in sorted(sweep.iterdir()) if p.is_dir()] == ["0", "1", "2"]
    result = OmegaConf.load(sweep / "optimization_results.yaml")
    assert result.best_params == {"optim.lr": 0.003}
    assert result.best_value == pytest.approx(metrics_of(sweep / "1")["best_val_loss"])
    assert [job_status(sweep / name) for name in ("0", "1", "2")] == ["failed", "finished", "failed"]
    assert report_main([str(sweep)]) == 0
    rows = read_csv(sweep / "summary.csv")
    assert [(r["job"], r["status"]) for r in rows] == [("1", "finished"), ("0", "failed"), ("2", "failed")]
    assert rows[1]["note"].startswith("training loss became nan at step 1: training diverged")


def val_loss_of(run):
    """Mean loss of ``run``'s last.ckpt over the whole validation set, in this one process."""
    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    datamodule = build_datamodule(Run(cfg, task_of_config(cfg), model_class_of(cfg)))
    datamodule.prepare()
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**ckpt["model_config"]))
    model.load_state_dict({k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()})
    model.eval()
    with torch.no_grad():
        losses = [model(x, y)[1] for x, y in datamodule.val_dataloader()]
    return torch.stack(losses).mean().item(), len(losses)


@pytest.mark.slow
def test_ddp_on_two_cpu_processes_shares_one_run_folder(tmp_path, tiny_text_file):
    logs = tmp_path / "logs"
    run = tmp_path / "run"
    proc = run_train(run, "trainer=ddp_sim", *TINY, "callbacks=default", f"data.path={tiny_text_file}",
                     "data.val_batches=3", "trainer.max_steps=6", "trainer.val_check_interval=3",
                     f"paths.log_dir={logs}")
    assert "Starting with 2 processes" in proc.stdout + proc.stderr
    assert (run / "train_ddp_process_1.log").exists()  # rank 1 ran, in rank 0's folder
    # TensorBoard files (scalars, attention maps, samples) all come from one process: rank 0
    events = run.glob("events.out.tfevents.*")
    assert len({re.search(r"\.(\d+)\.\d+$", p.name).group(1) for p in events}) == 1  # <time>.<host>.<pid>.<n>
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "tiny.txt"]  # no second run folder
    assert not list(tmp_path.rglob(".pl_ddp_hydra_*"))
    assert sorted(p.name for p in (run / ".hydra").iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]

    metrics = metrics_of(run)
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert metrics["steps"] == ckpt["global_step"] == 6
    # every rank validated the whole validation set (no DistributedSampler share): rank 0's val
    # loss is the loss of the saved weights on all 3 validation batches
    loss, batches = val_loss_of(run)
    assert batches == 3
    assert metrics["val_loss"] == pytest.approx(loss, rel=1e-5)


@pytest.mark.slow
def test_ddp_inside_a_local_sweep_is_refused_per_job(tmp_path, tiny_text_file):
    sweep = tmp_path / "sweep"
    proc = run_train(tmp_path / "unused", "-m", f"hydra.sweep.dir={sweep}", "trainer=ddp_sim", *TINY,
                     f"data.path={tiny_text_file}", "trainer.max_steps=2", "trainer.val_check_interval=2",
                     "model.n_embd=16,32", in_process=True)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and all("multi-process DDP cannot run inside a local sweep (-m)" in e for e in errors)
    assert "Initializing distributed" not in proc.stdout + proc.stderr  # no rank was started
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    assert not list(sweep.rglob("metrics.json"))


def compose_with_hydra(*overrides):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("train", overrides=list(overrides), return_hydra_config=True)


@pytest.fixture(scope="module")
def experiments(tmp_path_factory) -> dict:
    """Each experiment's config with the default trainer, composed once for every trainer below."""
    tmp = tmp_path_factory.mktemp("experiments")
    names = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
    return {name: compose(f"experiment={name}", output_dir=tmp) for name in names}


@pytest.mark.parametrize("trainer", ["cpu", "gpu", "ddp", "ddp_sim"])
def test_trainer_configs_compose_with_every_experiment(tmp_path, trainer, experiments):
    for experiment, plain in experiments.items():
        cfg = compose(f"trainer={trainer}", f"experiment={experiment}", output_dir=tmp_path)
        assert cfg.model == plain.model and cfg.data == plain.data and cfg.optim == plain.optim
        assert cfg.trainer.max_steps == plain.trainer.max_steps
    expected = {"cpu": ("cpu", "32-true"), "gpu": ("gpu", "bf16-mixed"), "ddp": ("auto", "32-true"),
                "ddp_sim": ("cpu", "32-true")}[trainer]
    assert (cfg.trainer.accelerator, cfg.trainer.precision) == expected


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_trainer_runs_in_bf16(tmp_path, tiny_text_file):
    run = tmp_path / "run"
    run_train(run, "trainer=gpu", *TINY, f"data.path={tiny_text_file}", "trainer.max_steps=4",
              "trainer.val_check_interval=4")
    assert math.isfinite(metrics_of(run)["val_loss"])


def test_slurm_launcher_config_composes_for_ddp(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    cfg = compose_with_hydra("hydra/launcher=slurm", "trainer=ddp", "trainer.devices=4", "trainer.num_nodes=2",
                             "hydra.launcher.partition=gpu", f"paths.log_dir={tmp_path}")
    launcher = instantiate(cfg.hydra.launcher)  # builds the launcher only: submits nothing
    params = launcher.params
    assert type(launcher).__name__ == "SlurmLauncher"
    assert (params["tasks_per_node"], params["nodes"], params["partition"]) == (4, 2, "gpu")  # one task per rank
    assert params["timeout_min"] == 120 and params["array_parallelism"] == 16
    assert params["submitit_folder"].startswith(f"{tmp_path}/multirun/")
