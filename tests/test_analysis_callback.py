"""The HeadScores training callback: its scalars, images and metrics.json entry; off with null; the
run's weights unchanged (in-process tiny runs)."""

from __future__ import annotations

import json

import torch
from conftest import TINY_MODEL, train_in_process
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

OTHER_VIEWS = ["~callbacks.sample_text", "~callbacks.attention_maps", "~callbacks.next_token_probes",
               "~callbacks.embedding_projector"]
RUN = [*TINY_MODEL, "model.num_layers=2", "data.repeat=30", "trainer.max_steps=10", "trainer.val_check_interval=10",
       "threads=1", *OTHER_VIEWS]


def test_head_scores_are_logged_by_layer_as_images_and_in_metrics_json(tmp_path, tiny_text_file):
    run = tmp_path / "run"
    train_in_process(run, *RUN, f"data.path={tiny_text_file}", "callbacks.head_scores.every_n_steps=5",
                     "callbacks.head_scores.images_every_n_steps=null")
    events = EventAccumulator(str(run), size_guidance={"scalars": 0, "images": 0}).Reload()
    scalars = {tag for tag in events.Tags()["scalars"] if "head" in tag}
    assert scalars == {f"probe_heads_layer{layer}/{score}_head{head}" for layer in (0, 1) for head in (0, 1)
                       for score in ("previous_token", "induction", "entropy")}
    for tag in scalars:
        assert [e.step for e in events.Scalars(tag)] == [5, 10]
    assert all(0 <= e.value <= 1 for e in events.Scalars("probe_heads_layer1/induction_head0"))
    images = {tag for tag in events.Tags()["images"] if "heads" in tag}
    assert images == {"maps/heads_previous_token", "maps/heads_induction", "maps/heads_entropy"}
    assert [e.step for e in events.Images("maps/heads_induction")] == [10]  # images: when training ends
    scores = json.loads((run / "metrics.json").read_text())["head_scores"]
    assert [(s["layer"], s["head"], s["step"]) for s in scores] == [(0, 0, 10), (0, 1, 10), (1, 0, 10), (1, 1, 10)]
    last = events.Scalars("probe_heads_layer1/induction_head0")[-1].value
    assert abs(scores[2]["induction"] - last) < 1e-6


def test_null_switches_it_off_and_the_weights_are_the_same_either_way(tmp_path, tiny_text_file):
    on, off = tmp_path / "on", tmp_path / "off"
    train_in_process(on, *RUN, f"data.path={tiny_text_file}", "callbacks.head_scores.every_n_steps=3",
                     "logger=none")
    train_in_process(off, *RUN, f"data.path={tiny_text_file}", "callbacks.head_scores=null", "logger=none")
    assert "head_scores" in json.loads((on / "metrics.json").read_text())
    assert "head_scores" not in json.loads((off / "metrics.json").read_text())
    weights = [torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"] for run in (on, off)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_an_lstm_run_skips_it_with_one_warning(lstm_run):
    assert lstm_run.output.count("HeadScores: the lstm model has no attention") == 1
