"""Fang et al. Corollary 3.7: Chebyshev/least-squares fits compiled into C^q."""

import numpy as np
import pytest

from transformer_ua import fang
from transformer_ua.fang import corollary37


def test_fit_monomials_equal_chebyshev_form():
  f = lambda x: np.exp(x[:, 0]) * np.sin(3 * x[:, 1])
  cheb, poly = corollary37.chebyshev_fit(f, d=2, degree=5)
  x = np.random.default_rng(0).uniform(0, 1, size=(200, 2))
  np.testing.assert_allclose(fang.evaluate_poly(poly, x), corollary37.eval_cheb(cheb, x, 5),
                             atol=1e-10)
  assert max(sum(a) for a in poly) <= 5


def test_polynomial_targets_are_reproduced():
  # A degree-3 polynomial is its own best fit: the fit error is rounding only.
  f = lambda x: 1 - 2 * x[:, 0] + x[:, 0] ** 2 * x[:, 1] - 0.5 * x[:, 1] ** 3
  r = corollary37.sup_errors(f, d=2, degree=3, grid_points=21)
  assert r['sup_fit_minus_f'] < 1e-12 and r['sup_transformer_minus_f'] < 1e-12


def test_sup_error_decreases_with_q_for_a_nonpolynomial_function():
  f = lambda x: np.abs(x[:, 0] - 0.5)
  errs = [corollary37.sup_errors(f, d=1, degree=q, grid_points=501)['sup_transformer_minus_f']
          for q in (2, 4, 8)]
  assert errs[0] > errs[1] > errs[2]
  # |x - 1/2| is Lipschitz: Jackson gives O(1/q); Chebyshev interpolation is within a
  # log factor of best: 0.2 < q * err < 0.4 is what Chebyshev interpolation gives.
  assert all(0.1 < q * e < 0.5 for q, e in zip((2, 4, 8), errs))
  g = lambda x: np.exp(x[:, 0]) * np.sin(4 * x[:, 1])
  smooth = [corollary37.sup_errors(g, d=2, degree=q, grid_points=41)['sup_transformer_minus_f']
            for q in (2, 4, 8)]
  assert smooth[0] > 10 * smooth[1] > 100 * smooth[2]


def test_bad_degree():
  with pytest.raises(ValueError, match='degree must be an integer >= 0'):
    corollary37.chebyshev_fit(lambda x: x[:, 0], d=1, degree=-1)
