"""The vocabulary for checking a value a user gave: a config's, a command's option, a query's, a file's.

- ``is_int`` (an int, never a bool: ``True`` is not 1) and ``is_number``;
- ``whole_number`` and ``layer_and_head``: numbers a user typed, parsed rather than tested character by
  character. ``str.isdigit`` is true for superscripts that ``int`` refuses (``'²'.isdigit()``, then
  ``int('²')`` raises), so a number is a number exactly when ``int`` takes it;
- rules (``Rule``: a value -> what is wrong with it, ``"must be ..."``, or None): ``integer``, ``number``,
  ``one_of``, ``choice`` (names and what each means), ``nullable``, ``text`` and ``rule`` for any other
  test, with ``POSITIVE_INT``, ``POSITIVE_NUMBER`` and ``FLAG`` (true or false);
- ``value_problem`` and ``check_value``: one value against a rule, said in one line ``key=value must be ...``;
- ``Option`` and ``check_options``: a command's options described once, as a table of rules, and checked
  in one place, the first bad one refused in one line;
- ``one_line``: an exception (or a text) as one line for an ``error:`` line, cut short if asked.

Characters outside a vocabulary are said by ``tinylm.tokenizer.unknown_characters``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from tinylm.errors import TinyLMError

Rule = Callable[[object], str | None]  # a value -> what is wrong with it ("must be ...", ": choose ..."), or None
SHORT = 200  # characters of an exception's message an error: line keeps when it is cut short (one_line)


def is_int(value) -> bool:
    """An int, and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value, finite: bool = True) -> bool:
    """An int or a float, not a bool (and, unless ``finite`` is false, neither infinite nor NaN)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and (not finite or math.isfinite(value))


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


def rule(test: Callable[[object], bool], wanted: str) -> Rule:
    """A value passes when ``test`` says so; else it "must be ``wanted``"."""
    return lambda v: None if test(v) else f"must be {wanted}"


def integer(low: int | None = None, high: int | None = None, wanted: str | None = None) -> Rule:
    """An int (not a bool) from ``low`` to ``high``, both included (None: no bound)."""
    if wanted is None:
        wanted = ("an integer" if low is None else f"an integer >= {low}") if high is None \
            else f"an integer in [{low}, {high}]"
    return rule(lambda v: is_int(v) and (low is None or v >= low) and (high is None or v <= high), wanted)


def number(low: float, high: float | None = None, brackets: str = "[]", wanted: str | None = None,
           finite: bool = True) -> Rule:
    """A number (not a bool; ``finite`` unless told) >= low (> low with brackets "(.."), and <= high (< high
    with "..)")."""
    if wanted is None:
        above = f"a number > {low:g}" if brackets[0] == "(" else f"a number >= {low:g}"
        wanted = above if high is None else f"a number in {brackets[0]}{low:g}, {high:g}{brackets[1]}"

    def inside(v) -> bool:
        return is_number(v, finite) and (v > low if brackets[0] == "(" else v >= low) and (
            high is None or (v < high if brackets[1] == ")" else v <= high))
    return rule(inside, wanted)


POSITIVE_INT = integer(1, wanted="a positive integer")
POSITIVE_NUMBER = number(0, brackets="(]", wanted="a positive number")
FLAG = rule(lambda v: isinstance(v, bool), "true or false")


def one_of(*options) -> Rule:
    """Exactly one of ``options``: 1 is not true, and 16.0 is not 16."""
    names = ", ".join(str(o).lower() if isinstance(o, bool) else str(o) for o in options)
    return rule(lambda v: any(type(v) is type(o) and v == o for o in options), f"one of {names}")


def choice(meanings: Mapping[str, str]) -> Rule:
    """One of the names of ``meanings`` (name -> what it means), said as ": choose a (...) or b (...)"."""
    said = [f"{name} ({meaning})" for name, meaning in meanings.items()]
    listed = said[0] if len(said) == 1 else f"{', '.join(said[:-1])} or {said[-1]}"
    return lambda v: None if isinstance(v, str) and v in meanings else f": choose {listed}"


def nullable(check: Rule, words: str = " or null") -> Rule:
    """``check``, or None; ``words`` follow what the value must be."""
    return lambda v: None if v is None or check(v) is None else f"{check(v)}{words}"


def text(what: str) -> Rule:
    """A string that is not empty."""
    return rule(lambda v: isinstance(v, str) and bool(v), what)


@dataclass(frozen=True)
class Option:
    """One option of a command: its key, the rule its value follows, and what the refusal adds after
    "must be ..." (what the option is for, an example, what null means)."""

    key: str
    rule: Rule
    hint: str = ""


def value_problem(key: str, value, check: Rule, hint: str = "") -> str | None:
    """``key=value must be ...hint`` (``key=value: choose ...``) when ``value`` breaks ``check``, else None."""
    problem = check(value)
    if problem is None:
        return None
    return f"{key}={value!r}{problem if problem.startswith(':') else ' ' + problem}{hint}"


def check_value(key: str, value, check: Rule, hint: str = "") -> None:
    """Raise ``value_problem`` as one TinyLMError line, if there is one."""
    if problem := value_problem(key, value, check, hint):
        raise TinyLMError(problem)


def check_options(values: Mapping, options: Iterable[Option]) -> None:
    """Raise one TinyLMError line for the first of ``options`` whose value in ``values`` (a config, a dict)
    breaks its rule."""
    for option in options:
        check_value(option.key, values[option.key], option.rule, option.hint)


def one_line(error: BaseException | str, limit: int | None = None) -> str:
    """An exception's message (or a text) with its whitespace and line breaks collapsed, cut to ``limit``
    characters if given; an exception without a message is its type's name."""
    line = " ".join(str(error).split())[:limit]
    return line or (type(error).__name__ if isinstance(error, BaseException) else "")
