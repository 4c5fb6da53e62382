"""The vocabulary for checking values (tinylm.values): ints that are not bools, rules, options, one line."""

from __future__ import annotations

import pytest

from tinylm.errors import TinyLMError
from tinylm.values import (
    FLAG,
    POSITIVE_INT,
    POSITIVE_NUMBER,
    Option,
    check_options,
    check_value,
    choice,
    integer,
    is_int,
    is_number,
    layer_and_head,
    nullable,
    number,
    one_line,
    one_of,
    rule,
    value_problem,
    whole_number,
)


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


@pytest.mark.parametrize(("value", "whole"), [(3, True), (-1, True), (True, False), (False, False), (3.0, False),
                                              ("3", False), (None, False)])
def test_is_int_is_an_int_and_never_a_bool(value, whole):
    assert is_int(value) is whole


def test_is_number_refuses_bools_and_by_default_what_is_not_finite():
    assert is_number(1) and is_number(0.5) and not is_number(True) and not is_number("1")
    assert not is_number(float("nan")) and not is_number(float("inf"))
    assert is_number(float("inf"), finite=False) and not is_number(True, finite=False)


@pytest.mark.parametrize(("check", "value", "problem"), [
    (POSITIVE_INT, 0, "must be a positive integer"),
    (POSITIVE_INT, True, "must be a positive integer"),
    (POSITIVE_INT, 2.0, "must be a positive integer"),
    (POSITIVE_INT, 1, None),
    (integer(), "a", "must be an integer"),
    (integer(), -7, None),
    (integer(0), -1, "must be an integer >= 0"),
    (integer(2, 99_999), 100_000, "must be an integer in [2, 99999]"),
    (integer(2, 99_999), 99_999, None),
    (integer(1, wanted="an integer from 1 to block_size"), 0, "must be an integer from 1 to block_size"),
    (POSITIVE_NUMBER, 0, "must be a positive number"),
    (POSITIVE_NUMBER, 1e-9, None),
    (number(0), -0.5, "must be a number >= 0"),
    (number(0), float("inf"), "must be a number >= 0"),
    (number(0, finite=False), float("inf"), None),
    (number(0, finite=False), float("nan"), "must be a number >= 0"),
    (number(0, brackets="(]"), 0, "must be a number > 0"),
    (number(0, 1, "()"), 1, "must be a number in (0, 1)"),
    (number(0, 1, "[)"), 0, None),
    (number(0, 1, "(]", wanted="in (0, 1]"), 1.5, "must be in (0, 1]"),
    (one_of(True, False), 1, "must be one of true, false"),
    (one_of(16, "bf16"), 16.0, "must be one of 16, bf16"),
    (one_of(16, "bf16"), 16, None),
    (nullable(POSITIVE_INT), None, None),
    (nullable(POSITIVE_INT), 0, "must be a positive integer or null"),
    (nullable(integer(1), ", or null"), 0, "must be an integer >= 1, or null"),
    (rule(lambda v: isinstance(v, list), "a list"), (1,), "must be a list"),
])
def test_a_rule_says_what_a_value_must_be(check, value, problem):
    assert check(value) == problem


OPTIONS = (Option("seed", nullable(integer(), ""), ", or null for a fresh one"),
           Option("beam_size", integer(1), " (1: no beam search)"))


def test_check_options_refuses_the_first_bad_option_in_one_line():
    check_options({"seed": None, "beam_size": 1}, OPTIONS)
    with pytest.raises(TinyLMError, match=r"^beam_size=0 must be an integer >= 1 \(1: no beam search\)$"):
        check_options({"seed": 3, "beam_size": 0}, OPTIONS)
    with pytest.raises(TinyLMError, match=r"^seed='x' must be an integer, or null for a fresh one$"):
        check_options({"seed": "x", "beam_size": 0}, OPTIONS)


def test_a_choice_names_each_option_and_what_it_means():
    split = choice({"val": "training's validation split", "all": "the whole text"})
    assert split("val") is None and split(1) is not None
    assert split("test") == ": choose val (training's validation split) or all (the whole text)"
    assert choice({"a": "1", "b": "2", "c": "3"})("d") == ": choose a (1), b (2) or c (3)"
    with pytest.raises(TinyLMError, match=r"^split='test': choose val \(training's validation split\) or all"):
        check_options({"split": "test"}, [Option("split", split)])


def test_one_value_is_said_as_key_equals_value():
    assert value_problem("model.n_embd", 0, POSITIVE_INT) == "model.n_embd=0 must be a positive integer"
    assert value_problem("model.n_embd", 8, POSITIVE_INT) is None
    assert value_problem("model.tied_head", "yes", FLAG) == "model.tied_head='yes' must be true or false"
    check_value("HeadScores.draws", 2, integer(1))
    with pytest.raises(TinyLMError, match=r"^HeadScores.draws=0 must be an integer >= 1 \(strings\)$"):
        check_value("HeadScores.draws", 0, integer(1), " (strings)")


def test_one_line_collapses_an_exception_and_cuts_it_when_asked():
    error = ValueError("first line\n  second\tline  ")
    assert one_line(error) == "first line second line"
    assert one_line(error, 10) == "first line"
    assert one_line(KeyError()) == "KeyError"
    assert one_line("a text\non two lines") == "a text on two lines"
    assert one_line("") == ""
    assert one_line("x" * 500) == "x" * 500 and len(one_line(RuntimeError("y" * 500), 200)) == 200
