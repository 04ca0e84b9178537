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

Two groups of reductions in one output (the feed-forward's E_1 = W_2 [Theta] W_1 r_z, its
input's reduction at W_1, and E_2 = W_2 r_act, its ReLU outputs' at W_2: two matmuls, each
row in one mode, the two modes independent), with (L_k, H_k, S_k) and T_k = max(L_k, H_k):

    |E_1 + E_2| <= max(max(L_1 + L_2, H_1 + H_2), T_1 + S_2, S_1 + T_2, S_1 + S_2)
                                                                       (``combined``)

(both truncated: the intervals [-L_k, H_k] add; one truncated and one rounded; both
rounded), never above max(T_1, S_1) + max(T_2, S_2): a positive error of one group offsets
a negative one of the other only where both are truncated.
"""

from __future__ import annotations

import numpy as np

from transformer_ua import rounding


def parts(model: rounding.MatmulModel, lo, hi, c_lo, c_hi, up_fn, xp, *, cap=None,
          nonneg=False):
  """(L, H, S) [..., rows] of the module docstring for operands a^ [..., r] with range
  [lo, hi] (widened by their D already) and coefficients [c_lo, c_hi] broadcastable to
  [..., rows, r]; ``cap`` [..., r] a bound of |r| in every mode (or None), ``nonneg`` True
  where a^ >= 0 by construction. ``up_fn`` rounds a float64 sum up, ``xp`` the array module
  (NumPy, or jax.numpy in the box kernel). Where the model is nearest only, L = H = 0."""
  near = model if model.operand_mode == 'nearest' else model.with_nearest_operands()
  exact = c_lo is c_hi and np.ndim(c_lo) == 2     # exact weights W [rows, r]: matmuls

  def total(c, x):                                 # sum_i c_oi x_i [..., rows]
    return x @ c.T if exact else (c * x[..., None, :]).sum(axis=-1)
  rho_n = near.operand_error(lo, hi, xp)
  if cap is not None:
    rho_n = xp.minimum(rho_n, cap)
  s = up_fn(total(xp.maximum(xp.abs(c_lo), xp.abs(c_hi)), rho_n))
  if model.operand_mode == 'nearest':
    zero = xp.zeros_like(s)
    return zero, zero, s
  rho_t = model.with_truncated_operands().operand_error(lo, hi, xp)
  if cap is not None:
    rho_t = xp.minimum(rho_t, cap)
  pos = xp.ones_like(lo, dtype=bool) if nonneg else xp.asarray(lo) >= 0
  neg = xp.zeros_like(pos) if nonneg else (xp.asarray(hi) <= 0) & ~pos
  d = xp.where(neg, 0.0, rho_t)                    # r >= -d
  e = xp.where(pos, 0.0, rho_t)                    # r <= e
  cp, cn = xp.maximum(c_hi, 0.0), xp.maximum(-xp.asarray(c_lo), 0.0)
  if exact:           # one of cp, cn is 0 per entry: max(cp d, cn e) = cp d + cn e
    return up_fn(total(cp, d) + total(cn, e)), up_fn(total(cp, e) + total(cn, d)), s
  d, e = d[..., None, :], e[..., None, :]
  low = up_fn(xp.maximum(cp * d, cn * e).sum(axis=-1))
  high = up_fn(xp.maximum(cp * e, cn * d).sum(axis=-1))
  return low, high, s


def bound(model: rounding.MatmulModel, lo, hi, c_lo, c_hi, up_fn, xp, **kw):
  """[..., rows] >= |sum_i c_i r_i| (``parts``; ``kw`` as there): max(L, H, S)."""
  low, high, s = parts(model, lo, hi, c_lo, c_hi, up_fn, xp, **kw)
  return xp.maximum(xp.maximum(low, high), s)


def combined(model: rounding.MatmulModel, first, second, up_fn, xp):
  """[..., rows] >= |E_1 + E_2| for two groups' ``parts`` (module docstring)."""
  (l1, h1, s1), (l2, h2, s2) = first, second
  nearest = up_fn(s1 + s2)
  if model.operand_mode == 'nearest':
    return nearest
  t1, t2 = xp.maximum(l1, h1), xp.maximum(l2, h2)
  both = xp.maximum(up_fn(l1 + l2), up_fn(h1 + h2))
  return xp.maximum(xp.maximum(both, nearest), xp.maximum(up_fn(t1 + s2), up_fn(s1 + t2)))

