"""Exact NumPy emulations of matrix-multiply accumulators, to test rounding.py's models and
the runtime probe against (shares no code with either).

``round_bits(x, p, mode)``: x (float64) to p significant bits, 'nearest' (ties to even) or
'truncate' (toward zero), exact (p <= 52).

``block_dot(a, b, block, align_bits, c=0)``: the hardware models (**) of rounding.py: rows
of a [R, m] times b [m] (or [R, m]), products exact in float64 (operands of <= 26 bits), in
steps of ``block`` products: the step's products and the accumulator are cut below
2^(E + 1 - 24 - align_bits) (E the exponent of the largest), summed exactly, and the sum
truncated to 24 bits. Every intermediate is exact in float64 (aligned terms are integers
times a power of two below 2^(26 + align_bits)).

``sequential_dot(a, b, p, mode, nonzero_only=False)``: products exact, added one at a time
to an accumulator of p bits rounded by ``mode``; ``nonzero_only``: a sum with a zero addend
(or a zero accumulator) is not rounded (the planted fault of issue 71).

``fraction_block_dot``: the block model again, in Fractions and integers, one row at a time
(an independent check of ``block_dot``).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np


def round_bits(x, p: int, mode: str):
  x = np.asarray(x, np.float64)
  m, e = np.frexp(x)                         # x = m 2^e, 0.5 <= |m| < 1
  q = np.ldexp(m, p)                         # exact: |q| in [2^(p-1), 2^p)
  q = np.rint(q) if mode == 'nearest' else np.trunc(q)
  return np.where(x == 0, 0.0, np.ldexp(q, e - p))


def _cut(x, grid):
  """x truncated toward zero to a multiple of ``grid`` (a power of two), exact."""
  return np.trunc(x / grid) * grid


def block_dot(a, b, block: int, align_bits: int, c=0.0, p: int = 24):
  a = np.asarray(a, np.float64)
  prods = a * np.asarray(b, np.float64)      # exact for operands of <= 26 bits
  rows, m = prods.shape
  acc = np.broadcast_to(np.asarray(c, np.float64), (rows,)).copy()
  for start in range(0, m, block):
    terms = np.concatenate([acc[:, None], prods[:, start:start + block]], axis=1)
    big = np.abs(terms).max(axis=1)
    _, e = np.frexp(big)                     # 2^(e-1) <= big < 2^e: E = e - 1
    grid = np.ldexp(1.0, e - p - align_bits)[:, None]     # 2^(E + 1 - p - align_bits)
    aligned = np.where(big[:, None] > 0, _cut(terms, np.where(big[:, None] > 0, grid, 1.0)),
                       0.0)
    acc = round_bits(aligned.sum(axis=1), p, 'truncate')  # the sum is exact (few bits)
  return acc


def sequential_dot(a, b, p: int, mode: str, nonzero_only: bool = False):
  """Rows of a [R, m] times b [R, m] or [m], one product at a time (see module doc)."""
  prods = np.asarray(a, np.float64) * np.asarray(b, np.float64)
  acc = np.zeros(prods.shape[0])
  for i in range(prods.shape[1]):
    x = prods[:, i]
    hi = acc + x
    lo = (acc - (hi - x)) + (x - (hi - (hi - x)))          # TwoSum: hi + lo = acc + x
    r = _round_pair(hi, lo, p, mode)
    if nonzero_only:
      r = np.where((acc == 0) | (x == 0), hi, r)
    acc = r
  return acc


def _round_pair(hi, lo, p, mode):
  """hi + lo (|lo| <= ulp(hi)/2, TwoSum) rounded to p bits exactly."""
  r = round_bits(hi, p, mode)
  m, e = np.frexp(hi)
  q = np.ldexp(m, p)
  unit = np.ldexp(1.0, e - p)                # the p-bit spacing at hi
  sign = np.sign(hi)
  if mode == 'truncate':                     # hi on the grid and the rest pulls inward
    on_grid = q == np.trunc(q)
    r = np.where(on_grid & (lo * sign < 0), hi - sign * unit, r)
  else:                                      # hi exactly a midpoint: lo decides
    mid = (q - np.floor(q)) == 0.5
    up = np.ldexp(np.floor(q) + 1, e - p)
    down = np.ldexp(np.floor(q), e - p)
    r = np.where(mid & (lo > 0), up, np.where(mid & (lo < 0), down, r))
  return np.where(hi == 0, 0.0, r)


def fraction_block_dot(a_row, b_row, block: int, align_bits: int, c=0, p: int = 24):
  """One row of ``block_dot`` in exact rationals (integers for the alignment)."""
  prods = [Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a_row, b_row)]
  acc = Fraction(c)
  for start in range(0, len(prods), block):
    terms = [acc] + prods[start:start + block]
    big = max(abs(t) for t in terms)
    if big == 0:
      acc = Fraction(0)
      continue
    e = 0                                    # 2^e <= big < 2^(e+1)
    while Fraction(2) ** (e + 1) <= big:
      e += 1
    while Fraction(2) ** e > big:
      e -= 1
    grid = Fraction(2) ** (e + 1 - p - align_bits)
    total = sum(int(t / grid) * grid for t in terms)        # int() truncates toward zero
    acc = _fraction_truncate(total, p)
  return acc


def _fraction_truncate(y: Fraction, p: int) -> Fraction:
  if y == 0:
    return y
  e = 0
  while Fraction(2) ** (e + 1) <= abs(y):
    e += 1
  while Fraction(2) ** e > abs(y):
    e -= 1
  unit = Fraction(2) ** (e + 1 - p)
  return int(y / unit) * unit
