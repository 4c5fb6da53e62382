"""What every architecture's config is checked for: its sizes and its dropout (``size_problems``).

Like the architectures' own checks (``gpt_checks``, ``rnn_checks``, ``seq2seq_checks``) it imports
no torch: train.py checks a config with them before torch is imported (``tinylm.models``).
"""

from __future__ import annotations

from tinylm.values import POSITIVE_INT, number, value_problem


def size_problems(cfg: dict, keys: tuple[str, ...]) -> list[str]:
    """Sizes (``keys``) that are not positive integers, and a dropout outside [0, 1)."""
    problems = []
    for key in keys:
        if problem := value_problem(f"model.{key}", cfg.get(key), POSITIVE_INT):
            problems.append(problem)
    if problem := value_problem("model.dropout", cfg.get("dropout"), number(0, 1, "[)", wanted="in [0, 1)")):
        problems.append(problem)
    return problems
