r"""f's side of the certificate: the built-ins as interval functions, a callable's modulus.

A built-in target has a closed form, written here once more on ``intervals.Interval``
(forward mode), so that one pass gives f's value and Jacobian enclosures over a box:

    token_times_mean   f_j = x_j * (1/n) sum_k x_k
    prefix_mean        f_j = (1/(j+1)) sum_{k<=j} x_k
    reversal           f_j = x_{n-1-j}
    attention_map      f = softmax_k((x W_Q)_j . (x W_K)_k / sqrt(d)) (x W_V)_k
    random_bumps       f_ji = sum_b a_b exp(-((x_ji - c_b)^2 + (m_i - e_b)^2) / (2 s^2)),
                       m = mean_k x_k, entrywise (``targets.random_bumps_params``)

Constants that are not floats (1/n, 1/sqrt(d), 1/(2 s^2)) enter as outward-rounded
intervals. A callable f has no closed form: its value at the box centre is what it
returns there (float64), and over the box it moves by at most

    |f(X)_jk - f(c)_jk| <= L max_q |X_q - c_q|     (lipschitz=, target_bounds' convention)
                         or modulus(max_q r_q)      (modulus=: a function of the sup-norm
                                                     radius; per-coordinate radii enter
                                                     through their maximum)

a first-order bound (no cancellation with g's Jacobian), so callables need smaller boxes;
or, with the caller's jacobian= and hessian= H, the second-order Taylor bound of
callable_enclosures.py (which holds both callable forms).
"""

from __future__ import annotations

import math

import numpy as np

from transformer_ua.certify import intervals as iv
from transformer_ua.targets import functions as targets_lib


def _const(value_lo: float, value_hi: float) -> iv.Interval:
  return iv.Interval(np.float64(value_lo), np.float64(value_hi))


def _reciprocal(k: int) -> iv.Interval:
  """An interval holding 1/k."""
  x = 1.0 / k
  return _const(iv.down(x), iv.up(x))


def _mean_tokens(x: iv.Interval) -> iv.Interval:
  """(1/n) sum_k x_k [..., 1, d] (kept as a token axis of length 1)."""
  n = x.lo.shape[-2]
  s = iv.sum_axis(x, -2)
  m = iv.mul(s, _reciprocal(n))
  return iv.Interval(m.lo[..., None, :], m.hi[..., None, :],
                     None if not m.has_tangent else m.tlo[..., None, :, :],
                     None if not m.has_tangent else m.thi[..., None, :, :])


def _token_times_mean(x: iv.Interval) -> iv.Interval:
  return iv.mul(x, _mean_tokens(x))


def _prefix_mean(x: iv.Interval) -> iv.Interval:
  n = x.lo.shape[-2]
  parts = []
  for j in range(n):
    s = iv.sum_axis(x.take(np.arange(j + 1), axis=-2), -2)
    parts.append(iv.mul(s, _reciprocal(j + 1)))
  return _stack_tokens(parts)


def _stack_tokens(parts) -> iv.Interval:
  lo = np.stack([p.lo for p in parts], axis=-2)
  hi = np.stack([p.hi for p in parts], axis=-2)
  if not parts[0].has_tangent:
    return iv.Interval(lo, hi)
  return iv.Interval(lo, hi, np.stack([p.tlo for p in parts], axis=-3),
                     np.stack([p.thi for p in parts], axis=-3))


def _reversal(x: iv.Interval) -> iv.Interval:
  n = x.lo.shape[-2]
  return x.take(np.arange(n)[::-1], axis=-2)


def _attention_map(x: iv.Interval) -> iv.Interval:
  d = x.lo.shape[-1]
  w_q, w_k, w_v = targets_lib.attention_map_weights(d)
  q = iv.linear(x, w_q.T)
  k = iv.linear(x, w_k.T)
  v = iv.linear(x, w_v.T)
  r = 1.0 / math.sqrt(d)
  s = iv.mul(iv.pairwise(q, k), _const(iv.down(iv.down(r)), iv.up(iv.up(r))))
  return iv.mix(iv.softmax(s), v)


def _random_bumps(x: iv.Interval) -> iv.Interval:
  """Entrywise: f_ji = sum_b a_b exp(-((x_ji - c_b)^2 + (m_i - e_b)^2) / (2 s^2))."""
  a, c, e, s = targets_lib.random_bumps_params()
  m = _mean_tokens(x)                                          # [..., 1, d]
  dx = iv.sub(iv.expand(x, -1), iv.point(c))                  # [..., n, d, 64]
  dm = iv.sub(iv.expand(m, -1), iv.point(e))                  # [..., 1, d, 64]
  r2 = iv.add(iv.square(dx), iv.square(dm))
  k = 1.0 / (2.0 * s * s)
  arg = iv.mul(r2, _const(-iv.up(iv.up(k)), -iv.down(iv.down(k))))
  out = iv.linear(iv.exp(arg), np.asarray(a, np.float64)[None, :])   # [..., n, d, 1]
  return out.take(0, axis=-1)


#: The built-ins with an interval form (name -> function of an Interval [B, n, d]).
INTERVAL_FORMS = {
    'token_times_mean': _token_times_mean,
    'prefix_mean': _prefix_mean,
    'reversal': _reversal,
    'attention_map': _attention_map,
    'random_bumps': _random_bumps,
}


def interval_form(target):
  """The interval function of a built-in target (the object itself, not a look-alike),
  else None."""
  name = getattr(target, 'name', None)
  if name in INTERVAL_FORMS and targets_lib.BUILTIN_TARGETS.get(name) is target:
    return INTERVAL_FORMS[name]
  return None
