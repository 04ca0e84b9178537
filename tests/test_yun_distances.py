"""d_p estimates with confidence intervals, the bad-set measure, exact bad-set d_p."""

import fractions
import itertools

import numpy as np
import pytest

from transformer_ua.targets import distances
from transformer_ua.targets import functions as targets
from transformer_ua.yun.bounds import bad_set
from transformer_ua.yun.grid import Grid


def test_dp_of_identical_functions_is_zero():
  est = distances.dp_distances({'a': lambda x: x, 'b': lambda x: x.copy()}, [('a', 'b')],
                               d=2, n=3, p=2, samples=1000)['a|b']
  assert est.value == est.ci_low == est.ci_high == 0.0


@pytest.mark.parametrize('p, exact', [(1, 3.0), (2, np.sqrt(2.0)), (3.5, (6 / 4.5)**(1 / 3.5))])
def test_dp_analytic_value_inside_interval(p, exact):
  # f1 = X, f2 = 0 on [0,1]^{2x3}: integral of sum |x|^p = 6 / (p + 1).
  est = distances.dp_distances({'x': lambda x: x, 'zero': np.zeros_like}, [('x', 'zero')],
                               d=2, n=3, p=p, samples=40000, seed=3)['x|zero']
  assert est.ci_low <= exact <= est.ci_high
  assert est.ci_high - est.ci_low < 0.05 * exact


def test_lemma4_error_shrinks_like_delta():
  f = targets.get_target('token_times_mean', d=1, n=2)
  errs = []
  for resolution in (4, 8, 16):
    f_bar = targets.piecewise_constant(f, resolution)
    errs.append(distances.dp_distances({'f': f, 'fb': f_bar}, [('f', 'fb')], d=1, n=2, p=2,
                                       samples=20000)['f|fb'].value)
  # Lipschitz target: d_p(f, f_bar) = Theta(delta); halving delta halves the error.
  for a, b in zip(errs, errs[1:]):
    assert 1.7 < a / b < 2.3, errs


@pytest.mark.parametrize('d, n, resolution', [(1, 2, 3), (1, 3, 4), (2, 2, 2), (2, 3, 2)])
def test_bad_set_measure_matches_enumeration(d, n, resolution):
  cells = list(itertools.product(range(resolution), repeat=d * n))
  bad = sum(1 for c in cells
            if len({tuple(c[j * d:(j + 1) * d]) for j in range(n)}) < n)
  assert bad_set.bad_set_measure(Grid(d, n, resolution)) == fractions.Fraction(bad, len(cells))


def test_dp_on_bad_set_matches_loop():
  f = targets.get_target('token_times_mean', d=1, n=2)
  total = 0.0
  for a in range(3):  # bad cells of d=1, n=2, N=3 are K = (a, a)
    c = np.array([[[(a + .5) / 3], [(a + .5) / 3]]])
    total += np.sum(np.abs(f(c))**2)
  got = bad_set.dp_on_bad_set(f, Grid(1, 2, 3), p=2)
  assert got == pytest.approx((total / 9)**0.5, rel=1e-12)


@pytest.mark.parametrize('p', [0.5, 0, -1, float('inf'), float('nan'), True, '2'])
def test_bad_p_is_refused(p):
  with pytest.raises(ValueError, match='p must be a finite number >= 1'):
    distances.check_p(p)
