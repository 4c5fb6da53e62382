"""The HeadScores callback's cheap drawing and writing: a reused grid draws exactly the pixels of a
fresh one, and one event of many scalars reads back as one point per tag."""

from __future__ import annotations

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from tinylm.analysis.callback import add_scalars
from tinylm.analysis.figures import head_grid
from tinylm.plots.figures import render_rgb


def rows_of(values: np.ndarray) -> list[dict]:
    return [{"layer": layer, "head": head, "induction": float(values[layer, head])}
            for layer in range(values.shape[0]) for head in range(values.shape[1])]


def test_a_reused_head_grid_draws_the_pixels_of_a_fresh_one():
    reuse: dict = {}
    first = rows_of(np.zeros((2, 3)))
    later = rows_of(np.array([[0.1, 0.9, np.nan], [1.0, 0.5, 0.0]]))
    drawn = render_rgb(head_grid(first, "induction", numbers=False, vmax=1.0, reuse=reuse))
    again = head_grid(later, "induction", numbers=False, vmax=1.0, reuse=reuse)
    assert len(reuse) == 1  # the same figure, refilled
    fresh = render_rgb(head_grid(later, "induction", numbers=False, vmax=1.0))
    reused = render_rgb(again)
    assert reused.shape == fresh.shape and np.array_equal(reused, fresh)
    assert not np.array_equal(reused, drawn)  # the cells did change
    head_grid(later, "induction", note="another title", numbers=False, vmax=1.0, reuse=reuse)
    assert len(reuse) == 2  # other text: a figure of its own


def test_many_scalars_in_one_event_read_back_one_point_per_tag(tmp_path):
    writer = SummaryWriter(str(tmp_path))
    values = {f"probe_heads_layer{layer}/induction_head{head}": layer + head / 10
              for layer in (0, 1) for head in (0, 1)}
    add_scalars(writer, values, 5)
    add_scalars(writer, {tag: value + 1 for tag, value in values.items()}, 10)
    writer.close()
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0}).Reload()
    assert set(events.Tags()["scalars"]) == set(values)
    for tag, value in values.items():
        points = events.Scalars(tag)
        assert [p.step for p in points] == [5, 10]
        assert np.allclose([p.value for p in points], [value, value + 1])
