"""What every architecture's config is checked for: its sizes and its dropout (``size_problems``).

Like the architectures' own checks (``gpt_checks``, ``rnn_checks``, ``seq2seq_checks``) it imports
no torch: train.py checks a config with them before torch is imported (``tinylm.models``).
"""

from __future__ import annotations


def size_problems(cfg: dict, keys: tuple[str, ...]) -> list[str]:
    """Sizes (``keys``) that are not positive integers, and a dropout outside [0, 1)."""
    problems = []
    for key in keys:
        value = cfg.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            problems.append(f"model.{key}={value!r} must be a positive integer")
    dropout = cfg.get("dropout")
    if not isinstance(dropout, int | float) or isinstance(dropout, bool) or not 0 <= dropout < 1:
        problems.append(f"model.dropout={dropout!r} must be in [0, 1)")
    return problems
