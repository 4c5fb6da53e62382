"""The answers of the comparisons: REPORT.md tables and each comparison's validation curves."""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure
from omegaconf import OmegaConf

from tinylm.compare.spec import Comparison
from tinylm.errors import TinyLMError
from tinylm.plots.figures import save_png
from tinylm.runs.sweep_report import Job, markdown, read_job, split_overrides, table_rows

CURVES_NAME, REPORT_NAME = "curves.png", "REPORT.md"
VAL_TAGS = {"loss": "loss/val", "bpc": "loss/val_bpc", "exact_match": "loss/val_exact_match"}  # metric -> its tag
Y_LABELS = {"loss/val": "validation loss (nats/token)", "loss/val_bpc": "validation bits per character",
            "loss/val_exact_match": "validation exact match (greedy translations)"}
HIGHER_IS_BETTER = ("exact_match",)
TRANSLATION_COLUMNS = {"exact_match": ("val_exact_match", "{:.1%}"), "cer": ("val_cer", "{:.3f}")}


def scalar_curve(run_dir: Path, tag: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one scalar from a run's TensorBoard event files; empty if not logged."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = run_dir / "tensorboard"
    if not folder.is_dir():
        return [], []
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every point
    events.Reload()
    if tag not in events.Tags().get("scalars", []):
        return [], []
    points = sorted({e.step: e.value for e in events.Scalars(tag)}.items())  # a resumed run may repeat a step
    return [s for s, _ in points], [v for _, v in points]


def curves_figure(runs: dict[str, Path], tag: str, title: str) -> Figure | None:
    """The ``tag`` curve of every run on one chart; None when no run logged it."""
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    drawn = 0
    for variant, run_dir in runs.items():
        steps, values = scalar_curve(run_dir, tag)
        if steps:
            ax.plot(steps, values, marker="o", markersize=3, label=f"{variant} ({values[-1]:.3f})")
            drawn += 1
    if not drawn:
        return None
    ax.set_xlabel("training step")
    ax.set_ylabel(Y_LABELS[tag])
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(title="variant (last value)")
    return fig


def budget(run_dir: Path) -> str:
    """One line stating what every variant of a comparison was trained with, from a run's config."""
    path = run_dir / ".hydra" / "config.yaml"
    if not path.exists():
        return ""
    cfg = OmegaConf.load(path)
    generated = f"the generated {cfg.data.demo} pairs" if "demo" in cfg.data else "the embedded Chinese corpus"
    data = cfg.data.path or generated
    return (f"Budget per run: {cfg.trainer.max_steps} steps x batch {cfg.data.batch_size} x block "
            f"{cfg.model.block_size} tokens, lr {cfg.optim.lr:g}, seed {cfg.seed}; data: {data}.")


def best_line(jobs: list[Job], metric: str) -> str:
    key = f"val_{metric}"
    done = [j for j in jobs if j.metrics and math.isfinite(j.metrics.get(key, math.nan))]
    if not done:
        return ""
    higher = metric in HIGHER_IS_BETTER
    best = (max if higher else min)(done, key=lambda j: j.metrics[key])
    return f"{'Highest' if higher else 'Lowest'} {key}: **{best.name}** ({best.metrics[key]:.4f})."


def translation_cells(run_dir: Path) -> dict[str, str]:
    """A translation run's exact match and character error rate, formatted; nothing for a text run."""
    job = read_job(run_dir)
    metrics = job.metrics or {}
    return {name: fmt.format(metrics[key]) for name, (key, fmt) in TRANSLATION_COLUMNS.items()
            if metrics.get(key) is not None}


def comparison_section(name: str, comparison: Comparison, out: Path) -> str:
    """The Markdown section of one comparison (and its curves.png), from its run folders."""
    runs = {v: out / name / v for v in comparison.variants if (out / name / v).is_dir()}
    if not runs:
        return ""
    jobs = [read_job(run_dir) for run_dir in runs.values()]
    swept, common = split_overrides(jobs)
    # variants in their own order, not ranked by val_loss (which tokenizers cannot be compared by)
    rows = sorted(table_rows(jobs, swept), key=lambda row: list(runs).index(row["job"]))
    rows = [{"variant": row["job"], **translation_cells(runs[row["job"]]), **{k: v for k, v in row.items()
                                                                          if k not in ("rank", "job")}}
            for row in rows]
    table = markdown(rows, common, name).split("\n", 2)[2]  # drop the sweep title line
    lines = [f"## {comparison.title} (`{name}`)", "", comparison.note, "", budget(next(iter(runs.values()))),
             best_line(jobs, comparison.metric), "", table]
    fig = curves_figure(runs, VAL_TAGS[comparison.metric], f"{comparison.title}: validation {comparison.metric}")
    if fig is not None:
        save_png(fig, out / name / CURVES_NAME)
        lines += [f"![{name} curves]({name}/{CURVES_NAME})", ""]
    return "\n".join(lines)


def write_report(out: Path, all_comparisons: dict[str, Comparison]) -> Path:
    """``<out>/REPORT.md`` with a section for every comparison found in ``out``."""
    sections = [s for name, c in all_comparisons.items() if (s := comparison_section(name, c, out))]
    if not sections:
        raise TinyLMError(f"no comparison runs in {out}: run e.g. `python -m tinylm.compare positions --out {out}`")
    path = out / REPORT_NAME
    path.write_text("# Comparisons\n\n" + "\n".join(sections), encoding="utf-8")
    return path
