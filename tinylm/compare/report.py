"""The answers of the comparisons: REPORT.md tables and each comparison's validation curves."""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure
from omegaconf import OmegaConf

from tinylm.compare.spec import Comparison
from tinylm.errors import TinyLMError
from tinylm.plots.rendering import save_png
from tinylm.run_folder import HYDRA_DIR, METRICS, events_folder
from tinylm.runs.sweep_jobs import Job, read_job
from tinylm.runs.sweep_report import markdown, split_overrides, table_rows

CURVES_NAME, REPORT_NAME = "curves.png", "REPORT.md"
VAL_TAGS = {"loss": "loss/val", "bpc": "loss/val_bpc", "exact_match": "loss/val_exact_match"}  # metric -> its tag
Y_LABELS = {"loss/val": "validation loss (nats/token)", "loss/val_bpc": "validation bits per character",
            "loss/val_exact_match": "validation exact match (greedy translations)"}
HIGHER_IS_BETTER = ("exact_match",)
TRANSLATION_COLUMNS = {"exact_match": ("val_exact_match", "{:.1%}"), "cer": ("val_cer", "{:.3f}")}


def scalar_curve(run_dir: Path, tag: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one scalar from a run's TensorBoard event files; empty if not logged."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = events_folder(run_dir)
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
    path = run_dir / HYDRA_DIR / "config.yaml"
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


def seeded_section(name: str, comparison: Comparison, out: Path) -> str:
    """The section of a comparison with seeds: mean ± sd per variant at equal steps and at equal wall time,
    the cost per step, and its curves.png (validation loss against steps and against seconds)."""
    from tinylm.compare.runner import seed_dirs
    from tinylm.compare.scores import variant_scores

    names = [*comparison.variants, *(["combined"] if comparison.combine else [])]
    runs = {v: seed_dirs(out, name, v, comparison.seeds) for v in names}
    runs = {v: dirs for v, dirs in runs.items() if all((d / METRICS).exists() for d in dirs)}
    if not runs:
        return ""
    scores = variant_scores(runs)
    base = scores.get(names[0])
    first = next(iter(runs.values()))[0]
    equal_time = next(iter(scores.values()))["equal_time"]
    lines = [f"## {comparison.title} (`{name}`)", "", comparison.note, "", budget(first).replace(
        f", seed {OmegaConf.load(first / HYDRA_DIR / 'config.yaml').seed}", f", seeds 1-{comparison.seeds}"),
        f"Equal steps: {base['steps'] if base else '?'} (evaluate.py, every validation position). Equal wall time: "
        f"{equal_time:.1f} s, the fastest run's whole training (training's loss/val, interpolated). "
        "Mean ± sd over the seeds; Δ: against the baseline's mean (negative: better).", "",
        "| variant | overrides | loss at equal steps | Δ | loss at equal time | Δ | ms/step |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for variant, score in scores.items():
        cells = []
        for key in ("loss_at_steps", "loss_at_time"):
            mean, sd = score[key]
            cells += [f"{mean:.4f} ± {sd:.4f}", f"{mean - base[key][0]:+.4f}" if base else ""]
        own = " ".join(comparison.variants.get(variant, []) or read_overrides(runs[variant][0], first))
        lines.append(f"| {variant} | {own or '(reference)'} | {' | '.join(cells)} | "
                     f"{score['ms_per_step'][0]:.1f} ± {score['ms_per_step'][1]:.1f} |")
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    by_step, by_time = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for i, (variant, score) in enumerate(scores.items()):
        color = f"C{i % 10}" if i < 10 else "black"
        for k, (seconds, values, steps) in enumerate(score["curves"]):
            by_step.plot(steps, values, lw=1, color=color, ls="-" if i < 10 else "--", label=None if k else variant)
            by_time.plot(seconds, values, lw=1, color=color, ls="-" if i < 10 else "--")
    by_time.axvline(equal_time, color="grey", ls="--", lw=1)
    for ax, xlabel in ((by_step, "training step"), (by_time, "seconds of training")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(Y_LABELS["loss/val"])
        ax.grid(True, alpha=0.3)
    by_step.legend(fontsize=7)
    fig.suptitle(f"{comparison.title}: every seed")
    save_png(fig, out / name / CURVES_NAME)
    return "\n".join([*lines, "", f"![{name} curves]({name}/{CURVES_NAME})", ""])


def read_overrides(run_dir: Path, reference: Path) -> list[str]:
    """The overrides a run has beyond the reference run's (the combination's own)."""
    theirs, ours = (list(OmegaConf.load(r / HYDRA_DIR / "overrides.yaml")) for r in (reference, run_dir))
    return [o for o in ours if o not in theirs and not o.startswith("seed=")]


def comparison_section(name: str, comparison: Comparison, out: Path) -> str:
    """The Markdown section of one comparison (and its curves.png), from its run folders."""
    if comparison.seeds > 1:
        return seeded_section(name, comparison, out)
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
