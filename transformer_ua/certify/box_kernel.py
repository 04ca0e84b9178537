r"""The box kernel: network_enclosure's per-box enclosure compiled with jax.jit over batches.

For a batch of boxes [B, n, d] it returns what ``network_enclosure.enclose`` returns, as
NumPy arrays: g(c) at the centres (point intervals), g over the box with its interval
Jacobian (tangents [B, n, d, n d]), and the float deviation D >= |fl(g) - g|. The math is
network_enclosure's and intervals.py's, op for op; the NumPy path stays the reference and
the tests check that these bounds contain it.

Outward rounding under XLA (flush to zero, FMA contraction, XLA's exp, x64): the interval
primitives of jax_intervals.py, whose docstring gives the argument.

Overflow: every M + D that network_enclosure checks (``float_deviation.Model.check_range``) is kept per
box; a box where one may reach the format's largest value gets D = inf (no bound: it is
split), as ``enclose(marks=)`` does.

Generic over the op set: ``OPS`` maps a layer kind to its function (params, z, d_z, fm) ->
(z, d_z) (agreement.md's op interface), and ``program(net)`` lists a network's layers as
(kind, params); a new layer (LayerNorm, GELU, the scale, the causal mask) is one entry in
OPS and one in ``program``. Today OPS has the embedding (+ bias), positional encodings,
attention with Q/K/V/O biases, the ReLU feed-forward and the readout (+ bias); a network
with another op is refused in one line (the NumPy path certifies it).
"""

from __future__ import annotations

import numpy as np

from transformer_ua import rounding
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import float_deviation
from transformer_ua.certify import signed_reduction
from transformer_ua.certify.jax_intervals import (
    SMALLEST_NORMAL, STEP, add, check_exp, down, jnp_module, linear, mag, mix, pairwise, relu,
    softmax, sum_error, up)

_WIDEN = 1 + 2.0 ** -40
#: The kernel's values and tangents are widened by this much of their largest magnitude at
#: the end, its deviation by DEV_WIDEN of itself (``enclose``).
FINAL_WIDEN = 2.0 ** -40
DEV_WIDEN = 2.0 ** -30


# ---------------------------------------------------------------------------
# The float deviation (network_enclosure's formulas, in jnp).
# ---------------------------------------------------------------------------


def _up(x):
  return up(x * _WIDEN)


class _KModel:
  """float_deviation.Model's constants, and the range checks of one trace: every M + D
  that network_enclosure checks (``check_range``) is kept here, so that the kernel gives
  D = inf to a box where one may reach the format's largest value, as enclose(marks=)."""

  def __init__(self, fm):
    self.fm = fm
    self.u, self.tiny, self.limit = fm.u, fm.tiny, fm.limit
    self.checks = []
    self.operands = None
    self.signs = None

  def signs_of(self, d):
    """float_deviation.Model.signs_of."""
    mark, self.signs = self.signs, None
    return mark[:2] if mark is not None and mark[2] is d else None

  def kappa(self, m):
    return self.fm.kappa(m)

  def kappa_pair(self, m):
    return self.fm.kappa_pair(m)

  @property
  def split(self):
    return self.fm.split

  def kappa_acc(self, m):
    return self.fm.kappa_acc(m)

  def rho(self, lo, hi, d):
    """float_deviation.Model.rho in jnp (the same rounding.MatmulModel.operand_error)."""
    if not self.split:
      return 0.0
    return self.fm.model.operand_error(down(lo - d), up(hi + d), jnp_module())

  def gamma(self, m):
    return self.fm.gamma(m)

  def check_range(self, m_plus_d):
    jnp = jnp_module()
    b = m_plus_d.shape[0]
    self.checks.append(jnp.max(jnp.reshape(m_plus_d, (b, -1)), axis=1))

  def operand_outputs(self, w, b, res, d_res, d_out):
    """float_deviation.Model.operand_outputs."""
    if self.split:
      exact_zero = (res[0] == 0) & (res[1] == 0) & (d_res == 0)
      self.operands = (float_deviation.operand_rows(w, b) & exact_zero, d_out)

  def signed(self, lo, hi, d, c_lo, c_hi, *, cap=None, nonneg=False):
    """float_deviation.Model.signed in jnp."""
    return signed_reduction.parts(self.fm.model, down(lo - d), up(hi + d), c_lo, c_hi, _up,
                                  jnp_module(), cap=cap, nonneg=nonneg)

  def signed_bound(self, lo, hi, d, w, **kw):
    """float_deviation.Model.signed_bound in jnp."""
    low, high, s = self.signed(lo, hi, d, w, w, **kw)
    jnp = jnp_module()
    return jnp.maximum(jnp.maximum(low, high), s)

  def rho_of(self, z, d_z):
    """float_deviation.Model.rho_of."""
    rho = self.rho(z[0], z[1], d_z)
    mark, self.operands = self.operands, None
    if mark is not None and mark[1] is d_z and self.split:
      rho = jnp_module().where(mark[0], self.tiny, rho)
    return rho

  def dot(self, w_abs, d_x, m_x, b_abs, terms: int, x=None, rho=None, w=None):
    """float_deviation.Model.dot."""
    prop = None
    if self.split:
      if rho is None:
        rho = self.rho(-m_x, m_x, d_x) if x is None else self.rho(x[0], x[1], d_x)
      if w is not None and x is not None:
        prop = _up(d_x @ w_abs.T + self.signed_bound(x[0], x[1], d_x, w, cap=rho))
      d_x = _up(d_x + rho)
    a = (m_x + d_x).max(axis=-1, keepdims=True)
    s = (m_x + d_x) @ w_abs.T + b_abs
    prop = d_x @ w_abs.T if prop is None else prop
    out = _up(prop + self.kappa_acc(terms) * s
              + (terms + 1) * self.tiny * (a + float(w_abs.max()) + 2))
    self.check_range(_up(s + out))
    return out


def _dev_pairwise(fm, dq, mq, dk, mk, rq=0.0, rk=0.0):
  jnp = jnp_module()
  m = dq.shape[-1]
  if fm.split:
    dq, dk = _up(dq + rq), _up(dk + rk)
  aq, ak = mq + dq, mk + dk
  prop = jnp.einsum('...jm,...km->...jk', dq, ak) + jnp.einsum('...jm,...km->...jk', mq, dk)
  s = jnp.einsum('...jm,...km->...jk', aq, ak)
  big = jnp.maximum(aq.max(axis=-1)[..., :, None], ak.max(axis=-1)[..., None, :])
  kappa = fm.kappa_acc(m) if fm.split else fm.kappa_pair(m)
  out = _up(prop + kappa * s + (m + 1) * fm.tiny * (2 * big + 2))
  fm.check_range(_up(s + out))
  return out


def _dev_mix(fm, dw, mw, dv, mv, rw=0.0, rv=0.0):
  jnp = jnp_module()
  n = dw.shape[-1]
  if fm.split:
    dw, dv = _up(dw + rw), _up(dv + rv)
  aw, av = mw + dw, mv + dv
  prop = dw @ av + mw @ dv
  s = aw @ av
  big = jnp.maximum(aw.max(axis=-1)[..., :, None], av.max(axis=-2)[..., None, :])
  kappa = fm.kappa_acc(n) if fm.split else fm.kappa_pair(n)
  out = _up(prop + kappa * s + (n + 1) * fm.tiny * (2 * big + 2))
  fm.check_range(_up(s + out))
  return out


def _expm1_up(x):
  """float_deviation.expm1_up: e^x - 1 <= x + x^2 / (2 (1 - x/3)) below 1/2, the checked
  exp minus 1 on [1/2, 50], inf above."""
  jnp = jnp_module()
  small = jnp.minimum(x, 0.5)
  series = _up(small + _up(small * small) / down(2 * down(1 - small / 3)))
  big = jnp.clip(x, 0.5, 50.0)
  via_exp = _up(_up(jnp.exp(big) * (1 + iv.EXP_SLACK)) - 1)
  return jnp.where(x < 0.5, series, jnp.where(x <= 50, via_exp, jnp.inf))


def _dev_softmax(fm, ds, s_lo, s_hi, w_hi):
  """float_deviation._softmax_raw (per-entry max subtraction, constants without
  cancellation)."""
  jnp = jnp_module()
  n = ds.shape[-1]
  u = fm.u
  c_u, gam, cap = float_deviation.softmax_constants(fm.fm, n)
  delta = ds.max(axis=-1, keepdims=True)
  t = up(up(s_hi + ds).max(axis=-1, keepdims=True) - down(s_lo - ds))
  ut = _up(u * jnp.maximum(t, 0.0))
  r1 = _up(_expm1_up(ut) + 2 * u * rounding.EXP_ULPS * _up(1 + _expm1_up(ut)))
  r2 = _up(r1 + gam + _up(r1 * gam))
  grow = _up(1 + _expm1_up(_up(2 * delta)))
  shift = _expm1_up(_up(2 * delta))
  w_up = jnp.minimum(1.0, _up(w_hi * grow))
  mixed = (w_up * r2).sum(axis=-1, keepdims=True)
  big_r = jnp.minimum(_up(mixed + sum_error(mixed, n)), r2.max(axis=-1, keepdims=True))
  denom = down(jnp.where(big_r < 1, 1 - big_r, 1.0))
  rho = jnp.where(big_r < 1, _up(_up(r1 + c_u + _up(r1 * c_u) + big_r) / denom), jnp.inf)
  out = _up(w_hi * shift + rho * w_up + 4 * n * fm.tiny)
  return jnp.where(jnp.isnan(out), jnp.inf, jnp.minimum(out, cap))


# ---------------------------------------------------------------------------
# The op table and a network's program.
# ---------------------------------------------------------------------------


def _attention(p, z, d_z, fm):
  """z + Attn(z) (network_enclosure._attention without scale and mask)."""
  jnp = jnp_module()
  h, m, width = p['w_q'].shape
  heads, d_heads, o_sides = [], [], []
  for i in range(h):
    q = linear(z, p['w_q'][i], p['b_q'][i])
    k = linear(z, p['w_k'][i], None if p['b_k'] is None else p['b_k'][i])
    v = linear(z, p['w_v'][i], None if p['b_v'] is None else p['b_v'][i])
    s = pairwise(q, k)
    w = softmax(s)
    heads.append(mix(w, v))
    if fm is not None:
      babs = lambda b: 0.0 if b is None else np.abs(b[i])   # noqa: E731
      r_z = fm.rho_of(z, d_z) if i == 0 else r_z
      d_q = fm.dot(np.abs(p['w_q'][i]), d_z, mag(z), np.abs(p['b_q'][i]), width, z, r_z,
                   p['w_q'][i])
      d_k = fm.dot(np.abs(p['w_k'][i]), d_z, mag(z), babs(p['b_k']), width, z, r_z,
                   p['w_k'][i])
      d_v = fm.dot(np.abs(p['w_v'][i]), d_z, mag(z), babs(p['b_v']), width, z, r_z,
                   p['w_v'][i])
      d_s = _dev_pairwise(fm, d_q, mag(q), d_k, mag(k), fm.rho(q[0], q[1], d_q),
                          fm.rho(k[0], k[1], d_k))
      d_w = _dev_softmax(fm, d_s, s[0], s[1], w[1])
      r_v = jnp.where(float_deviation.operand_rows(p['w_v'][i], None if p['b_v'] is None
                                                    else p['b_v'][i]),
                      fm.tiny, fm.rho(v[0], v[1], d_v))
      r_w = fm.rho(w[0], w[1], d_w)
      d_heads.append(_dev_mix(fm, d_w, w[1], d_v, mag(v), r_w, r_v))
      if fm.split:               # o^ - o in [-lo, hi] (signed_reduction.mix_sides)
        p_v = fm.signed(z[0], z[1], d_z, p['w_v'][i], p['w_v'][i], cap=r_z)
        v_sides = signed_reduction.replace(d_v, jnp.maximum(*signed_reduction.sides(
            p_v, jnp)), p_v, _up, jnp)
        o_sides.append(signed_reduction.mix_sides(
            fm.fm.model, (w[0], w[1]), d_w, r_w, (v[0], v[1]), mag(v), d_v, r_v, v_sides,
            d_heads[-1], _up, down, jnp))
  out = z
  for i, o in enumerate(heads):
    out = add(out, linear(o, p['w_o'][i]))
  b_o = p['b_o']
  if b_o is not None:
    out = add(out, (b_o, b_o, None, None))
  if fm is None:
    return out, None
  w_o = p['w_o']
  d_ops = [_up(d_heads[i] + fm.rho(heads[i][0], heads[i][1], d_heads[i])) for i in range(h)]
  if fm.split:                  # o^i's reduction one-signed (a row per head)
    prop = sum(_up(d_heads[i] @ np.abs(w_o[i]).T + fm.signed_bound(
        heads[i][0], heads[i][1], d_heads[i], w_o[i])) for i in range(h))
  else:
    prop = sum(d_ops[i] @ np.abs(w_o[i]).T for i in range(h))
  s = sum((mag(heads[i]) + d_ops[i]) @ np.abs(w_o[i]).T for i in range(h))
  bo = 0.0 if b_o is None else np.abs(b_o)
  terms = h * m + 1 + (b_o is not None)
  a = jnp.max(jnp.stack([(mag(heads[i]) + d_ops[i]).max() for i in range(h)]))
  r_abs = mag(z) + d_z
  d_out = _up(d_z + prop + fm.kappa_acc(terms) * (s + r_abs + bo)
              + (terms + 1) * fm.tiny * (a + float(np.abs(w_o).max()) + r_abs + bo + 2))
  fm.check_range(_up(s + r_abs + bo + d_out))
  if fm.split:                   # z'^ - z' in [-lo, hi]: d_out - prop >= the rest
    rest = _up(d_out - prop)
    lo, hi = rest, rest
    for i in range(h):
      l_o, h_o = signed_reduction.spread(w_o[i], w_o[i], *o_sides[i], _up, jnp, exact=True)
      l_r, h_r = signed_reduction.sides(fm.signed(heads[i][0], heads[i][1], d_heads[i],
                                                  w_o[i], w_o[i]), jnp)
      lo, hi = _up(lo + l_o + l_r), _up(hi + h_o + h_r)
    fm.signs = (jnp.minimum(lo, d_out), jnp.minimum(hi, d_out), d_out)
  fm.operand_outputs(np.concatenate(list(w_o), axis=-1), b_o, z, d_z, d_out)
  return out, d_out


def _feedforward(p, z, d_z, fm):
  """z + W_2 ReLU(W_1 z + b_1) + b_2 (network_enclosure._feedforward: the smaller of its two
  forms of D)."""
  w_1, b_1, w_2, b_2 = p['w_1'], p['b_1'], p['w_2'], p['b_2']
  r, width = w_1.shape
  pre = linear(z, w_1, b_1)
  act = relu(pre)
  out = add(z, linear(act, w_2, b_2))
  if fm is None:
    return out, None
  r_z = fm.rho_of(z, d_z)
  d_act = fm.dot(np.abs(w_1), d_z, mag(z), np.abs(b_1), width, z, r_z, w_1)
  terms = r + 1
  r_abs = mag(z) + d_z
  d_op = _up(d_act + fm.rho(act[0], act[1], d_act))
  s = (mag(act) + d_op) @ np.abs(w_2).T + np.abs(b_2) + r_abs
  a = (mag(act) + d_op).max(axis=-1, keepdims=True)
  own = d_op @ np.abs(w_2).T
  if fm.split:                        # act's reduction one-signed (rounding.py (****))
    own = _up(d_act @ np.abs(w_2).T + fm.signed_bound(act[0], act[1], d_act, w_2,
                                                             nonneg=True))
  d_out = _up(d_z + own + fm.kappa_acc(terms) * s
              + (terms + 2) * fm.tiny * (a + float(np.abs(w_2).max()) + r_abs + 2))
  jac = _dev_ff_jacobian(fm, p, pre, z, d_z, act, d_act, r_z)
  if jac is not None:
    d_out = jnp_module().minimum(d_out, jac)
  fm.check_range(_up(s + d_out))
  return out, d_out


def _dev_ff_jacobian(fm, p, pre, z, d_z, act, d_act, rho_z=None):
  """float_deviation.ff_jacobian (the FF's D through |I + W_2 [Theta] W_1|), or None
  where the reference does not use it (r D^2 > FF_JACOBIAN_SIZE, weights not exact)."""
  jnp = jnp_module()
  w_1, b_1, w_2, b_2 = p['w_1'], p['b_1'], p['w_2'], p['b_2']
  r, width = w_1.shape
  model = fm.fm.model
  if r * width * width > float_deviation.FF_JACOBIAN_SIZE or not (
      model.weights_exact or model.operand_rel == 0):
    return None
  v = float_deviation.float_up(model.operand_rel)
  acc = float_deviation.float_up(model.kappa(width, 0))
  mz = _up(mag(z) + d_z)
  if fm.split:
    rho = fm.rho(z[0], z[1], d_z) if rho_z is None else rho_z
  else:
    rho = _up(v * mz + fm.tiny)
  delta = _up(d_z + rho)
  s1 = _up(mz + rho) @ np.abs(w_1).T + np.abs(b_1)
  local1 = _up(acc * s1 + (width + 1) * fm.tiny * (mz.max(axis=-1, keepdims=True)
                                                   + float(np.abs(w_1).max()) + 2))
  spread = _up(delta @ np.abs(w_1).T + local1)
  p_lo = (down(pre[0] - spread) > 0).astype(jnp.float64)
  p_hi = (up(pre[1] + spread) > 0).astype(jnp.float64)
  c = (w_2.T[:, :, None] * w_1[:, None, :]).reshape(r, -1)
  cp, cn = np.maximum(c, 0), np.minimum(c, 0)
  eye = np.eye(width).reshape(-1)
  a_lo = p_lo @ cp + p_hi @ cn                                      # W_2 [Theta] W_1
  a_hi = p_hi @ cp + p_lo @ cn
  slack = 2.0 ** -40 * (1 + p_hi @ np.abs(c))
  j_mag = _up(jnp.maximum(jnp.abs(eye + a_lo), jnp.abs(eye + a_hi)) + slack)
  a_mag = _up(jnp.maximum(jnp.abs(a_lo), jnp.abs(a_hi)) + slack)
  shape = j_mag.shape[:-1] + (width, width)
  # the reduction rho goes through W_2 [Theta] W_1 alone (the residual is not reduced):
  # |I + A| (D + rho) would miss it where |I + A| < |A|
  terms = r + 1
  r_act = fm.rho(act[0], act[1], d_act) if fm.split else 0.0
  sym = jnp.einsum('...ij,...j->...i', j_mag.reshape(shape), d_z)
  if fm.split:        # delta, r_z and r_act signed together (signed_reduction.ff_terms)
    prop = signed_reduction.ff_terms(
        model, eye, a_lo, a_hi, slack, (down(z[0] - d_z), up(z[1] + d_z)), rho,
        (down(act[0] - d_act), up(act[1] + d_act)), w_2, sym, fm.signs_of(d_z), _up, down,
        jnp)
  else:
    prop = _up(sym + jnp.einsum('...ij,...j->...i', a_mag.reshape(shape), rho))
  own = _up((mag(act) + d_act + r_act) @ np.abs(w_2).T)
  s2 = own + np.abs(b_2) + mag(z) + d_z
  a2 = (mag(act) + d_act + r_act).max(axis=-1, keepdims=True)
  local2 = _up(fm.kappa_acc(terms) * s2 + (terms + 2) * fm.tiny * (
      a2 + float(np.abs(w_2).max()) + mag(z) + d_z + 2))
  return _up(prop + local1 @ np.abs(w_2).T + local2)


def _embed(params, z, d_z, fm):
  e, eb, d = params
  if fm is not None:
    d_z = fm.dot(np.abs(e), d_z, mag(z), 0.0 if eb is None else np.abs(eb), d, z, w=e)
  return linear(z, e, eb), d_z


def _pad(params, z, d_z, fm):
  jnp = jnp_module()
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
    fm.check_range(_up(mag(z) + d_z))
  return z, d_z


def _readout(params, z, d_z, fm):
  r, rb, width = params
  if fm is not None:
    d_z = fm.dot(np.abs(r), d_z, mag(z), 0.0 if rb is None else np.abs(rb), width, z, w=r)
  return linear(z, r, rb), d_z


def _first(params, z, d_z, fm):
  (d,) = params
  t = (None, None) if z[2] is None else (z[2][..., :d, :], z[3][..., :d, :])
  return (z[0][..., :d], z[1][..., :d]) + t, None if d_z is None else d_z[..., :d]


def _block_end(params, z, d_z, fm):
  if fm is not None:
    fm.check_range(_up(mag(z) + d_z))
  return z, d_z


#: Layer kind -> op(params, z, d_z, fm) -> (z, d_z).
OPS = {'embed': _embed, 'pad': _pad, 'positional': _positional, 'attention': _attention,
       'feedforward': _feedforward, 'block_end': _block_end, 'readout': _readout,
       'first': _first}


def _f64(a):
  return None if a is None else np.asarray(a, np.float64)


def program(net) -> list:
  """The network's layers as (kind, params), in network_enclosure.enclose's order; a layer
  the kernel has no op for is refused in one line (ValueError)."""
  def lacks(what):
    raise ValueError(f'the box kernel has no op for {what} yet (box_kernel.OPS); the NumPy '
                     'path certifies it.')
  out = []
  if net.embed is not None:
    out.append(('embed', (_f64(net.embed), _f64(net.embed_bias), net.d)))
  elif net.D > net.d:
    out.append(('pad', (net.D - net.d,)))
  if net.positional is not None:
    out.append(('positional', (_f64(net.positional),)))
  for i, blk in enumerate(net.blocks):
    if blk.ln_attn is not None or blk.ln_ff is not None:
      lacks(f'LayerNorm (block {i})')
    a, f = blk.attention, blk.ff
    if a is not None:
      if a.causal or a.scale != 1.0:
        lacks(f'the causal mask or the attention scale (block {i})')
      out.append(('attention', {k: _f64(getattr(a, k)) for k in
                                ('w_q', 'b_q', 'w_k', 'b_k', 'w_v', 'b_v', 'w_o', 'b_o')}))
    if f is not None:
      if f.activation != 'relu':
        lacks(f'{f.activation} (block {i})')
      out.append(('feedforward', {k: _f64(getattr(f, k)) for k in
                                  ('w_1', 'b_1', 'w_2', 'b_2')}))
    out.append(('block_end', ()))
  if net.final_ln is not None:
    lacks('the final LayerNorm')
  if net.readout is not None:
    out.append(('readout', (_f64(net.readout), _f64(net.readout_bias), net.D)))
  else:
    out.append(('first', (net.d,)))
  return out


def _check_weights(layers) -> None:
  for kind, params in layers:
    for a in (params.values() if isinstance(params, dict) else params):
      if isinstance(a, np.ndarray):
        sub = (a != 0) & (np.abs(a) < SMALLEST_NORMAL)
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
    self.model = model
    self.batch = int(batch)
    with jax.enable_x64(True):
      check_exp()
      self._point = jax.jit(self._run_point)
      self._box = jax.jit(self._run_box)

  def _layers(self, z, d_z, fm):
    for kind, params in self.layers:
      z, d_z = OPS[kind](params, z, d_z, fm)
    return z, d_z

  def _fm(self):
    return None if self.model is None else _KModel(float_deviation.Model(self.model))

  def _run_point(self, c):
    z, _ = self._layers((c, c, None, None), None, None)
    return z[0], z[1]

  def _run_box(self, lo, hi):
    jnp = jnp_module()
    b, n, d = lo.shape
    p = n * d
    eye = jnp.eye(p, dtype=lo.dtype).reshape((n, d, p))
    t = jnp.broadcast_to(eye, (b, n, d, p))
    d_z = None
    fm = self._fm()
    if fm is not None:
      d_z = _up(fm.u * mag((lo, hi)) + fm.tiny)
      fm.check_range(_up(mag((lo, hi)) + d_z))
    z, d_z = self._layers((lo, hi, t, t), d_z, fm)
    if fm is not None:         # a box where some M + D may reach the largest value: no bound
      worst = jnp.max(jnp.stack(fm.checks), axis=0)
      d_z = jnp.where((worst < fm.limit)[:, None, None], d_z, jnp.inf)
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
    dev = None if self.model is None else \
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
  """A BoxKernel, compiled once per (network, rounding model, batch) in this process: the
  whole model is the key (its operand mode and exact weights change D, not its name)."""
  from transformer_ua.networks import network_dict
  key = (network_dict.params_hash(net), model, int(batch))
  if key not in _KERNELS:
    _KERNELS[key] = BoxKernel(net, model, batch=batch)
  return _KERNELS[key]


