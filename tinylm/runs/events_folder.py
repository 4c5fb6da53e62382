"""Where a run folder's TensorBoard event files are.

A run writes them into its folder itself (a sweep job: into ``<job>/<swept settings>/``), so that
TensorBoard names the run by its folder, the settings its command line changed. Run folders of earlier
releases hold them in ``tensorboard/`` (a sweep job's in ``tensorboard/<swept settings>/``): every reader
of a run's events goes through ``events_folder``, which finds either.
"""

from __future__ import annotations

from pathlib import Path

EVENT_FILE_PREFIX = "events.out.tfevents"
EARLIER_EVENTS_DIR = "tensorboard"  # where earlier releases wrote a run's events, inside its folder


def holds_event_files(folder: Path) -> bool:
    """``folder`` itself (not below it) holds a TensorBoard event file."""
    try:
        return any(p.name.startswith(EVENT_FILE_PREFIX) for p in folder.iterdir())
    except OSError:
        return False


def events_folder(run_dir: Path) -> Path:
    """The folder of a run's event files: the run folder, or its ``tensorboard/`` in a run of an earlier
    release (the run folder when it has neither)."""
    run_dir = Path(run_dir)
    earlier = run_dir / EARLIER_EVENTS_DIR
    return earlier if not holds_event_files(run_dir) and holds_event_files(earlier) else run_dir
