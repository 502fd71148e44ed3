"""Numeric answers compare exactly (issue 9, fault 1): a seeded property test over exact rationals from
1e-40 to 1e40, and the unit rules of :mod:`sagerl.grading.numbers`."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from sagerl.grading import answers_match
from sagerl.grading.numbers import REL_TOL, normalize_thousands

SEED = 20_260_901


def _random_value(rng: random.Random) -> Fraction:
    """A rational n/d * 10^e with |value| roughly in [1e-40, 1e40]."""
    n = rng.randint(1, 999_999)
    d = rng.choice([1, 2, 3, 4, 5, 7, 8, 16, 25, 125, 999, 1024, 65_537])
    e = rng.randint(-40, 34)
    value = Fraction(n, d) * Fraction(10) ** e
    return -value if rng.random() < 0.2 else value


def _decimal(value: Fraction) -> str | None:
    """The exact decimal of ``value``, or None when it does not terminate."""
    d = value.denominator
    twos = fives = 0
    while d % 2 == 0:
        d, twos = d // 2, twos + 1
    while d % 5 == 0:
        d, fives = d // 5, fives + 1
    if d != 1:
        return None
    places = max(twos, fives)
    scaled = abs(value) * 10**places
    digits = str(scaled.numerator).rjust(places + 1, "0")
    text = digits if places == 0 else digits[:-places] + "." + digits[-places:]
    return ("-" if value < 0 else "") + text


def _grouped(n: int, separator: str) -> str:
    text = f"{abs(n):,}".replace(",", separator)
    return ("-" if n < 0 else "") + text


def _forms(value: Fraction, rng: random.Random) -> list[str]:
    """Exact spellings of ``value``: fractions (reduced or not), powers, products, decimals, grouped digits."""
    p, q = value.numerator, value.denominator
    sign = "-" if p < 0 else ""
    k = rng.randint(2, 9)
    forms = [rf"\frac{{{p}}}{{{q}}}", rf"{sign}\frac{{{abs(p) * k}}}{{{q * k}}}", f"{p}/{q}"]
    # n * 10^e / d with the power of ten written as a power
    e = 0
    m = abs(p)
    while m % 10 == 0 and m:
        m, e = m // 10, e + 1
    qq = q
    while qq % 10 == 0:
        qq, e = qq // 10, e - 1
    forms.append(rf"{sign}\frac{{{m} \cdot 10^{{{e}}}}}{{{qq}}}")
    forms.append(rf"{sign}{m} \cdot 10^{{{e}}} \cdot \frac{{1}}{{{qq}}}")
    decimal = _decimal(value)
    if decimal is not None:
        forms.append(decimal)
    if q == 1:
        forms += [_grouped(p, "{,}"), _grouped(p, "\\,"), _grouped(p, ",")]
    return forms


def test_distinct_exact_values_are_never_equal() -> None:
    rng = random.Random(SEED)
    checked = 0
    for _ in range(60):
        v = _random_value(rng)
        neighbours = [
            v * 2,
            v / 2,
            v * 10,
            v + Fraction(1, 10**45),
            v * (1 + Fraction(1, 10**12)),  # a relative difference far below any rounding
            -v,
        ]
        for w in neighbours:
            a, b = rng.choice(_forms(v, rng)), rng.choice(_forms(w, rng))
            if _decimal(v) is not None and a == _decimal(v) and abs(w - v) <= REL_TOL * abs(v):
                continue  # a decimal is compared with a relative tolerance: covered below
            if _decimal(w) is not None and b == _decimal(w) and abs(w - v) <= REL_TOL * abs(v):
                continue
            assert not answers_match(b, a), (a, b)
            checked += 1
    assert checked >= 300


def test_equal_values_written_differently_are_always_equal() -> None:
    rng = random.Random(SEED + 1)
    checked = 0
    for _ in range(80):
        v = _random_value(rng)
        if rng.random() < 0.3:
            v = Fraction(round(v)) or Fraction(7)  # integers, for the digit-grouping forms
        forms = _forms(v, rng)
        for a in forms:
            b = rng.choice(forms)
            assert answers_match(b, a), (a, b)
            checked += 1
    assert checked >= 400


def test_decimals_compare_with_a_relative_tolerance_at_every_magnitude() -> None:
    rng = random.Random(SEED + 2)
    for _ in range(60):
        exponent = rng.randint(-40, 40)
        mantissa = Fraction(rng.randint(100_000, 999_999), 100_000)  # 6 significant digits
        value = mantissa * Fraction(10) ** exponent
        written = rf"{float(mantissa):.5f} \times 10^{{{exponent}}}"
        assert answers_match(written, rf"\frac{{{value.numerator}}}{{{value.denominator}}}")
        far = value * (1 + 10 * REL_TOL)  # ten times the tolerance away
        assert not answers_match(written, rf"\frac{{{far.numerator}}}{{{far.denominator}}}")
        near = value * (1 + REL_TOL / 10)
        assert answers_match(written, rf"\frac{{{near.numerator}}}{{{near.denominator}}}")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1{,}000", "1000"),
        (r"1\,000\,000", "1000000"),
        (r"2\ 500", "2500"),
        ("1 000 000", "1000000"),
        ("1, 000", "1, 000"),  # a list
        ("(1{,}000, 3)", "(1000, 3)"),
        ("12{,}34", "12{,}34"),  # not a group of three digits
        (r"x^{2}\,dx", r"x^{2}\,dx"),
        ("1.000{,}5", "1.000{,}5"),  # not after a decimal point
    ],
)
def test_normalize_thousands(text: str, expected: str) -> None:
    assert normalize_thousands(text) == expected
