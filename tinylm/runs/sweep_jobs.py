"""One job of a sweep, as its folder tells it: its settings, its metrics, its status and the line that says more.

``read_job`` reads a job folder (``tinylm.runs.job_files`` tells the status from its files); ``Job`` is what
the sweep's report (``tinylm.runs.sweep_report``), its plot (``tinylm.runs.sweep_plot``) and the
comparisons (``tinylm.compare``) show of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.run_folder import CLAIM, ERROR, HYDRA_DIR, LAST_CHECKPOINT, read_marker
from tinylm.runs.folder import original_overrides
from tinylm.runs.job_files import describe, job_status, read_metrics
from tinylm.values import one_line

MISSING, UNREADABLE_OVERRIDES = "missing", f"unreadable {HYDRA_DIR}/overrides.yaml"


@dataclass
class Job:
    """What one job folder says about its job."""

    name: str  # the folder name: Hydra's job number
    overrides: dict[str, str]  # key -> value, as given on the command line
    metrics: dict | None  # its metrics, None when missing or unreadable
    status: str  # a job_files.job_status, "missing" (no folder yet) or ``UNREADABLE_OVERRIDES``
    note: str = ""  # its error line, why its metrics are unreadable, where a running job runs, ...

    @property
    def best_val_loss(self) -> float:
        """The lowest val loss (a metrics file older than best_val_loss: the final one); NaN if none."""
        metrics = self.metrics or {}
        value = metrics.get("best_val_loss", metrics.get("val_loss"))
        return math.nan if value is None else float(value)


def as_dict(overrides: list[str]) -> dict[str, str]:
    """``["model.n_embd=32", ...]`` -> ``{"model.n_embd": "32", ...}``."""
    pairs = (item.split("=", 1) for item in overrides)
    return {pair[0]: pair[1] if len(pair) == 2 else "" for pair in pairs}


def note(folder: Path, status: str, metrics: dict | None) -> str:
    """The one line that says more about a job than its status."""
    marker = read_marker(folder)
    if status == "running" and marker is not None:
        return describe(marker)
    claim = read_marker(folder, CLAIM) if status == "queued" else None
    if claim is not None:
        return f"not started yet by the sweep of {describe(claim)}"
    if (folder / ERROR).is_file():
        try:  # the job's one error line; a damaged file is shown as far as it reads
            return one_line((folder / ERROR).read_text(encoding="utf-8", errors="replace"), 300)
        except OSError as e:
            return f"{ERROR} cannot be read ({e.strerror or e})"
    if marker is not None:  # left behind by a job that was killed
        return f"killed; resumable from {LAST_CHECKPOINT}" if status == "interrupted" else "killed before a checkpoint"
    if metrics is not None and metrics.get("stopped_early"):
        return "stopped early"
    if status == "finished" and metrics is not None and metrics.get("val_loss") is None:
        return "no val loss (never validated)"
    return ""


def read_job(folder: Path, expected: list[str] | None = None) -> Job:
    """A job folder's files; a metrics file that cannot be used makes the job unreadable, not the report.
    ``expected``: the job's overrides as its sweep defines them, for a folder without a Hydra record."""
    try:
        overrides, damaged = original_overrides(folder), None
    except TinyLMError as e:
        overrides, damaged = None, str(e)
    overrides = as_dict(overrides if overrides is not None else expected or [])
    status = job_status(folder)
    try:
        metrics = read_metrics(folder)
    except ValueError as e:
        return Job(folder.name, overrides, None, status, str(e))
    if damaged is not None:
        return Job(folder.name, overrides, metrics, UNREADABLE_OVERRIDES, damaged)
    return Job(folder.name, overrides, metrics, status, note(folder, status, metrics))


def short(value: str) -> str:
    """A long decimal setting (Optuna's '0.0029216561697486') cut to 4 significant digits."""
    try:
        number = float(value)
    except ValueError:
        return value
    return f"{number:.4g}" if "." in value and len(value) > 8 else value
