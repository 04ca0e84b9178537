r"""The domain and the sum of ``certify_network``: the boxes, their volumes and the L_p total.

The boxes start as the k^(n d) dyadic cubes of side 1/k, k the largest power of 2 with
k^(n d) <= INITIAL_BOXES (those meeting the sorted region R in positive volume when f and g
are permutation equivariant: sorted_volume.py). A box B contributes

    C_B = mult * vol_B * sum_jk E_B,jk^p      (1 <= p < inf),       C_B = max_jk E_B,jk  (p = inf)

each product and sum rounded up (vol_B = vol(B), a power of 2, or vol(B cap R) rounded up;
mult = 1 or n!). The total is an exact rational

    total >= (sum_B C_B)^(1/p):   s = fsum(C) one ulp up,  q^p >= s checked exactly
                                  (integer p; else mpmath at 60 digits with a 10^-40 margin)

Refinement: ``pick_boxes`` takes the largest C_B until they hold half the sum (p < inf), or
every box above the goal (p = inf), at most MAX_SPLIT, and ``bisect`` halves each along a
coordinate (the midpoint of a dyadic interval: exact).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from transformer_ua.certify import intervals as iv
from transformer_ua.certify import sorted_volume

#: Initial boxes (about; the per-axis count is the largest k with k^(n d) <= this).
INITIAL_BOXES = 512


#: At most this many boxes are bisected per round.
MAX_SPLIT = 32768


def initial_boxes(n: int, d: int, symmetric: bool):
  dims = n * d
  k = max(2, int(math.floor(INITIAL_BOXES ** (1.0 / dims) + 1e-9)))
  k = 2 ** int(math.floor(math.log2(k)))             # dyadic boxes: exact centres and radii
  axes = np.meshgrid(*[np.arange(k)] * dims, indexing='ij')
  idx = np.stack([a.ravel() for a in axes], axis=1).reshape(-1, n, d).astype(np.float64)
  lo, hi = idx / k, (idx + 1) / k
  if symmetric:
    keep = sorted_volume.meets_sorted(lo, hi)
    lo, hi = lo[keep], hi[keep]
  return lo, hi


def volumes(lo, hi, sorted_part: bool) -> np.ndarray:
  """vol(B cap R) with ``sorted_part`` (sorted_volume.py: exact, rounded up), else vol(B)."""
  if sorted_part:
    return sorted_volume.volumes_up(lo, hi)
  return np.prod((hi - lo).reshape(len(lo), -1), axis=1)     # powers of 2: exact


def contributions(e, vol, p: float, mult: int) -> np.ndarray:
  """mult * vol * sum_jk E^p (upper bounds), or max_jk E for p = inf."""
  b = len(e)
  flat = e.reshape(b, -1)
  if math.isinf(p):
    return flat.max(axis=1)
  if p == 1:
    pw = flat
  elif p == 2:
    pw = iv.up(flat * flat)
  else:
    pw = iv.up(np.power(flat, p) * (1 + 2.0 ** -40))
  s = iv.up(pw.sum(axis=1) + iv.sum_error(pw.sum(axis=1), pw.shape[1]))
  return iv.up(iv.up(s * vol) * mult)


def exact_total(contrib: np.ndarray, p: float, cause: str = '') -> Fraction:
  """An exact rational >= (sum contrib)^(1/p) (max for p = inf); ValueError (one line) when
  a box's bound overflowed (``cause``: ``box_bound.nonfinite_cause``'s phrase)."""
  if not np.all(np.isfinite(contrib)):
    raise ValueError(f'{int(np.sum(~np.isfinite(contrib)))} of {len(contrib):,} boxes have no '
                     f'finite bound when the run stopped ({cause or "no finite bound"} there); '
                     'no certificate.')
  if math.isinf(p):
    return Fraction(float(contrib.max()))
  s = Fraction(float(np.nextafter(math.fsum(contrib.tolist()), np.inf)))
  if p == 1:
    return s
  guess = Fraction(float(np.nextafter(float(s) ** (1.0 / p), np.inf))).limit_denominator(10**12)
  step = max(guess * Fraction(1, 10 ** 12), Fraction(1, 10 ** 300))
  pi = Fraction(p).limit_denominator(10 ** 6) if p != int(p) else Fraction(int(p))
  while not _pow_ge(guess, pi, s, p):
    guess += step
    step *= 2
  return guess


def _pow_ge(q: Fraction, pi: Fraction, s: Fraction, p: float) -> bool:
  """q^p >= s, decided exactly for integer p, else with mpmath at 60 digits + margin."""
  if pi.denominator == 1 and pi == p:
    return q ** int(pi) >= s
  import mpmath
  with mpmath.workdps(60):
    return mpmath.power(mpmath.mpf(q.numerator) / q.denominator, p) >= \
        (mpmath.mpf(s.numerator) / s.denominator) * (1 + mpmath.mpf(10) ** -40)


def float_total(total_p: float, p: float) -> float:
  """A float >= (total_p)^(1/p) (the round's record; the certificate's total is exact)."""
  if math.isinf(p) or p == 1:
    return float(np.nextafter(total_p, np.inf))
  return float(iv.up(float(np.nextafter(total_p, np.inf)) ** (1.0 / p) * (1 + 2.0 ** -40)))


def pick_boxes(contrib: np.ndarray, p: float, target_p: float | None) -> np.ndarray:
  """The boxes to bisect: the largest shares, until they hold half the sum (p < inf), or
  every box above the goal (p = inf); at least 1, at most MAX_SPLIT. Boxes without a
  finite bound (a LayerNorm whose variance may reach 0 there) go first, all of them."""
  unbounded = np.flatnonzero(~np.isfinite(contrib))
  if len(unbounded):
    return unbounded[:MAX_SPLIT]
  order = np.argsort(-contrib)
  if math.isinf(p):
    goal = target_p if target_p is not None else 0.5 * contrib.max()
    count = int(np.sum(contrib > goal))
  else:
    cum = np.cumsum(contrib[order])
    count = int(np.searchsorted(cum, 0.5 * cum[-1])) + 1
  count = max(1, min(count, MAX_SPLIT, len(contrib)))
  return order[:count]


def bisect_each(lo, hi, axes):
  """Both halves of each box [P, n, d] along each of its candidate axes [P, K]:
  [K, 2, P, n, d] lows and highs (left half first)."""
  los, his = [], []
  for c in range(axes.shape[1]):
    c_lo, c_hi = bisect(lo, hi, axes[:, c])
    los.append(c_lo.reshape((2,) + lo.shape))
    his.append(c_hi.reshape((2,) + lo.shape))
  return np.stack(los), np.stack(his)


def bisect(lo, hi, axis):
  b, n, d = lo.shape
  flat_lo, flat_hi = lo.reshape(b, -1), hi.reshape(b, -1)
  mid = (flat_lo[np.arange(b), axis] + flat_hi[np.arange(b), axis]) / 2
  left_hi = flat_hi.copy()
  left_hi[np.arange(b), axis] = mid
  right_lo = flat_lo.copy()
  right_lo[np.arange(b), axis] = mid
  new_lo = np.concatenate([flat_lo, right_lo]).reshape(2 * b, n, d)
  new_hi = np.concatenate([left_hi, flat_hi]).reshape(2 * b, n, d)
  return new_lo, new_hi
