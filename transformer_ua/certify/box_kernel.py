r"""The box kernel: network_enclosure's per-box enclosure compiled with jax.jit over batches.

For a batch of boxes [B, n, d] it returns what ``network_enclosure.enclose`` returns, as
NumPy arrays: g(c) at the centres (point intervals), g over the box with its interval
Jacobian (tangents [B, n, d, n d]), and the float deviation D >= |fl(g) - g|. The math is
network_enclosure's and intervals.py's, op for op; the NumPy path stays the reference and
the tests check that these bounds contain it.

Outward rounding under XLA. Every bound is moved outward after each rounded operation, as
in intervals.py, but with a step that survives what XLA does to floats:

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
* XLA's exp (and expm1, used by the softmax's deviation) are not NumPy's: ``check_exp``
  measures them on the backend against mpmath (60 digits) and refuses when off by more than
  intervals.EXP_SLACK (relative), the widening every exp gets.
* float64 is required (jax's x64): the kernel runs under ``jax.enable_x64(True)`` and
  refuses, in one line, a backend whose arrays do not come back as float64.

Generic over the op set: ``OPS`` maps a layer kind to its function (params, z, d_z, fm) ->
(z, d_z) (agreement.md's op interface), and ``program(net)`` lists a network's layers as
(kind, params); a new layer (LayerNorm, GELU) is one entry in OPS and one in ``program``.
"""

from __future__ import annotations

import math

import numpy as np

from transformer_ua.certify import intervals as iv
from transformer_ua.certify import network_enclosure
from transformer_ua import rounding

#: The absolute step of up/down (twice the smallest normal: covers a flushed subnormal).
STEP = 2.0 ** -1021
_TINY = 2.0 ** -1022
_U = 2.0 ** -53
_WIDEN = 1 + 2.0 ** -40
_MAX = float(np.finfo(np.float64).max)
#: The kernel's values and tangents are widened by this much of their largest magnitude at
#: the end, its deviation by DEV_WIDEN of itself (``enclose``).
FINAL_WIDEN = 2.0 ** -40
DEV_WIDEN = 2.0 ** -30


def _jnp():
  import jax.numpy as jnp   # jax only when the kernel is used
  return jnp


# ---------------------------------------------------------------------------
# Interval primitives (intervals.py's, in jnp). An interval is a tuple (lo, hi, tlo, thi),
# tlo/thi None without tangents.
# ---------------------------------------------------------------------------


def up(x):
  jnp = _jnp()
  return jnp.maximum(jnp.nextafter(x, jnp.inf), x + STEP)


def down(x):
  jnp = _jnp()
  return jnp.minimum(jnp.nextafter(x, -jnp.inf), x - STEP)


def sum_error(abs_sum, terms: int):
  """intervals.sum_error with a flush-to-zero term (k + 1) 2^-1021 per sum of k terms."""
  k = terms + 1
  gamma = k * _U / (1 - k * _U)
  return up(abs_sum * (gamma * (1 + 2.0 ** -30)) + (k + 1) * STEP)


def _mul_bounds(alo, ahi, blo, bhi):
  jnp = _jnp()
  c = jnp.stack(jnp.broadcast_arrays(alo * blo, alo * bhi, ahi * blo, ahi * bhi))
  return down(c.min(axis=0)), up(c.max(axis=0))


def mag(a):
  jnp = _jnp()
  return jnp.maximum(jnp.abs(a[0]), jnp.abs(a[1]))


def add(a, b):
  jnp = _jnp()
  lo, hi = down(a[0] + b[0]), up(a[1] + b[1])
  if a[2] is not None and b[2] is not None:
    return lo, hi, down(a[2] + b[2]), up(a[3] + b[3])
  src = a if a[2] is not None else b
  if src[2] is None:
    return lo, hi, None, None
  full = lo.shape + src[2].shape[-1:]
  return lo, hi, jnp.broadcast_to(src[2], full), jnp.broadcast_to(src[3], full)


def mul(a, b):
  jnp = _jnp()
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
  jnp = _jnp()
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
  jnp = _jnp()
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
  jnp = _jnp()
  lo, hi = jnp.maximum(a[0], 0.0), jnp.maximum(a[1], 0.0)
  if a[2] is None:
    return lo, hi, None, None
  on, off = (a[0] >= 0)[..., None], (a[1] <= 0)[..., None]
  tlo = jnp.where(off, 0.0, jnp.where(on, a[2], jnp.minimum(a[2], 0.0)))
  thi = jnp.where(off, 0.0, jnp.where(on, a[3], jnp.maximum(a[3], 0.0)))
  return lo, hi, tlo, thi


def _exp_down(x):
  jnp = _jnp()
  return jnp.maximum(down(jnp.exp(x) * (1 - iv.EXP_SLACK)), 0.0)


def _exp_up(x):
  jnp = _jnp()
  return up(jnp.exp(x) * (1 + iv.EXP_SLACK))


def softmax(s):
  """intervals.softmax (saturating) over the last value axis."""
  jnp = _jnp()
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
  jnp = _jnp()
  lo, hi = jnp.expand_dims(a[0], axis), jnp.expand_dims(a[1], axis)
  if a[2] is None:
    return lo, hi, None, None
  return lo, hi, jnp.expand_dims(a[2], axis - 1), jnp.expand_dims(a[3], axis - 1)


def pairwise(a, b):
  return sum_axis(mul(expand(a, -2), expand(b, -3)), -1)


def mix(w, v):
  return sum_axis(mul(expand(w, -1), expand(v, -3)), -2)


# ---------------------------------------------------------------------------
# The float deviation (network_enclosure's formulas, in jnp).
# ---------------------------------------------------------------------------


def _up(x):
  return up(x * _WIDEN)


def _dot_dev(fm, w_abs, d_x, m_x, b_abs, terms: int):
  a = (m_x + d_x).max(axis=-1, keepdims=True)
  s = (m_x + d_x) @ w_abs.T + b_abs
  return _up(d_x @ w_abs.T + fm.kappa(terms) * s
             + (terms + 1) * fm.tiny * (a + float(w_abs.max()) + 2))


def _dev_pairwise(fm, dq, mq, dk, mk):
  jnp = _jnp()
  m = dq.shape[-1]
  aq, ak = mq + dq, mk + dk
  prop = jnp.einsum('...jm,...km->...jk', dq, mk) + jnp.einsum('...jm,...km->...jk', aq, dk)
  s = jnp.einsum('...jm,...km->...jk', aq, ak)
  big = jnp.maximum(aq.max(axis=-1)[..., :, None], ak.max(axis=-1)[..., None, :])
  return _up(prop + fm.kappa(m) * s + (m + 1) * fm.tiny * (2 * big + 2))


def _dev_mix(fm, dw, mw, dv, mv):
  jnp = _jnp()
  n = dw.shape[-1]
  aw, av = mw + dw, mv + dv
  prop = dw @ mv + aw @ dv
  s = aw @ av
  big = jnp.maximum(aw.max(axis=-1)[..., :, None], av.max(axis=-2)[..., None, :])
  return _up(prop + fm.kappa(n) * s + (n + 1) * fm.tiny * (2 * big + 2))


def _dev_softmax(fm, ds, ms, w_hi):
  jnp = _jnp()
  n = ds.shape[-1]
  u = fm.u
  delta = ds.max(axis=-1, keepdims=True)
  t = 2 * (ms + ds).max(axis=-1, keepdims=True)
  r1 = _up(jnp.expm1(_up(u * t)) * _WIDEN + 2 * u * rounding.EXP_ULPS
           * _up(jnp.exp(_up(u * t))))
  r2 = _up((1 + r1) * (1 + fm.gamma(n)) - 1)
  denom = down(jnp.where(r2 < 1, 1 - r2, 1.0))
  rho = jnp.where(r2 < 1, _up((1 + r1) * (1 + u) ** 2 / denom - 1), jnp.inf)
  grow = _up(jnp.exp(_up(2 * delta)) * (1 + iv.EXP_SLACK))
  shift = _up(jnp.expm1(_up(2 * delta)) * (1 + iv.EXP_SLACK) + 2.0 ** -60)
  out = _up(w_hi * shift + rho * jnp.minimum(1.0, w_hi * grow) + 4 * n * fm.tiny)
  return jnp.where(jnp.isnan(out), jnp.inf, jnp.minimum(out, _up(1 + rho)))


# ---------------------------------------------------------------------------
# The op table and a network's program.
# ---------------------------------------------------------------------------


def _attention(params, z, d_z, fm):
  jnp = _jnp()
  w_q, b_q, w_k, w_v, w_o = params
  h, m, width = w_q.shape
  heads, d_heads = [], []
  for i in range(h):
    q = linear(z, w_q[i], b_q[i])
    k = linear(z, w_k[i])
    v = linear(z, w_v[i])
    s = pairwise(q, k)
    w = softmax(s)
    heads.append(mix(w, v))
    if fm is not None:
      d_q = _dot_dev(fm, np.abs(w_q[i]), d_z, mag(z), np.abs(b_q[i]), width)
      d_k = _dot_dev(fm, np.abs(w_k[i]), d_z, mag(z), 0.0, width)
      d_v = _dot_dev(fm, np.abs(w_v[i]), d_z, mag(z), 0.0, width)
      d_s = _dev_pairwise(fm, d_q, mag(q), d_k, mag(k))
      d_w = _dev_softmax(fm, d_s, mag(s), w[1])
      d_heads.append(_dev_mix(fm, d_w, w[1], d_v, mag(v)))
  out = z
  for i, o in enumerate(heads):
    out = add(out, linear(o, w_o[i]))
  if fm is None:
    return out, None
  prop = sum(d_heads[i] @ np.abs(w_o[i]).T for i in range(h))
  s = sum((mag(heads[i]) + d_heads[i]) @ np.abs(w_o[i]).T for i in range(h))
  terms = h * m + 1
  a = jnp.max(jnp.stack([(mag(heads[i]) + d_heads[i]).max() for i in range(h)]))
  d_out = _up(d_z + prop + fm.kappa(terms) * (s + mag(z) + d_z)
              + (terms + 1) * fm.tiny * (a + float(np.abs(w_o).max()) + (mag(z) + d_z) + 2))
  return out, d_out


def _feedforward(params, z, d_z, fm):
  w_1, b_1, w_2, b_2 = params
  r, width = w_1.shape
  pre = linear(z, w_1, b_1)
  act = relu(pre)
  out = add(z, linear(act, w_2, b_2))
  if fm is None:
    return out, None
  d_act = _dot_dev(fm, np.abs(w_1), d_z, mag(z), np.abs(b_1), width)
  terms = r + 1
  s = (mag(act) + d_act) @ np.abs(w_2).T + np.abs(b_2) + mag(z) + d_z
  a = (mag(act) + d_act).max(axis=-1, keepdims=True)
  d_out = _up(d_z + d_act @ np.abs(w_2).T + fm.kappa(terms) * s
              + (terms + 2) * fm.tiny * (a + float(np.abs(w_2).max()) + mag(z) + d_z + 2))
  return out, d_out


def _embed(params, z, d_z, fm):
  (e, d) = params
  if fm is not None:
    d_z = _dot_dev(fm, np.abs(e), d_z, mag(z), 0.0, d)
  return linear(z, e), d_z


def _pad(params, z, d_z, fm):
  jnp = _jnp()
  (extra,) = params
  pad = [(0, 0)] * (z[0].ndim - 1) + [(0, extra)]
  tpad = pad + [(0, 0)]
  t = (None, None) if z[2] is None else (jnp.pad(z[2], tpad), jnp.pad(z[3], tpad))
  return (jnp.pad(z[0], pad), jnp.pad(z[1], pad)) + t, \
      None if d_z is None else jnp.pad(d_z, pad)


def _positional(params, z, d_z, fm):
  (pos,) = params
  z = add(z, (pos, pos, None, None))
  if fm is not None:
    d_z = _up(d_z + fm.u * (mag(z) + d_z) + fm.tiny)
  return z, d_z


def _readout(params, z, d_z, fm):
  (r, width) = params
  if fm is not None:
    d_z = _dot_dev(fm, np.abs(r), d_z, mag(z), 0.0, width)
  return linear(z, r), d_z


def _first(params, z, d_z, fm):
  (d,) = params
  t = (None, None) if z[2] is None else (z[2][..., :d, :], z[3][..., :d, :])
  return (z[0][..., :d], z[1][..., :d]) + t, None if d_z is None else d_z[..., :d]


#: Layer kind -> op(params, z, d_z, fm) -> (z, d_z).
OPS = {'embed': _embed, 'pad': _pad, 'positional': _positional, 'attention': _attention,
       'feedforward': _feedforward, 'readout': _readout, 'first': _first}


def program(net) -> list:
  """The network's layers as (kind, params), in network_enclosure.enclose's order."""
  out = []
  if net.embed is not None:
    out.append(('embed', (np.asarray(net.embed, np.float64), net.d)))
  elif net.D > net.d:
    out.append(('pad', (net.D - net.d,)))
  if net.positional is not None:
    out.append(('positional', (np.asarray(net.positional, np.float64),)))
  for blk in net.blocks:
    if blk.attention is not None:
      out.append(('attention', tuple(np.asarray(a, np.float64) for a in blk.attention)))
    if blk.ff is not None:
      out.append(('feedforward', tuple(np.asarray(a, np.float64) for a in blk.ff)))
  if net.readout is not None:
    out.append(('readout', (np.asarray(net.readout, np.float64), net.D)))
  else:
    out.append(('first', (net.d,)))
  return out


def _check_weights(layers) -> None:
  for kind, params in layers:
    for a in params:
      if isinstance(a, np.ndarray):
        sub = (a != 0) & (np.abs(a) < _TINY)
        if np.any(sub):
          raise ValueError(f'the box kernel refuses a {kind} weight that is subnormal '
                           f'({a[sub].ravel()[0]:.3g}): XLA reads it as 0; use the NumPy path.')


# ---------------------------------------------------------------------------
# The kernel.
# ---------------------------------------------------------------------------


class BoxKernel:
  """jit-compiled ``network_enclosure.enclose`` of one network and rounding model."""

  def __init__(self, net, model: rounding.MatmulModel | None, *, batch: int = 2048):
    import jax
    self.layers = program(net)
    _check_weights(self.layers)
    self.fm = None if model is None else network_enclosure._Model(model)
    self.batch = int(batch)
    with jax.enable_x64(True):
      check_exp()
      self._point = jax.jit(self._run_point)
      self._box = jax.jit(self._run_box)

  def _layers(self, z, d_z, fm):
    for kind, params in self.layers:
      z, d_z = OPS[kind](params, z, d_z, fm)
    return z, d_z

  def _run_point(self, c):
    z, _ = self._layers((c, c, None, None), None, None)
    return z[0], z[1]

  def _run_box(self, lo, hi):
    jnp = _jnp()
    b, n, d = lo.shape
    p = n * d
    eye = jnp.eye(p, dtype=lo.dtype).reshape((n, d, p))
    t = jnp.broadcast_to(eye, (b, n, d, p))
    d_z = None
    fm = self.fm
    if fm is not None:
      d_z = _up(fm.u * mag((lo, hi)) + fm.tiny)
    z, d_z = self._layers((lo, hi, t, t), d_z, fm)
    return z, d_z

  def enclose(self, lo: np.ndarray, hi: np.ndarray):
    """(g(c) as (lo, hi), g over the box as an intervals.Interval with tangents, D or None)
    for boxes [B, n, d] (dyadic: the centres are exact)."""
    import jax
    lo = np.asarray(lo, np.float64)
    hi = np.asarray(hi, np.float64)
    outs = []
    with jax.enable_x64(True):
      for i in range(0, len(lo), self.batch):
        l, h = lo[i:i + self.batch], hi[i:i + self.batch]
        m = len(l)
        if m < self.batch:                     # pad to the compiled shape
          l = np.concatenate([l, np.repeat(l[-1:], self.batch - m, axis=0)])
          h = np.concatenate([h, np.repeat(h[-1:], self.batch - m, axis=0)])
        c = (l + h) / 2
        pc = self._point(c)
        z, dev = self._box(l, h)
        got = [np.asarray(x)[:m] for x in (*pc, *z)] + \
            [None if dev is None else np.asarray(dev)[:m]]
        if got[0].dtype != np.float64:
          raise ValueError(f'the box kernel needs float64 (jax x64); this backend returned '
                           f'{got[0].dtype}: use the NumPy path.')
        outs.append(got)
    cat = [np.concatenate([o[k] for o in outs]) for k in range(6)]
    # XLA sums in another order than NumPy's BLAS: the two sound bounds differ in the last
    # bits (relative to the sums' magnitudes, not to a cancelled result); widened by
    # FINAL_WIDEN of the array's largest magnitude (and the deviation by DEV_WIDEN of
    # itself), the kernel's contain the reference's (tested), at a negligible cost.
    scales = [max(_scale(cat[k]), _scale(cat[k + 1])) for k in (0, 2, 4)]
    lows = [_widen_down(cat[k], sc, FINAL_WIDEN) for k, sc in zip((0, 2, 4), scales)]
    highs = [_widen_up(cat[k], sc, FINAL_WIDEN) for k, sc in zip((1, 3, 5), scales)]
    dev = None if self.fm is None else \
        _widen_up(np.concatenate([o[6] for o in outs]), 0.0, DEV_WIDEN)
    return (lows[0], highs[0]), iv.Interval(lows[1], highs[1], lows[2], highs[2]), dev


def _scale(x) -> float:
  finite = np.abs(x[np.isfinite(x)])
  return float(finite.max()) if finite.size else 0.0


def _widen_up(x, scale: float, rel: float):
  """x + (|x| + scale) rel, rounded up (NumPy, after the kernel)."""
  with np.errstate(invalid='ignore', over='ignore'):
    return iv.up(x + (np.abs(x) + scale) * rel + STEP)


def _widen_down(x, scale: float, rel: float):
  with np.errstate(invalid='ignore', over='ignore'):
    return iv.down(x - (np.abs(x) + scale) * rel - STEP)


_KERNELS: dict = {}


def kernel_for(net, model: rounding.MatmulModel | None, *, batch: int = 2048) -> BoxKernel:
  """A BoxKernel, compiled once per (network, rounding model, batch) in this process."""
  from transformer_ua.networks import network_dict
  key = (network_dict.params_hash(net), None if model is None else model.name, int(batch))
  if key not in _KERNELS:
    _KERNELS[key] = BoxKernel(net, model, batch=batch)
  return _KERNELS[key]


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
  worst = 0.0
  with mpmath.workdps(60):
    for xi, gi in zip(x, got):
      ref = mpmath.exp(mpmath.mpf(float(xi)))
      if ref < mpmath.mpf(2) ** -1000:
        continue
      worst = max(worst, float(abs(mpmath.mpf(float(gi)) - ref) / ref))
    for xi, gi in zip(small, got_m1):
      ref = mpmath.expm1(mpmath.mpf(float(xi)))
      worst = max(worst, float(abs(mpmath.mpf(float(gi)) - ref) / abs(ref)))
  if worst > iv.EXP_SLACK:
    raise ValueError(f"XLA's exp on {backend} is off by {worst:.3g} relative (more than the "
                     f'certifier allows, {iv.EXP_SLACK:.3g}); use the NumPy path.')
  _EXP_CHECKED[backend] = worst
  return worst
