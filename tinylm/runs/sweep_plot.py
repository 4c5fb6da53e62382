"""The sweep report's figure: each job's best val loss against its parameter count, labelled with its settings."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from tinylm.runs.sweep_jobs import Job, short

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def point_label(job: Job, swept: list[str]) -> str:
    """'#3 n_embd=64 num_heads=4': the job and its swept settings by their last name part."""
    settings = " ".join(f"{key.rsplit('.', 1)[-1]}={short(job.overrides.get(key, ''))}" for key in swept)
    return f"#{job.name} {settings}".strip()


def plot(jobs: list[Job], swept: list[str], title: str) -> Figure | None:
    """Best val loss against parameter count (log x) for the jobs that validated; None if none did."""
    done = [j for j in jobs if math.isfinite(j.best_val_loss) and (j.metrics.get("num_params") or 0) > 0]
    if not done:
        return None
    from matplotlib.figure import Figure  # here: a report without a plot starts faster

    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    params = [j.metrics["num_params"] for j in done]
    losses = [j.best_val_loss for j in done]
    ax.scatter(params, losses, color="tab:blue", zorder=2)
    ax.set_xscale("log")
    ax.margins(x=0.1, y=0.1)
    middle = math.sqrt(min(params) * max(params))  # the middle of the log axis
    same_size_below = Counter()  # jobs of one size (e.g. only the heads differ) get stacked labels
    for job, x, y in sorted(zip(done, params, losses, strict=True), key=lambda point: point[2]):
        right_half = x > middle  # label towards the middle, so labels stay inside the axes
        offset = (-5 if right_half else 5, 4 + 9 * same_size_below[x])  # points
        label = ax.annotate(point_label(job, swept), (x, y), xytext=offset, textcoords="offset points",
                            ha="right" if right_half else "left", fontsize=7)
        label.set_in_layout(False)  # a long label must not squeeze the axes
        same_size_below[x] += 1
    best = min(done, key=lambda j: j.best_val_loss)
    ax.scatter([best.metrics["num_params"]], [best.best_val_loss], s=120, facecolors="none", edgecolors="tab:red",
               zorder=3, label=f"best: job {best.name} ({best.best_val_loss:.4f})")
    ax.set_xlabel("parameters (log scale)")
    ax.set_ylabel("best val loss (nats/token)")
    ax.set_title(f"sweep {title}: best val loss vs model size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return fig


def write_plot(fig: Figure | None, path: Path) -> None:
    """The plot into ``path``; without one, no plot of an earlier report is left behind."""
    path.unlink(missing_ok=True)
    if fig is not None:
        from tinylm.plots.figures import save_png

        save_png(fig, path)
