r"""Outward-rounded interval arithmetic in jax.numpy (float64), for the box kernel.

intervals.py's primitives op for op (an interval is a tuple (lo, hi, tlo, thi), tlo/thi None
without tangents), with the outward step made to survive what XLA does to floats:

    up(x)   = max(nextafter(x, +inf), x + 2^-1021)
    down(x) = min(nextafter(x, -inf), x - 2^-1021)

* Flush to zero (XLA's CPU runtime flushes subnormal results and reads subnormal inputs as
  0): a flushed result is off by < 2^-1022, which the 2^-1021 covers; an output of up()
  that is subnormal only arises where the true value is negative, so reading it as 0 still
  bounds it (down() symmetrically). Sums get (k + 1) 2^-1021 per k terms (each product or
  partial sum may flush). Weights that are subnormal would be read as 0: refused.
* FMA contraction (GPU): a contracted a b + c has one rounding instead of two; every
  bound here is taken after a single operation or over a sum with the any-order bound
  gamma_k sum |terms| (intervals.sum_error), which holds for FMA-based sums as well.
* XLA's exp (and expm1) are not NumPy's: ``check_exp`` measures them on the backend against mpmath (60 digits) and refuses when off by more than
  intervals.EXP_SLACK (relative), the widening every exp gets.
* float64 is required (jax's x64): the kernel runs under ``jax.enable_x64(True)`` and
  refuses, in one line, a backend whose arrays do not come back as float64.
"""

from __future__ import annotations

import math

import numpy as np

from transformer_ua.certify import intervals as iv

#: The absolute step of up/down (twice the smallest normal: covers a flushed subnormal).
STEP = 2.0 ** -1021
SMALLEST_NORMAL = 2.0 ** -1022
_U = 2.0 ** -53
_MAX = float(np.finfo(np.float64).max)


def jnp_module():
  """jax.numpy, imported when the kernel is used."""
  import jax.numpy as jnp   # jax only when the kernel is used
  return jnp


# ---------------------------------------------------------------------------
# Interval primitives (intervals.py's, in jnp). An interval is a tuple (lo, hi, tlo, thi),
# tlo/thi None without tangents.
# ---------------------------------------------------------------------------


def up(x):
  jnp = jnp_module()
  return jnp.maximum(jnp.nextafter(x, jnp.inf), x + STEP)


def down(x):
  jnp = jnp_module()
  return jnp.minimum(jnp.nextafter(x, -jnp.inf), x - STEP)


def sum_error(abs_sum, terms: int):
  """intervals.sum_error with a flush-to-zero term (k + 1) 2^-1021 per sum of k terms."""
  k = terms + 1
  gamma = k * _U / (1 - k * _U)
  return up(abs_sum * (gamma * (1 + 2.0 ** -30)) + (k + 1) * STEP)


def _mul_bounds(alo, ahi, blo, bhi):
  jnp = jnp_module()
  c = jnp.stack(jnp.broadcast_arrays(alo * blo, alo * bhi, ahi * blo, ahi * bhi))
  return down(c.min(axis=0)), up(c.max(axis=0))


def mag(a):
  jnp = jnp_module()
  return jnp.maximum(jnp.abs(a[0]), jnp.abs(a[1]))


def add(a, b):
  jnp = jnp_module()
  lo, hi = down(a[0] + b[0]), up(a[1] + b[1])
  if a[2] is not None and b[2] is not None:
    return lo, hi, down(a[2] + b[2]), up(a[3] + b[3])
  src = a if a[2] is not None else b
  if src[2] is None:
    return lo, hi, None, None
  full = lo.shape + src[2].shape[-1:]
  return lo, hi, jnp.broadcast_to(src[2], full), jnp.broadcast_to(src[3], full)


def mul(a, b):
  jnp = jnp_module()
  lo, hi = _mul_bounds(a[0], a[1], b[0], b[1])
  parts = []
  if a[2] is not None:
    parts.append(_mul_bounds(a[2], a[3], b[0][..., None], b[1][..., None]))
  if b[2] is not None:
    parts.append(_mul_bounds(a[0][..., None], a[1][..., None], b[2], b[3]))
  if not parts:
    return lo, hi, None, None
  tlo, thi = parts[0]
  if len(parts) == 2:
    tlo, thi = down(tlo + parts[1][0]), up(thi + parts[1][1])
  full = lo.shape + tlo.shape[-1:]
  return lo, hi, jnp.broadcast_to(tlo, full), jnp.broadcast_to(thi, full)


def sub(a, b):
  return add(a, (-b[1], -b[0], None if b[2] is None else -b[3],
                 None if b[2] is None else -b[2]))


def sum_axis(a, axis: int):
  jnp = jnp_module()
  k = a[0].shape[axis]
  err = sum_error(mag(a).sum(axis=axis), k)
  lo, hi = down(a[0].sum(axis=axis) - err), up(a[1].sum(axis=axis) + err)
  if a[2] is None:
    return lo, hi, None, None
  t = axis - 1
  terr = sum_error(jnp.maximum(jnp.abs(a[2]), jnp.abs(a[3])).sum(axis=t), k)
  return lo, hi, down(a[2].sum(axis=t) - terr), up(a[3].sum(axis=t) + terr)


def linear(a, w: np.ndarray, b: np.ndarray | None = None):
  """a @ w^T + b on the last value axis (w [r, D], b [r]: exact floats, no subnormals)."""
  jnp = jnp_module()
  w = np.asarray(w, np.float64)
  wp, wn, wa = jnp.asarray(np.maximum(w, 0)), jnp.asarray(np.minimum(w, 0)), np.abs(w)
  k = w.shape[1] + (b is not None)
  lo = a[0] @ wp.T + a[1] @ wn.T
  hi = a[1] @ wp.T + a[0] @ wn.T
  absum = mag(a) @ jnp.asarray(wa.T)
  if b is not None:
    lo, hi, absum = lo + b, hi + b, absum + np.abs(b)
  err = sum_error(absum, 2 * k)
  if a[2] is None:
    return down(lo - err), up(hi + err), None, None
  tl, th = jnp.swapaxes(a[2], -1, -2), jnp.swapaxes(a[3], -1, -2)
  tlo = jnp.swapaxes(tl @ wp.T + th @ wn.T, -1, -2)
  thi = jnp.swapaxes(th @ wp.T + tl @ wn.T, -1, -2)
  tabs = jnp.swapaxes(jnp.maximum(jnp.abs(tl), jnp.abs(th)) @ jnp.asarray(wa.T), -1, -2)
  terr = sum_error(tabs, 2 * w.shape[1])
  return down(lo - err), up(hi + err), down(tlo - terr), up(thi + terr)


def relu(a):
  jnp = jnp_module()
  lo, hi = jnp.maximum(a[0], 0.0), jnp.maximum(a[1], 0.0)
  if a[2] is None:
    return lo, hi, None, None
  on, off = (a[0] >= 0)[..., None], (a[1] <= 0)[..., None]
  tlo = jnp.where(off, 0.0, jnp.where(on, a[2], jnp.minimum(a[2], 0.0)))
  thi = jnp.where(off, 0.0, jnp.where(on, a[3], jnp.maximum(a[3], 0.0)))
  return lo, hi, tlo, thi


def _exp_down(x):
  jnp = jnp_module()
  return jnp.maximum(down(jnp.exp(x) * (1 - iv.EXP_SLACK)), 0.0)


def _exp_up(x):
  jnp = jnp_module()
  return up(jnp.exp(x) * (1 + iv.EXP_SLACK))


def softmax(s):
  """intervals.softmax (saturating) over the last value axis."""
  jnp = jnp_module()
  n = s[0].shape[-1]
  eye = jnp.eye(n, dtype=bool)
  dhi = up(s[1][..., None, :] - s[0][..., :, None])
  dlo = down(s[0][..., None, :] - s[1][..., :, None])
  ehi = jnp.where(eye, 1.0, _exp_up(dhi))
  elo = jnp.where(eye, 1.0, jnp.minimum(_exp_down(dlo), _MAX))
  shi = up(ehi.sum(axis=-1) + sum_error(ehi.sum(axis=-1), n))
  esum = elo.sum(axis=-1)
  slo = jnp.where(jnp.isfinite(esum), down(esum - sum_error(esum, n)), elo.max(axis=-1))
  w = (jnp.clip(down(1.0 / shi), 0.0, 1.0), jnp.clip(up(1.0 / slo), 0.0, 1.0), None, None)
  if s[2] is None:
    return w
  ds = (s[2], s[3], None, None)
  wt = (w[0][..., None], w[1][..., None], None, None)
  inner = sum_axis(mul(wt, ds), -2)
  centred = sub(ds, (inner[0][..., None, :], inner[1][..., None, :], None, None))
  dw = mul(wt, centred)
  return w[0], w[1], dw[0], dw[1]


def expand(a, axis: int):
  jnp = jnp_module()
  lo, hi = jnp.expand_dims(a[0], axis), jnp.expand_dims(a[1], axis)
  if a[2] is None:
    return lo, hi, None, None
  return lo, hi, jnp.expand_dims(a[2], axis - 1), jnp.expand_dims(a[3], axis - 1)


def pairwise(a, b):
  return sum_axis(mul(expand(a, -2), expand(b, -3)), -1)


def mix(w, v):
  return sum_axis(mul(expand(w, -1), expand(v, -3)), -2)


_EXP_CHECKED: dict = {}


def check_exp(points: int = 2000, seed: int = 0) -> float:
  """XLA's exp and expm1 (jit, on the default backend, float64) against mpmath (60 digits)
  on [-745, 50] and small arguments: the largest relative error; ValueError (one line) if
  above intervals.EXP_SLACK. Cached per backend."""
  import jax
  import jax.numpy as jnp
  import mpmath
  backend = jax.default_backend()
  if backend in _EXP_CHECKED:
    return _EXP_CHECKED[backend]
  rng = np.random.default_rng(seed)
  x = np.concatenate([-np.logspace(-12, math.log10(745), points // 2),
                      rng.uniform(-40, 50, points - points // 2)])
  small = np.concatenate([np.logspace(-20, 1, 200), -np.logspace(-20, 1, 200)])
  with jax.enable_x64(True):
    got = np.asarray(jax.jit(jnp.exp)(jnp.asarray(x)))
    got_m1 = np.asarray(jax.jit(jnp.expm1)(jnp.asarray(small)))
  if got.dtype != np.float64:
    raise ValueError(f'the box kernel needs float64 (jax x64); the {backend} backend gave '
                     f'{got.dtype}: use the NumPy path.')
  worst = iv.exp_relative_error(x, got)
  with mpmath.workdps(60):
    for xi, gi in zip(small, got_m1):
      ref = mpmath.expm1(mpmath.mpf(float(xi)))
      worst = max(worst, float(abs(mpmath.mpf(float(gi)) - ref) / abs(ref)))
  if worst > iv.EXP_SLACK:
    raise ValueError(f"XLA's exp on {backend} is off by {worst:.3g} relative (more than the "
                     f'certifier allows, {iv.EXP_SLACK:.3g}); use the NumPy path.')
  _EXP_CHECKED[backend] = worst
  return worst
