r"""The exact volume of a box's part in the sorted region, vol(B cap R), as a rational.

R = {X in [0,1]^{n x d}: x_{1,1} <= x_{2,1} <= ... <= x_{n,1}} (the tokens sorted by their
first coordinate). Only the first coordinates are constrained, so for B = prod [a_jk, b_jk]

    vol(B cap R) = V(a_1, b_1, ..., a_n, b_n) * prod_{j, k >= 2} (b_jk - a_jk),
    V = vol{x in prod_j [a_j, b_j]: x_1 <= ... <= x_n}          (a_j = a_{j,1}, b_j = b_{j,1})

V by recursive integration over the sorted coordinates: with F_1(t) = clip(t - a_1, 0,
b_1 - a_1) (the measure of x_1 <= t) and

    F_j(t) = int_{a_j}^{min(t, b_j)} F_{j-1}(s) ds      (t >= a_j; 0 below a_j),

V = F_n(b_n). Each F_j is a polynomial of degree j on each piece between consecutive
breakpoints (the a's and b's below it) and constant above b_j; its antiderivative is taken
piece by piece in Fractions, so V is exact (dyadic boxes: every breakpoint is a dyadic
rational). V is invariant under translation and scales by w^n under x -> w x: it is
cached on the box's shape (a_j - a_min, b_j - a_min) / w_min, which repeats often on a
dyadic partition.

Fast paths: V = prod (b_j - a_j) when b_j <= a_{j+1} for all j (B inside R), and V = 0 when
max(a_1, ..., a_j) >= b_j for some j (B meets R in a set of measure zero, or not at all).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

#: Shapes kept in the cache (a dict; cleared when it grows past this).
CACHE_SIZE = 200_000
_CACHE: dict = {}


def _integrate(poly: list) -> list:
  """Coefficients (in powers of t) of an antiderivative with zero constant term."""
  return [Fraction(0)] + [c / (k + 1) for k, c in enumerate(poly)]


def _at(poly: list, t: Fraction) -> Fraction:
  out = Fraction(0)
  for c in reversed(poly):
    out = out * t + c
  return out


def _shape_volume(a: tuple, b: tuple) -> Fraction:
  """V for first-coordinate intervals [a_j, b_j] (Fractions), by the recursion above."""
  # F as pieces [(start, end, coefficients)] from its first breakpoint on; F = 0 below the
  # first start, F = F(last end) above the last end.
  pieces = [(a[0], b[0], [-a[0], Fraction(1)])]
  for aj, bj in zip(a[1:], b[1:]):
    # A(t) = int_{start_0}^t F, pieces of A with their constants; then G = A - A(aj) on
    # [aj, bj].
    anti = []
    acc = Fraction(0)
    for start, end, poly in pieces:
      q = _integrate(poly)
      shift = acc - _at(q, start)
      q[0] += shift
      anti.append((start, end, q))
      acc = _at(q, end)
    last_end = pieces[-1][1]
    last_val = _at(pieces[-1][2], last_end)
    tail = [acc - last_val * last_end, last_val]           # A above the last end
    first = pieces[0][0]

    def a_at(t, anti=anti, tail=tail, first=first, last_end=last_end):
      if t <= first:
        return Fraction(0)
      if t >= last_end:
        return _at(tail, t)
      for start, end, q in anti:
        if start <= t <= end:
          return _at(q, t)
      raise AssertionError('unreachable')

    base = a_at(aj)
    new = []
    cuts = sorted({aj, bj} | {s for s, _, _ in anti if aj < s < bj}
                  | {e for _, e, _ in anti if aj < e < bj})
    for lo, hi in zip(cuts, cuts[1:]):
      mid = (lo + hi) / 2
      if mid <= first:
        q = [Fraction(0)]
      elif mid >= last_end:
        q = list(tail)
      else:
        q = next(list(q) for s, e, q in anti if s <= mid <= e)
      q[0] -= base
      new.append((lo, hi, q))
    pieces = new
  return _at(pieces[-1][2], pieces[-1][1])


def first_coordinate_volume(a, b) -> Fraction:
  """V = vol{x in prod [a_j, b_j]: x_1 <= ... <= x_n}, exactly (a, b: sequences of floats
  or Fractions, dyadic on a certifier's partition)."""
  a = [Fraction(x) for x in a]
  b = [Fraction(x) for x in b]
  n = len(a)
  width = Fraction(1)
  for lo, hi in zip(a, b):
    width *= hi - lo
  if all(b[j] <= a[j + 1] for j in range(n - 1)):
    return width
  run = a[0]
  for j in range(1, n):
    run = max(run, a[j])
    if run >= b[j]:
      return Fraction(0)
  a0 = min(a)
  w = min(hi - lo for lo, hi in zip(a, b))
  key = tuple((x - a0) / w for x in a) + tuple((x - a0) / w for x in b)
  got = _CACHE.get(key)
  if got is None:
    got = _shape_volume(key[:n], key[n:])
    if len(_CACHE) >= CACHE_SIZE:
      _CACHE.clear()
    _CACHE[key] = got
  return got * w ** n


def volumes_up(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
  """Floats >= vol(B cap R) for boxes [B, n, d] (module docstring); exact where the volume
  is a float (a box inside R, or of measure zero there)."""
  b = len(lo)
  other = np.prod((hi[:, :, 1:] - lo[:, :, 1:]).reshape(b, -1), axis=1)   # powers of 2: exact
  first_lo, first_hi = lo[:, :, 0], hi[:, :, 0]
  inside = np.all(first_hi[:, :-1] <= first_lo[:, 1:], axis=1)
  out = np.prod(first_hi - first_lo, axis=1) * other          # powers of 2: exact
  for i in np.nonzero(~inside)[0]:
    v = first_coordinate_volume(first_lo[i].tolist(), first_hi[i].tolist()) * \
        Fraction(float(other[i]))
    f = float(v)
    out[i] = f if Fraction(f) >= v else float(np.nextafter(f, np.inf))
  return out


def meets_sorted(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
  """Boxes [B, n, d] whose part in R has positive volume: max(a_1..a_j) < b_j for all j."""
  run = lo[:, 0, 0].copy()
  ok = np.ones(len(lo), bool)
  for j in range(1, lo.shape[1]):
    run = np.maximum(run, lo[:, j, 0])
    ok &= run < hi[:, j, 0]
  return ok
