r"""The certificate's terms estimated before building: what the search (``search``) needs to
choose N, the margin and the tolerance without building g.

For a grid of resolution N (delta = 1/N) and the certificate's bound
d_p(f, g) <= T1 + T2 + T3 (``search`` module docstring):

    T1 = d_p(f, f_bar)      f_term_estimate: the per-cube bound (``f_term.bound``, as the
                            certificate computes it) up to F_TERM_CLASSES cube classes
                            (cube_classes: N^(dn), or C(N^d + n - 1, n) for an equivariant f
                            without positions; per_cube_limit: the largest such N), else the
                            global modulus (``certificate.f_fbar_bound``)
    T2 = d_p(f_bar, g_bar)  t2_estimate: f_bar's mass on the bad set (a repeated column, of
                            measure bad_fraction = 1 - prod_{i<n} (1 - i / N^d)), summed in
                            float64 up to BAD_SET_CELLS cells, extrapolated by the measure
                            past it
    T3's windows            margin_for: the largest power-of-two margin m with
                            (n sum_i s_i^p (1 - (1 - 2m)^{nd}))^{1/p} <= budget, s_i the
                            clamp's range (clamp_spread: f's range on a probe, widened by 1/2)

Estimates for the search only: the certificate computes every term itself.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun.bounds import bad_set
from transformer_ua.yun.bounds import certificate, f_term
from transformer_ua.yun.grid import Grid

#: Cube classes up to which the search computes the per-cube f-term (``f_term_estimate``; about
#: 1 s for 10^4 classes of token_times_mean, 10 s for attention_map); past it, the global
#: modulus (which is looser, so a cap below the doubling's reach would overshoot N).
F_TERM_CLASSES = 100_000
#: The bad-set estimate enumerates grids of at most this many cells; past it, it is
#: extrapolated by the bad set's measure (``t2_estimate``).
BAD_SET_CELLS = 200_000


def cube_classes(target, *, d: int, n: int, resolution: int, positional: bool) -> int:
  """The cube classes the per-cube f-term evaluates at N: every cube (Theorem 3, or f not
  permutation equivariant) or every multiset of cells."""
  if positional or not target.permutation_equivariant:
    return resolution ** (d * n)
  return math.comb(resolution ** d + n - 1, n)


def per_cube_limit(target, *, d: int, n: int, positional: bool) -> int:
  """The largest N whose grid has at most ``F_TERM_CLASSES`` cube classes (>= 1)."""
  count = lambda N: cube_classes(target, d=d, n=n, resolution=N,  # noqa: E731
                                  positional=positional)
  lo, hi = 1, 2
  while count(hi) <= F_TERM_CLASSES:
    lo, hi = hi, hi * 2
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (mid, hi) if count(mid) <= F_TERM_CLASSES else (lo, mid)
  return lo


def f_term_estimate(cache: dict, target, lip: Fraction | None, *, d: int, n: int, resolution: int,
            p: float, positional: bool, modulus=None) -> float:
  """T1 = d_p(f, f_bar) at N before building: the per-cube bound (``f_term.bound``: exact
  integrals for polynomial built-ins, arb enclosures, a caller's modulus: the same the
  certificate computes) where the grid has at most ``F_TERM_CLASSES`` cube classes, else
  the global modulus (``certificate.f_fbar_bound``; none without ``lip``: infinite). The
  table's rounding (~1e-16) is added by the certificate."""
  key = (resolution, positional)
  if key not in cache:
    classes = cube_classes(target, d=d, n=n, resolution=resolution, positional=positional)
    glob = math.inf if lip is None else certificate.f_fbar_bound(
        lip, Grid(d, n, resolution), p=p)['bound']
    cache[key] = glob if classes > F_TERM_CLASSES else min(glob, f_term.bound(
        target, d=d, n=n, resolution=resolution, p=p, positional=positional,
        lipschitz=lip, modulus=modulus).bound)
  return cache[key]


def bad_fraction(d: int, n: int, N: int) -> float:  # pylint: disable=invalid-name
  """Measure of the bad set (a repeated column): 1 - prod_{i<n} (1 - i / N^d)."""
  m = N ** d
  if m < n:
    return 1.0
  return -math.expm1(sum(math.log1p(-i / m) for i in range(n)))


def t2_estimate(cache: dict, target, d: int, n: int, N: int, p: float) -> float:  # pylint: disable=invalid-name
  """d_p(f_bar, g_bar) of the paper's map before building: f_bar's mass on the bad set
  (float64 sum over the grid, ``bad_set.dp_on_bad_set``) up to ``BAD_SET_CELLS``
  cells; past it, the value at the largest such N' scaled by (bad measure at N / at
  N')^{1/p} (with no such N': the bad measure times nd max |f|^p on a probe, to the
  1/p). For the search only: the certificate computes the exact term."""
  if 2 ** (d * n) > BAD_SET_CELLS:   # no grid small enough: |f_bar| <= max |f| there
    x = np.random.default_rng(0).random((256, n, d))
    amax = float(np.max(np.abs(np.asarray(target(x), np.float64))))
    return (bad_fraction(d, n, N) * n * d) ** (1 / p) * amax
  base = N
  while base > 2 and base ** (d * n) > BAD_SET_CELLS:
    base = max(2, int(BAD_SET_CELLS ** (1 / (d * n))))
  if base not in cache:
    cache[base] = bad_set.dp_on_bad_set(target, Grid(d, n, base), p=p)
  if base == N:
    return cache[base]
  return cache[base] * (bad_fraction(d, n, N) / bad_fraction(d, n, base)) ** (1 / p)


def margin_for(budget: float, *, d: int, n: int, p: float, spread) -> Fraction | None:
  """Largest power-of-two margin m whose window term, with |g - g_bar| <= spread_i (the
  clamp's range), is <= budget: (n sum_i spread_i^p (1 - (1 - 2m)^{nd}))^{1/p} (float64,
  for the search; None if none down to ``certificate.MIN_MARGIN``). In logarithms, so
  that a huge p or spread does not overflow: log n + log sum_i spread_i^p + log window
  <= p log budget."""
  logs = [p * math.log(float(s)) for s in spread if float(s) > 0]
  if any(not math.isfinite(v) for v in logs) or not budget > 0:
    return None
  if not logs:
    return certificate.MAX_MARGIN       # g_bar's range is a point: no window term
  top = max(logs)
  log_mass = math.log(n) + top + math.log(sum(math.exp(v - top) for v in logs))
  m = certificate.MAX_MARGIN
  while m >= certificate.MIN_MARGIN:
    window = -math.expm1(d * n * math.log1p(-2 * float(m)))
    if log_mass + math.log(window) <= p * math.log(budget):
      return m
    m /= 2
  return None


def clamp_spread(target, d: int, n: int) -> list:
  """An upper bound on b_i - a_i (the clamp's range) before building: the range of f on
  a probe batch and 0, widened by a half (the exact range is the built net's). A
  non-finite value, or a range past float64, is refused in one line."""
  x = np.random.default_rng(0).random((256, n, d))
  y = targets_lib.evaluate(target, x).reshape(-1, d)
  lo, hi = np.minimum(y.min(0), 0.0), np.maximum(y.max(0), 0.0)
  with np.errstate(over='ignore'):
    out = [float(1.5 * (b - a)) for a, b in zip(lo, hi)]
  if not all(math.isfinite(v) for v in out):
    raise ValueError(f'target {target.name!r} ranges over [{float(lo.min()):.3g}, '
                     f'{float(hi.max()):.3g}] on 256 probe points, past what float64 can '
                     'hold as a clamp range; rescale f.')
  return out
