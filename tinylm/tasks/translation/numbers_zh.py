"""The translation demo that needs no file: Chinese numerals to Arabic digits (``experiment=numbers_zh``).

``三千零五`` -> ``3005``, ``十二`` -> ``12``, ``一万零二百`` -> ``10200``. The output order is not the
input order: a digit answers to a numeral and to the unit after it (``千``, ``百``, ``十``), a ``0``
to a ``零`` that stands for one or more zeros, or to nothing at all (the zeros of ``三千`` -> ``3000``),
so the cross-attention has to find, for each digit, which characters of the source say it.
"""

from __future__ import annotations

import random

DEMOS = ("numbers_zh",)  # what data.demo names: the generated pairs of data=pairs without a path
DIGITS = "零一二三四五六七八九"
UNITS = ("", "十", "百", "千")


def below_10000(n: int, leading: bool) -> str:
    """1 <= n <= 9999 in Chinese numerals; ``leading``: n is the start of the number (十二, not 一十二)."""
    text, zeros = "", False
    for power in range(3, -1, -1):
        digit = n // 10**power % 10
        if digit == 0:
            zeros = bool(text)  # a run of zeros inside the number is read as one 零
            continue
        if zeros:
            text += "零"
            zeros = False
        if not (digit == 1 and power == 1 and leading and not text):  # 十二, but 一百一十二
            text += DIGITS[digit]
        text += UNITS[power]
    return text


def chinese_numeral(n: int) -> str:
    """1 <= n <= 99999 in Chinese numerals: 三千零五, 十二, 一万零二百, 二万三千."""
    if not 1 <= n <= 99_999:
        raise ValueError(f"{n} is outside 1 .. 99999")
    high, low = divmod(n, 10_000)
    if not high:
        return below_10000(low, leading=True)
    text = DIGITS[high] + "万"
    if low:
        text += ("零" if low < 1000 else "") + below_10000(low, leading=False)
    return text


def numbers_zh_pairs(count: int, high: int, seed: int) -> list[tuple[str, str]]:
    """``count`` distinct numbers in 1 .. ``high``, drawn with ``seed``, as (Chinese, Arabic) pairs."""
    numbers = random.Random(seed).sample(range(1, high + 1), min(count, high))
    return [(chinese_numeral(n), str(n)) for n in numbers]
