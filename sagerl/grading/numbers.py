"""Exact comparison of numeric answers, where math-verify rounds.

math-verify compares numbers after rounding to a fixed number of decimals (``float_rounding=6``) or after
chopping tiny values to zero (``evalf(chop=True)``), so ``\\frac{1}{2^{98}}`` equals ``\\frac{1}{2^{99}}``
and ``0.0000001`` equals ``0.0000002``. sagerl decides numeric answers itself, on the SymPy expressions
math-verify parsed, before asking math-verify:

- **exact values** (integers, fractions, powers with integer exponents, factorials, and sums and products of
  these; rationals of any size) compare exactly, in rational arithmetic;
- a value with a **decimal** in it (a SymPy ``Float``: ``0.5``, ``1.5\\times 10^{-7}``) equals another value
  when they differ by at most :data:`REL_TOL` relative to the larger magnitude (``0.333333`` equals
  ``\\frac13``; near 1 this is no looser than math-verify's 6 decimals; ``0.0000001`` and ``0.0000002``
  differ);
- other exact numbers (``\\sqrt{2}/2^{99}``, ``\\pi/4``) compare at 50 significant digits, so distinct
  values of any magnitude never become equal;
- a tuple or set of numbers compares element by element (a set in any order), with the same rules;
- an assignment ``x = 5`` given for a bare reference ``5`` is read as its right-hand side.

Anything else (symbols, equations, intervals, percentages, matrices, text) is left to math-verify
(:func:`numbers_equal` returns None). Numbers too large to build (``9^{9^{9^9}}``) are left to it too,
so this never runs a computation whose size the model chose.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ["REL_TOL", "canonical_form", "normalize_thousands", "numbers_equal"]

REL_TOL = Fraction(1, 10**6)
"""Relative tolerance when either value holds a decimal: \\|a - b\\| <= REL_TOL * max(\\|a\\|, \\|b\\|)."""

_EXACT_DIGITS = 50
_KEY_DIGITS = 30  # significant digits of an irrational number's canonical form
_EXACT_REL_TOL = 1e-30
_MAX_BITS = 1_000_000  # the largest exact power built: about 300,000 decimal digits
_MAX_FACTORIAL = 20_000

# "1{,}000", "1\,000", "1\ 000", "1~000", "1 000": thousands separators between groups of three digits.
_THOUSANDS = re.compile(r"(?<![\d.])\d{1,3}(?:(?:\{,\}|\\,|\\ |~| )\d{3})+(?![\d])")
_SEPARATOR = re.compile(r"\{,\}|\\,|\\ |~| ")


class _TooLarge(Exception):
    """A value whose exact construction would cost more than the limits allow."""


def normalize_thousands(text: str) -> str:
    """Drop thousands separators inside numbers: ``1{,}000``, ``1\\,000``, ``1\\ 000``, ``1~000`` and ``1 000``
    become ``1000`` (math-verify reads a plain ``1,000`` itself). Only groups of exactly three digits
    after a group of one to three count, so ``(1, 4)`` and ``12{,}34`` are left alone."""
    return _THOUSANDS.sub(lambda m: _SEPARATOR.sub("", m.group(0)), text)


def _rational(expr) -> Fraction | None:
    """The exact value of ``expr`` when it is built from rationals, decimals, integer powers and
    factorials; None otherwise. Raises _TooLarge past the size limits."""
    import sympy

    if isinstance(expr, sympy.Integer | sympy.Rational):
        return Fraction(int(expr.p), int(expr.q))
    if isinstance(expr, sympy.Float):
        if not expr.is_finite:
            return None
        if abs(int(expr._mpf_[2])) > _MAX_BITS:  # binary exponent
            raise _TooLarge
        return Fraction(str(expr))  # the decimal as written (up to the Float's 15+ significant digits)
    if isinstance(expr, sympy.Add | sympy.Mul):
        values = [_rational(arg) for arg in expr.args]
        if any(v is None for v in values):
            return None
        if isinstance(expr, sympy.Add):
            return sum(values, Fraction(0))  # type: ignore[arg-type]
        product = Fraction(1)
        for v in values:
            product *= v  # type: ignore[operator]
        return product
    if isinstance(expr, sympy.Pow):
        base, exponent = _rational(expr.base), _rational(expr.exp)
        if base is None or exponent is None or exponent.denominator != 1:
            return None
        bits = max(abs(base.numerator), abs(base.denominator), 2).bit_length()
        if abs(exponent.numerator) * bits > _MAX_BITS:
            raise _TooLarge
        if base == 0 and exponent < 0:
            return None
        return base ** int(exponent)
    if isinstance(expr, sympy.factorial):
        n = _rational(expr.args[0])
        if n is None or n.denominator != 1 or n < 0:
            return None
        if n > _MAX_FACTORIAL:
            raise _TooLarge
        return Fraction(math.factorial(int(n)))
    return None


def _is_number(expr) -> bool:
    import sympy

    if not isinstance(expr, sympy.Expr) or isinstance(expr, sympy.UnevaluatedExpr):
        return False
    if expr.free_symbols or expr.has(sympy.UnevaluatedExpr):  # percentages: math-verify's own rules
        return False
    return bool(expr.is_number)


def _close(a: Fraction, b: Fraction, rel_tol: Fraction) -> bool:
    return abs(a - b) <= rel_tol * max(abs(a), abs(b))


def _scalars_equal(gold, pred) -> bool | None:
    import sympy

    if not (_is_number(gold) and _is_number(pred)):
        return None
    decimal = gold.has(sympy.Float) or pred.has(sympy.Float)
    a, b = _rational(gold), _rational(pred)
    if a is not None and b is not None:
        return _close(a, b, REL_TOL if decimal else Fraction(0))
    x, y = sympy.N(gold, _EXACT_DIGITS), sympy.N(pred, _EXACT_DIGITS)
    if not (x.is_finite and y.is_finite) or x.has(sympy.nan) or y.has(sympy.nan):
        return None
    scale = max(abs(x), abs(y))
    if not scale.is_number or scale.free_symbols:
        return None
    tolerance = float(REL_TOL) if decimal else _EXACT_REL_TOL
    return bool(abs(x - y) <= tolerance * scale)


def _values_equal(gold, pred) -> bool | None:
    import sympy

    if isinstance(gold, sympy.Tuple) and isinstance(pred, sympy.Tuple):
        if len(gold) != len(pred):
            return False
        verdicts = [_values_equal(g, p) for g, p in zip(gold, pred, strict=True)]
        return None if None in verdicts else all(verdicts)
    if isinstance(gold, sympy.FiniteSet) and isinstance(pred, sympy.FiniteSet):
        if len(gold) != len(pred):
            return None  # math-verify decides (repeated elements, sets against relations...)
        unmatched = list(pred.args)
        for g in gold.args:
            for i, p in enumerate(unmatched):
                verdict = _values_equal(g, p)
                if verdict is None:
                    return None
                if verdict:
                    del unmatched[i]
                    break
            else:
                return False
        return True
    return _scalars_equal(gold, pred)


def numbers_equal(gold, pred) -> bool | None:
    """Compare two parsed answers (SymPy objects from ``math_verify.parse``) when both are numbers.

    Returns:
        True or False when both are numbers, or tuples or sets of numbers (rules in the module docstring);
        None when math-verify should decide (anything else, or a number too large to build exactly).
    """
    import sympy

    if isinstance(pred, sympy.Eq) and isinstance(pred.lhs, sympy.Symbol) and not isinstance(gold, sympy.Eq):
        pred = pred.rhs  # "x = 5" for the reference "5"
    try:
        return _values_equal(gold, pred)
    except _TooLarge:
        return None
    except (TypeError, ValueError, ArithmeticError, AttributeError, RecursionError):
        return None


def canonical_form(expr) -> str:
    """A string that two parsed answers (SymPy objects from ``math_verify.parse``) share when they are the same
    value: the identity of a final answer, for counting and clustering answers (where a pairwise comparison cannot
    serve: counts key each answer alone).

    - an exact number or a decimal: its exact rational value, ``p/q`` in lowest terms (``1/2``, ``0.5``,
      ``\\frac{2}{4}`` and ``0.50`` all give ``1/2``; ``2^{10}`` gives ``1024``);
    - another number (``\\sqrt{2}/2``, ``\\frac{1}{\\sqrt{2}}``, ``\\pi``): its value to 30 significant digits;
    - an assignment ``x = v``: the form of v (as the grader reads ``x = 5`` for ``5``);
    - a tuple: its elements' forms in order; a set: its elements' forms, sorted;
    - anything else (symbols, expressions, intervals, percentages): SymPy's printed form, in which the parser has
      already ordered sums and products (``x + 1`` for ``1+x``).

    Coarser than the grader in one way: a decimal is its exact value, so ``0.333333`` and ``\\frac13`` (equal for
    the grader, within :data:`REL_TOL`) are two forms. Numbers too large to build exactly keep the printed form.
    """
    import sympy

    if isinstance(expr, sympy.Eq) and isinstance(expr.lhs, sympy.Symbol):
        return canonical_form(expr.rhs)
    if isinstance(expr, sympy.Tuple):
        return "(" + ", ".join(canonical_form(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.FiniteSet):
        return "{" + ", ".join(sorted(canonical_form(a) for a in expr.args)) + "}"
    if _is_number(expr):
        try:
            value = _rational(expr)
        except _TooLarge:
            return str(expr)
        except (TypeError, ValueError, ArithmeticError, AttributeError, RecursionError):
            value = None
        if value is not None:
            return str(value)
        try:
            approx = sympy.N(expr, _KEY_DIGITS)
        except (TypeError, ValueError, ArithmeticError, AttributeError, RecursionError):
            return str(expr)
        if approx.is_number and not approx.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo):
            return str(approx)
    return str(expr)
