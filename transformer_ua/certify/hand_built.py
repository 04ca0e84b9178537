r"""A hand-built standard Transformer for token_times_mean at any (d, n), its error in closed form.

f(X)_{j,c} = x_{j,c} m_c, m_c = mean_k x_{k,c} (targets/functions.py: X * mean over tokens,
entrywise). The network (``hand_built_product_network(units, n, d)``), D = 2d, written for
one coordinate c (the d coordinates do not mix: every matrix below is block-diagonal over c):

    pad:   z_j = (x_j, 0)                               (x_j in R^d, then d zeros)
    Attn:  one head of width d, W_Q = W_K = 0 (every score 0: the softmax is uniform, 1/n
           exactly in real arithmetic), W_V = [I_d, 0], W_O = [0, I_d]^T:  z_j = (x_j, m)
    FF:    with u = (x_c + m_c)/2 in [0, 1], w = (x_c - m_c + 1)/2 in [0, 1] and
           x_c m_c = u^2 - (w - 1/2)^2 = u^2 - w^2 + w - 1/4, the square t^2 on [0, 1] is
           replaced by its piecewise-linear interpolation on k = units/2 pieces of width
           h = 1/k,
               q(t) = h relu(t) + 2h sum_{i=1}^{k-1} relu(t - i h),
           and the residual keeps x_c, so the FF adds to coordinate c
               q(u) - q(w) - u + 1/4       (x - u + 1/4 = w - 1/4; relu(u) = u on [0, 1])
           with units = 2k ReLUs per coordinate (rows c units + i: k on u, rows [1/2, 1/2]
           on (x_c, m_c), biases -i h; rows c units + k + i: k on w, rows [1/2, -1/2],
           biases 1/2 - i h): d units ReLUs in all
    out:   the first d coordinates: g(X)_{j,c} = x_{j,c} + q(u_{j,c}) - q(w_{j,c}) - u_{j,c} + 1/4.

Parameters: 4 d^2 (units + 2) + d units + 3 d (W_Q, W_K, W_V, W_O: 2 d^2 each; b_Q: d;
W_1, W_2: 2 d^2 units each; b_1: d units; b_2: 2d). At d = 1 the arrays are those of the
d = 1 network built before (same params_hash).

Its error, in real arithmetic: g_{j,c} - f_{j,c} = E(u_{j,c}) - E(w_{j,c}), where on a piece [t_i, t_i + h]
E(t) = q(t) - t^2 = (t - t_i)(t_i + h - t), 0 <= E <= h^2/4. Hence

    sup |g - f| = h^2/4                                       (units a multiple of 4)

(below: |E(u) - E(w)| <= max(E(u), E(w)); attained at X = t 1 with t the midpoint of a
piece: then m = x = t, u = t, E(u) = h^2/4, and w = 1/2 is a knot since k is even), and,
since entry (j, c) depends on column c of X only and the d columns of a uniform X are
independent uniforms on [0, 1]^n (each integral over the other columns is 1),

    d_2(f, g)^2 = sum_c int_{[0,1]^n} sum_j (E(u_{j,c}) - E(w_{j,c}))^2 dX_c
                = d * (the d = 1 value),  exactly:
    the d = 1 value = n int_{[0,1]^n} (E(u_1) - E(w_1))^2 dX
                = n int_0^1 dx int ds phi_{n-1}(s) (E(u) - E(w))^2,   m = (x + s)/n,

phi_{n-1} the Irwin-Hall density of a sum of n - 1 uniforms (a polynomial on each
[q, q + 1]). On each region cut out of [0, 1] x [q, q + 1] by the pieces of u and of w
(a convex polygon, the lines rational) the integrand is a polynomial in (x, s) with
rational coefficients; ``l2_error_squared`` integrates it exactly (polygons clipped in
Fractions, fan-triangulated, monomials over the simplex int a^i b^j = i! j! / (i+j+2)!).

The weights are the rationals above rounded to float64 (exact when k is a power of 2: h,
1/2 and i h are then dyadic); the closed forms are those of the rational network.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np

from transformer_ua.networks import network_dict


@dataclasses.dataclass(frozen=True)
class HandBuilt:
  """The network with its closed-form errors for n tokens of width d (module doc)."""

  net: network_dict.Net
  units: int                   # ReLUs per coordinate (d units in all)
  n: int
  sup_error: Fraction          # sup over the cube of max_jc |g(X)_jc - f(X)_jc|
  l2_error_squared: Fraction   # d_2(f, g)^2, exactly
  d: int = 1

  @property
  def l2_error(self) -> float:
    """d_2(f, g) = sqrt(l2_error_squared), rounded up to the next float."""
    v = math.sqrt(self.l2_error_squared)
    return v if Fraction(v) ** 2 >= self.l2_error_squared else math.nextafter(v, math.inf)


def _check_int(name: str, value, least: int) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
    raise ValueError(f'{name}={value!r}; it must be an integer >= {least}.')
  return int(value)


def hand_built_product_network(units: int, n: int = 3, d: int = 1) -> HandBuilt:
  """The hand-built network for token_times_mean on n tokens of width d with ``units``
  ReLUs per coordinate (module doc), and its closed-form sup and L2 errors.

  Raises:
    ValueError: units not a positive multiple of 4, n < 2 or d < 1.
  """
  if isinstance(units, bool) or not isinstance(units, (int, np.integer)) or units < 4 \
      or units % 4:
    raise ValueError(f'units={units!r}; it must be a positive multiple of 4 (k = units/2 '
                     'pieces per square, k even so that the sup error is h^2/4 exactly).')
  n = _check_int('n', n, 2)
  d = _check_int('d', d, 1)
  units = int(units)
  k = units // 2
  h = Fraction(1, k)
  w_1 = np.zeros((d * units, 2 * d))
  b_1 = np.zeros(d * units)
  w_2 = np.zeros((2 * d, d * units))
  for c in range(d):
    row = c * units
    for i in range(k):
      w_1[row + i, [c, d + c]] = [0.5, 0.5]                # u - i h
      b_1[row + i] = float(-i * h)
      w_1[row + k + i, [c, d + c]] = [0.5, -0.5]           # w - i h
      b_1[row + k + i] = float(Fraction(1, 2) - i * h)
      w_2[c, row + i] = float(h - 1) if i == 0 else float(2 * h)
      w_2[c, row + k + i] = float(-h) if i == 0 else float(-2 * h)
  eye = np.eye(d)
  block = {'W_Q': np.zeros((1, d, 2 * d)), 'b_Q': np.zeros((1, d)),
           'W_K': np.zeros((1, d, 2 * d)),
           'W_V': np.concatenate([eye, np.zeros((d, d))], axis=1)[None],
           'W_O': np.concatenate([np.zeros((d, d)), eye], axis=0)[None],
           'W_1': w_1, 'b_1': b_1, 'W_2': w_2,
           'b_2': np.concatenate([np.full(d, 0.25), np.zeros(d)])}
  net = network_dict.check({'blocks': [block]}, d=d)
  return HandBuilt(net, units, n, h * h / 4, d * l2_error_squared(k, n), d)


# ---------------------------------------------------------------------------
# The exact L2 integral: polynomials in (x, s) over rational polygons.
# ---------------------------------------------------------------------------


def _mul(p: dict, q: dict) -> dict:
  out = {}
  for (a, b), c in p.items():
    for (a2, b2), c2 in q.items():
      key = (a + a2, b + b2)
      out[key] = out.get(key, 0) + c * c2
  return out


def _add(p: dict, q: dict, sign: int = 1) -> dict:
  out = dict(p)
  for key, c in q.items():
    out[key] = out.get(key, 0) + sign * c
  return out


def _linear(cx, cs, c0) -> dict:
  """cx x + cs s + c0 as a polynomial {(i, j): coefficient of x^i s^j}."""
  return {(1, 0): Fraction(cx), (0, 1): Fraction(cs), (0, 0): Fraction(c0)}


def _clip(poly: list, cx, cs, c0) -> list:
  """The convex polygon ``poly`` (vertices (x, s)) cut to cx x + cs s + c0 >= 0."""
  out = []
  for i, a in enumerate(poly):
    b = poly[(i + 1) % len(poly)]
    fa = cx * a[0] + cs * a[1] + c0
    fb = cx * b[0] + cs * b[1] + c0
    if fa >= 0:
      out.append(a)
    if (fa > 0 > fb) or (fa < 0 < fb):
      t = fa / (fa - fb)
      out.append((a[0] + t * (b[0] - a[0]), a[1] + t * (b[1] - a[1])))
  return out


def _triangle_integral(poly: dict, p0, p1, p2) -> Fraction:
  """The integral of ``poly`` over the triangle p0 p1 p2, exactly."""
  det = abs((p1[0] - p0[0]) * (p2[1] - p0[1]) - (p2[0] - p0[0]) * (p1[1] - p0[1]))
  if det == 0:
    return Fraction(0)
  xs = {(0, 0): p0[0], (1, 0): p1[0] - p0[0], (0, 1): p2[0] - p0[0]}   # x(a, b)
  ss = {(0, 0): p0[1], (1, 0): p1[1] - p0[1], (0, 1): p2[1] - p0[1]}   # s(a, b)
  deg_x = max(i for i, _ in poly)
  deg_s = max(j for _, j in poly)
  px, ps = [{(0, 0): Fraction(1)}], [{(0, 0): Fraction(1)}]
  for _ in range(deg_x):
    px.append(_mul(px[-1], xs))
  for _ in range(deg_s):
    ps.append(_mul(ps[-1], ss))
  total = Fraction(0)
  for (i, j), c in poly.items():
    if c == 0:
      continue
    for (a, b), v in _mul(px[i], ps[j]).items():
      total += c * v * Fraction(math.factorial(a) * math.factorial(b),
                                math.factorial(a + b + 2))
  return total * det


def _irwin_hall_piece(count: int, q: int) -> dict:
  """The density of a sum of ``count`` >= 1 uniforms on [q, q + 1], as a polynomial in s:
  1/(count-1)! sum_{k <= q} (-1)^k C(count, k) (s - k)^(count-1)."""
  out = {}
  for kk in range(q + 1):
    term = {(0, 0): Fraction((-1) ** kk * math.comb(count, kk), math.factorial(count - 1))}
    for _ in range(count - 1):
      term = _mul(term, _linear(0, 1, -kk))
    out = _add(out, term)
  return out


def l2_error_squared(k: int, n: int) -> Fraction:
  """d_2(f, g)^2 of the hand-built network with k pieces per square, n tokens (module
  doc), exactly."""
  h = Fraction(1, k)
  # u = ((n+1) x + s) / (2n), w = ((n-1) x - s) / (2n) + 1/2
  u = (Fraction(n + 1, 2 * n), Fraction(1, 2 * n), Fraction(0))
  w = (Fraction(n - 1, 2 * n), Fraction(-1, 2 * n), Fraction(1, 2))
  total = Fraction(0)
  for q in range(n - 1):
    density = _irwin_hall_piece(n - 1, q)
    rect = [(Fraction(0), Fraction(q)), (Fraction(1), Fraction(q)),
            (Fraction(1), Fraction(q + 1)), (Fraction(0), Fraction(q + 1))]
    for i in range(k):
      cell_u = _clip(_clip(rect, u[0], u[1], u[2] - i * h), -u[0], -u[1], (i + 1) * h - u[2])
      if len(cell_u) < 3:
        continue
      e_u = _mul(_linear(u[0], u[1], u[2] - i * h), _linear(-u[0], -u[1], (i + 1) * h - u[2]))
      for l in range(k):
        cell = _clip(_clip(cell_u, w[0], w[1], w[2] - l * h), -w[0], -w[1],
                     (l + 1) * h - w[2])
        if len(cell) < 3:
          continue
        e_w = _mul(_linear(w[0], w[1], w[2] - l * h),
                   _linear(-w[0], -w[1], (l + 1) * h - w[2]))
        diff = _add(e_u, e_w, -1)
        integrand = _mul(_mul(diff, diff), density)
        for t in range(1, len(cell) - 1):
          total += _triangle_integral(integrand, cell[0], cell[t], cell[t + 1])
  return n * total
