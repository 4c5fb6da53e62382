"""The raw attention weights AttentionMaps logs for the tinylm tab: their summary, their cap per run, and
a run's weights unchanged by them."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from conftest import TINY_MODEL, train_in_process
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util
from torch.utils.tensorboard import SummaryWriter

from tinylm.callbacks.attention import WEIGHTS_TAG
from tinylm.errors import TinyLMError
from tinylm.tasks.text.attention import AttentionMaps


def maps(step: int) -> list[torch.Tensor]:
    """Two layers of 2 heads' causal attention over 4 tokens (h, T, T), different at each step."""
    torch.manual_seed(step)
    scores = torch.randn(2, 2, 4, 4).masked_fill(~torch.ones(4, 4, dtype=torch.bool).tril(), float("-inf"))
    return list(scores.softmax(-1))


def test_the_weights_are_a_float16_tensor_with_the_tokens_and_stop_at_the_cap(tmp_path, caplog):
    callback = AttentionMaps(weights_max_kib=1)  # 1,024 bytes: 8 steps of 2 x 2 x 4 x 4 float16 (128 bytes)
    callback._pieces = ["自", "注", "\n", " "]
    writer = SummaryWriter(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="tinylm.callbacks"):
        for step in range(1, 11):
            callback.log_weights(writer, maps(step), step)
    writer.close()
    assert [r.getMessage() for r in caplog.records] == [
        "AttentionMaps: the raw attention weights reached AttentionMaps.weights_max_kib; not logged from step 9 on "
        "(the images go on)"]
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0}).Reload()
    logged = events.Tensors(WEIGHTS_TAG)
    assert [e.step for e in logged] == [1, 2, 3, 4, 5, 6, 7, 8]
    for event in logged:
        array = tensor_util.make_ndarray(event.tensor_proto)
        assert array.dtype == np.float16 and array.shape == (2, 2, 4, 4)
        np.testing.assert_allclose(array, torch.stack(maps(event.step)).numpy(), atol=1e-3)
    metadata = events.SummaryMetadata(WEIGHTS_TAG)
    assert metadata.plugin_data.plugin_name == "tinylm"
    assert json.loads(metadata.plugin_data.content) == {"tokens": ["自", "注", "\n", " "]}


def test_a_cap_of_0_logs_none_and_says_nothing(tmp_path, caplog):
    callback = AttentionMaps(weights_max_kib=0)
    writer = SummaryWriter(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="tinylm.callbacks"):
        callback.log_weights(writer, maps(1), 1)
    writer.close()
    assert caplog.records == []
    assert WEIGHTS_TAG not in EventAccumulator(str(tmp_path)).Reload().Tags()["tensors"]


@pytest.mark.parametrize("bad", [-1, 1.5, "512", True])
def test_a_bad_cap_or_interval_is_one_line(bad):
    with pytest.raises(TinyLMError, match=r"AttentionMaps.weights_max_kib=.* must be an integer >= 0"):
        AttentionMaps(weights_max_kib=bad)
    with pytest.raises(TinyLMError, match=r"AttentionMaps.weights.every_n_steps=.* must be a positive integer"):
        AttentionMaps(weights_every_n_steps=bad)


@pytest.mark.slow  # two tiny runs
def test_the_weights_are_logged_between_the_images_and_leave_the_runs_weights_bit_for_bit(tmp_path, tiny_text_file):
    run = [*TINY_MODEL, "model.num_layers=2", "data.repeat=30", "trainer.max_steps=12", "trainer.val_check_interval=12",
           "callbacks.attention_maps.every_n_steps=3", "~callbacks.sample_text", "~callbacks.next_token_probes",
           "~callbacks.head_scores", "~callbacks.embedding_projector", f"data.path={tiny_text_file}"]
    train_in_process(tmp_path / "on", *run, "callbacks.attention_maps.weights_every_n_steps=2")
    train_in_process(tmp_path / "off", *run, "callbacks.attention_maps.weights_max_kib=0")
    on = EventAccumulator(str(tmp_path / "on"), size_guidance={"tensors": 0, "images": 0}).Reload()
    assert [e.step for e in on.Tensors(WEIGHTS_TAG)] == [2, 3, 4, 6, 8, 9, 10, 12]  # with the images, every 2 steps
    assert [e.step for e in on.Images("maps/attention_layer0")] == [3, 6, 9, 12]
    weights = [torch.load(tmp_path / name / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
               for name in ("on", "off")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_a_runs_events_are_tensorboards_runs_of_its_folder_and_below_it(tmp_path):
    """The events of a run folder (``<name>``), a sweep job's (``<name>/<settings>``) and an earlier release's
    (``<name>/tensorboard[/...]``) are the run's; another run's, even one whose name starts alike, are not."""
    from types import SimpleNamespace

    from tinylm.explorer.events import event_runs
    from tinylm.explorer.runs import RunFolder

    names = ["runs/a", "runs/ab", "runs/b/tensorboard", "multirun/t/0/model.n_embd=32", "multirun/t/1"]
    data = SimpleNamespace(list_runs=lambda ctx, experiment_id: [SimpleNamespace(run_name=n) for n in names])
    runs = {name: event_runs(data, None, "", RunFolder(name, tmp_path))
            for name in ("runs/a", "runs/b", "multirun/t/0", ".")}
    assert runs == {"runs/a": ["runs/a"], "runs/b": ["runs/b/tensorboard"],
                    "multirun/t/0": ["multirun/t/0/model.n_embd=32"], ".": sorted(names)}
