"""Which checkpoint a command picks when none is named, and the line that names it: never a debug run
while another run has checkpoints (tinylm.run_folder.choose_checkpoint), the same rule for
``train.py ckpt_path=last``, and every entry point naming the file and why it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from conftest import ROOT, compose_config, entry_point
from omegaconf import OmegaConf
from test_checkpoint import make_run

from tinylm.console import checkpoint_name
from tinylm.run_folder import Chosen, choose_checkpoint, debug_preset, latest_last_checkpoint, shown_path


def record_hydra(run: Path, *overrides: str) -> Path:
    """The ``.hydra/hydra.yaml`` Hydra writes for a training run made with ``overrides``."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    (run / ".hydra").mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create({"hydra": cfg.hydra}), run / ".hydra" / "hydra.yaml")
    return run


def test_debug_preset_comes_from_hydras_record_of_the_chosen_groups(tmp_path):
    assert debug_preset(record_hydra(tmp_path / "fast", "debug=fast")) == "fast"
    assert debug_preset(record_hydra(tmp_path / "overfit", "debug=overfit", "model=lstm")) == "overfit"
    assert debug_preset(record_hydra(tmp_path / "plain", "trainer.max_steps=5")) is None
    assert debug_preset(tmp_path / "no_record") is None
    broken = tmp_path / "broken" / ".hydra"
    broken.mkdir(parents=True)
    (broken / "hydra.yaml").write_text("hydra: [unclosed", encoding="utf-8")
    assert debug_preset(broken.parent) is None  # an unreadable record never stops a command


def test_the_newest_run_skips_newer_debug_runs_and_says_how_to_pick_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ordinary = record_hydra(make_run(tmp_path, "outputs/runs/a", {"best-step000300.ckpt": 1_000,
                                                                  "last.ckpt": 1_100}))
    record_hydra(make_run(tmp_path, "outputs/runs/b_debug_fast", {"best-step000005.ckpt": 2_000}), "debug=fast")
    newest = record_hydra(make_run(tmp_path, "outputs/multirun/c/0", {"last.ckpt": 3_000}), "debug=overfit")

    chosen = choose_checkpoint(log_dir=tmp_path / "outputs")
    assert chosen.path == ordinary / "checkpoints" / "best-step000300.ckpt"
    assert chosen.why == ("the newest run's best checkpoint; skipped 2 newer debug runs, the newest "
                          "outputs/multirun/c/0 with debug=overfit: pick one with run_dir=outputs/multirun/c/0")
    assert choose_checkpoint(run_dir=newest) == Chosen(newest / "checkpoints" / "last.ckpt",
                                                       "run_dir's last checkpoint: it has no best-*.ckpt")
    assert choose_checkpoint(ckpt_path=newest / "checkpoints" / "last.ckpt").why == ""  # the user named it

    path, why = latest_last_checkpoint(tmp_path / "outputs")  # train.py ckpt_path=last: the same rule
    assert path == ordinary / "checkpoints" / "last.ckpt"
    assert why == ("ckpt_path=last: the newest run's last.ckpt; skipped 1 newer debug run, the newest "
                   "outputs/multirun/c/0 with debug=overfit: pick one with "
                   "ckpt_path=outputs/multirun/c/0/checkpoints/last.ckpt")

    shutil.rmtree(ordinary)  # only debug runs left: the newest of them, and the line says it is one
    chosen = choose_checkpoint(log_dir=tmp_path / "outputs")
    assert chosen.path == newest / "checkpoints" / "last.ckpt"
    assert chosen.why == ("the newest run's last checkpoint, a debug run with debug=overfit: "
                          "no other run has checkpoints")


def test_an_ordinary_newest_run_is_chosen_as_before(tmp_path):
    record_hydra(make_run(tmp_path, "runs/old_debug", {"last.ckpt": 1_000}), "debug=fast")
    new = record_hydra(make_run(tmp_path, "runs/new", {"best-step000010.ckpt": 2_000}))
    assert choose_checkpoint(log_dir=tmp_path) == Chosen(new / "checkpoints" / "best-step000010.ckpt",
                                                         "the newest run's best checkpoint")


def test_a_checkpoint_is_shown_relative_to_the_current_folder_when_it_lies_inside(tmp_path, monkeypatch):
    ckpt = tmp_path / "outputs" / "runs" / "a" / "checkpoints" / "last.ckpt"
    monkeypatch.chdir(tmp_path)
    assert shown_path(ckpt) == os.path.join("outputs", "runs", "a", "checkpoints", "last.ckpt")
    (tmp_path / "beside").mkdir()
    monkeypatch.chdir(tmp_path / "beside")  # "../outputs/..." is shorter, but walks out of the folder
    assert shown_path(ckpt) == str(ckpt)
    deep = tmp_path.joinpath(*"d" * (len(str(tmp_path)) // 3 + 1))
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert shown_path(ckpt) == str(ckpt)
    assert checkpoint_name(ckpt, "why", "step 3") == f"{ckpt} (why; step 3)"
    assert checkpoint_name(ckpt) == str(ckpt)


def test_every_entry_point_names_the_checkpoint_and_why(gpt_run, tmp_path, monkeypatch, capsys):
    """generate, evaluate, visualize and export with neither ckpt_path nor run_dir: the newest run's best."""
    monkeypatch.chdir(gpt_run.log_dir)
    best = shown_path(next((gpt_run.path / "checkpoints").glob("best-*.ckpt")))
    assert not os.path.isabs(best)
    named = f"{best} (the newest run's best checkpoint; step "
    where = f"paths.log_dir={gpt_run.log_dir}"

    entry_point("generate.py").run(compose_config("generate", where, "max_new_tokens=3", "seed=1"))
    err = capsys.readouterr().err
    assert err.startswith(f"checkpoint: {named}") and "vocabulary " in err and err.rstrip().endswith("seed=1")

    text = tmp_path / "t.txt"
    text.write_text("自注意力可以让序列中的每个位置看到前面的所有位置。" * 3, encoding="utf-8")
    entry_point("evaluate.py").run(compose_config("evaluate", where, f"data.path={text}", "split=all"))
    assert capsys.readouterr().out.startswith(f"evaluated {named}")

    entry_point("visualize.py").run(compose_config("visualize", where, f"out_dir={tmp_path / 'pngs'}"))
    err = capsys.readouterr().err
    assert err.startswith(f"checkpoint: {named}") and "parameters" in err and "seed" not in err

    out = tmp_path / "m.onnx"
    entry_point("export.py").run(compose_config("export", where, f"out={out}"))
    captured = capsys.readouterr()
    phases = [line.split(" ")[1] for line in captured.err.splitlines()]
    assert phases == ["loading", "tracing", "checking", "comparing"]  # one line each, nothing else
    assert captured.err.startswith(f"export: loading {best} (the newest run's best checkpoint)\n")
    assert f"MiB written next to {out.name})" in captured.err
    assert captured.out.startswith(f"exported {named}") and f" to {shown_path(out)} (" in captured.out
