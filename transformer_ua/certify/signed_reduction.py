r"""One-signed operand reductions: |sum_i c_i r_i| for reductions r_i of known sign.

rounding.py (****). An operand a^ (a computed activation) is reduced to the operand format
as fl_op(a^) = a^ + r. A truncation moves toward zero, so

    a^ >= 0:  r in [-rho^t, 0]          a^ <= 0:  r in [0, rho^t]
    a^ of either sign (its range straddles 0):  r in [-rho^t, rho^t]

and rounded to nearest |r| <= rho^n (half a unit of the last kept bit), whatever the sign;
rho^t, rho^n each mode's bound over a^'s range (``rounding.MatmulModel.operand_error`` of
``with_truncated_operands`` and ``with_nearest_operands``, capped by any bound known to
hold in every mode, e.g. tau for a value already in the operand format). The sign is read
from a^'s range widened by its deviation D ([lo - D, hi + D] >= 0, or <= 0), or known by
construction (a ReLU output a^ = max(0, .) >= 0 always).

One output of a matmul sums sum_i c_i r_i over one row of operands, with coefficients c_i
in [c^lo_i, c^hi_i] (exact weights: c^lo = c^hi = W_i; the feed-forward's interval matrix
W_2 [Theta] W_1 for the reduction of its input). Writing x^+ = max(x, 0), x^- = max(-x, 0)
and, for truncation, r_i in [-d_i, e_i] (d_i = rho^t_i unless a^_i <= 0, e_i = rho^t_i
unless a^_i >= 0), each product lies in [-L_i, H_i] (the corners of c r; the other two
corners are below these since c^lo <= c^hi):

    H_i = max((c^hi_i)^+ e_i, (c^lo_i)^- d_i),   L_i = max((c^hi_i)^+ d_i, (c^lo_i)^- e_i),

so a row truncated throughout has sum in [-L, H], L = sum_i L_i, H = sum_i H_i, and a row
rounded to nearest |sum| <= S = sum_i max(|c^lo_i|, |c^hi_i|) rho^n_i. With ONE mode within
each row of operands that a matmul sums (printed in the line; the modes of different rows,
and of different matmuls, may differ):

    |sum_i c_i r_i| <= max(L, H, S)                                          (``bound``)

(S alone where the runtime probe measured round to nearest). Every entry of unknown sign
gives L_i = H_i = max|c_i| rho^t_i, so a row with no known sign keeps the magnitude bound
sum_i |c_i| max(rho^t_i, rho^n_i), and max(L, H, S) never exceeds it. For the exact ReLU
outputs a^ >= 0 and exact W: L = P = sum_{W_i > 0} W_i rho^t_i, H = N = sum_{W_i < 0} |W_i|
rho^t_i (767f2a7).

Sides of a deviation. Reductions of different rows (or matmuls) may use different modes, so
the bound valid in every mode assignment is an interval: the row's sum lies in
[-max(L, S), max(H, S)] (``sides``), and independent groups add their sides (the max over
assignments of a sum of separately chosen terms is the sum of the separate maxima):

    |E_1 + E_2| <= max(lo_1 + lo_2, hi_1 + hi_2),  lo_k = max(L_k, S_k), hi_k = max(H_k, S_k)

(= max(L_1 + L_2, H_1 + H_2, T_1 + S_2, S_1 + T_2, S_1 + S_2), T_k = max(L_k, H_k): both
truncated, one of each, both rounded), never above the sum of the two bounds. A deviation
delta = z^ - z kept as sides, delta in [-lo, hi], goes through coefficients c in
[c^lo, c^hi] by the same corners (``spread``: d = lo, e = hi), and a bound
total >= rest + max(L, H, S) becomes the sides rest + (lo, hi) (``replace``).

The attention (W_Q = W_K = 0 or not; one head's o_jm = sum_k w_jk v_km, z' = r + W_O o + b):
  v = W_V z + b_V   sides from W_V's one-signed reduction of z's row (``replace``);
  mix               fl(w^) fl(v^) - w v = (delta_w + r_w) fl(v^) + w (delta_v + r_v), with
                    delta_w symmetric (|delta_w| <= D_w), w in [w^lo, w^hi] >= 0, the computed
                    w^ >= 0 (exp, a positive sum, a quotient), fl(v^) in v's range widened by
                    D_v + rho_v, and r_w (row j of w) and r_v (column m of v) each in one mode:
                      o^ - o in [-(R + w^hi lo_v + lo_w + lo_v'), R + w^hi hi_v + hi_w + hi_v']
                    R = D_mix - (rho_w A_v + M_w (D_v + rho_v)) (rounded down) >= D_w A_v + the
                    sum's own rounding, (lo_w, hi_w) the sides of sum_k r_w,jk fl(v^_km),
                    (lo_v', hi_v') of sum_k w_jk r_v,km (``mix_sides``);
  output            z'^ - z' = delta_r + W_O (delta_o + r_o) + rounding: D' - prop (>= |delta_r|
                    + the rounding) plus W_O's spread of o's sides and o's reduction's sides.
The feed-forward's Jacobian form (float_deviation.ff_jacobian):
    z'^ - z' = (I + A) delta + A r_z + W_2 r_act + W_2 Theta eps + (second sum's rounding),
A in [W_2 [Theta] W_1]: (I + A) delta by ``spread`` of delta's sides (or |I + A| D_z,
whichever is smaller on each side), A r_z and W_2 r_act by their ``parts`` (r_z's row, the
ReLU outputs' row, each in one mode), added side by side (``ff_terms``); the rest symmetric.
For the hand-built network this is where they cancel: truncation lowers m (its reductions
of x at W_V, of w = 1/3 and of o are all <= 0, and J_xm = dx'/dm ~ x > 0), while x's
reduction at W_1 (A_xx ~ m - 1 <= 0) and the ReLU outputs' at W_2 (mostly negative weights
where u < 1) raise x'.
"""

from __future__ import annotations

import numpy as np

from transformer_ua import rounding


def _total(c, x, exact):
  """sum_i c_oi x_i [..., rows]: c [rows, r] by a matmul (exact weights), else broadcast."""
  return x @ c.T if exact else (c * x[..., None, :]).sum(axis=-1)


def spread(c_lo, c_hi, d, e, up_fn, xp, exact=False):
  """(L, H) [..., rows]: sum_i c_i t_i lies in [-L, H] for t_i in [-d_i, e_i] (d, e >= 0,
  [..., r]) and c_i in [c_lo, c_hi] (broadcastable to [..., rows, r]; ``exact``: c_lo is
  c_hi, a [rows, r] matrix), by the corners: H_i = max(c_hi^+ e_i, c_lo^- d_i), L_i =
  max(c_hi^+ d_i, c_lo^- e_i)."""
  cp, cn = xp.maximum(c_hi, 0.0), xp.maximum(-xp.asarray(c_lo), 0.0)
  if exact:           # one of cp, cn is 0 per entry: max(cp d, cn e) = cp d + cn e
    return (up_fn(_total(cp, d, True) + _total(cn, e, True)),
            up_fn(_total(cp, e, True) + _total(cn, d, True)))
  d, e = d[..., None, :], e[..., None, :]
  return (up_fn(xp.maximum(cp * d, cn * e).sum(axis=-1)),
          up_fn(xp.maximum(cp * e, cn * d).sum(axis=-1)))


def parts(model: rounding.MatmulModel, lo, hi, c_lo, c_hi, up_fn, xp, *, cap=None,
          nonneg=False):
  """(L, H, S) [..., rows] of the module docstring for operands a^ [..., r] with range
  [lo, hi] (widened by their D already) and coefficients [c_lo, c_hi] broadcastable to
  [..., rows, r]; ``cap`` [..., r] a bound of |r| in every mode (or None), ``nonneg`` True
  where a^ >= 0 by construction. ``up_fn`` rounds a float64 sum up, ``xp`` the array module
  (NumPy, or jax.numpy in the box kernel). Where the model is nearest only, L = H = 0."""
  near = model if model.operand_mode == 'nearest' else model.with_nearest_operands()
  exact = c_lo is c_hi and np.ndim(c_lo) == 2     # exact weights W [rows, r]: matmuls
  rho_n = near.operand_error(lo, hi, xp)
  if cap is not None:
    rho_n = xp.minimum(rho_n, cap)
  s = up_fn(_total(xp.maximum(xp.abs(c_lo), xp.abs(c_hi)), rho_n, exact))
  if model.operand_mode == 'nearest':
    zero = xp.zeros_like(s)
    return zero, zero, s
  rho_t = model.with_truncated_operands().operand_error(lo, hi, xp)
  if cap is not None:
    rho_t = xp.minimum(rho_t, cap)
  pos = xp.ones_like(lo, dtype=bool) if nonneg else xp.asarray(lo) >= 0
  neg = xp.zeros_like(pos) if nonneg else (xp.asarray(hi) <= 0) & ~pos
  low, high = spread(c_lo, c_hi, xp.where(neg, 0.0, rho_t), xp.where(pos, 0.0, rho_t),
                     up_fn, xp, exact)
  return low, high, s


def sides(p, xp):
  """(lo, hi): a row's sum_i c_i r_i lies in [-lo, hi] in either mode, for its ``parts`` p:
  [-max(L, S), max(H, S)]."""
  low, high, s = p
  return xp.maximum(low, s), xp.maximum(high, s)


def bound(model: rounding.MatmulModel, lo, hi, c_lo, c_hi, up_fn, xp, **kw):
  """[..., rows] >= |sum_i c_i r_i| (``parts``; ``kw`` as there): max(L, H, S)."""
  low, high = sides(parts(model, lo, hi, c_lo, c_hi, up_fn, xp, **kw), xp)
  return xp.maximum(low, high)


def replace(total, used, p, up_fn, xp):
  """(lo, hi), each <= ``total``: a deviation bounded by ``total`` >= rest + ``used`` (the
  float max(L, H, S) of ``parts`` p that was added into it) lies in [-(rest + lo_p),
  rest + hi_p] (``sides``): total - used >= rest."""
  rest = up_fn(total - used)
  lo, hi = sides(p, xp)
  return xp.minimum(up_fn(rest + lo), total), xp.minimum(up_fn(rest + hi), total)


def mix_sides(model, w, d_w, r_w, v, m_v, d_v, r_v, v_sides, d_mix, up_fn, down_fn, xp):
  """(lo, hi) [..., j, m], each <= d_mix: o^ - o in [-lo, hi] for o_jm = sum_k w_jk v_km
  (module docstring): w = (lo, hi) [..., j, k] the exact softmax (>= 0; its computed value
  >= 0 too), v = (lo, hi) [..., k, m] with magnitude m_v, D's d_w, d_v, reductions r_w, r_v
  (both modes), v^ - v in [-v_sides[0], v_sides[1]], and d_mix >= the float_deviation.mix
  bound. fl(w^) fl(v^) - w v = (delta_w + r_w) fl(v^) + w (delta_v + r_v): the rows of w
  and the columns of v each in one mode, delta_w symmetric; d_mix - (r_w A_v + M_w (D_v +
  r_v)) (rounded down) bounds the rest (delta_w A_v and the sum's own rounding)."""
  dv2 = up_fn(d_v + r_v)
  a_v = m_v + dv2                                  # >= |fl(v^)|
  used = down_fn((r_w @ a_v + w[1] @ (d_v + r_v)) * (1 - 2.0 ** -30))   # below its exact
  rest = up_fn(d_mix - used)
  swap = lambda x: xp.swapaxes(x, -1, -2)          # noqa: E731
  f_lo, f_hi = swap(down_fn(v[0] - dv2)), swap(up_fn(v[1] + dv2))   # fl(v^) [..., m, k]
  p_w = parts(model, down_fn(w[0] - d_w), up_fn(w[1] + d_w), f_lo[..., None, :, :],
              f_hi[..., None, :, :], up_fn, xp, cap=r_w, nonneg=True)
  p_v = parts(model, swap(down_fn(v[0] - d_v)), swap(up_fn(v[1] + d_v)),
              w[0][..., None, :, :], w[1][..., None, :, :], up_fn, xp, cap=swap(r_v))
  lw, hw = sides(p_w, xp)
  lv, hv = (swap(t) for t in sides(p_v, xp))
  lo = up_fn(rest + w[1] @ v_sides[0] + lw + lv)
  hi = up_fn(rest + w[1] @ v_sides[1] + hw + hv)
  return xp.minimum(lo, d_mix), xp.minimum(hi, d_mix)


def ff_terms(model, eye, a_lo, a_hi, slack, z_range, cap, act_range, w_2, sym, signs, up_fn,
             down_fn, xp):
  """[..., D] >= |(I + A) delta + A r_z + W_2 r_act| for the feed-forward's Jacobian form
  (float_deviation.ff_jacobian): A in [a_lo, a_hi] (+- slack, [..., D*D]) the interval
  W_2 [Theta] W_1, r_z the reduction of its input (range ``z_range`` widened by D, |r_z| <=
  ``cap``), r_act its ReLU outputs' (``act_range``) at W_2, each row in one mode, and delta
  = z^ - z with |(I + A)| |delta| <= ``sym``, or delta in [-signs[0], signs[1]] where
  ``signs`` is given: the three intervals add (``spread``, ``sides``)."""
  shape = sym.shape + sym.shape[-1:]
  c_lo, c_hi = down_fn(a_lo - slack).reshape(shape), up_fn(a_hi + slack).reshape(shape)
  l1, h1 = sides(parts(model, *z_range, c_lo, c_hi, up_fn, xp, cap=cap), xp)
  l2, h2 = sides(parts(model, *act_range, w_2, w_2, up_fn, xp, nonneg=True), xp)
  lo_p = hi_p = sym
  if signs is not None:
    lsp, hsp = spread(down_fn(eye + a_lo - slack).reshape(shape),
                      up_fn(eye + a_hi + slack).reshape(shape), signs[0], signs[1], up_fn, xp)
    lo_p, hi_p = xp.minimum(sym, lsp), xp.minimum(sym, hsp)
  return xp.maximum(up_fn(lo_p + l1 + l2), up_fn(hi_p + h1 + h2))
