"""The text a run's attention views are drawn on (its probe; a translation run's source), chosen when
training starts and recorded in the run folder (``PROBE_FILE``), where the tinylm tab reads it back.
Torch-free: the tab lists runs with it, and opens a run that recorded no probe on this rule applied to the
opening of its data file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tinylm.run_folder import PROBE_FILE

OPENING_CHARS = 16  # a probe taken from the training text: its first line's first characters


def known_probe(text: str, unknown: Callable[[str], list[str]]) -> str | None:
    """``text`` without the characters the vocabulary lacks (``unknown(text)`` lists them), when at least 2
    non-blank characters remain; None otherwise (the probe is then the training text's opening)."""
    missing = set(unknown(text))
    usable = "".join(ch for ch in text if ch not in missing)
    return usable if len(usable.strip()) >= 2 else None


def text_opening(text: str, max_chars: int = OPENING_CHARS) -> str:
    """The first ``max_chars`` characters of ``text``'s first non-blank line, stripped ("" without one)."""
    return next((line[:max_chars] for line in (raw.strip() for raw in text.splitlines()) if line), "")


def record_probe(folder: str | Path, text: str) -> None:
    """Write the run's probe into ``folder`` (the run folder) as ``PROBE_FILE``."""
    path = Path(folder) / PROBE_FILE
    if not path.is_file() or path.read_text(encoding="utf-8", errors="replace") != text:
        path.write_text(text, encoding="utf-8")
