"""Numbers a user typed, parsed rather than tested character by character.

``str.isdigit`` is true for superscripts and other digits that ``int`` refuses (``'²'.isdigit()``, then
``int('²')`` raises), so a check by characters lets through what the conversion then fails on. Every
number of a command line or a query goes through here: it is a number exactly when ``int`` takes it.
"""

from __future__ import annotations


def whole_number(value) -> int | None:
    """``value`` (a string or an int, never a bool) as an int, or None when it is not a whole number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def layer_and_head(value) -> tuple[int, int] | None:
    """``"1.3"`` (or the float 1.3 a YAML list gives) as ``(1, 3)``; None when it is not ``layer.head`` with
    two whole numbers of at least 0."""
    if isinstance(value, bool):
        return None
    layer, dot, head = str(value).strip().partition(".")
    parsed = whole_number(layer), whole_number(head)
    if not dot or None in parsed or min(parsed) < 0:
        return None
    return parsed
