"""The error decomposition of Theorems 2 and 3 (yun.bounds.decomposition): Monte Carlo d_p of
every term against the exact terms."""

import pytest

from transformer_ua import yun


@pytest.fixture(scope='module')
def thm2():
  return yun.build_approximator('token_times_mean', d=1, n=3, resolution=3)


def test_error_decomposition_matches_exact_terms(thm2):
  dec = yun.error_decomposition(thm2, p=2, samples=6000, seed=1)
  est = dec.estimates['f_bar', 'g_bar']
  exact = dec.exact.dp_f_bar_g_bar
  half = (est.ci_high - est.ci_low) / 2
  assert abs(est.value - exact) < 4 * half
  assert dec.exact.bad_set_measure == pytest.approx(1 - 3 * 2 * 1 / 27)
  # Triangle inequality on the shared samples (exact for the empirical d_p).
  e = dec.estimates
  assert e['f', 'g_bar'].value <= e['f', 'f_bar'].value + e['f_bar', 'g_bar'].value + 1e-12
