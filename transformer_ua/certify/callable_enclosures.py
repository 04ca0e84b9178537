r"""A callable f's side of the per-box bound: first order (lipschitz=, modulus=) or second
order (jacobian= and hessian=), one object decided once by ``certify_network``.

On a box B with centre c and half-widths r (R = max_q r_q, the max norm over the n d input
coordinates X_q, as for lipschitz=), ``around(c, r)`` gives f(c), J_f(c) (or None), the
remainder rem and the spread s, entrywise [B, n, d]:

  First order (``FirstOrder``): |f(X) - f(c)| <= L R (lipschitz=) or modulus(c, r):
      rem = s = that bound, J_f(c) = None.

  Second order (``SecondOrder``), the caller's statement, for X, c in [0, 1]^{n x d}:
      |f(X)_jk - f(c)_jk - sum_q J_f(c)_jk,q (X_q - c_q)| <= H/2 max_q |X_q - c_q|^2   (T)
  (a C^2 f with |v^T Hess f_jk(Z) v| <= H max|v|^2 for all Z, v meets it: Taylor's
  remainder). On B, max_q |X_q - c_q| <= R, so
      f(X) in f(c) + J_f(c)(X - c) + [-rem, rem],   rem = H/2 R^2,
      s = sum_q |J_f(c)_jk,q| r_q + rem >= sup_B |f(X) - f(c)|.

How ``box_bound`` uses them, with e = f - g, J_g(B) g's interval Jacobian on B, and
g(X) - g(c) = A (X - c) for some A in J_g(B) (mean value along the segment [c, X] in B):

      e(X) = e(c) + (J_f(c) - A)(X - c) + rho(X),   |rho| <= rem               (by T)
  =>  |e(X)_jk| <= |e(c)_jk| + sum_q max|J_f(c)_jk,q - J_g(B)_jk,q| r_q + rem   (mean value)
      |e(X)_jk| <= max |f(c)_jk - g(B)_jk| + s_jk                              (natural)

and with J_f(c) = None the first sum is sum_q max|J_g(B)_jk,q| r_q (first order: no
cancellation, rem ~ r). The second-order rem shrinks like r^2, and J_f(c) - J_g(B) cancels
where g matches f's slope, so the mean-value form shrinks like r^2 as for a built-in.

No interval Jacobian of f over B is needed: the Taylor form (T) at the centre replaces it,
and is tighter. (Were it needed, (T) alone would give, for |u|_inf <= 1 and t = |X - c|_inf:
f(X + t u) expanded at X and at c, minus f(X) expanded at c, leaves
|(J_f(X) - J_f(c)) u| t <= H/2 (t^2 + (2t)^2 + t^2), i.e. |(J_f(X) - J_f(c)) u| <= 3 H t;
the mean-value form with J_f(B) in J_f(c) +- 3 H R would add sum_q 3 H R r_q >= 3 H R^2,
six times rem.)

Rounding: f(c) and J_f(c) are the caller's float64 values (the statement T is about them);
every sum, product and difference of the bound is rounded up (``intervals.up`` after each
IEEE operation, ``intervals.sum_error`` on the sums over q), and H enters as a float >= H.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from transformer_ua.certify import box_bound, float_deviation
from transformer_ua.certify import intervals as iv
from transformer_ua.targets import callable_checks


def dot_up(a: np.ndarray, r: np.ndarray) -> np.ndarray:
  """An upper bound of sum_q a_q r_q (a, r >= 0; q the last axis): the float sum widened by
  ``intervals.sum_error`` over the products' and the sum's rounding, then one ulp up."""
  s = (a * r).sum(axis=-1)
  return iv.up(s + iv.sum_error(s, a.shape[-1] + 1))


class FirstOrder:
  """|f(X) - f(c)| <= L max_q r_q (``lipschitz``, a float >= the caller's L) or
  modulus(c, r) (the caller's function)."""

  def __init__(self, call, lipschitz: float | None, modulus=None):
    self.call, self.lipschitz, self.modulus = call, lipschitz, modulus

  def around(self, c: np.ndarray, r: np.ndarray):
    """(f(c), None, rem, s) on the boxes c +- r [B, n, d] (module doc)."""
    f_c = np.asarray(box_bound.guarded('f', self.call, c), np.float64)
    if self.modulus is not None:
      wiggle = np.asarray(box_bound.guarded('the modulus', self.modulus, c, r), np.float64)
    else:
      wiggle = iv.up(self.lipschitz * r.reshape(len(c), -1).max(axis=1))[:, None, None] * \
          np.ones_like(c)
    return f_c, None, wiggle, wiggle


class SecondOrder:
  """The caller's statement T (module doc) with ``jacobian`` and a float ``hessian_up`` >= H."""

  def __init__(self, call, jacobian, hessian_up: float):
    self.call, self.jacobian, self.hessian_up = call, jacobian, hessian_up

  def around(self, c: np.ndarray, r: np.ndarray):
    """(f(c) [B, n, d], J_f(c) [B, n, d, n d], rem, s) on the boxes c +- r (module doc)."""
    b, n, d = c.shape
    f_c = np.asarray(box_bound.guarded('f', self.call, c), np.float64)
    jac = callable_checks.evaluate_jacobian(self.jacobian, c)
    big = r.reshape(b, -1).max(axis=1)
    rem = iv.up(0.5 * iv.up(iv.up(self.hessian_up * big) * big))[:, None, None] * \
        np.ones_like(c)
    spread = iv.up(dot_up(np.abs(jac), r.reshape(b, 1, 1, n * d)) + rem)
    return f_c, jac, rem, spread


def check_hessian(hessian) -> Fraction:
  """The caller's H as a Fraction (a finite number >= 0), or one ValueError line."""
  if isinstance(hessian, (bool, np.bool_)) or \
      not isinstance(hessian, (int, float, Fraction, np.integer, np.floating)) or \
      not math.isfinite(float(hessian)) or hessian < 0:
    raise ValueError(f'hessian={hessian!r}; it must be a finite number H >= 0 with '
                     '|f(X) - f(c) - J_f(c)(X - c)| <= H/2 max|X - c|^2 entrywise.')
  return Fraction(hessian) if isinstance(hessian, (int, Fraction, np.integer)) else \
      Fraction(float(hessian))


def second_order(target, jacobian, hessian, *, d: int, n: int, points: int):
  """(SecondOrder, the f-side text, the assumption) for a callable target with the caller's
  ``jacobian`` and ``hessian`` H: H checked (``check_hessian``), J_f compared with central
  differences (``callable_checks.check_jacobian``), then H refuted on ``points`` sampled
  pairs (``callable_checks.refute_hessian``); each failure one ValueError line."""
  if not callable(jacobian):
    raise ValueError('jacobian= must be a function X [B, n, d] -> [B, n, d, n, d] (entry '
                     '[b, j, k, l, m] = d f(X)_jk / d X_lm), given with hessian=.')
  h = check_hessian(hessian)
  callable_checks.check_jacobian(target, jacobian, h, d=d, n=n)
  seen = callable_checks.refute_hessian(target, jacobian, h, d=d, n=n, points=points)
  shown = callable_checks.show_constant(h)
  assumption = (f"f's second-order bound given by the caller: |f(X) - f(c) - J_f(c)(X - c)|"
                f" <= H/2 max|X - c|^2 entrywise with H = {shown} (not refuted on {points:,} "
                f'sampled pairs, largest sampled 2 |remainder| / max|X - c|^2: {seen:.4g}) '
                f'and the given jacobian (agrees with central differences at '
                f'{callable_checks.JACOBIAN_POINTS} points, h = 2^-16, within H h / 2 + '
                f'{callable_checks.JACOBIAN_RTOL:g} (1 + |J|))')
  return (SecondOrder(target, jacobian, float_deviation.float_up(h)),
          f'callable, second order: jacobian and H = {shown} given by the caller',
          assumption)
