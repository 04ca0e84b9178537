r"""A standard Transformer g over a batch of boxes: its value, its Jacobian, and fl(g) - g.

``enclose(net, x, model)`` runs g (``network_dict.Net``: the block equations are in that
module's docstring) on ``intervals.Interval`` input x [B, n, d] and returns

    g(x) in [lo, hi] and dg/dX in [tlo, thi]   (outward-rounded intervals, intervals.py)
    D >= |fl(g)(X) - g(X)| for every X in the box       (when a rounding model is given)

The float deviation D follows the rounding model of ``rounding.py`` layer by layer. With z
the exact value, z^ the computed one, D_z >= |z^ - z| and M_z >= |z| (from the interval):

  input        X^ = fl(X):                 D = u M_X + tau
  dot product  y = W z + b (m terms; the bias, or the residual, may be added anywhere):
               D_y = |W| D_z + kappa_m (|W| (M_z + D_z) + |b|) + (m + 1) tau (A + B + 2)
               (kappa_m, A, B: rounding.py (*); the bias counts as one more term)
  scores       s_jk = q_j . k_k (m terms):  sum_m D_q M_k + (M_q + D_q) D_k
                                            + kappa_m sum_m (M_q + D_q)(M_k + D_k) + ...
  softmax      w = softmax(s), computed as e_k = exp(fl(s^_k - max)), w_k = e_k / sum_l e_l
               (or e_k * (1 / sum)): with delta = max_k D_s, per entry
               t_k = max_l (s_hi,l + D_s,l) - (s_lo,k - D_s,k) >= max_l s^_l - s^_k, and
               w'_k = min(1, w_hi,k e^{2 delta}) >= softmax(s^)_k,
                 |softmax(s^) - softmax(s)|_k <= w_k (e^{2 delta} - 1)
                 r1_k = e^{u t_k} (1 + 2 u EXP_ULPS) - 1   (one exp: argument and result)
                 r2_k = (1 + r1_k)(1 + gamma_n) - 1       (its share of the sum of n exps)
                 R = min(sum_l w'_l r2_l, max_l r2_l)     (the sum's relative error)
                 rho_k = (1 + r1_k)(1 + u)^2 / (1 - R) - 1 (the normalization)
               D_w = w_hi (e^{2 delta} - 1) + rho_k w'_k + 4 n tau, capped at
               (1 + u)^2 / (1 - gamma_n) + tau (no computed weight exceeds it: e_k is one of
               the summed exps). Every constant is written without cancellation (rho_k =
               (r1_k + c_u + r1_k c_u + R) / (1 - R), c_u = 2u + u^2 from Fractions) and
               e^x - 1 is bounded by exact inequalities (``_expm1_up``), so each rounds up.
  mix          o_j = sum_k w_jk v_k (n terms), like the scores
  residual     z' = z + sum_i W_O^i o^i: one dot product of h m terms with z as its bias
               (any grouping of heads and residual: at most h m + 1 roundings per term);
               z' = z + W_2 ReLU(W_1 z + b_1) + b_2 likewise, with b_2 and z as bias terms,
               or (the smaller, ``_dev_ff_jacobian``) through the layer's interval Jacobian:
               |I + W_2 [Theta] W_1| (D_z + v (M_z + D_z)) + |W_2| L_1 + L_2 (Theta the
               ReLUs' difference quotients in [0, 1]; L_1, L_2 the sums' own roundings).
  ReLU         exact and 1-Lipschitz: D passes unchanged.
  weights      for the TF32 / bfloat16 models the certifier runs g with its weights reduced
               to the operand format exactly (network_certificate.reduced_networks), so a
               weight times an activation has one reduced operand (kappa with (1 + v), not
               (1 + v)^2); scores and the mix keep two (``kappa_pair``).
  overflow     every value's M + D and every sum's S + D must stay below the format's
               largest finite number (``_Model.check_range``, rounding.py 'Overflow'):
               else one ValueError line names the layer and the operation.

Every D is computed in float64 and widened by 2^-40 (relative) and one ulp per step, so it
stays an upper bound of the exact expression.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from transformer_ua import rounding
from transformer_ua.certify import intervals as iv
from transformer_ua.networks import network_dict

_WIDEN = 1 + 2.0 ** -40


def _up(x):
  return iv.up(np.asarray(x, np.float64) * _WIDEN)


def _f(value: Fraction) -> float:
  """A float >= the rational ``value``."""
  x = float(value)
  return x if Fraction(x) >= value else float(np.nextafter(x, np.inf))


class _Model:
  """The float constants of a ``rounding.MatmulModel``, rounded up."""

  def __init__(self, model: rounding.MatmulModel):
    self.model = model
    self.u = _f(model.u)
    self.tiny = _f(model.tiny)
    self._kappa = {}
    self.limit = float(model.range_limit)        # exact: (2 - 2^(1-p)) 2^emax
    self.layer = 'the input'                     # where check_range reports (enclose sets it)

  def check_range(self, m_plus_d, where: str) -> None:
    """ValueError (one line) unless every entry of ``m_plus_d`` (M + D of a value, or S + D
    of a dot product's partial sums) is below ``model.range_limit``: the rounding model
    assumes no overflow (rounding.py, 'Overflow')."""
    worst = float(np.max(m_plus_d)) if np.size(m_plus_d) else 0.0
    if not worst < self.limit:                   # NaN and inf included
      fmt = self.model.storage.name
      if self.model.range_limit < self.model.storage.max_finite:
        fmt = f'{self.model.name} operand ({self.model.operand_bits} significant bits)'
      raise ValueError(f'g can overflow in {self.model.name}: at {self.layer}, {where}, a '
                       f'magnitude may reach {worst:.4g}, not below {self.limit:.6g}, the '
                       f'largest finite {fmt} (the rounding model assumes no overflow: '
                       'fl(g) may be inf there); no certificate.')

  def kappa(self, m: int) -> float:
    """kappa_m of a weight times an activation (one reduced operand when the model's
    weights are exact numbers of the operand format, else two)."""
    if m not in self._kappa:
      self._kappa[m] = _f(self.model.kappa(m, 1 if self.model.weights_exact else 2))
    return self._kappa[m]

  def kappa_pair(self, m: int) -> float:
    """kappa_m of an activation times an activation (scores, mix): both reduced."""
    if ('pair', m) not in self._kappa:
      self._kappa[('pair', m)] = _f(self.model.kappa(m, 2))
    return self._kappa[('pair', m)]

  def gamma(self, m: int) -> float:
    return _f(self.model.storage.gamma(m))

  def dot(self, w_abs, d_x, m_x, b_abs, terms: int, what: str = 'a dot product'):
    """D of y = W x + b, W [r, D] given as |W|, x's D and M [..., D], |b| [r] or 0; ``what``
    names it in an overflow refusal."""
    a = (m_x + d_x).max(axis=-1, keepdims=True)
    s = (m_x + d_x) @ w_abs.T + b_abs
    out = _up(d_x @ w_abs.T + self.kappa(terms) * s
              + (terms + 1) * self.tiny * (a + w_abs.max() + 2))
    self.check_range(_up(s + out), what)
    return out


def _dev_pairwise(model: _Model, dq, mq, dk, mk):
  """D of c_jk = sum_m a_jm b_km (a, b computed with D's, magnitudes M) [..., j, k]."""
  m = dq.shape[-1]
  aq, ak = mq + dq, mk + dk
  prop = np.einsum('...jm,...km->...jk', dq, mk) + np.einsum('...jm,...km->...jk', aq, dk)
  s = np.einsum('...jm,...km->...jk', aq, ak)
  big = np.maximum(aq.max(axis=-1)[..., :, None], ak.max(axis=-1)[..., None, :])
  out = _up(prop + model.kappa_pair(m) * s + (m + 1) * model.tiny * (2 * big + 2))
  model.check_range(_up(s + out), 'the scores q_j . k_k')
  return out


def _dev_mix(model: _Model, dw, mw, dv, mv):
  """D of o_jm = sum_k w_jk v_km [..., j, m]."""
  n = dw.shape[-1]
  aw, av = mw + dw, mv + dv
  prop = dw @ mv + aw @ dv
  s = aw @ av
  big = np.maximum(aw.max(axis=-1)[..., :, None], av.max(axis=-2)[..., None, :])
  out = _up(prop + model.kappa_pair(n) * s + (n + 1) * model.tiny * (2 * big + 2))
  model.check_range(_up(s + out), 'the mix sum_k w_jk v_k')
  return out


def _dev_softmax(model: _Model, ds, s_lo, s_hi, w_hi):
  """D of the computed softmax over the last axis (module docstring)."""
  with np.errstate(over='ignore'):       # a huge argument gives inf: the cap below holds
    return _dev_softmax_raw(model, ds, s_lo, s_hi, w_hi)


def _expm1_up(x):
  """An upper bound of e^x - 1 for x >= 0 from exact inequalities (no library expm1):
  x + x^2 / (2 (1 - x/3)) for x < 1/2 (the series' tail sum_k>=2 x^k/k! <= x^2/2 sum (x/3)^j),
  exp (checked against mpmath, iv.EXP_SLACK) minus 1 on [1/2, 50], inf above."""
  x = np.asarray(x, np.float64)
  small = np.minimum(x, 0.5)
  series = _up(small + _up(small * small) / iv.down(2 * iv.down(1 - small / 3)))
  big = np.clip(x, 0.5, 50.0)
  via_exp = _up(_up(np.exp(big) * (1 + iv.EXP_SLACK)) - 1)
  return np.where(x < 0.5, series, np.where(x <= 50, via_exp, np.inf))


def softmax_constants(model: _Model, n: int):
  """(c_u, gamma_n, cap) as floats >= the rationals 2u + u^2 = (1 + u)^2 - 1, gamma_n and
  (1 + u)^2 / (1 - gamma_n) + tau (no computed softmax entry exceeds cap: e_k is one of the
  summed exps)."""
  key = ('softmax', n)
  if key not in model._kappa:
    u, g = model.model.u, model.model.storage.gamma(n)
    model._kappa[key] = (_f(2 * u + u * u), _f(g), _f((1 + u) ** 2 / (1 - g) + model.model.tiny))
  return model._kappa[key]


def _dev_softmax_raw(model: _Model, ds, s_lo, s_hi, w_hi):
  # per entry: t_k >= max_l s^_l - s^_k, the argument of exp before its rounding (u t_k)
  n = ds.shape[-1]
  u = model.u
  c_u, gam, cap = softmax_constants(model, n)
  delta = ds.max(axis=-1, keepdims=True)
  t = iv.up(iv.up(s_hi + ds).max(axis=-1, keepdims=True) - iv.down(s_lo - ds))  # signed: no _up
  ut = _up(u * np.maximum(t, 0.0))
  r1 = _up(_expm1_up(ut) + 2 * u * rounding.EXP_ULPS * _up(1 + _expm1_up(ut)))
  r2 = _up(r1 + gam + _up(r1 * gam))                  # (1 + r1)(1 + gamma_n) - 1
  grow = _up(1 + _expm1_up(_up(2 * delta)))
  shift = _expm1_up(_up(2 * delta))
  w_up = np.minimum(1.0, _up(w_hi * grow))            # >= the softmax of the computed scores
  mixed = (w_up * r2).sum(axis=-1, keepdims=True)
  big_r = np.minimum(_up(mixed + iv.sum_error(mixed, n)), r2.max(axis=-1, keepdims=True))
  denom = iv.down(np.where(big_r < 1, 1 - big_r, 1.0))
  rho = np.where(big_r < 1, _up(_up(r1 + c_u + _up(r1 * c_u) + big_r) / denom), np.inf)
  out = _up(w_hi * shift + rho * w_up + 4 * n * model.tiny)
  return np.where(np.isnan(out), np.inf, np.minimum(out, cap))


def enclose(net: network_dict.Net, x: iv.Interval, model: rounding.MatmulModel | None):
  """(g(x) as an Interval [B, n, d] with x's tangents, D [B, n, d] or None)."""
  fm = None if model is None else _Model(model)
  z = x
  d_z = None
  if fm is not None:
    d_z = _up(fm.u * x.mag() + fm.tiny)
    fm.check_range(_up(x.mag() + d_z), 'X')
  if net.embed is not None:
    e = net.embed
    if fm is not None:
      fm.layer = 'the embedding'
      d_z = fm.dot(np.abs(e), d_z, x.mag(), 0.0, net.d, 'X embed^T')
    z = iv.linear(z, e)
  elif net.D > net.d:
    pad = [(0, 0)] * (z.lo.ndim - 1) + [(0, net.D - net.d)]
    tpad = pad + [(0, 0)]
    z = iv.Interval(np.pad(z.lo, pad), np.pad(z.hi, pad),
                    None if not z.has_tangent else np.pad(z.tlo, tpad),
                    None if not z.has_tangent else np.pad(z.thi, tpad))
    if d_z is not None:
      d_z = np.pad(d_z, pad)
  if net.positional is not None:
    z = iv.add(z, iv.point(net.positional))
    if fm is not None:
      d_z = _up(d_z + fm.u * (z.mag() + d_z) + fm.tiny)
      fm.layer = 'the positional encoding'
      fm.check_range(_up(z.mag() + d_z), 'Z_0 + E')
  for i, blk in enumerate(net.blocks):
    if blk.attention is not None:
      if fm is not None:
        fm.layer = f'block {i} attention'
      z, d_z = _attention(blk.attention, z, d_z, fm)
    if blk.ff is not None:
      if fm is not None:
        fm.layer = f'block {i} feed-forward'
      z, d_z = _feedforward(blk.ff, z, d_z, fm)
    if fm is not None:
      fm.check_range(_up(z.mag() + d_z), 'its output z')
  if net.readout is not None:
    r = net.readout
    if fm is not None:
      fm.layer = 'the readout'
      d_z = fm.dot(np.abs(r), d_z, z.mag(), 0.0, net.D, 'Z readout^T')
    z = iv.linear(z, r)
  else:
    z = z.take(np.arange(net.d), axis=-1)
    if d_z is not None:
      d_z = d_z[..., :net.d]
  return z, d_z


def _attention(params, z: iv.Interval, d_z, fm: _Model | None):
  w_q, b_q, w_k, w_v, w_o = params
  h, m, width = w_q.shape
  heads = []
  d_heads = []
  for i in range(h):
    q = iv.linear(z, w_q[i], b_q[i])                         # [B, n, m]
    k = iv.linear(z, w_k[i])
    v = iv.linear(z, w_v[i])
    s = iv.pairwise(q, k)                                    # [B, n_q, n_k]
    w = iv.softmax(s)
    o = iv.mix(w, v)                                         # [B, n, m]
    heads.append(o)
    if fm is not None:
      d_q = fm.dot(np.abs(w_q[i]), d_z, z.mag(), np.abs(b_q[i]), width, f'head {i} W_Q z + b_Q')
      d_k = fm.dot(np.abs(w_k[i]), d_z, z.mag(), 0.0, width, f'head {i} W_K z')
      d_v = fm.dot(np.abs(w_v[i]), d_z, z.mag(), 0.0, width, f'head {i} W_V z')
      d_s = _dev_pairwise(fm, d_q, q.mag(), d_k, k.mag())
      d_w = _dev_softmax(fm, d_s, s.lo, s.hi, w.hi)
      d_heads.append(_dev_mix(fm, d_w, w.hi, d_v, v.mag()))
  out = z
  for i, o in enumerate(heads):
    out = iv.add(out, iv.linear(o, w_o[i]))
  d_out = None
  if fm is not None:
    prop = sum(d_heads[i] @ np.abs(w_o[i]).T for i in range(h))
    s = sum((heads[i].mag() + d_heads[i]) @ np.abs(w_o[i]).T for i in range(h))
    terms = h * m + 1
    a = max(float((heads[i].mag() + d_heads[i]).max()) for i in range(h))
    d_out = _up(d_z + prop + fm.kappa(terms) * (s + z.mag() + d_z)
                + (terms + 1) * fm.tiny * (a + float(np.abs(w_o).max()) + (z.mag() + d_z) + 2))
    fm.check_range(_up(s + z.mag() + d_z + d_out), 'the residual z + sum_i W_O^i o^i')
  return out, d_out


#: The feed-forward's Jacobian form is used while r D^2 stays at most this (cost B n r D^2).
FF_JACOBIAN_SIZE = 2 ** 16


def _dev_ff_jacobian(fm: _Model, params, pre: iv.Interval, z: iv.Interval, d_z, act, d_act):
  """D of z' = z + W_2 ReLU(W_1 z + b_1) + b_2 through the layer's Jacobian (lowprec).
  With delta = z^ - z (|delta| <= D_z), rho = fl_op(z^) - z^ the operand reduction of z
  (|rho| <= v |z^|: one function of the value, so the same in every row of W_1; the
  residual z^ itself is added unreduced) and eps the first sum's accumulation rounding
  (|eps| <= L_1 = gamma_{m+1}(u_acc) S_1 + ...: the weights being exact numbers of the
  operand format, the products of operands are exact or rounded inside gamma),
      z'^ - z' = (I + W_2 Theta W_1) delta + W_2 Theta W_1 rho + W_2 Theta eps + (rounding
                 of the second sum),
  Theta = diag(theta_r), theta_r in [0, 1] (a ReLU's difference quotient), 1 where the
  pre-activation's range widened by |W_1| (|delta| + |rho|) + L_1 is > 0, 0 where it is
  <= 0:
      D' = |I + W_2 [Theta] W_1| D_z + |W_2 [Theta] W_1| v (M_z + D_z) + |W_2| L_1 + L_2,
  (L_2 the second sum's rounding, act's reduction included, as in ``_feedforward``); this
  keeps the cancellation of W_2 W_1 that |W_2| |W_1| D_z loses. inf (unused: the caller
  takes the minimum) when r D^2 > FF_JACOBIAN_SIZE or the weights are not exact."""
  w_1, b_1, w_2, b_2 = params
  r, width = w_1.shape
  model = fm.model
  if r * width * width > FF_JACOBIAN_SIZE or not (model.weights_exact or
                                                  model.operand_rel == 0):
    return np.inf
  v = _f(model.operand_rel)
  acc = _f(model.kappa(width, 0))
  mz = _up(z.mag() + d_z)
  rho = _up(v * mz + fm.tiny)
  delta = _up(d_z + rho)
  s1 = _up(mz * (1 + v) + fm.tiny) @ np.abs(w_1).T + np.abs(b_1)
  local1 = _up(acc * s1 + (width + 1) * fm.tiny * (mz.max(axis=-1, keepdims=True)
                                                   + np.abs(w_1).max() + 2))
  spread = _up(delta @ np.abs(w_1).T + local1)
  p_lo = (iv.down(pre.lo - spread) > 0).astype(np.float64)          # theta_r = 1 surely
  p_hi = (iv.up(pre.hi + spread) > 0).astype(np.float64)            # theta_r may be > 0
  c = (w_2.T[:, :, None] * w_1[:, None, :]).reshape(r, -1)         # [r, D*D]: W_2[i,r] W_1[r,j]
  cp, cn = np.maximum(c, 0), np.minimum(c, 0)
  eye = np.eye(width).reshape(-1)
  a_lo = p_lo @ cp + p_hi @ cn                                      # W_2 [Theta] W_1
  a_hi = p_hi @ cp + p_lo @ cn
  slack = 2.0 ** -40 * (1 + p_hi @ np.abs(c))                      # the float sums' error
  j_mag = _up(np.maximum(np.abs(eye + a_lo), np.abs(eye + a_hi)) + slack)
  a_mag = _up(np.maximum(np.abs(a_lo), np.abs(a_hi)) + slack)
  shape = j_mag.shape[:-1] + (width, width)
  prop = _up(np.einsum('...ij,...j->...i', j_mag.reshape(shape), d_z)
             + np.einsum('...ij,...j->...i', a_mag.reshape(shape), rho))
  terms = r + 1
  s2 = (act.mag() + d_act) @ np.abs(w_2).T + np.abs(b_2) + z.mag() + d_z
  a2 = (act.mag() + d_act).max(axis=-1, keepdims=True)
  local2 = _up(fm.kappa(terms) * s2 + (terms + 2) * fm.tiny * (a2 + float(np.abs(w_2).max())
                                                               + z.mag() + d_z + 2))
  return _up(prop + local1 @ np.abs(w_2).T + local2)


def _feedforward(params, z: iv.Interval, d_z, fm: _Model | None):
  w_1, b_1, w_2, b_2 = params
  r, width = w_1.shape
  pre = iv.linear(z, w_1, b_1)
  act = iv.relu(pre)
  out = iv.add(z, iv.linear(act, w_2, b_2))
  d_out = None
  if fm is not None:
    d_act = fm.dot(np.abs(w_1), d_z, z.mag(), np.abs(b_1), width, 'W_1 z + b_1')
    terms = r + 1
    s = (act.mag() + d_act) @ np.abs(w_2).T + np.abs(b_2) + z.mag() + d_z
    a = (act.mag() + d_act).max(axis=-1, keepdims=True)
    d_out = _up(d_z + d_act @ np.abs(w_2).T + fm.kappa(terms) * s
                + (terms + 2) * fm.tiny * (a + float(np.abs(w_2).max()) + z.mag() + d_z + 2))
    d_out = np.minimum(d_out, _dev_ff_jacobian(fm, params, pre, z, d_z, act, d_act))
    fm.check_range(_up(s + d_out), 'the residual z + W_2 ReLU(W_1 z + b_1) + b_2')
  return out, d_out
