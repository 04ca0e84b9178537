"""Fang et al. 2022, Lemma 3.3 (Zhou 2018): polynomials as sums of ridge powers.

For unit directions xi_1..xi_n in R^d that are *unisolvent for degree q* (the powers
(xi_k . x)^q span the homogeneous polynomials H_q), every Q of degree <= q is

    Q(x) = Q(0) + sum_{k=1}^{n} sum_{s=1}^{q} beta_{k,s} (xi_k . x)^s.        (1)

n_q = C(d-1+q, q) = dim H_q directions suffice. Unisolvence for q implies it for
every s <= q (if a degree-s form p vanished on all xi_k, so would p * l^(q-s)).

The solve, degree by degree. Write Q_s = sum_{|a|=s} c_a x^a for Q's homogeneous
part of degree s. By the multinomial theorem
(xi . x)^s = sum_{|a|=s} multinom(s; a) xi^a x^a, so (1) is, for each s, the linear
system  A_s beta_s = c_s  with  A_s[a, k] = multinom(s; a) xi_k^a  (dim H_s x n).
We solve it in the Bombieri-scaled basis (rows divided by sqrt(multinom(s; a))),
where every column has unit norm (||(xi . x)^s||_Bombieri = ||xi||^s = 1), so the
reported condition numbers measure the directions, not the monomial scaling.
For s < q the system is underdetermined: we take the minimum-norm solution.

Default directions: the lattice set  { a / ||a|| : a in N^d, |a| = q }, exactly
n_q directions, the classical unisolvent set. Measured 2-norm condition of the
degree-5 Bombieri system for d = 10 (2002 x 2002): lattice ~9e2, Gaussian random
~3e4, random-sign lattice ~1.5e6 (``results/fang/fang_construction.md``).
Each direction is replaced by an exactly rational point on the unit sphere
(inverse stereographic projection of a rounded point), so ||xi|| = 1 holds
*exactly* and the exact (Fraction) mode can use the same directions.
"""

from __future__ import annotations

import itertools
import math
import numbers
from fractions import Fraction
from typing import Mapping

import numpy as np

DIRECTION_KINDS = ('lattice', 'random')
# Denominator limit of the rational unit vectors (float mode: indistinguishable from
# the lattice directions; exact mode uses EXACT_DENOMINATOR to keep Fractions small).
FLOAT_DENOMINATOR = 2 ** 26
EXACT_DENOMINATOR = 16
# Largest exact (Fraction) ridge solve we attempt: Gaussian elimination is O(n^3)
# Fraction operations with growing sizes.
EXACT_SOLVE_MAX_TOKENS = 120


# ---------------------------------------------------------------------------
# Polynomials: dict exponent-tuple -> coefficient.
# ---------------------------------------------------------------------------


def validate_poly(poly, d) -> dict:
  """Checks ``poly`` (dict: exponent tuple of length d -> finite real) and returns a
  clean copy with Python-int exponents and float (or Fraction) coefficients, zero
  coefficients dropped. Raises ValueError with a one-line message otherwise."""
  if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 1:
    raise ValueError(f'd must be a positive integer, got {d!r}.')
  if not isinstance(poly, Mapping):
    raise ValueError('poly must be a dict mapping exponent tuples (length d, non-negative '
                     f'integers) to finite real coefficients, got {type(poly).__name__}.')
  out = {}
  for key, coef in poly.items():
    if (not isinstance(key, tuple) or len(key) != d
        or not all(isinstance(e, (int, np.integer)) and not isinstance(e, bool) and e >= 0
                   for e in key)):
      raise ValueError(f'poly key {key!r} is not allowed; keys must be tuples of {d} '
                       'non-negative integers (one exponent per input coordinate).')
    if isinstance(coef, bool) or not isinstance(coef, numbers.Real):
      raise ValueError(f'poly[{key!r}] = {coef!r}; coefficients must be finite real numbers.')
    if isinstance(coef, Fraction):
      c = coef
    else:
      c = float(coef)
      if not math.isfinite(c):
        raise ValueError(f'poly[{key!r}] = {coef!r}; coefficients must be finite real numbers.')
    k = tuple(int(e) for e in key)
    out[k] = out.get(k, 0) + c
  return {k: v for k, v in out.items() if v != 0}


def degree(poly: Mapping) -> int:
  return max((sum(k) for k in poly), default=0)


def evaluate_poly(poly: Mapping, x) -> np.ndarray:
  """Q(x) in float64, x: [..., d]. (Direct monomial evaluation; the reference.)"""
  x = np.asarray(x, np.float64)
  out = np.zeros(x.shape[:-1])
  for a, c in poly.items():
    out = out + float(c) * np.prod(x ** np.asarray(a), axis=-1)
  return out


def evaluate_poly_exact(poly: Mapping, x_row) -> Fraction:
  """Q(x) exactly, x_row a sequence of d rationals (Fractions, ints or floats)."""
  xs = [Fraction(v) for v in x_row]
  total = Fraction(0)
  for a, c in poly.items():
    term = Fraction(c)
    for xi, e in zip(xs, a):
      term *= xi ** e
    total += term
  return total


def abs_scale(poly: Mapping, x) -> np.ndarray:
  """sum_a |c_a| |x^a|: the size of Q's terms at x (the accuracy scale)."""
  x = np.abs(np.asarray(x, np.float64))
  out = np.zeros(x.shape[:-1])
  for a, c in poly.items():
    out = out + abs(float(c)) * np.prod(x ** np.asarray(a), axis=-1)
  return out


# ---------------------------------------------------------------------------
# Exponents and the Bombieri-scaled systems.
# ---------------------------------------------------------------------------


def exponents(d: int, s: int) -> list[tuple[int, ...]]:
  """All a in N^d with |a| = s (stars and bars), in a fixed order; C(d-1+s, s) many."""
  out = []
  for bars in itertools.combinations(range(s + d - 1), d - 1):
    prev, a = -1, []
    for b in bars:
      a.append(b - prev - 1)
      prev = b
    a.append(s + d - 2 - prev)
    out.append(tuple(a))
  return out


def n_q(d: int, q: int) -> int:
  """dim H_q(R^d) = C(d-1+q, q): the theorem's number of tokens."""
  return math.comb(d - 1 + q, q)


def multinomial(a) -> int:
  s = sum(a)
  out = math.factorial(s)
  for e in a:
    out //= math.factorial(e)
  return out


def bombieri_matrix(directions: np.ndarray, s: int) -> np.ndarray:
  """A_s / sqrt(multinom): ``[dim H_s, n]``, entry sqrt(multinom(s;a)) xi_k^a."""
  exps = np.asarray(exponents(directions.shape[1], s))                 # [H, d]
  scale = np.sqrt([multinomial(a) for a in exps])                      # [H]
  mono = np.prod(directions[None, :, :] ** exps[:, None, :], axis=-1)  # [H, n]
  return scale[:, None] * mono


# ---------------------------------------------------------------------------
# Directions.
# ---------------------------------------------------------------------------


def rational_unit_vector(v, max_denominator: int) -> tuple[Fraction, ...]:
  """An exactly rational unit vector close to ``v`` (||result||^2 == 1 exactly).

  Inverse stereographic projection from the pole -e_d: with u = v_{1..d-1}/(1+v_d)
  rounded to rationals, xi = (2u, 1 - |u|^2) / (1 + |u|^2). If v_d < 0 the last
  coordinate is flipped before and after (projection from +e_d).
  """
  v = np.asarray(v, np.float64)
  nv = float(np.linalg.norm(v))
  if not nv > 0:
    raise ValueError('cannot normalize a zero direction.')
  v = v / nv
  if v.shape[0] == 1:
    return (Fraction(1) if v[0] > 0 else Fraction(-1),)
  flip = v[-1] < 0
  if flip:
    v = v.copy()
    v[-1] = -v[-1]
  u = [Fraction(float(c) / (1.0 + float(v[-1]))).limit_denominator(max_denominator)
       for c in v[:-1]]
  u2 = sum(c * c for c in u)
  xi = [2 * c / (1 + u2) for c in u] + [(1 - u2) / (1 + u2)]
  if flip:
    xi[-1] = -xi[-1]
  assert sum(c * c for c in xi) == 1
  return tuple(xi)


def ridge_directions(*, d: int, q: int, kind: str = 'lattice', num: int | None = None,
                     seed: int = 0, max_denominator: int = FLOAT_DENOMINATOR):
  """Unit directions as exact Fractions ``[n][d]`` and their float64 array ``[n, d]``.

  kind 'lattice': a/||a|| for a in N^d, |a| = q (n = n_q; ``num`` must be None or
    n_q). kind 'random': ``num`` (default n_q) Gaussian directions, seeded.
  """
  if kind not in DIRECTION_KINDS:
    raise ValueError(f'directions={kind!r}; allowed: {DIRECTION_KINDS}.')
  nq = n_q(d, q)
  if kind == 'lattice':
    if num not in (None, nq):
      raise ValueError(f"lattice directions come in n_q = {nq}; use kind='random' for "
                       f'num={num}.')
    raw = np.asarray(exponents(d, q), np.float64)
  else:
    num = nq if num is None else num
    if num < nq:
      raise ValueError(f'need at least n_q = C(d-1+q, q) = {nq} directions, got {num}.')
    raw = np.random.default_rng(seed).normal(size=(num, d))
  exact = [rational_unit_vector(r, max_denominator) for r in raw]
  return exact, np.asarray([[float(c) for c in row] for row in exact], np.float64)


# ---------------------------------------------------------------------------
# The solve.
# ---------------------------------------------------------------------------


def homogeneous_parts(poly: Mapping, d: int, q: int) -> list[np.ndarray]:
  """[c_1, ..., c_q]: Q_s's coefficients in ``exponents(d, s)`` order (float64)."""
  parts = []
  for s in range(1, q + 1):
    index = {a: i for i, a in enumerate(exponents(d, s))}
    c = np.zeros(len(index))
    for a, v in poly.items():
      if sum(a) == s:
        c[index[a]] = float(v)
    parts.append(c)
  return parts


def ridge_coefficients(poly: Mapping, directions: np.ndarray, q: int):
  """beta [n, q] with Q(x) = Q(0) + sum_{k,s} beta[k, s-1] (xi_k . x)^s, and a report.

  Float64, degree by degree, minimum-norm solutions in the Bombieri basis (QR of
  A_s^T). The report lists, per degree s: system shape, 2-norm condition number
  (SVD of the triangular factor), relative residual ||A beta - c|| / ||c|| and
  max |beta|.

  Raises:
    ValueError: the directions are not unisolvent for some degree <= q (singular).
  """
  import scipy.linalg as sla
  directions = np.asarray(directions, np.float64)
  n, d = directions.shape
  parts = homogeneous_parts(poly, d, q)
  beta = np.zeros((n, q))
  report = []
  for s in range(1, q + 1):
    A = bombieri_matrix(directions, s)                                   # [H, n]
    scale = np.sqrt([multinomial(a) for a in exponents(d, s)])
    c = parts[s - 1] / scale                                             # Bombieri coords
    H = A.shape[0]
    if n < H:
      raise ValueError(f'{n} directions cannot represent degree {s} in d={d} '
                       f'(dim H_{s} = {H}).')
    Qm, R = sla.qr(A.T, mode='economic')                                 # A^T = Q R
    sv = np.linalg.svd(R, compute_uv=False)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf
    if not cond < 1e14:
      raise ValueError(f'ridge directions are not unisolvent for degree {s} '
                       f'(condition {cond:.3g}); choose other directions.')
    if np.any(c):
      y = sla.solve_triangular(R, c, trans='T')                          # R^T y = c
      b_s = Qm @ y                                                       # min-norm
    else:
      b_s = np.zeros(n)
    beta[:, s - 1] = b_s
    res = float(np.linalg.norm(A @ b_s - c) / max(np.linalg.norm(c), 1e-300)) if np.any(c) else 0.0
    report.append({'degree': s, 'shape': [int(H), int(n)], 'cond_2': cond,
                   'relative_residual': res, 'max_abs_beta': float(np.max(np.abs(b_s)))})
  return beta, report


def ridge_coefficients_exact(poly: Mapping, directions_exact, q: int):
  """Exact rational beta (list of n rows of q Fractions) solving (1) exactly.

  Per degree s: Gauss-Jordan elimination in Fractions on A_s (not scaled); for
  s < q a basic solution (free directions get 0). Feasible for small n only.
  """
  n, d = len(directions_exact), len(directions_exact[0])
  if n > EXACT_SOLVE_MAX_TOKENS:
    raise ValueError(f'exact ridge solve with n = {n} tokens is not feasible (Fraction '
                     f'elimination is O(n^3)); allowed n <= {EXACT_SOLVE_MAX_TOKENS}.')
  beta = [[Fraction(0)] * q for _ in range(n)]
  for s in range(1, q + 1):
    exps = exponents(d, s)
    rows = []
    for a in exps:
      mult = multinomial(a)
      row = []
      for xi in directions_exact:
        v = Fraction(mult)
        for c, e in zip(xi, a):
          v *= c ** e
        row.append(v)
      rows.append(row + [Fraction(poly.get(a, 0))])
    # Gauss-Jordan with the first non-zero pivot in each row.
    pivots = []
    for r in range(len(rows)):
      col = next((j for j in range(n) if rows[r][j] != 0), None)
      if col is None:
        if rows[r][n] != 0:
          raise ValueError(f'directions are not unisolvent for degree {s}.')
        continue
      piv = rows[r][col]
      rows[r] = [v / piv for v in rows[r]]
      for r2 in range(len(rows)):
        if r2 != r and rows[r2][col] != 0:
          f = rows[r2][col]
          rows[r2] = [a - f * b for a, b in zip(rows[r2], rows[r])]
      pivots.append((r, col))
    if len(pivots) < len(exps):
      raise ValueError(f'directions are not unisolvent for degree {s}.')
    for r, col in pivots:
      beta[col][s - 1] = rows[r][n]
  return beta
