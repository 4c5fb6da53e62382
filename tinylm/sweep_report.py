"""Summarise a finished (or running) sweep: one row per job, best val loss first.

    python -m tinylm.sweep_report outputs/multirun/2026-11-29_08-00-00

A sweep folder holds one folder per job, and each job leaves behind what this report reads:
``metrics.json`` (written by ``tinylm.training.train``), ``error.txt`` (a job whose config was
refused) and ``.hydra/overrides.yaml`` (that job's command-line settings). Only the settings that
differ between jobs become columns; the ones every job shares are listed once above the table. A
job whose metrics.json cannot be used (not JSON, not an object, a value of the wrong type) is
listed as "unreadable metrics.json" with the reason, and one without a val loss (null) last.

Writes into the sweep folder: ``summary.csv`` (raw numbers, for a spreadsheet or pandas),
``summary.md`` (the table printed here) and ``val_loss_vs_params.png`` (val loss against the
parameter count, log scale, each point labelled with its job).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from tinylm.errors import TinyLMError
from tinylm.plotting import save_png
from tinylm.run_folder import original_overrides

# metrics.json fields shown, in column order
METRICS = ("val_loss", "val_bpc", "num_params", "tokens_per_second", "wall_seconds", "steps")
FORMATS = {"val_loss": "{:.4f}", "val_bpc": "{:.3f}", "num_params": "{:,}", "tokens_per_second": "{:,.0f}",
           "wall_seconds": "{:.1f}", "steps": "{}"}
CSV_NAME, MARKDOWN_NAME, PLOT_NAME = "summary.csv", "summary.md", "val_loss_vs_params.png"


@dataclass
class Job:
    """What one job folder says about its job."""

    name: str  # the folder name: Hydra's job number
    overrides: dict[str, str]  # key -> value, as given on the command line
    metrics: dict | None  # metrics.json, None when missing or unreadable
    error: str | None  # error.txt's line, None when the job was not refused
    unreadable: str | None = None  # why metrics.json could not be used, None when it could (or is missing)

    @property
    def status(self) -> str:
        if self.error is not None:
            return "error"
        if self.unreadable is not None:
            return "unreadable metrics.json"
        if self.metrics is None:
            return "no metrics (running, or crashed)"
        if self.metrics.get("interrupted"):
            return "interrupted"
        return "ok" if math.isfinite(self.val_loss) else "no val loss (diverged, or never validated)"

    @property
    def val_loss(self) -> float:
        value = (self.metrics or {}).get("val_loss")
        return math.nan if value is None else float(value)


def read_overrides(folder: Path) -> dict[str, str]:
    """``["model.n_embd=32", ...]`` in .hydra/overrides.yaml -> ``{"model.n_embd": "32", ...}``."""
    pairs = (item.split("=", 1) for item in original_overrides(folder) or [])
    return {pair[0]: pair[1] if len(pair) == 2 else "" for pair in pairs}


JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
              float: "a number", type(None): "null"}


def parse_metrics(text: str) -> dict:
    """metrics.json's object; ValueError saying what is wrong with it. A missing val loss (null,
    or the bare NaN of older files) is allowed: the job then ranks with the unfinished ones."""
    try:
        metrics = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(metrics, dict):
        raise ValueError(f"{JSON_TYPES[type(metrics)]} instead of an object")
    for name in METRICS:
        value = metrics.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"{name} is {JSON_TYPES[type(value)]}, not a number")
    interrupted = metrics.get("interrupted")
    if interrupted is not None and not isinstance(interrupted, bool):
        raise ValueError(f"interrupted is {JSON_TYPES[type(interrupted)]}, not true or false")
    return metrics


def read_job(folder: Path) -> Job:
    """A job folder's files; a metrics.json that cannot be used makes the job unreadable, not the report."""
    metrics_path, error_path = folder / "metrics.json", folder / "error.txt"
    metrics = unreadable = None
    if metrics_path.exists():
        try:
            metrics = parse_metrics(metrics_path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            unreadable = "not UTF-8 text"
        except ValueError as e:
            unreadable = str(e)
        except OSError as e:
            unreadable = e.strerror or str(e)
    error = error_path.read_text(encoding="utf-8").strip() if error_path.exists() else None
    return Job(folder.name, read_overrides(folder), metrics, error, unreadable)


def is_job_folder(folder: Path) -> bool:
    return folder.is_dir() and any(
        (folder / name).exists() for name in (".hydra/overrides.yaml", "metrics.json", "error.txt")
    )


def find_jobs(sweep_dir: Path) -> list[Job]:
    """Every job folder directly inside ``sweep_dir``, in job-number order."""
    if not sweep_dir.is_dir():
        raise TinyLMError(f"sweep folder not found: {sweep_dir} (give a folder like outputs/multirun/<date>_<time>)")
    folders = [p for p in sweep_dir.iterdir() if is_job_folder(p)]
    if not folders:
        raise TinyLMError(
            f"no job folders in {sweep_dir}: a sweep folder holds one folder per job "
            "(run `python train.py -m ...` and pass its outputs/multirun/<date>_<time> folder)"
        )
    folders.sort(key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else 0, p.name))
    return [read_job(p) for p in folders]


def split_overrides(jobs: list[Job]) -> tuple[list[str], dict[str, str]]:
    """(keys whose value differs between jobs, in first-seen order; {key: value} shared by all)."""
    keys = list(dict.fromkeys(key for job in jobs for key in job.overrides))
    swept = [k for k in keys if len({job.overrides.get(k) for job in jobs}) > 1]
    common = {k: jobs[0].overrides[k] for k in keys if k not in swept}
    return swept, common


def ranked(jobs: list[Job]) -> list[Job]:
    """Best val loss first; jobs without a finite val loss (failed, running) last, in job order."""

    def key(job: Job) -> tuple[int, float]:
        return (0, job.val_loss) if math.isfinite(job.val_loss) else (1, 0.0)

    return sorted(jobs, key=key)


def table_rows(jobs: list[Job], swept: list[str]) -> list[dict]:
    """One dict per job (raw values), in ranking order: rank, job, swept settings, metrics, status."""
    rows = []
    for rank, job in enumerate(ranked(jobs), start=1):
        metrics = job.metrics or {}
        rows.append({
            "rank": rank,
            "job": job.name,
            **{key: job.overrides.get(key, "") for key in swept},
            **{name: metrics.get(name) for name in METRICS},
            "status": job.status,
            "error": job.error or job.unreadable or "",
        })
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def short(value: str) -> str:
    """A long decimal setting (Optuna's '0.0029216561697486') cut to 4 significant digits."""
    try:
        number = float(value)
    except ValueError:
        return value
    return f"{number:.4g}" if "." in value and len(value) > 8 else value


def cell(name: str, value) -> str:
    """A table cell: numbers formatted per column, nothing for missing or NaN, ``|`` escaped."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if name in FORMATS:
        return FORMATS[name].format(value)
    return short(str(value)).replace("|", "\\|")


def markdown(rows: list[dict], common: dict[str, str], title: str) -> str:
    """A Markdown table with padded columns, so it reads as well in a terminal as rendered."""
    columns = [c for c in rows[0] if c != "error" or any(row["error"] for row in rows)]
    cells = [[cell(c, row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    numeric = [c in FORMATS or c == "rank" for c in columns]

    def line(values):
        padded = (v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True))
        return "| " + " | ".join(padded) + " |"

    # numbers right-aligned when rendered too: "---:"
    rule = line(["-" * (w - 1) + ":" if num else "-" * w for w, num in zip(widths, numeric, strict=True)])
    shared = " ".join(f"`{k}={v}`" for k, v in common.items()) or "none"
    return "\n".join([f"# Sweep {title}", "", f"Settings shared by every job: {shared}", "",
                      line(columns), rule, *(line(r) for r in cells)]) + "\n"


def point_label(job: Job, swept: list[str]) -> str:
    """'#3 n_embd=64 num_heads=4': the job and its swept settings by their last name part."""
    settings = " ".join(f"{key.rsplit('.', 1)[-1]}={short(job.overrides.get(key, ''))}" for key in swept)
    return f"#{job.name} {settings}".strip()


def plot(jobs: list[Job], swept: list[str], title: str) -> Figure | None:
    """Val loss against parameter count (log x) for the jobs that finished; None if none did."""
    done = [j for j in jobs if j.metrics and math.isfinite(j.val_loss) and (j.metrics.get("num_params") or 0) > 0]
    if not done:
        return None
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    params = [j.metrics["num_params"] for j in done]
    losses = [j.val_loss for j in done]
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
    best = min(done, key=lambda j: j.val_loss)
    ax.scatter([best.metrics["num_params"]], [best.val_loss], s=120, facecolors="none", edgecolors="tab:red",
               zorder=3, label=f"best: job {best.name} ({best.val_loss:.4f})")
    ax.set_xlabel("parameters (log scale)")
    ax.set_ylabel("final val loss (nats/token)")
    ax.set_title(f"sweep {title}: val loss vs model size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return fig


def report(sweep_dir: str | Path) -> tuple[str, list[Path]]:
    """Write summary.csv, summary.md and the plot into ``sweep_dir``: (the Markdown, the files)."""
    sweep_dir = Path(sweep_dir)
    jobs = find_jobs(sweep_dir)
    swept, common = split_overrides(jobs)
    rows = table_rows(jobs, swept)
    written = [sweep_dir / CSV_NAME, sweep_dir / MARKDOWN_NAME]
    write_csv(rows, written[0])
    text = markdown(rows, common, sweep_dir.name)
    written[1].write_text(text, encoding="utf-8")
    fig = plot(jobs, swept, sweep_dir.name)
    (sweep_dir / PLOT_NAME).unlink(missing_ok=True)  # never leave an earlier report's plot behind
    if fig is not None:
        written.append(save_png(fig, sweep_dir / PLOT_NAME))
    return text, written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tinylm.sweep_report",
        description="Tabulate a sweep's jobs by val loss (printed; summary.csv, summary.md and "
                    "val_loss_vs_params.png in the sweep folder).",
    )
    parser.add_argument("sweep_dir", help="the sweep's folder, e.g. outputs/multirun/2026-11-29_08-00-00")
    args = parser.parse_args(argv)
    try:
        text, written = report(args.sweep_dir)
    except TinyLMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(text, end="")
    print(f"\nwrote {', '.join(p.name for p in written)} in {args.sweep_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
