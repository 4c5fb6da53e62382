"""Numbers a user typed are parsed, not tested character by character (tinylm.numbers)."""

from __future__ import annotations

import pytest

from tinylm.numbers import layer_and_head, whole_number


@pytest.mark.parametrize(("value", "number"), [
    ("5", 5), (" 12 ", 12), ("-1", -1), (7, 7), ("٣", 3),  # an Arabic-Indic three is a digit int() reads
    ("²", None), ("1.5", None), ("", None), ("five", None), (True, None), (None, None),
])
def test_whole_number_is_what_int_takes(value, number):
    assert whole_number(value) == number


@pytest.mark.parametrize(("value", "parsed"), [
    ("1.3", (1, 3)), ("1.10", (1, 10)), (0.2, (0, 2)),
    ("².0", None), ("1.²", None), ("1.-1", None), ("3", None), ("1.", None), ("a.b", None), (True, None),
])
def test_layer_and_head(value, parsed):
    assert layer_and_head(value) == parsed
