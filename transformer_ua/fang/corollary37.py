"""Fang et al. 2022, Corollary 3.7: continuous f on [0,1]^d is a limit of C^q as q -> oo.

The corollary is "denseness of polynomials + Theorem 3.5". We make it concrete:

    p_q   = least-squares fit of f in the total-degree-q tensor Chebyshev basis
            T_a(2x - 1) = prod_j T_{a_j}(2 x_j - 1), |a| <= q, on a tensor grid of
            Chebyshev points of [0,1]^d (for d = 1 this is Chebyshev interpolation);
    Q_q   = p_q rewritten in monomials of x (exact expansion, float64 coefficients);
    C^q   = build_polynomial_transformer(Q_q, d, bound=sqrt(d)), since
            [0,1]^d is inside the ball ||x|| <= sqrt(d).

    sup |C^q - f| <= sup |p_q - f| + sup |C^q - p_q|:  the approximation error of the
    fit plus the float64 error of the monomial expansion and the construction (the
    latter grows with the monomial coefficients, ~ (3 + 2 sqrt 2)^q on [0,1]).

``sup_errors`` measures all three on a grid of [0,1]^d.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from transformer_ua.fang import ridge

GRID_FACTOR = 3  # fit grid: GRID_FACTOR * (q + 1) Chebyshev points per axis (d >= 2)


def _cheb_points(m: int) -> np.ndarray:
  """m Chebyshev points of the first kind on [0, 1]."""
  k = np.arange(m)
  return 0.5 * (1 + np.cos((2 * k + 1) * np.pi / (2 * m)))[::-1]


def _shifted_cheb_monomials(q: int) -> list[np.ndarray]:
  """Power coefficients in x of T_k(2x - 1), k = 0..q (exact small integers)."""
  P = np.polynomial
  out = []
  for k in range(q + 1):
    c = P.Chebyshev.basis(k, domain=[0, 1]).convert(kind=P.Polynomial, domain=[0, 1],
                                                    window=[0, 1]).coef
    out.append(np.round(np.pad(c, (0, q + 1 - len(c)))))
  return out


def total_degree_indices(d: int, q: int) -> list[tuple[int, ...]]:
  return [a for s in range(q + 1) for a in ridge.exponents(d, s)]


def chebyshev_fit(f, *, d: int, degree: int):
  """Least-squares fit in the total-degree Chebyshev basis on [0,1]^d.

  Args:
    f: vectorized callable [N, d] -> [N].
  Returns:
    (cheb: dict a -> coefficient of T_a(2x - 1), poly: dict a -> monomial coefficient).
  """
  if not isinstance(degree, int) or degree < 0:
    raise ValueError(f'degree must be an integer >= 0, got {degree!r}.')
  idx = total_degree_indices(d, degree)
  m = degree + 1 if d == 1 else GRID_FACTOR * (degree + 1)
  pts = _cheb_points(m)
  grid = np.asarray(list(itertools.product(pts, repeat=d)))               # [m^d, d]
  T = np.polynomial.chebyshev.chebvander(2 * grid - 1, degree)           # [N, d, q+1]
  A = np.stack([np.prod(T[:, np.arange(d), list(a)], axis=1) for a in idx], axis=1)
  y = np.asarray(f(grid), np.float64)
  coef, *_ = np.linalg.lstsq(A, y, rcond=None)
  cheb = dict(zip(idx, coef))
  mono1 = _shifted_cheb_monomials(degree)
  poly: dict = {}
  for a, c in cheb.items():
    # prod_j T_{a_j}(2 x_j - 1) = prod_j sum_e mono1[a_j][e] x_j^e
    factors = [[(e, v) for e, v in enumerate(mono1[aj]) if v != 0] for aj in a]
    for combo in itertools.product(*factors):
      key = tuple(e for e, _ in combo)
      poly[key] = poly.get(key, 0.0) + c * math.prod(v for _, v in combo)
  return cheb, {k: float(v) for k, v in poly.items() if v != 0}


def eval_cheb(cheb: dict, x: np.ndarray, degree: int) -> np.ndarray:
  """The fit in its (stable) Chebyshev form, x [N, d]."""
  d = x.shape[1]
  T = np.polynomial.chebyshev.chebvander(2 * x - 1, degree)
  return sum(c * np.prod(T[:, np.arange(d), list(a)], axis=1) for a, c in cheb.items())


def sup_errors(f, *, d: int, degree: int, grid_points: int) -> dict:
  """Fit, compile, and measure sup errors on a uniform grid of [0,1]^d."""
  from transformer_ua.fang.polynomial import build_polynomial_transformer
  cheb, poly = chebyshev_fit(f, d=d, degree=degree)
  model = build_polynomial_transformer(poly, d=d, bound=math.sqrt(d), degree=max(1, degree))
  g = np.linspace(0, 1, grid_points)
  x = np.asarray(list(itertools.product(g, repeat=d)))
  fx = np.asarray(f(x), np.float64)
  px = eval_cheb(cheb, x, degree)
  cx = model.apply(x)
  return {'d': d, 'q': degree, 'tokens': model.n, 'blocks': model.depth(),
          'free_params': model.num_free_params(),
          'max_abs_monomial_coef': max(abs(v) for v in poly.values()),
          'max_abs_beta': float(np.max(np.abs(model.beta_slots))),
          'sup_fit_minus_f': float(np.max(np.abs(px - fx))),
          'sup_transformer_minus_f': float(np.max(np.abs(cx - fx))),
          'sup_transformer_minus_fit': float(np.max(np.abs(cx - px))),
          'grid_points': int(x.shape[0])}
