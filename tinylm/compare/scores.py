"""The numbers of a comparison with seeds: each run scored by ``evaluate.py`` at its last step, its
validation curve against wall time, its cost per step; means and standard deviations over the seeds.

- at **equal steps**: ``evaluate.py`` (its ``run``, in this process) on the run's last checkpoint, every
  position of the validation split once; kept in ``<run>/evaluate.json`` so a report is rebuilt for free;
- at **equal wall time**: training's ``loss/val`` (its fixed validation batches, a sample), read from the
  TensorBoard events and interpolated at the same number of seconds for every run: the time the
  fastest run needed for all its steps. Seconds count from the start of training (the run's metrics'
  ``wall_seconds`` ends at the last validation);
- **cost per step**: the run's metrics' wall seconds (validations and checkpoints included) over its steps.
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
from pathlib import Path

from tinylm.run_folder import LAST_CHECKPOINT, METRICS, events_folder

EVALUATION = "evaluate.json"


def evaluate_run(run_dir: Path) -> dict:
    """``python evaluate.py`` on the run's last checkpoint, in this process: {"loss", "bpc", "tokens", ...}."""
    saved = run_dir / EVALUATION
    if saved.exists():
        return json.loads(saved.read_text())
    from hydra import compose, initialize_config_dir

    from tinylm.commands import evaluate
    from tinylm.run_folder import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"ckpt_path='{run_dir / LAST_CHECKPOINT}'"])
    with contextlib.redirect_stdout(io.StringIO()):
        result = evaluate.run(cfg)
    saved.write_text(json.dumps(result))
    return result


def timed_curve(run_dir: Path) -> tuple[list[float], list[float], list[int]]:
    """(seconds since training started, loss/val, step) at each validation of a run, from its TensorBoard events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(events_folder(run_dir)), size_guidance={"scalars": 0})
    events.Reload()
    if "loss/val" not in events.Tags().get("scalars", []):
        return [], [], []
    points = sorted({e.step: (e.wall_time, e.value) for e in events.Scalars("loss/val")}.items())
    total = json.loads((run_dir / METRICS).read_text())["wall_seconds"]
    start = points[-1][1][0] - total  # the last validation ends the training's wall time
    return [w - start for _, (w, _) in points], [v for _, (_, v) in points], [s for s, _ in points]


def value_at(seconds: list[float], values: list[float], t: float) -> float:
    """The curve (seconds, values) at time t: linear between validations, the first value before them."""
    if t <= seconds[0]:
        return values[0]
    for (t0, v0), (t1, v1) in zip(zip(seconds, values, strict=True), zip(seconds[1:], values[1:], strict=True),
                                  strict=False):
        if t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return values[-1]


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def variant_scores(runs: dict[str, list[Path]]) -> dict[str, dict]:
    """Per variant (its seed runs): evaluate.py losses at equal steps, loss/val at the equal wall time,
    ms per step; each a (mean, sd) pair, and the equal time itself."""
    metrics = {v: [json.loads((r / METRICS).read_text()) for r in rs] for v, rs in runs.items()}
    equal_time = min(m["wall_seconds"] for ms in metrics.values() for m in ms)
    scores = {}
    for variant, run_dirs in runs.items():
        curves = [timed_curve(r) for r in run_dirs]
        scores[variant] = {
            "steps": metrics[variant][0]["steps"],
            "loss_at_steps": mean_sd([evaluate_run(r)["loss"] for r in run_dirs]),
            "loss_at_time": mean_sd([value_at(t, v, equal_time) for t, v, _ in curves]),
            "ms_per_step": mean_sd([1000 * m["wall_seconds"] / m["steps"] for m in metrics[variant]]),
            "equal_time": equal_time, "curves": curves,
        }
    return scores
