"""Best, not only last: the lowest val loss and its step next to the final one (metrics.json, the
final log line, TensorBoard's HParams tab), the same after a resume and the same as the best
checkpoint's; and early stopping, off by default, counting validations."""

import json
import logging
from contextlib import contextmanager

import pytest
import torch
from conftest import TINY_MODEL, TINY_TEXT, compose
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tinylm.training import main as train_main

COMMON = [*TINY_MODEL, "data.repeat=30", "threads=1", "callbacks=minimal", "trainer.val_check_interval=3"]
# lr 0.2 on the tiny model: loss/val is lowest at step 30 of 36, then higher at 33 and 36
RISING = [*COMMON, "optim.lr=0.2"]
# lr 1e-12 changes no weight: loss/val never improves after the first validation (step 3)
FLAT = [*COMMON, "optim.lr=1e-12", "logger=none"]


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


@contextmanager
def logged_lines():
    """The messages tinylm.training logs inside the block."""
    lines = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("tinylm.training")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def train(run, text, *overrides):
    """Train in this process (as train.py would in ``run``); (metrics.json, the log lines)."""
    with logged_lines() as lines:
        train_main(compose(*overrides, f"data.path={text}", output_dir=run))
    return json.loads((run / "metrics.json").read_text()), lines


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "tiny.txt"
    path.write_text(TINY_TEXT, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def rising(tmp_path_factory, text):
    run = tmp_path_factory.mktemp("rising") / "run"
    metrics, lines = train(run, text, *RISING, "trainer.max_steps=36")
    return run, metrics, lines


def test_best_val_loss_is_reported_next_to_the_final_one(rising):
    run, metrics, lines = rising
    assert (metrics["best_step"], metrics["steps"]) == (30, 36) and metrics["best_val_loss"] < metrics["val_loss"]
    assert metrics["stopped_early"] is False and metrics["interrupted"] is False  # no early stopping by default
    assert lines[-1] == (f"final val loss {metrics['val_loss']:.4f} ({metrics['val_bpc']:.3f} bits/char), "
                         f"best {metrics['best_val_loss']:.4f} at step 30; run folder {run}")
    assert not (run / "running.json").exists()  # only while training

    # the best is the lowest point of the loss/val curve, at the 10th validation (step 30)
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    curve = [e.value for e in events.Scalars("loss/val")]
    assert len(curve) == 12 and min(curve) == pytest.approx(metrics["best_val_loss"]) and curve.index(min(curve)) == 9
    # TensorBoard's HParams tab shows it next to the final val loss
    assert events.Scalars("summary/best_val_loss")[-1].value == pytest.approx(metrics["best_val_loss"])
    assert events.Scalars("summary/best_step")[-1].value == 30
    assert events.Scalars("summary/val_loss")[-1].value == pytest.approx(metrics["val_loss"])


def test_best_val_loss_is_the_best_checkpoints(rising):
    run, metrics, _ = rising
    assert [p.name for p in (run / "checkpoints").glob("best-*.ckpt")] == ["best-step000030.ckpt"]
    best = load(run / "checkpoints" / "best-step000030.ckpt")
    (score,) = [state["best_model_score"] for key, state in best["callbacks"].items()
                if key.startswith("ModelCheckpoint") and "'monitor': 'loss/val'" in key]
    assert float(score) == metrics["best_val_loss"]
    # every checkpoint carries the best so far, as plain data
    assert best["best_val"] == {"loss": metrics["best_val_loss"], "step": 30}
    assert load(run / "checkpoints" / "last.ckpt")["best_val"] == {"loss": metrics["best_val_loss"], "step": 30}


def test_a_resumed_run_reports_the_best_of_an_uninterrupted_one(rising, tmp_path, text):
    _, whole, _ = rising
    run = tmp_path / "run"
    train(run, text, *RISING, "trainer.max_steps=30")
    # validations at 33 and 36 are worse than step 30's: the best must come from the checkpoint
    resumed, lines = train(run, text, *RISING, "trainer.max_steps=36", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    keys = ("val_loss", "best_val_loss", "best_step", "steps")
    assert {k: resumed[k] for k in keys} == {k: whole[k] for k in keys}
    assert lines[-1].endswith(f"best {whole['best_val_loss']:.4f} at step 30; run folder {run}")


def test_without_validation_there_is_no_best(tmp_path, text):
    run = tmp_path / "run"
    metrics, lines = train(run, text, *FLAT, "trainer.max_steps=2", "+trainer.limit_val_batches=0")
    raw = json.loads((run / "metrics.json").read_text(), parse_constant=pytest.fail)  # strict JSON: no NaN
    assert raw["best_val_loss"] is None and raw["best_step"] is None and raw["val_loss"] is None
    assert lines[-1] == f"final val loss nan (nan bits/char); run folder {run}"


def test_early_stopping_stops_after_patience_validations_without_a_better_loss(tmp_path, text):
    run = tmp_path / "run"
    stopping = ["callbacks.early_stopping.patience=2"]
    metrics, lines = train(run, text, *FLAT, *stopping, "trainer.max_steps=30")
    # validations at steps 3 (the best), 6 and 9 (no better): stopped after the 2nd without improvement
    assert (metrics["steps"], metrics["best_step"], metrics["stopped_early"]) == (9, 3, True)
    assert lines[-2] == "stopped early at step 9 of trainer.max_steps=30: loss/val did not improve in 2 validations"
    assert lines[-1].startswith(f"final val loss {metrics['val_loss']:.4f}")
    last = load(run / "checkpoints" / "last.ckpt")  # early stopping's state is plain data too
    (state,) = [state for key, state in last["callbacks"].items() if key.startswith("EarlyStopping")]
    assert (state["wait_count"], state["patience"]) == (2, 2)

    # a resume keeps counting: one more validation without improvement, and it stops again
    resumed, _ = train(run, text, *FLAT, *stopping, "trainer.max_steps=30",
                       f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    assert (resumed["steps"], resumed["best_step"], resumed["stopped_early"]) == (12, 3, True)
    assert resumed["best_val_loss"] == metrics["best_val_loss"]


def test_a_run_that_fails_removes_its_running_marker(tmp_path, text):
    run = tmp_path / "run"
    with pytest.raises(SystemExit, match="training diverged"):
        train(run, text, *COMMON, "logger=none", "optim.lr=1e12", "trainer.max_steps=4")
    assert run.is_dir() and not (run / "running.json").exists()
