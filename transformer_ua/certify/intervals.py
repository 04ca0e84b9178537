r"""Outward-rounded interval arithmetic in NumPy float64, with tangents (forward mode).

An ``Interval`` holds arrays ``lo <= hi`` (any batch shape) and, optionally, a tangent
interval ``[tlo, thi]`` with one more trailing axis of P directions: for x(X) over a box,

    x(X) in [lo, hi]   and   dx/dX_q (X) in [tlo[..., q], thi[..., q]]   for all X in the box.

Rigor: every IEEE operation is correctly rounded (|fl(a op b) - a op b| <= ulp/2), so moving
each computed bound one ulp outward (``down``/``up``: np.nextafter) encloses the real value.
Sums of k terms computed by NumPy in some order get the any-order bound

    |fl(sum) - sum| <= gamma_{k} sum |terms| + k tau           (rounding.py)

subtracted/added before the outward step. exp is NumPy's, not correctly rounded: its
result is widened by ``EXP_SLACK`` (relative) before the outward step; ``check_numpy_exp``
measures NumPy's exp against mpmath on the arguments the certificate needs and refuses to
run if it is off by more (the certificate's line names this).

Tangent rules (the chain rule on intervals): d(x + y) = dx + dy; d(x y) = dx y + x dy;
d ReLU(x) = dx * [0, 1] where lo < 0 < hi (the hull with 0), dx where lo >= 0, 0 where
hi <= 0; d exp(x) = exp(x) dx; d(1/x) = -dx / x^2.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

#: Relative widening of NumPy's exp (far above its measured error, ~1 ulp = 2^-52).
EXP_SLACK = 2.0 ** -40
_TINY = 2.0 ** -1022
_U = 2.0 ** -53
_MAX = float(np.finfo(np.float64).max)


def down(x):
  return np.nextafter(x, -np.inf)


def up(x):
  return np.nextafter(x, np.inf)


def sum_error(abs_sum, terms: int):
  """An upper bound of |fl(sum) - sum| for ``terms`` terms whose |.| sum to ``abs_sum``
  (itself a computed float: widened by the same factor again)."""
  k = terms + 1
  gamma = k * _U / (1 - k * _U)
  return up(abs_sum * (gamma * (1 + 2.0 ** -30)) + k * _TINY)


@dataclasses.dataclass
class Interval:
  """[lo, hi] with optional tangents [tlo, thi] (trailing axis: the P input directions)."""

  lo: np.ndarray
  hi: np.ndarray
  tlo: np.ndarray | None = None
  thi: np.ndarray | None = None

  @property
  def has_tangent(self) -> bool:
    return self.tlo is not None

  def mag(self) -> np.ndarray:
    """max |x| over the interval."""
    return np.maximum(np.abs(self.lo), np.abs(self.hi))

  def tmag(self) -> np.ndarray:
    return np.maximum(np.abs(self.tlo), np.abs(self.thi))

  def take(self, index, axis: int) -> 'Interval':
    """Entries ``index`` along value axis ``axis`` (negative, counted on the value)."""
    t = None if not self.has_tangent else (np.take(self.tlo, index, axis=axis - 1),
                                           np.take(self.thi, index, axis=axis - 1))
    return Interval(np.take(self.lo, index, axis=axis), np.take(self.hi, index, axis=axis),
                    *(t or (None, None)))


def point(x: np.ndarray) -> Interval:
  """The degenerate interval of a float array (no tangent)."""
  x = np.asarray(x, np.float64)
  return Interval(x, x.copy())


def box(lo: np.ndarray, hi: np.ndarray) -> Interval:
  """The input box with identity tangents: value [lo, hi] [..., n, d], tangent
  [..., n, d, n*d] with d x_q / d x_q = 1."""
  lo = np.asarray(lo, np.float64)
  hi = np.asarray(hi, np.float64)
  shape = lo.shape[-2:]
  p = shape[0] * shape[1]
  eye = np.eye(p).reshape(shape + (p,))
  t = np.broadcast_to(eye, lo.shape + (p,)).copy()
  return Interval(lo, hi, t, t.copy())


def _mul_bounds(alo, ahi, blo, bhi):
  c = np.stack([alo * blo, alo * bhi, ahi * blo, ahi * bhi])
  return down(c.min(axis=0)), up(c.max(axis=0))


def add(a: Interval, b: Interval) -> Interval:
  lo, hi = down(a.lo + b.lo), up(a.hi + b.hi)
  if a.has_tangent or b.has_tangent:
    tlo, thi = _tangent_sum(a, b, lo.shape)
    return Interval(lo, hi, tlo, thi)
  return Interval(lo, hi)


def _tangent_of(a: Interval, shape):
  if a.has_tangent:
    return a.tlo, a.thi
  return None, None


def _tangent_sum(a: Interval, b: Interval, shape):
  if a.has_tangent and b.has_tangent:
    return down(a.tlo + b.tlo), up(a.thi + b.thi)
  src = a if a.has_tangent else b
  return (np.broadcast_to(src.tlo, shape + src.tlo.shape[-1:]).copy(),
          np.broadcast_to(src.thi, shape + src.thi.shape[-1:]).copy())


def neg(a: Interval) -> Interval:
  return Interval(-a.hi, -a.lo, None if not a.has_tangent else -a.thi,
                  None if not a.has_tangent else -a.tlo)


def sub(a: Interval, b: Interval) -> Interval:
  return add(a, neg(b))


def mul(a: Interval, b: Interval) -> Interval:
  """Elementwise product (broadcasting on the value axes)."""
  lo, hi = _mul_bounds(a.lo, a.hi, b.lo, b.hi)
  if not (a.has_tangent or b.has_tangent):
    return Interval(lo, hi)
  parts = []
  if a.has_tangent:
    parts.append(_mul_bounds(a.tlo, a.thi, b.lo[..., None], b.hi[..., None]))
  if b.has_tangent:
    parts.append(_mul_bounds(a.lo[..., None], a.hi[..., None], b.tlo, b.thi))
  tlo, thi = parts[0]
  if len(parts) == 2:
    tlo, thi = down(tlo + parts[1][0]), up(thi + parts[1][1])
  full = lo.shape + tlo.shape[-1:]
  return Interval(lo, hi, np.broadcast_to(tlo, full).copy(), np.broadcast_to(thi, full).copy())


def scale(a: Interval, c: float) -> Interval:
  """a times the exact float c."""
  return mul(a, point(np.float64(c)))


def square(a: Interval) -> Interval:
  """a^2 (tight: 0 when the interval straddles 0)."""
  lo2, hi2 = _mul_bounds(a.lo, a.hi, a.lo, a.hi)
  straddle = (a.lo < 0) & (a.hi > 0)
  lo = np.where(straddle, 0.0, np.maximum(lo2, 0.0))
  out = Interval(lo, hi2)
  if a.has_tangent:
    two_a = Interval(down(2 * a.lo), up(2 * a.hi))
    tlo, thi = _mul_bounds(a.tlo, a.thi, two_a.lo[..., None], two_a.hi[..., None])
    out.tlo, out.thi = tlo, thi
  return out


def sum_axis(a: Interval, axis: int) -> Interval:
  """Sum over value axis ``axis`` (negative), any order."""
  k = a.lo.shape[axis]
  lo, hi = a.lo.sum(axis=axis), a.hi.sum(axis=axis)
  err = sum_error(np.maximum(np.abs(a.lo), np.abs(a.hi)).sum(axis=axis), k)
  out = Interval(down(lo - err), up(hi + err))
  if a.has_tangent:
    t_axis = axis - 1
    tlo, thi = a.tlo.sum(axis=t_axis), a.thi.sum(axis=t_axis)
    terr = sum_error(np.maximum(np.abs(a.tlo), np.abs(a.thi)).sum(axis=t_axis), k)
    out.tlo, out.thi = down(tlo - terr), up(thi + terr)
  return out


def linear(a: Interval, w: np.ndarray, b: np.ndarray | None = None) -> Interval:
  """a @ w^T + b on the last value axis: a [..., D], w [r, D] (exact floats), b [r]."""
  w = np.asarray(w, np.float64)
  wp, wn = np.maximum(w, 0), np.minimum(w, 0)
  k = w.shape[1] + (b is not None)
  lo = a.lo @ wp.T + a.hi @ wn.T
  hi = a.hi @ wp.T + a.lo @ wn.T
  absum = np.maximum(np.abs(a.lo), np.abs(a.hi)) @ np.abs(w).T
  if b is not None:
    lo, hi, absum = lo + b, hi + b, absum + np.abs(b)
  err = sum_error(absum, 2 * k)
  out = Interval(down(lo - err), up(hi + err))
  if a.has_tangent:
    # tangent [..., D, P] -> [..., r, P], as BLAS products on [..., P, D]
    tl, th = np.swapaxes(a.tlo, -1, -2), np.swapaxes(a.thi, -1, -2)
    tlo = np.swapaxes(tl @ wp.T + th @ wn.T, -1, -2)
    thi = np.swapaxes(th @ wp.T + tl @ wn.T, -1, -2)
    tabs = np.swapaxes(np.maximum(np.abs(tl), np.abs(th)) @ np.abs(w).T, -1, -2)
    terr = sum_error(tabs, 2 * w.shape[1])
    out.tlo, out.thi = down(tlo - terr), up(thi + terr)
  return out


def relu(a: Interval) -> Interval:
  lo, hi = np.maximum(a.lo, 0.0), np.maximum(a.hi, 0.0)
  out = Interval(lo, hi)
  if a.has_tangent:
    on = (a.lo >= 0)[..., None]
    off = (a.hi <= 0)[..., None]
    tlo = np.where(off, 0.0, np.where(on, a.tlo, np.minimum(a.tlo, 0.0)))
    thi = np.where(off, 0.0, np.where(on, a.thi, np.maximum(a.thi, 0.0)))
    out.tlo, out.thi = tlo, thi
  return out


def _exp_down(x):
  return np.maximum(down(np.exp(x) * (1 - EXP_SLACK)), 0.0)


def _exp_up(x):
  return up(np.exp(x) * (1 + EXP_SLACK))


def exp(a: Interval) -> Interval:
  lo, hi = _exp_down(a.lo), _exp_up(a.hi)
  out = Interval(lo, hi)
  if a.has_tangent:
    out.tlo, out.thi = _mul_bounds(a.tlo, a.thi, lo[..., None], hi[..., None])
  return out


def softmax(s: Interval) -> Interval:
  """softmax over the last value axis, w_k = 1 / sum_l exp(s_l - s_k) (the l = k term is
  exactly 1, which keeps the enclosure tight); tangent dw_k = w_k (ds_k - sum_l w_l ds_l).
  Saturating: where exp(s_l - s_k) overflows, the sum's upper end is +inf (w_k's lower end
  0) and its lower end is at least its largest term, capped at the largest float (w_k's
  upper end ~ 1e-308): a score row of any spread gets finite bounds, never inf - inf."""
  n = s.lo.shape[-1]
  eye = np.eye(n, dtype=bool)
  # diff[..., k, l] = s_l - s_k
  dhi = up(s.hi[..., None, :] - s.lo[..., :, None])
  dlo = down(s.lo[..., None, :] - s.hi[..., :, None])
  with np.errstate(over='ignore', invalid='ignore'):   # saturation: an exp past the float
    ehi = np.where(eye, 1.0, _exp_up(dhi))              # range is +inf above (w_k -> 0) and
    elo = np.where(eye, 1.0, np.minimum(_exp_down(dlo), _MAX))   # the largest float below
    shi = up(ehi.sum(axis=-1) + sum_error(ehi.sum(axis=-1), n))
    esum = elo.sum(axis=-1)
    slo = np.where(np.isfinite(esum), down(esum - sum_error(esum, n)), elo.max(axis=-1))
  w = Interval(np.clip(down(1.0 / shi), 0.0, 1.0), np.clip(up(1.0 / slo), 0.0, 1.0))
  if not s.has_tangent:
    return w
  ds = Interval(s.tlo, s.thi)                                     # [..., n, P]
  wt = Interval(w.lo[..., None], w.hi[..., None])
  inner = sum_axis(mul(wt, ds), -2)                                # [..., P]
  centred = sub(ds, Interval(inner.lo[..., None, :], inner.hi[..., None, :]))
  dw = mul(wt, centred)
  w.tlo, w.thi = dw.lo, dw.hi
  return w


def pairwise(a: Interval, b: Interval) -> Interval:
  """c[..., j, k] = sum_m a[..., j, m] b[..., k, m] (scores q_j . k_k)."""
  prod = mul(expand(a, -2), expand(b, -3))                      # [..., j, k, m]
  return sum_axis(prod, -1)


def mix(w: Interval, v: Interval) -> Interval:
  """c[..., j, m] = sum_k w[..., j, k] v[..., k, m] (attention output)."""
  prod = mul(expand(w, -1), expand(v, -3))                      # [..., j, k, m]
  return sum_axis(prod, -2)


def expand(a: Interval, axis: int) -> Interval:
  """A new value axis at ``axis`` (negative), the tangent's with it."""
  lo, hi = np.expand_dims(a.lo, axis), np.expand_dims(a.hi, axis)
  if not a.has_tangent:
    return Interval(lo, hi)
  return Interval(lo, hi, np.expand_dims(a.tlo, axis - 1), np.expand_dims(a.thi, axis - 1))


def check_numpy_exp(points: int = 2000, seed: int = 0) -> float:
  """NumPy's exp against mpmath (60 digits) on arguments in [-745, 50]: returns the
  largest relative error; ValueError if it exceeds ``EXP_SLACK`` (the certifier's
  intervals would not enclose)."""
  import mpmath
  rng = np.random.default_rng(seed)
  x = np.concatenate([-np.logspace(-12, math.log10(745), points // 2),
                      rng.uniform(-40, 50, points - points // 2)])
  got = np.exp(x)
  worst = 0.0
  with mpmath.workdps(60):
    for xi, gi in zip(x, got):
      ref = mpmath.exp(mpmath.mpf(float(xi)))
      if ref < mpmath.mpf(2) ** -1000:
        continue
      worst = max(worst, float(abs(mpmath.mpf(float(gi)) - ref) / ref))
  if worst > EXP_SLACK:
    raise ValueError(f"NumPy's exp is off by {worst:.3g} relative (more than the "
                     f'certifier allows, {EXP_SLACK:.3g}); the intervals would not enclose.')
  return worst
