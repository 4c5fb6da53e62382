"""What a run says when it ends, and where TensorBoard shows a task's scores: a translation run's
final log line carries its exact match and character error rate; a run without validation says so
(``debug=shapes``), its metrics.json strict JSON; the scores sit in the loss group beside ``loss/val``,
under the metrics.json keys scripts read (``val_exact_match``, ``val_cer``)."""

import json
import re

import pytest
from conftest import ROOT, TINY_MODEL, train_in_process

from tinylm.training.fit import final_result

PAIRS = [("一", "1"), ("二", "2"), ("三", "3"), ("十", "10"), ("十一", "11"), ("十二", "12"), ("二十", "20"),
         ("三十", "30"), ("二十一", "21"), ("三十二", "32")]
SEQ2SEQ = ["model=seq2seq", "data=pairs", "model.encoder_layers=1", "model.decoder_layers=1", "model.block_size=8",
           "model.n_embd=16", "model.num_heads=2", "data.batch_size=4", "data.val_batches=1", "threads=1",
           "trainer.max_steps=3", "trainer.val_check_interval=3", "trainer.enable_progress_bar=false",
           "callbacks=minimal"]


def strict_json(path):
    return json.loads(path.read_text(), parse_constant=pytest.fail)  # NaN or Infinity: not JSON


def test_a_translation_run_ends_with_its_exact_match_and_cer_logged_beside_the_loss(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    run = tmp_path / "run"
    last = train_in_process(run, *SEQ2SEQ, f"data.path={pairs}").splitlines()[-1]
    metrics = strict_json(run / "metrics.json")
    found = re.fullmatch(r"final val loss (\S+) \((\S+) bits/char\), exact match (\S+), CER (\S+), "
                         r"best (\S+) at step 3; run folder (.+)", last)
    assert found, last
    assert found.groups() == (f"{metrics['val_loss']:.4f}", f"{metrics['val_bpc']:.3f}",
                              f"{metrics['val_exact_match']:.3f}", f"{metrics['val_cer']:.3f}",
                              f"{metrics['best_val_loss']:.4f}", str(run))
    assert {k for k in metrics if k.startswith("val_")} == {"val_loss", "val_bpc", "val_exact_match", "val_cer"}
    events = EventAccumulator(str(run))
    events.Reload()
    scalars = events.Tags()["scalars"]
    # TensorBoard's Scalars and Time Series group cards by the tag's part before the first "/"
    assert {"loss/val", "loss/val_exact_match", "loss/val_cer"} <= set(scalars)
    assert not [t for t in scalars if t.split("/")[0] not in ("loss", "lr-AdamW", "summary")]
    assert events.Scalars("loss/val_exact_match")[-1].value == pytest.approx(metrics["val_exact_match"])


def test_a_text_run_keeps_its_final_line(gpt_run):
    last = gpt_run.output.splitlines()[-1]
    assert re.fullmatch(r"final val loss \d+\.\d{4} \(\d+\.\d{3} bits/char\), best \d+\.\d{4} at step \d+; "
                        rf"run folder {re.escape(str(gpt_run.path))}", last), last


def test_debug_shapes_says_that_no_validation_ran_and_writes_strict_json(tmp_path):
    run = tmp_path / "run"
    last = train_in_process(run, *TINY_MODEL, "debug=shapes").splitlines()[-1]
    assert last == f"no validation ran (trainer.limit_val_batches=0); run folder {run}"
    metrics = strict_json(run / "metrics.json")
    assert metrics["val_loss"] is metrics["val_bpc"] is metrics["best_val_loss"] is metrics["best_step"] is None


def test_under_hydra_the_line_names_the_debug_preset_that_turned_validation_off():
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    none = {"val_loss": None, "val_bpc": None, "best_val_loss": None, "best_step": None, "interrupted": False}
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["debug=shapes"], return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        try:
            assert final_result(cfg, none, {}, {}) == "no validation ran (debug=shapes: trainer.limit_val_batches=0)"
        finally:
            HydraConfig.instance().cfg = None
        plain = compose("train", overrides=["trainer.max_steps=5"])
    # no validation for another reason (Ctrl-C before the first one), and none for no known reason
    assert final_result(plain, {**none, "interrupted": True}, {}, {}) == \
        "no validation ran (interrupted before the first one)"
    assert final_result(plain, none, {}, {}) == "no validation ran"
