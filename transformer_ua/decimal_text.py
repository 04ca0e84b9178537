"""Numbers as text that stays a proved bound: rounded up for a bound, down for a share.

    bound_text(x, k) = ceil_k(x)     k significant digits, rounded toward +inf
    share_text(x, k) = floor_k(x)    (x 100 with percent=True), toward -inf

x is taken exactly (a binary float is a dyadic rational) and rounded once, so what a reader
copies from a certificate's line is still an upper (or lower) bound of the proved value.
"""

from __future__ import annotations

import decimal
import math


def _decimal(x: float, digits: int, rounding: str, scale: int = 1) -> str:
  """x * scale (x a float, taken exactly) rounded to ``digits`` significant digits in the
  direction ``rounding`` (decimal.ROUND_CEILING / ROUND_FLOOR), as plain text."""
  x = float(x)
  if math.isnan(x):
    return 'nan'
  if math.isinf(x):
    return 'inf' if x > 0 else '-inf'
  if x == 0:
    return '0'
  c = decimal.Context(prec=digits, rounding=rounding, Emax=decimal.MAX_EMAX,
                      Emin=decimal.MIN_EMIN)
  v = c.multiply(decimal.Decimal(x), decimal.Decimal(scale))   # exact product, rounded once
  return format(v, 'g').replace('E', 'e')


def bound_text(x: float, digits: int) -> str:
  """An upper bound of x with ``digits`` significant digits (what a reader copies stays
  a proved bound)."""
  return _decimal(x, digits, decimal.ROUND_CEILING)


def share_text(x: float, digits: int, percent: bool = False) -> str:
  """A lower bound of x (x 100 with ``percent``) with ``digits`` significant digits."""
  return _decimal(x, digits, decimal.ROUND_FLOOR, 100 if percent else 1)
