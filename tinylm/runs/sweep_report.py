"""Summarise a sweep, finished or still running: one row per job, best val loss first.

    python -m tinylm.runs.sweep_report outputs/multirun/2026-11-29_08-00-00
    python -m tinylm.runs.sweep_report        # the newest sweep under outputs/ (a grid sweep ends with it too)

A sweep folder holds one folder per job, and each job leaves behind what this report reads:
its metrics (``METRICS``, written by ``tinylm.runs.job``), its error line (a job that failed), its claim
(a job that is training), a sweep's claim (a job a running sweep will start) and its recorded ``overrides.yaml``
(that job's command-line settings), as ``tinylm.run_folder`` names them; ``tinylm.runs.job_files`` tells from them
whether a job is finished, running, queued, interrupted, failed or not started. Jobs a grid sweep
defines (its ``multirun.yaml``) that have no folder yet are listed as missing. Only the settings
that differ between jobs become columns; the ones every job shares are listed once above the table.
A job whose metrics cannot be used (not JSON, not an object, a value of the wrong type) is
listed as unreadable (``job_files.UNREADABLE``) with the reason, one whose recorded ``overrides.yaml`` cannot
be read as ``UNREADABLE_OVERRIDES``.

Jobs are ranked by their best val loss (the lowest of all validations; the final one is shown too):
finished jobs first, then the others that validated (interrupted, running), then the rest.

Writes into the sweep folder: ``summary.csv`` (raw numbers, for a spreadsheet or pandas),
``summary.md`` (the table printed here) and ``val_loss_vs_params.png`` (best val loss against the
parameter count, log scale, each point labelled with its job: ``tinylm.runs.sweep_plot``). What cannot
be written there (a read-only folder, a folder in the way) is named in one line after the table.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import Counter
from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.run_folder import CLAIM, CONF_DIR, ERROR, HYDRA_DIR, LAST_CHECKPOINT, MARKER, METRICS, use_project_root
from tinylm.runs.folder import composed_log_dir, newest_sweep_dir
from tinylm.runs.job_files import expected_jobs
from tinylm.runs.sweep_jobs import MISSING, Job, as_dict, read_job, short
from tinylm.values import one_line

# metrics fields shown, in column order
METRICS_SHOWN = ("best_val_loss", "best_step", "val_loss", "val_bpc", "num_params", "tokens_per_second",
                 "wall_seconds", "steps")
FORMATS = {"best_val_loss": "{:.4f}", "best_step": "{}", "val_loss": "{:.4f}", "val_bpc": "{:.3f}",
           "num_params": "{:,}", "tokens_per_second": "{:,.0f}", "wall_seconds": "{:.1f}", "steps": "{}"}
CSV_NAME, MARKDOWN_NAME, PLOT_NAME = "summary.csv", "summary.md", "val_loss_vs_params.png"


def is_job_folder(folder: Path) -> bool:
    names = (f"{HYDRA_DIR}/overrides.yaml", METRICS, ERROR, MARKER, CLAIM, LAST_CHECKPOINT)
    return folder.is_dir() and any((folder / name).exists() for name in names)


def job_order(name: str) -> tuple[bool, int, str]:
    return not name.isdigit(), int(name) if name.isdigit() else 0, name


def find_jobs(sweep_dir: Path) -> list[Job]:
    """Every job folder directly inside ``sweep_dir`` and the jobs its sweep defines without a folder
    yet (missing), in job-number order."""
    if not sweep_dir.is_dir():
        raise TinyLMError(f"sweep folder not found: {sweep_dir} (give a folder like outputs/multirun/<date>_<time>)")
    expected = expected_jobs(sweep_dir) or {}
    folders = {p.name: p for p in sweep_dir.iterdir() if is_job_folder(p) or p.name in expected and p.is_dir()}
    if not folders and not expected:
        raise TinyLMError(
            f"no job folders in {sweep_dir}: a sweep folder holds one folder per job "
            "(run `python train.py -m ...` and pass its outputs/multirun/<date>_<time> folder)"
        )
    jobs = [read_job(folder, expected.get(name)) for name, folder in folders.items()]
    jobs += [Job(name, as_dict(overrides), None, MISSING) for name, overrides in expected.items()
             if name not in folders]
    return sorted(jobs, key=lambda job: job_order(job.name))


def split_overrides(jobs: list[Job]) -> tuple[list[str], dict[str, str]]:
    """(keys whose value differs between jobs, in first-seen order; {key: value} shared by all)."""
    keys = list(dict.fromkeys(key for job in jobs for key in job.overrides))
    swept = [k for k in keys if len({job.overrides.get(k) for job in jobs}) > 1]
    common = {k: jobs[0].overrides[k] for k in keys if k not in swept}
    return swept, common


def ranked(jobs: list[Job]) -> list[Job]:
    """Best val loss first: finished jobs, then the others that validated (interrupted, running);
    the jobs without a val loss (failed, not started, missing) last, in job order."""

    def key(job: Job) -> tuple[int, float]:
        if not math.isfinite(job.best_val_loss):
            return 2, 0.0
        return (0 if job.status == "finished" else 1), job.best_val_loss

    return sorted(jobs, key=key)


def table_rows(jobs: list[Job], swept: list[str]) -> list[dict]:
    """One dict per job (raw values), in ranking order: rank, job, swept settings, metrics, status, note."""
    rows = []
    for rank, job in enumerate(ranked(jobs), start=1):
        metrics = job.metrics or {}
        rows.append({
            "rank": rank,
            "job": job.name,
            **{key: job.overrides.get(key, "") for key in swept},
            **{name: metrics.get(name) for name in METRICS_SHOWN},
            "status": job.status,
            "note": job.note,
        })
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def cell(name: str, value) -> str:
    """A table cell: numbers formatted per column, nothing for missing or NaN, ``|`` escaped, one line."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if name in FORMATS:
        return FORMATS[name].format(value)
    return one_line(short(str(value))).replace("|", "\\|")


def status_counts(jobs: list[Job]) -> str:
    """'3 finished, 1 running, 2 missing': how far the sweep has got."""
    counts = Counter(job.status for job in jobs)
    return ", ".join(f"{n} {status}" for status, n in counts.most_common())


def markdown(rows: list[dict], common: dict[str, str], title: str, jobs: str | None = None) -> str:
    """A Markdown table with padded columns, so it reads as well in a terminal as rendered; ``jobs``:
    a line on the jobs' statuses above it."""
    columns = [c for c in rows[0] if c != "note" or any(row["note"] for row in rows)]
    cells = [[cell(c, row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    numeric = [c in FORMATS or c == "rank" for c in columns]

    def line(values):
        padded = (v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True))
        return "| " + " | ".join(padded) + " |"

    # numbers right-aligned when rendered too: "---:"
    rule = line(["-" * (w - 1) + ":" if num else "-" * w for w, num in zip(widths, numeric, strict=True)])
    shared = " ".join(f"`{k}={v}`" for k, v in common.items()) or "none"
    head = [f"# Sweep {title}", "", *([f"Jobs: {jobs}", ""] if jobs else []), f"Settings shared by every job: {shared}"]
    return "\n".join([*head, "", line(columns), rule, *(line(r) for r in cells)]) + "\n"


def report(sweep_dir: str | Path) -> tuple[str, list[Path], list[str]]:
    """Write summary.csv, summary.md and the plot into ``sweep_dir``: (the Markdown, the files written,
    'name (why)' for each file that could not be written)."""
    sweep_dir = Path(sweep_dir)
    jobs = find_jobs(sweep_dir)
    swept, common = split_overrides(jobs)
    rows = table_rows(jobs, swept)
    text = markdown(rows, common, sweep_dir.name, status_counts(jobs))
    from tinylm.runs.sweep_plot import plot, write_plot  # matplotlib, when a job validated

    fig = plot(jobs, swept, sweep_dir.name)
    writers = {CSV_NAME: lambda path: write_csv(rows, path),
               MARKDOWN_NAME: lambda path: path.write_text(text, encoding="utf-8"),
               PLOT_NAME: lambda path: write_plot(fig, path)}
    written, failed = [], []
    for name, write in writers.items():
        try:
            write(sweep_dir / name)
        except OSError as e:
            failed.append(f"{name} ({e.strerror or e})")
        else:
            written += [sweep_dir / name] if (sweep_dir / name).is_file() else []
    return text, written, failed


def newest_sweep() -> Path:
    """The newest sweep under paths.log_dir (``<checkout>/outputs`` unless TINYLM_ROOT says otherwise), said."""
    use_project_root()
    sweep_dir = newest_sweep_dir(composed_log_dir(CONF_DIR, []))
    print(f"the newest sweep: {sweep_dir}\n")
    return sweep_dir


def print_report(sweep_dir: Path) -> int:
    """Print the sweep's table and what was written; 0, or 1 if a file could not be written."""
    text, written, failed = report(sweep_dir)
    print(text, end="")
    if written:
        print(f"\nwrote {', '.join(p.name for p in written)} in {sweep_dir}")
    if failed:
        print(f"error: could not write {', '.join(failed)} in {sweep_dir}: make that folder writable, or move "
              "what is in the way; the table above is complete", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tinylm.runs.sweep_report",
        description="Tabulate a sweep's jobs, finished or still running, by best val loss (printed; summary.csv, "
                    "summary.md and val_loss_vs_params.png in the sweep folder).",
    )
    parser.add_argument("sweep_dir", nargs="?", help="the sweep's folder, e.g. outputs/multirun/2026-11-29_08-00-00 "
                                                     "(default: the newest sweep under outputs/)")
    args = parser.parse_args(argv)
    try:
        sweep_dir = Path(args.sweep_dir) if args.sweep_dir else newest_sweep()
        return print_report(sweep_dir)
    except TinyLMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
