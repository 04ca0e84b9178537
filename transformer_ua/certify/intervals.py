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
hi <= 0; d exp(x) = exp(x) dx; d(1/x) = -dx / x^2; d GELU(x) = [g'(x) over the
interval] dx; LayerNorm and the causal softmax as below (``layer_norm``, ``softmax``).

The stock-layer ops: ``gelu`` (both forms, monotone pieces around the minimum and g''s
inflection points, constants from mpmath), ``centred`` / ``variance_bounds`` /
``layer_norm`` (LayerNorm as one function of the token vector), and ``softmax(causal=True)``
(masked weights exactly 0). sqrt and division are IEEE operations, correctly rounded: one
outward step encloses them; ``math.erfc`` (GELU's float64 evaluation) is widened by
``GELU_SLACK`` (checked against mpmath by the tests).
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


def softmax(s: Interval, causal: bool = False) -> Interval:
  """softmax over the last value axis, w_k = 1 / sum_l exp(s_l - s_k) (the l = k term is
  exactly 1, which keeps the enclosure tight); tangent dw_k = w_k (ds_k - sum_l w_l ds_l).
  ``causal``: s [..., j, k] are scores of query j, and keys k > j are left out: their
  weight and its tangent are exactly 0 (structure, not an interval).
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
    if causal:               # [j, k, l]: keys l > j never enter query j's sum
      keep = ~np.triu(np.ones((n, n), bool), 1)
      ehi = np.where(keep[:, None, :], ehi, 0.0)
      elo = np.where(keep[:, None, :], elo, 0.0)
    shi = up(ehi.sum(axis=-1) + sum_error(ehi.sum(axis=-1), n))
    esum = elo.sum(axis=-1)
    slo = np.where(np.isfinite(esum), down(esum - sum_error(esum, n)), elo.max(axis=-1))
  w = Interval(np.clip(down(1.0 / shi), 0.0, 1.0), np.clip(up(1.0 / slo), 0.0, 1.0))
  if causal:
    w = Interval(np.where(keep, w.lo, 0.0), np.where(keep, w.hi, 0.0))
  if not s.has_tangent:
    return w
  ds = Interval(s.tlo, s.thi)                                     # [..., n, P]
  wt = Interval(w.lo[..., None], w.hi[..., None])
  inner = sum_axis(mul(wt, ds), -2)                                # [..., P]
  centred = sub(ds, Interval(inner.lo[..., None, :], inner.hi[..., None, :]))
  dw = mul(wt, centred)
  w.tlo, w.thi = dw.lo, dw.hi
  if causal:
    w.tlo = np.where(keep[..., None], w.tlo, 0.0)
    w.thi = np.where(keep[..., None], w.thi, 0.0)
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


def exp_relative_error(x, got) -> float:
  """The largest |got - e^x| / e^x against mpmath at 60 digits, over the x where
  e^x >= 2^-1000 (below it only an absolute bound is used)."""
  import mpmath
  worst = 0.0
  with mpmath.workdps(60):
    for xi, gi in zip(x, got):
      ref = mpmath.exp(mpmath.mpf(float(xi)))
      if ref < mpmath.mpf(2) ** -1000:
        continue
      worst = max(worst, float(abs(mpmath.mpf(float(gi)) - ref) / ref))
  return worst


def check_numpy_exp(points: int = 2000, seed: int = 0) -> float:
  """NumPy's exp against mpmath (60 digits) on arguments in [-745, 50]: returns the
  largest relative error; ValueError if it exceeds ``EXP_SLACK`` (the certifier's
  intervals would not enclose)."""
  import mpmath
  rng = np.random.default_rng(seed)
  x = np.concatenate([-np.logspace(-12, math.log10(745), points // 2),
                      rng.uniform(-40, 50, points - points // 2)])
  worst = exp_relative_error(x, np.exp(x))
  if worst > EXP_SLACK:
    raise ValueError(f"NumPy's exp is off by {worst:.3g} relative (more than the "
                     f'certifier allows, {EXP_SLACK:.3g}); the intervals would not enclose.')
  return worst


# -- GELU ---------------------------------------------------------------------------------
#
# Both forms g (erf: x Phi(x); tanh: 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))) have one
# critical point x0 (a global minimum g(x0) = GMIN; g decreasing before, increasing after)
# and g' has two (c1 < 0 < c2: g' decreasing on (-inf, c1], increasing on [c1, c2],
# decreasing on [c2, inf); erf form: c = -+sqrt 2 exactly, g'' = phi (2 - x^2)). The
# constants below are mpmath's (40 digits) rounded outward, each point inside a window
# [lo, hi]; an interval that meets a window takes the extreme value there. So over [a, b]:
#   g:  [g(a), g(b)] right of x0's window, [g(b), g(a)] left of it, else
#       [GMIN, max(g(a), g(b))];
#   g': the hull of g'(a), g'(b), and DMIN / DMAX where [a, b] meets c1's / c2's window.
# g and g' are evaluated in float64 (math.erfc, np.exp: stable forms x Phi(x) =
# x erfc(-x / sqrt 2) / 2 and x / (1 + exp(-2 y))) and widened by GELU_SLACK relative plus
# 2^-1000 (1 + |x|) absolute for g, GELU_SLACK absolute for g' (``check_gelu_evaluation``
# measures this against mpmath once per process, before the first GELU enclosure).
# LIPSCHITZ >= sup |g'| for both forms (max(|DMIN|, DMAX) = 1.12899...).

GELU_SLACK = 2.0 ** -36
GELU_LIPSCHITZ = 1.129
_SQRT_2_PI = math.sqrt(2 / math.pi)
_GELU = {
    # x0 window, GMIN, c1 window, DMIN, c2 window, DMAX
    'gelu': ((-0.7519, -0.7517), -0.1699712076, (-1.41422, -1.41420), -0.1289041453,
             (1.41420, 1.41422), 1.1289041453),
    'gelu_tanh': ((-0.7526, -0.7523), -0.1700407507, (-1.4186, -1.4184), -0.1289930688,
                  (1.4184, 1.4186), 1.1289930688),
}
_ERFC = np.vectorize(math.erfc, otypes=[np.float64])


def gelu_value(x, form: str):
  """g(x) in float64 (a close value, not a bound: widen by GELU_SLACK)."""
  x = np.asarray(x, np.float64)
  if form == 'gelu':
    return x * (0.5 * _ERFC(-x / math.sqrt(2)))
  y = _SQRT_2_PI * (np.clip(x, -1e6, 1e6) + 0.044715 * np.clip(x, -1e6, 1e6) ** 3)
  with np.errstate(over='ignore'):
    return x / (1 + np.exp(-2 * y))


def gelu_slope(x, form: str):
  """g'(x) in float64 (a close value, within GELU_SLACK absolute)."""
  x = np.clip(np.asarray(x, np.float64), -60.0, 60.0)
  if form == 'gelu':
    return 0.5 * _ERFC(-x / math.sqrt(2)) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
  y = _SQRT_2_PI * (x + 0.044715 * x ** 3)
  e = np.exp(-2 * np.abs(y))                    # <= 1: no overflow
  sig = np.where(y >= 0, 1 / (1 + e), e / (1 + e))        # 1 / (1 + exp(-2 y))
  sech2 = 4 * e / (1 + e) ** 2                            # 1 - tanh(y)^2
  return sig + 0.5 * x * _SQRT_2_PI * (1 + 3 * 0.044715 * x * x) * sech2


def _gelu_bounds(x, form, side):
  v = gelu_value(x, form)
  slack = np.abs(v) * GELU_SLACK + 2.0 ** -1000 * (1 + np.abs(x))
  return down(v - slack) if side < 0 else up(v + slack)


_GELU_CHECKED = []


def check_gelu_evaluation(points: int = 120, seed: int = 0) -> float:
  """``gelu_value`` and ``gelu_slope`` (both forms) against mpmath (40 digits) on arguments
  in [-40, 40]: returns the largest error in units of the slack; ValueError if above 1
  (the certifier's GELU intervals would not enclose). Run once per process by ``gelu``."""
  import mpmath
  rng = np.random.default_rng(seed)
  x = np.concatenate([rng.normal(0, 3, points // 2), rng.uniform(-40, 40, points // 2)])
  worst = 0.0
  with mpmath.workdps(40):
    k, c = mpmath.sqrt(2 / mpmath.pi), mpmath.mpf('0.044715')
    for form in ('gelu', 'gelu_tanh'):
      v, s = gelu_value(x, form), gelu_slope(x, form)
      for xi, vi, si in zip(x, v, s):
        t = mpmath.mpf(float(xi))
        if form == 'gelu':
          ref, dref = t * mpmath.ncdf(t), mpmath.ncdf(t) + t * mpmath.npdf(t)
        else:
          y = k * (t + c * t ** 3)
          sig = 1 / (1 + mpmath.exp(-2 * y))
          ref = t * sig
          dref = sig + 2 * t * k * (1 + 3 * c * t * t) * sig * (1 - sig)
        tol = abs(ref) * GELU_SLACK + 2.0 ** -1000 * (1 + abs(t))
        worst = max(worst, float(abs(mpmath.mpf(float(vi)) - ref) / tol),
                    float(abs(mpmath.mpf(float(si)) - dref) / GELU_SLACK))
  if worst > 1:
    raise ValueError(f"the float64 GELU evaluation (math.erfc, NumPy exp) is off by {worst:.3g} "
                     'times the certifier\'s slack; the GELU intervals would not enclose.')
  return worst


def gelu(a: Interval, form: str) -> Interval:
  """GELU (``form`` 'gelu' or 'gelu_tanh') elementwise, with tangent g'(x) dx (above)."""
  if not _GELU_CHECKED:
    _GELU_CHECKED.append(check_gelu_evaluation())
  (x0_lo, x0_hi), gmin, (c1_lo, c1_hi), dmin, (c2_lo, c2_hi), dmax = _GELU[form]
  g_lo_dn, g_lo_up = _gelu_bounds(a.lo, form, -1), _gelu_bounds(a.lo, form, 1)
  g_hi_dn, g_hi_up = _gelu_bounds(a.hi, form, -1), _gelu_bounds(a.hi, form, 1)
  right, left = a.lo >= x0_hi, a.hi <= x0_lo
  lo = np.where(right, g_lo_dn, np.where(left, g_hi_dn, gmin))
  hi = np.where(right, g_hi_up, np.where(left, g_lo_up, np.maximum(g_lo_up, g_hi_up)))
  out = Interval(lo, hi)
  if a.has_tangent:
    sa, sb = gelu_slope(a.lo, form), gelu_slope(a.hi, form)
    d_lo = down(np.minimum(sa, sb) - GELU_SLACK)
    d_hi = up(np.maximum(sa, sb) + GELU_SLACK)
    d_lo = np.where((a.lo <= c1_hi) & (a.hi >= c1_lo), dmin, d_lo)
    d_hi = np.where((a.lo <= c2_hi) & (a.hi >= c2_lo), dmax, d_hi)
    out.tlo, out.thi = _mul_bounds(a.tlo, a.thi, d_lo[..., None], d_hi[..., None])
  return out


# -- LayerNorm ----------------------------------------------------------------------------
#
# y = gamma c / s + beta over the last axis (D entries), c = z - mu(z) = (D I - 1 1^T) z / D
# (one linear map with integer weights, so z_i's two appearances do not widen it),
# var = |c|^2 / D, s = sqrt(var + eps) >= sqrt(eps). r = c / s from the corners of c and
# [s_lo, s_hi], intersected with |r_i| <= sqrt(D - 1) (sum c = 0 gives D c_i^2 <= (D - 1)
# |c|^2, and |c|^2 / (D s^2) < 1). Tangent, from ds = (c . dc) / (D s):
#     dy_i = (gamma_i / s) (dc_i - r_i (r . dc) / D)        (the DESIGN.md Jacobian)
# and, as a second enclosure of the same bracket intersected with it, the interval matrix
#     (I - 1 1^T / D - r r^T / D) dz   (r r^T's diagonal by ``square``; dz enters once).


def _div_positive(a: Interval, c: float) -> Interval:
  """a / c for an exact float c > 0 (each division correctly rounded, then one ulp out)."""
  out = Interval(down(a.lo / c), up(a.hi / c))
  if a.has_tangent:
    out.tlo, out.thi = down(a.tlo / c), up(a.thi / c)
  return out


def centred(a: Interval) -> Interval:
  """c = a - mean(a) over the last value axis, as (D I - 1 1^T) a / D."""
  width = a.lo.shape[-1]
  return _div_positive(linear(a, width * np.eye(width) - np.ones((width, width))), width)


def variance_bounds(c_lo, c_hi, z_lo=None, z_hi=None):
  """[var_lo, var_hi] of |c|^2 / D for c in the box [c_lo, c_hi] (last axis D) and, given
  the box [z_lo, z_hi] of z itself (c = z - mu(z)), var >= (max_i z_i - min_j z_j)^2 / (2 D)
  too (|c|^2 >= c_i^2 + c_j^2 >= (z_i - z_j)^2 / 2): the gap survives where c's box meets 0."""
  sq = square(Interval(c_lo, c_hi))
  width = c_lo.shape[-1]
  s_lo, s_hi = sq.lo.sum(axis=-1), sq.hi.sum(axis=-1)
  v_lo = np.maximum(down(down(s_lo - sum_error(s_lo, width)) / width), 0.0)
  if z_lo is not None:
    gap = np.maximum(down(z_lo.max(axis=-1) - z_hi.min(axis=-1)), 0.0)
    v_lo = np.maximum(v_lo, down(down(gap * gap) / (2 * width)))
  v_hi = up(up(s_hi + sum_error(s_hi, width)) / width)
  return v_lo, v_hi


def _ln_bracket_times(r: Interval, a: Interval, width: int) -> Interval:
  """(I - 1 1^T / D - r r^T / D) da, an interval matrix times a's tangents [..., D, P] (r r^T's
  diagonal by ``square``), as an Interval of the product [..., D, P]: the same product as
  dc - r (r . dc) / D, each tangent entry entering once, so the two are intersected."""
  ri = Interval(r.lo[..., :, None], r.hi[..., :, None])
  rj = Interval(r.lo[..., None, :], r.hi[..., None, :])
  q_lo, q_hi = _mul_bounds(ri.lo, ri.hi, rj.lo, rj.hi)
  sq = square(r)
  eye = np.eye(width, dtype=bool)
  q_lo = np.where(eye, sq.lo[..., :, None], q_lo)
  q_hi = np.where(eye, sq.hi[..., :, None], q_hi)
  base = np.eye(width) - 1.0 / width                       # exact for D a power of two
  m_lo = down(down(base) - up(q_hi / width))
  m_hi = up(up(base) - down(q_lo / width))
  p_lo, p_hi = _mul_bounds(m_lo[..., None], m_hi[..., None], a.tlo[..., None, :, :],
                           a.thi[..., None, :, :])             # [..., D_i, D_j, P]
  err = sum_error(np.maximum(np.abs(p_lo), np.abs(p_hi)).sum(axis=-2), width)
  return Interval(down(p_lo.sum(axis=-2) - err), up(p_hi.sum(axis=-2) + err))


def _intersect(t: Interval, other: Interval) -> Interval:
  """The intersection of two enclosures of the same values (no tangents)."""
  lo, hi = np.maximum(t.lo, other.lo), np.minimum(t.hi, other.hi)
  bad = ~(lo <= hi)
  return Interval(np.where(bad, t.lo, lo), np.where(bad, t.hi, hi))


def layer_norm(a: Interval, gamma, beta, eps: float):
  """(LN(a) as an Interval with tangents, r = c / s as an Interval, [s_lo, s_hi]) over the
  last value axis (above)."""
  gamma, beta = np.asarray(gamma, np.float64), np.asarray(beta, np.float64)
  width = a.lo.shape[-1]
  c = centred(a)
  v_lo, v_hi = variance_bounds(c.lo, c.hi, a.lo, a.hi)
  s_lo = down(np.sqrt(down(v_lo + eps)))[..., None]
  s_hi = up(np.sqrt(up(v_hi + eps)))[..., None]
  corners = np.stack([c.lo / s_lo, c.lo / s_hi, c.hi / s_lo, c.hi / s_hi])
  bound = up(math.sqrt(width - 1)) if width > 1 else 0.0
  r = Interval(np.maximum(down(corners.min(axis=0)), -bound),
               np.minimum(up(corners.max(axis=0)), bound))
  y = add(mul(r, point(gamma)), point(beta))
  if a.has_tangent:
    dc = Interval(c.tlo, c.thi)                                      # [..., D, P]
    r_t = Interval(r.lo[..., None], r.hi[..., None])
    inner = sum_axis(mul(r_t, dc), -2)                               # [..., P]
    proj = mul(r_t, Interval(inner.lo[..., None, :], inner.hi[..., None, :]))
    t = sub(dc, Interval(down(proj.lo / width), up(proj.hi / width)))
    t = _intersect(t, _ln_bracket_times(r, a, width))
    g_lo = np.minimum(gamma / s_lo, gamma / s_hi)
    g_hi = np.maximum(gamma / s_lo, gamma / s_hi)
    factor = Interval(down(g_lo)[..., None], up(g_hi)[..., None])
    dy = mul(factor, t)
    y.tlo, y.thi = dy.lo, dy.hi
  return y, r, (s_lo[..., 0], s_hi[..., 0])
