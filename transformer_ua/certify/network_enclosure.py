r"""A standard Transformer g over a batch of boxes: its value, its Jacobian, and fl(g) - g.

``enclose(net, x, model)`` runs g (``network_dict.Net``: the block equations are in that
module's docstring) on ``intervals.Interval`` input x [B, n, d] and returns

    g(x) in [lo, hi] and dg/dX in [tlo, thi]   (outward-rounded intervals, intervals.py)
    D >= |fl(g)(X) - g(X)| for every X in the box       (when a rounding model is given)

Every operation is one function op(params, z, d_z, fm) -> (z', d_z') (``_attention`` and
``_feedforward`` also take the residual they add); ``float_deviation.assumptions(net, model)``
lists what the ops of ``net`` assume of the runtime, for the certificate's line.

The float deviation D of each op is ``float_deviation``'s (the rounding model of
``rounding.py``, op by op, in that module's docstring).

Mean-value intersection (networks with a LayerNorm, given tangents): the box's midpoint c
runs through the same ops (no tangents, no D), and after every layer (and LN's input and
output) the box's value interval is intersected with
               z(c) + [-S, S],  S_i = sum_q max(|tlo_iq|, |thi_iq|) rho_q,  rho_q >= |X_q - c_q|
(the mean value theorem on the segment c -> X inside the box: z_i(X) - z_i(c) =
dz_i/dX(xi) (X - c), the tangents enclosing dz/dX, Clarke's gradient at ReLU kinks
included). Natural interval arithmetic loses the correlation of a token's entries, so its
var_lo -> 0 and 1/s -> 1/sqrt(eps); the intersection keeps var_lo near the true variance,
and every use of s_w, M_z and the LN Jacobian's factor gamma / s above gets it.
"""

from __future__ import annotations

import numpy as np

from transformer_ua import rounding
from transformer_ua.certify import float_deviation as fd
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import signed_reduction as sr
from transformer_ua.networks import network_dict

def enclose(net: network_dict.Net, x: iv.Interval, model: rounding.MatmulModel | None, *,
            marks: list | None = None, mean_value: bool = True):
  """(g(x) as an Interval [B, n, d] with x's tangents, D [B, n, d] or None).

  A value whose M + D may reach the format's largest finite number (``fd.Model.check_range``)
  is refused in one line; given a list ``marks``, its box gets D = inf instead (no bound
  there: the certifier splits it) and the first such box's refusal line is appended to
  ``marks``.

  Given tangents and a network with a LayerNorm, every layer's value is also intersected
  with its mean-value form z(X) in z(c) + [dz/dX] (X - c), c a point of the box
  (``_MeanValue``): the centre runs through the same ops beside the box (no tangents, no D).
  The variance's lower bound, and with it 1/s in LN's value, Jacobian and D, is what this
  tightens. Networks without a LayerNorm keep the plain enclosure, op for op what
  box_kernel.py computes (its tests compare the two); mean_value=False skips it."""
  fm = None if model is None else fd.Model(model)
  if fm is not None and marks is not None:
    fm.per_box = np.zeros(x.lo.shape[0], bool)
  has_ln = net.final_ln is not None or any(b.norm is not None for b in net.blocks)
  mv = _MeanValue(x) if x.has_tangent and has_ln and mean_value else None
  z, d_z = _embed(net, x, fm)
  zc = _embed(net, mv.centre, None)[0] if mv else None
  for i, blk in enumerate(net.blocks):
    for part, ln, op, name in ((blk.attention, blk.ln_attn, _attention, 'attention'),
                               (blk.ff, blk.ln_ff, _feedforward, 'feed-forward')):
      if part is None:
        continue
      if fm is not None:
        fm.layer = f'block {i} {name}'
      if blk.norm == 'pre' and ln is not None:
        u_z, d_u = _layer_norm(ln, z, d_z, fm)
        u_c = _layer_norm(ln, zc, None, None)[0] if mv else None
        u_z = mv.tighten(u_z, u_c) if mv else u_z
        z, d_z = op(part, u_z, d_u, fm, residual=(z, d_z))
        zc = op(part, u_c, None, None, residual=(zc, None))[0] if mv else None
      else:
        z, d_z = op(part, z, d_z, fm, residual=(z, d_z))
        zc = op(part, zc, None, None, residual=(zc, None))[0] if mv else None
        if ln is not None:
          z = mv.tighten(z, zc) if mv else z
          z, d_z = _layer_norm(ln, z, d_z, fm)
          zc = _layer_norm(ln, zc, None, None)[0] if mv else None
      z = mv.tighten(z, zc) if mv else z
    if fm is not None:
      fm.check_range(fd.up(z.mag() + d_z), 'its output z')
  if net.final_ln is not None:
    if fm is not None:
      fm.layer = 'the final LayerNorm'
    z, d_z = _layer_norm(net.final_ln, z, d_z, fm)
    if mv:
      z = mv.tighten(z, _layer_norm(net.final_ln, zc, None, None)[0])
  if net.readout is not None:
    r, rb = net.readout, net.readout_bias
    if fm is not None:
      fm.layer = 'the readout'
      d_z = fm.dot(np.abs(r), d_z, z.mag(), 0.0 if rb is None else np.abs(rb), net.D,
                   'Z readout^T + readout_bias', x=z, w=r)
    z = iv.linear(z, r, rb)
  else:
    z = z.take(np.arange(net.d), axis=-1)
    if d_z is not None:
      d_z = d_z[..., :net.d]
  if fm is not None and fm.per_box is not None and fm.per_box.any():
    d_z = np.where(fm.per_box[:, None, None], np.inf, d_z)
    marks.append(fm.first)
  return z, d_z


class _MeanValue:
  """The mean-value form of a layer's value over the box [lo, hi] of x [B, n, d]: with c
  the box's midpoint (in the box: float midpoints are) and rho_q >= |X_q - c_q|,
      z_i(X) - z_i(c) = sum_q dz_i/dX_q (xi) (X_q - c_q)  in  [-S_i, S_i],
      S_i = sum_q max(|tlo_iq|, |thi_iq|) rho_q
  (the mean value theorem on the segment from c to X, inside the box; the tangents enclose
  dz/dX over the whole box, Clarke's generalized gradient at ReLU kinks included, as the
  certifier's own mean-value form uses them). ``tighten`` intersects z's interval with
  [z(c)_lo - S, z(c)_hi + S]; the tangents stay."""

  def __init__(self, x: iv.Interval):
    c = (x.lo + x.hi) / 2
    c = np.minimum(np.maximum(c, x.lo), x.hi)
    self.centre = iv.point(c)
    rho = np.maximum(iv.up(c - x.lo), iv.up(x.hi - c))
    self.rho = rho.reshape(rho.shape[0], -1) if rho.ndim >= 2 else rho

  def tighten(self, z: iv.Interval, zc: iv.Interval) -> iv.Interval:
    rho = self.rho.reshape(self.rho.shape[:1] + (1,) * (z.lo.ndim - 1) + self.rho.shape[1:])
    spread = fd.up((z.tmag() * rho).sum(axis=-1))
    lo = np.maximum(z.lo, iv.down(zc.lo - spread))
    hi = np.minimum(z.hi, iv.up(zc.hi + spread))
    bad = ~(lo <= hi)          # cannot happen for enclosures; NaN-safe: keep the natural one
    lo, hi = np.where(bad, z.lo, lo), np.where(bad, z.hi, hi)
    return iv.Interval(lo, hi, z.tlo, z.thi)


def _embed(net: network_dict.Net, x: iv.Interval, fm: fd.Model | None):
  """(Z_0, its D): the input's rounding, the embedding (+ bias) or zero padding, and the
  positional encoding."""
  z = x
  d_z = None
  if fm is not None:
    d_z = fd.up(fm.u * x.mag() + fm.tiny)
    fm.check_range(fd.up(x.mag() + d_z), 'X')
  if net.embed is not None:
    e, eb = net.embed, net.embed_bias
    if fm is not None:
      fm.layer = 'the embedding'
      d_z = fm.dot(np.abs(e), d_z, x.mag(), 0.0 if eb is None else np.abs(eb), net.d,
                   'X embed^T + embed_bias', x=x, w=e)
    z = iv.linear(z, e, eb)
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
      d_z = fd.up(d_z + fm.u * (z.mag() + d_z) + fm.tiny)
      fm.layer = 'the positional encoding'
      fm.check_range(fd.up(z.mag() + d_z), 'Z_0 + E')
  return z, d_z


def _layer_norm(ln: network_dict.LayerNorm, z: iv.Interval, d_z, fm: fd.Model | None):
  y, _, _ = iv.layer_norm(z, ln.gamma, ln.beta, ln.eps)
  return y, None if fm is None else fd.layer_norm(fm, ln, z, d_z)


def _masked(a, keep):
  return None if a is None else np.where(keep, a, 0.0)


def _attention(params: network_dict.Attention, z: iv.Interval, d_z, fm: fd.Model | None, *,
               residual):
  """residual + Attn(z) (module docstring); ``residual`` = (its Interval, its D)."""
  p = params
  h, m, width = p.w_q.shape
  n = z.lo.shape[-2]
  keep = ~np.triu(np.ones((n, n), bool), 1) if p.causal else np.ones((n, n), bool)
  heads = []
  d_heads = []
  o_sides = []

  def bias(b, i):
    return None if b is None else b[i]

  def babs(b, i):
    return 0.0 if b is None else np.abs(b[i])

  for i in range(h):
    q = iv.linear(z, p.w_q[i], p.b_q[i])                     # [B, n, m]
    k = iv.linear(z, p.w_k[i], bias(p.b_k, i))
    v = iv.linear(z, p.w_v[i], bias(p.b_v, i))
    s = iv.pairwise(q, k)                                    # [B, n_q, n_k]
    if p.scale != 1.0:
      s_scaled = iv.scale(s, p.scale)
    else:
      s_scaled = s
    if p.causal:                     # masked scores: structure, never an interval
      t = None if not s_scaled.has_tangent else keep[..., None]
      s_scaled = iv.Interval(np.where(keep, s_scaled.lo, 0.0), np.where(keep, s_scaled.hi, 0.0),
                             None if t is None else np.where(t, s_scaled.tlo, 0.0),
                             None if t is None else np.where(t, s_scaled.thi, 0.0))
    w = iv.softmax(s_scaled, causal=p.causal)
    o = iv.mix(w, v)                                         # [B, n, m]
    heads.append(o)
    if fm is not None:
      r_z = fm.rho_of(z, d_z) if i == 0 else r_z             # z's reduction, per entry
      d_q = fm.dot(np.abs(p.w_q[i]), d_z, z.mag(), np.abs(p.b_q[i]), width,
                   f'head {i} W_Q z + b_Q', rho=r_z, x=z, w=p.w_q[i])
      d_k = fm.dot(np.abs(p.w_k[i]), d_z, z.mag(), babs(p.b_k, i), width,
                   f'head {i} W_K z + b_K', rho=r_z, x=z, w=p.w_k[i])
      d_v = fm.dot(np.abs(p.w_v[i]), d_z, z.mag(), babs(p.b_v, i), width,
                   f'head {i} W_V z + b_V', rho=r_z, x=z, w=p.w_v[i])
      d_s = fd.pairwise(fm, d_q, q.mag(), d_k, k.mag(), fm.rho(q.lo, q.hi, d_q),
                        fm.rho(k.lo, k.hi, d_k))
      if p.scale != 1.0:
        d_s = fd.scaled_scores(fm, p.scale, d_s, s.mag(), d_q, q.mag(), d_k, k.mag())
      # masked entries keep their (zeroed) scores: the per-entry max-subtraction bound only
      # grows with more entries, and their weights are exactly 0
      d_w = fd.softmax(fm, _masked(d_s, keep), s_scaled.lo, s_scaled.hi, w.hi)
      r_v = np.where(fd.operand_rows(p.w_v[i], bias(p.b_v, i)), fm.tiny,
                     fm.rho(v.lo, v.hi, d_v))               # v^ already an operand there
      r_w = fm.rho(w.lo, w.hi, d_w)
      d_heads.append(fd.mix(fm, d_w, w.hi, d_v, v.mag(), r_w, r_v))
      if fm.split:               # o^ - o in [-lo, hi] (signed_reduction.mix_sides)
        p_v = fm.signed(z.lo, z.hi, d_z, p.w_v[i], p.w_v[i], cap=r_z)
        v_sides = sr.replace(d_v, np.maximum(*sr.sides(p_v, np)), p_v, fd.up, np)
        o_sides.append(sr.mix_sides(fm.model, (w.lo, w.hi), d_w, r_w, (v.lo, v.hi), v.mag(),
                                    d_v, r_v, v_sides, d_heads[-1], fd.up, iv.down, np))
  res, d_res = residual
  out = res
  for i, o in enumerate(heads):
    out = iv.add(out, iv.linear(o, p.w_o[i]))
  if p.b_o is not None:
    out = iv.add(out, iv.point(p.b_o))
  d_out = None
  if fm is not None:
    # o^i's reduction per entry (rounding.py (***)) where the weights are exact
    d_ops = [fd.up(d_heads[i] + fm.rho(heads[i].lo, heads[i].hi, d_heads[i]))
             for i in range(h)]
    if fm.split:          # o^i's reduction one-signed (signed_reduction; a row per head)
      prop = sum(fd.up(d_heads[i] @ np.abs(p.w_o[i]).T + fm.signed_bound(
          heads[i].lo, heads[i].hi, d_heads[i], p.w_o[i])) for i in range(h))
    else:
      prop = sum(d_ops[i] @ np.abs(p.w_o[i]).T for i in range(h))
    s = sum((heads[i].mag() + d_ops[i]) @ np.abs(p.w_o[i]).T for i in range(h))
    b_o = 0.0 if p.b_o is None else np.abs(p.b_o)
    terms = h * m + 1 + (p.b_o is not None)
    a = max(float((heads[i].mag() + d_ops[i]).max()) for i in range(h))
    r_abs = res.mag() + d_res
    d_out = fd.up(d_res + prop + fm.kappa_acc(terms) * (s + r_abs + b_o)
                + (terms + 1) * fm.tiny * (a + float(np.abs(p.w_o).max()) + r_abs + b_o + 2))
    fm.check_range(fd.up(s + r_abs + b_o + d_out), 'the residual z + sum_i W_O^i o^i + b_O')
    if fm.split:                 # z'^ - z' in [-lo, hi]: d_out - prop >= the rest
      rest = fd.up(d_out - prop)
      lo, hi = rest, rest
      for i in range(h):
        l_o, h_o = sr.spread(p.w_o[i], p.w_o[i], *o_sides[i], fd.up, np, exact=True)
        l_r, h_r = sr.sides(fm.signed(heads[i].lo, heads[i].hi, d_heads[i], p.w_o[i],
                                      p.w_o[i]), np)
        lo, hi = fd.up(lo + l_o + l_r), fd.up(hi + h_o + h_r)
      fm.signs = (np.minimum(lo, d_out), np.minimum(hi, d_out), d_out)
    fm.operand_outputs(np.concatenate(list(p.w_o), axis=-1), p.b_o, res.lo, res.hi, d_res,
                       d_out)
  return out, d_out


def _feedforward(params: network_dict.FeedForward, z: iv.Interval, d_z, fm: fd.Model | None,
                 *, residual):
  """residual + FF(z) (module docstring)."""
  p = params
  r, width = p.w_1.shape
  pre = iv.linear(z, p.w_1, p.b_1)
  act = iv.relu(pre) if p.activation == 'relu' else iv.gelu(pre, p.activation)
  res, d_res = residual
  out = iv.add(res, iv.linear(act, p.w_2, p.b_2))
  d_out = None
  if fm is not None:
    r_z = fm.rho_of(z, d_z)                                  # z's reduction, per entry
    d_pre = fm.dot(np.abs(p.w_1), d_z, z.mag(), np.abs(p.b_1), width, 'W_1 z + b_1', rho=r_z,
                   x=z, w=p.w_1)
    d_act = d_pre if p.activation == 'relu' else fd.gelu(fm, p.activation, d_pre, pre.mag())
    terms = r + 1
    r_abs = res.mag() + d_res
    d_op = fd.up(d_act + fm.rho(act.lo, act.hi, d_act))    # act's reduction, rounding.py (***)
    s = (act.mag() + d_op) @ np.abs(p.w_2).T + np.abs(p.b_2) + r_abs
    a = (act.mag() + d_op).max(axis=-1, keepdims=True)
    if p.activation == 'relu' and fm.split:    # act's reduction one-signed (rounding.py (****))
      own = fd.up(d_act @ np.abs(p.w_2).T + fm.signed_bound(act.lo, act.hi, d_act, p.w_2,
                                                            nonneg=True))
    else:
      own = d_op @ np.abs(p.w_2).T
    d_out = fd.up(d_res + own + fm.kappa_acc(terms) * s
                + (terms + 2) * fm.tiny * (a + float(np.abs(p.w_2).max()) + r_abs + 2))
    if p.activation == 'relu' and res is z:        # the Jacobian form: z' = z + FF(z) only
      d_out = np.minimum(d_out, fd.ff_jacobian(fm, p, pre, z, d_z, act, d_act, r_z))
    fm.check_range(fd.up(s + d_out), 'the residual z + W_2 act(W_1 z + b_1) + b_2')
  return out, d_out
