r"""What the certificate needs to know about a target f: a modulus and exact values.

Modulus of continuity, in the form the certificate uses (entrywise out, max norm in):

    |f(X)_ji - f(Y)_ji| <= L max_kl |X_kl - Y_kl|        for X, Y in [0, 1]^{n x d}

Built-in constants (proved here, per output entry (j, i)):

    token_times_mean   f_ji = x_ji m_i, m_i = mean_k x_ki:  d f_ji = m_i dx_ji
                       + x_ji mean_k dx_ki, so |df_ji| <= (m_i + x_ji) max|dX| <= 2 max|dX|
                                                                                  L = 2
    prefix_mean        a mean of entries:                                         L = 1
    reversal           a permutation of entries:                                  L = 1
    attention_map      f_j = sum_k w_jk v_k, v_k = x_k W_V, w_j = softmax_k(s_jk),
                       s_jk = (x_j W_Q).(x_k W_K) / sqrt(d). With c(W) = max_i sum_l
                       |W_li| (so |(xW)_i| <= c(W) max|x| <= c(W) on [0, 1]^d):
                         |dv_ki| <= c(W_V) max|dX|,  |ds_jk| <= 2 sqrt(d) c(W_Q) c(W_K) max|dX|,
                         ||dw_j||_1 <= 2 max_k |ds_jk|   (softmax Jacobian diag(w) - w w^T:
                         ||J e||_1 = sum_k w_k |e_k - w.e| <= 2 ||e||_inf),
                       and df_ji = sum_k w_jk dv_ki + sum_k dw_jk v_ki, so
                                     L = c(W_V) (1 + 4 sqrt(d) c(W_Q) c(W_K))
                       (sqrt(d) rounded up to a rational; the weights are the float64
                       weights the target uses, taken exactly)

A user callable has no constant the code can know: the caller states one.

Exact values: f_bar's table holds f evaluated in float64 at the cube centres. For the
built-ins, ``exact_values`` encloses the real f(C) (rationals for the first three, arb
balls for attention_map), so the certificate can bound the rounding too.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from flint import arb, ctx

from transformer_ua.yun import targets as targets_lib

#: arb precision of the exact target values (bits).
EXACT_VALUE_BITS = 128


def _sqrt_up(x: int) -> Fraction:
  """A rational >= sqrt(x)."""
  r = math.isqrt(x)
  return Fraction(r) if r * r == x else Fraction(math.isqrt(x * 2 ** 40) + 1, 2 ** 20)


def _col_abs_sum(w) -> Fraction:
  w = np.asarray(w, np.float64)
  return max(sum(abs(Fraction(float(v))) for v in w[:, i]) for i in range(w.shape[1]))


def builtin_lipschitz(name: str, d: int, n: int) -> Fraction | None:
  """The proved constant L of a built-in target (see module doc), None for others."""
  if name == 'token_times_mean':
    return Fraction(2)
  if name in ('prefix_mean', 'reversal'):
    return Fraction(1)
  if name == 'attention_map':
    w_q, w_k, w_v = targets_lib.attention_map_weights(d)
    return _col_abs_sum(w_v) * (1 + 4 * _sqrt_up(d) * _col_abs_sum(w_q) * _col_abs_sum(w_k))
  return None


def check_lipschitz(lipschitz, target, d: int, n: int) -> Fraction:
  """The constant to use: the caller's (positive, finite) or the built-in one.

  Raises:
    ValueError: a bad value, or a target without a known constant and none given.
  """
  if lipschitz is not None:
    if isinstance(lipschitz, bool) or not isinstance(lipschitz, (int, float, Fraction)) \
        or not math.isfinite(float(lipschitz)) or lipschitz <= 0:
      raise ValueError(f'lipschitz={lipschitz!r}; it must be a positive finite number L '
                       'with |f(X)_ij - f(Y)_ij| <= L max|X - Y|.')
    return Fraction(lipschitz)
  name = target.name if target.name in targets_lib.BUILTIN_TARGETS and \
      targets_lib.BUILTIN_TARGETS[target.name] is target else None
  const = builtin_lipschitz(name, d, n) if name else None
  if const is None:
    raise ValueError(f'target {target.name!r} has no known modulus of continuity; pass '
                     'lipschitz=L with |f(X)_ij - f(Y)_ij| <= L max|X - Y| (it cannot be '
                     'guessed from samples).')
  return const


def exact_values(target, k: np.ndarray, resolution: int):
  """Enclosures of the real f(C_L) at the centres C_L = (K + 1/2) / N of K [C, n, d]:
  a nested list [C][n][d] of arb balls, or None for a target that is not a built-in."""
  name = target.name
  if name not in targets_lib.BUILTIN_TARGETS or targets_lib.BUILTIN_TARGETS[name] is not target:
    return None
  k = np.asarray(k)
  _, n, d = k.shape
  out = []
  with ctx.workprec(EXACT_VALUE_BITS):
    if name == 'attention_map':
      w_q, w_k, w_v = (np.vectorize(lambda v: arb(float(v)), otypes=[object])(w)
                       for w in targets_lib.attention_map_weights(d))
      root = arb(d).sqrt()
    for row in k:
      c = [[Fraction(2 * int(v) + 1, 2 * resolution) for v in tok] for tok in row]
      if name == 'token_times_mean':
        m = [sum(c[j][i] for j in range(n)) / n for i in range(d)]
        vals = [[c[j][i] * m[i] for i in range(d)] for j in range(n)]
      elif name == 'prefix_mean':
        vals = [[sum(c[k2][i] for k2 in range(j + 1)) / (j + 1) for i in range(d)]
                for j in range(n)]
      elif name == 'reversal':
        vals = [[c[n - 1 - j][i] for i in range(d)] for j in range(n)]
      else:
        x = np.asarray([[arb(v.numerator) / v.denominator for v in tok] for tok in c], object)
        q, kk, v = x @ w_q, x @ w_k, x @ w_v
        s = [[sum(q[j] * kk[k2]) / root for k2 in range(n)] for j in range(n)]
        vals = []
        for j in range(n):
          e = [(s[j][k2] - s[j][0]).exp() for k2 in range(n)]
          tot = sum(e)
          vals.append([sum(e[k2] * v[k2][i] for k2 in range(n)) / tot for i in range(d)])
      out.append([[v if isinstance(v, arb) else arb(v.numerator) / v.denominator
                   for v in tok] for tok in vals])
  return out
