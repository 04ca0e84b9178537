"""d_p(f, f_bar) cube by cube (yun.bounds.f_term) and the checks of what a certificate assumes.

Oracles: integrals worked out by hand here, dense plain-NumPy sampling of f on each cube,
and a plain-NumPy Monte Carlo of d_p(f, f_bar) (f_bar = f at each sample's cube centre).
"""

from fractions import Fraction

import numpy as np
import pytest

from transformer_ua.targets import bounds as target_bounds
from transformer_ua.targets import callable_checks
from transformer_ua.targets import functions as targets
from transformer_ua.yun import build_approximator, search
from transformer_ua.yun import grid
from transformer_ua.yun.bounds import certificate, f_term
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.realization import plan

MARGIN = Fraction(1, 64)


def _sampled_cube_integral(fn, k_row, values_row, N, p, samples=40000, seed=0):
  """delta^m E_cube sum_ji |f - A|^p by plain uniform sampling of one cube."""
  n, d = k_row.shape
  rng = np.random.default_rng(seed)
  x = (k_row[None] + rng.random((samples, n, d))) / N
  e = np.sum(np.abs(fn(x) - values_row[None]) ** p, axis=(1, 2))
  return float(e.mean()) / N ** (n * d), float(e.std()) / np.sqrt(samples) / N ** (n * d)


def _mc_f_fbar(fn, N, p, n=3, d=1, samples=400000, seed=1):
  """Plain-NumPy d_p(f, f_bar) with f_bar(X) = f(centre of X's cube): (value, se of
  the p-th power)."""
  rng = np.random.default_rng(seed)
  x = rng.random((samples, n, d))
  c = (np.floor(x * N) + 0.5) / N
  e = np.sum(np.abs(fn(x) - fn(c)) ** p, axis=(1, 2))
  return float(e.mean()) ** (1 / p), float(e.std()) / np.sqrt(samples)


# -- exact integrals against closed forms worked out by hand ---------------------------


def test_exact_integral_of_x_on_one_cell_by_hand():
  # f(x) = x (n = d = 1), N = 4, cube [0, 1/4), A = 1/8: int_0^{1/4} (x - 1/8)^2 dx
  # = 2 (1/8)^3 / 3 = 1/768
  got = f_term.exact_square_integral([[{(1,): Fraction(1)}]], np.zeros((1, 1, 1)),
                                     np.asarray([[[0.125]]]), np.ones(1, np.int64), 4)
  assert got == Fraction(1, 768)
  # A = 0 instead: int_0^{1/4} x^2 dx = 1/192
  got = f_term.exact_square_integral([[{(1,): Fraction(1)}]], np.zeros((1, 1, 1)),
                                     np.zeros((1, 1, 1)), np.ones(1, np.int64), 4)
  assert got == Fraction(1, 192)


def test_exact_integral_of_token_times_mean_on_one_cube_by_hand():
  # n = 2, d = 1, N = 2, cube [0, 1/2)^2, f_0 = x (x + y) / 2, A = f(1/4, 1/4) = 1/16.
  # (f_0 - A)^2 = (x^4 + 2 x^3 y + x^2 y^2) / 4 - (x^2 + x y) / 16 + 1/256 and
  # E x^a y^b = (1/2)^(a+b) / ((a+1)(b+1)) on the cube:
  ex4, ex3y, ex2y2 = Fraction(1, 80), Fraction(1, 128), Fraction(1, 144)
  ex2, exy = Fraction(1, 12), Fraction(1, 16)
  mean = (ex4 + 2 * ex3y + ex2y2) / 4 - (ex2 + exy) / 16 + Fraction(1, 256)
  want = 2 * Fraction(1, 4) * mean          # two entries (symmetric), area 1/4
  f = targets.get_target('token_times_mean', d=1, n=2)
  polys = target_bounds.polynomial(f, 1, 2)
  got = f_term.exact_square_integral(polys, np.zeros((1, 2, 1), np.int64),
                                     np.full((1, 2, 1), 1 / 16), np.ones(1, np.int64), 2)
  assert got == want


def test_reversal_term_is_delta_over_2_by_hand():
  # f - f(C) = U permuted: E sum_j U_j^2 = 3 delta^2 / 12, so d_2 = delta / 2
  for N in (4, 10):
    got = f_term.bound('reversal', d=1, n=3, resolution=N, p=2.0, positional=True)
    assert got.method == 'exact polynomial integral'
    assert got.bound == pytest.approx(1 / (2 * N), rel=1e-12) and got.bound >= 1 / (2 * N)


# -- per-cube bounds dominate dense sampled integrals --------------------------------


@pytest.mark.parametrize('name,p', [('token_times_mean', 2.0), ('token_times_mean', 1.0),
                                    ('attention_map', 2.0), ('attention_map', 1.0),
                                    ('attention_map', 3.0), ('prefix_mean', 1.5)])
def test_per_cube_bounds_dominate_sampled_integrals(name, p):
  d, n, N = (2, 2, 3) if name == 'attention_map' and p == 3.0 else (1, 3, 5)
  f = targets.get_target(name, d=d, n=n)
  rng = np.random.default_rng(4)
  fn = target_bounds.arb_function(f, d, n)
  for k_row in rng.integers(0, N, (6, n, d)):
    k = k_row[None]
    a = targets.grid_values(f, k, N)
    residues = f_term._residues(f, k, a, N)    # pylint: disable=protected-access
    grad = float(f_term.gradient_integral(fn, k, residues, np.ones(1, np.int64), N, p)
                 .upper())
    sampled, se = _sampled_cube_integral(f, k_row, a[0], N, p)
    assert grad >= sampled + 4 * se
    if p == 2.0 and name != 'attention_map':
      polys = target_bounds.polynomial(f, d, n)
      exact = float(f_term.exact_square_integral(polys, k, a, np.ones(1, np.int64), N))
      assert abs(exact - sampled) <= 5 * se     # the exact integral, not just a bound
      assert exact <= grad


# -- the whole term against a plain Monte Carlo ----------------------------------------


@pytest.mark.parametrize('name,positional,N,ratio', [
    ('token_times_mean', False, 10, 1.25), ('prefix_mean', True, 10, 1.25),
    ('attention_map', False, 4, 3.0), ('attention_map', False, 10, 3.0)])
def test_term_is_sound_and_tight_against_monte_carlo(name, positional, N, ratio):
  got = f_term.bound(name, d=1, n=3, resolution=N, p=2.0, positional=positional)
  fn = targets.BUILTIN_TARGETS[name].fn
  mc, se = _mc_f_fbar(fn, N, 2.0)
  assert got.bound ** 2 >= mc ** 2 - 4 * se       # sound
  assert got.bound <= ratio * mc                  # tight
  assert got.parts['lipschitz'] > got.bound        # tighter than the fallback
  assert got.assumes.startswith('nothing')


def test_callable_term_takes_the_lipschitz_fallback_and_says_so():
  got = f_term.bound(lambda x: 2 * x, d=1, n=2, resolution=4, p=2.0, lipschitz=2)
  # L (delta / 2) (nd nd / (nd + p))^(1/2) = 2 (1/8) sqrt(4 / 4) = 1/4
  assert got.method == 'lipschitz' and got.bound == pytest.approx(0.25, rel=1e-14)
  assert got.assumes == 'f is 2-Lipschitz in the max norm (given by the caller)'


def test_local_modulus_gives_a_sound_per_cube_term():
  fn = lambda x: 0.5 + 0.5 * np.sin(20 * x)                         # noqa: E731
  # |f(X)_j - f(C)_j| <= 10 |x_j - c_j| <= 10 delta / 2 on each cube
  got = f_term.bound(fn, d=1, n=2, resolution=8, p=2.0,
                     modulus=lambda c, delta: np.full(c.shape, 5 * delta))
  # (sum over entries of (5 delta)^2)^(1/2) = sqrt(2) 5 / 8
  assert got.method == 'local modulus'
  assert got.bound == pytest.approx(np.sqrt(2) * 5 / 8, rel=1e-12)
  mc, se = _mc_f_fbar(fn, 8, 2.0, n=2)
  assert got.bound ** 2 >= mc ** 2 - 4 * se
  assert 'modulus' in got.assumes and 'given by the caller' in got.assumes


# -- checks on the grid ------------------------------------------------------------------


def test_lipschitz_on_grid_is_a_lower_bound_and_refutes_in_one_line():
  N, n, d = 8, 2, 1
  fn = lambda x: 0.5 + 0.5 * np.sin(20 * x)                         # noqa: E731
  k = grid.decode_grid(np.arange(N ** 2), Grid(d, n, N))
  fv = fn((k + 0.5) / N)
  lower = callable_checks.check_lipschitz_on_grid(None, fv, Grid(d, n, N))
  # by hand: the largest |sin(20 c') - sin(20 c)| / 2 * 8 over neighbouring centres
  c = (np.arange(N) + 0.5) / N
  want = np.max(np.abs(np.diff(0.5 + 0.5 * np.sin(20 * c)))) * N
  assert float(lower) == pytest.approx(want, rel=1e-12) and float(lower) <= 10
  with pytest.raises(ValueError, match=r'lipschitz=0.01 is refuted: .* centres \[\(') as e:
    callable_checks.check_lipschitz_on_grid(0.01, fv, Grid(d, n, N))
  assert '\n' not in str(e.value)


def test_equivariance_failures_found_exactly():
  N, n, d = 4, 3, 1
  k = grid.decode_grid(np.arange(N ** 3), Grid(d, n, N))
  x = (k + 0.5) / N
  sym = 2 * x                                # f(X) = 2X: equivariant exactly
  assert callable_checks.equivariance_failures(sym, Grid(d, n, N))['cubes'] == 0
  skew = 2 * x
  skew[:, 0, 0] = x[:, 0, 0] + x[:, 1, 0]    # f_0 = x_0 + x_1, f_1 = 2 x_1, f_2 = 2 x_2
  got = callable_checks.equivariance_failures(skew, Grid(d, n, N))
  # by hand: swapping tokens 0, 1 keeps f_bar equivariant iff x_0 = x_1, swapping 1, 2
  # iff x_1 = x_2 (row 0: x_0 + x_2 against x_0 + x_1): every cube fails but the N
  # cubes with three equal tokens
  assert got['cubes'] == N ** 3 - N and got['example'].startswith('[(')


# -- certify_lp with callables: 48.2, 48.3, 48.4 ------------------------------------------


def _sin20(x):
  return 0.5 + 0.5 * np.sin(20 * np.asarray(x, np.float64))


def _bumped(x):
  """token_times_mean plus a bump on token 0 alone near x_0 = 0.63: 102-Lipschitz, and
  not permutation equivariant, yet equivariant on the probe points of
  ``targets.check_equivariant`` (the bump's window holds none of them)."""
  x = np.asarray(x, np.float64)
  out = x * x.mean(axis=-2, keepdims=True)
  out[:, 0, 0] += 100 * np.maximum(0, 0.1 - np.abs(x[:, 0, 0] - 0.63))
  return out


def _realized(f, N, n=3, ties='paper'):
  net = build_approximator(f, d=1, n=n, resolution=N, ties=ties)
  pl = plan.plan_realization(net, tolerance=1e-6, margin=float(MARGIN))
  return net, net.realize(lam=pl.lam, epsilon=pl.epsilon, dtype='exact', clamp=True)


@pytest.fixture(scope='module')
def sin20():
  return _realized(_sin20, 4, n=2, ties='complete')


def test_a_refuted_lipschitz_is_refused_naming_two_centres(sin20):
  net, g = sin20
  with pytest.raises(ValueError, match=r'lipschitz=0.01 is refuted: .* between the '
                                       r'neighbouring cube centres \[.*\] and \[.*\]') as e:
    certificate.certify_lp(net, g, lipschitz=0.01, margin=MARGIN, workers=1)
  assert '\n' not in str(e.value)


def test_a_refuted_lipschitz_is_refused_by_approximate():
  with pytest.raises(ValueError, match='lipschitz=0.01 is refuted') as e:
    search.approximate(_sin20, 0.3, d=1, n=2, lipschitz=0.01, workers=1)
  assert '\n' not in str(e.value)


def test_callable_certificate_states_its_assumption(sin20):
  net, g = sin20
  cert = certificate.certify_lp(net, g, lipschitz=10, margin=MARGIN, workers=1)
  line = 'assuming f is 10-Lipschitz in the max norm (given by the caller)'
  assert line in str(cert) and line in cert.describe()
  assert cert.details['assumptions'] == [cert.assumes] and cert.f_term_method == 'lipschitz'
  assert 'f_bar equivariant on every cube (checked)' in str(cert)
  assert cert.details['callable_checks']['equivariance']['cubes'] == 0


def test_callable_local_modulus_certificate_and_refusal(sin20):
  net, g = sin20
  cert = certificate.certify_lp(net, g, modulus=lambda c, delta: np.full(c.shape, 5 * delta),
                                margin=MARGIN, workers=1)
  assert cert.f_term_method == 'local modulus' and cert.lipschitz is None
  assert 'modulus(C, delta) on every cube (given by the caller)' in str(cert)
  with pytest.raises(ValueError, match=r'modulus is refuted: .* centres \[') as e:
    certificate.certify_lp(net, g, modulus=lambda c, delta: np.zeros(c.shape),
                           margin=MARGIN, workers=1)
  assert '\n' not in str(e.value)
  with pytest.raises(ValueError, match='returned shape') as e:
    certificate.certify_lp(net, g, modulus=lambda c, delta: 0.1, margin=MARGIN)
  assert '\n' not in str(e.value)


def test_modulus_for_a_builtin_is_refused():
  net = build_approximator('token_times_mean', d=1, n=2, resolution=2)
  pl = plan.plan_realization(net, tolerance=1e-3, margin=float(MARGIN))
  g = net.realize(lam=pl.lam, epsilon=pl.epsilon, dtype='exact', clamp=True)
  with pytest.raises(ValueError, match='modulus= is for callable targets') as e:
    certificate.certify_lp(net, g, modulus=lambda c, delta: c, margin=MARGIN)
  assert '\n' not in str(e.value)


def test_non_equivariant_callable_is_counted_and_certified_soundly():
  net, g = _realized(_bumped, 4)          # the probe does not see the bump: it builds
  cert = certificate.certify_lp(net, g, lipschitz=102, margin=MARGIN, workers=1)
  eq = cert.details['callable_checks']['equivariance']
  assert eq['cubes'] > 0 and eq['max_difference'] > 1
  assert f'not equivariant on {eq["cubes"]} cubes' in str(cert)
  # the term counts it: plain sampling of f_bar (f at each sample's cube centre) against
  # g_bar (the network's exact bump selection)
  rng = np.random.default_rng(0)
  x = rng.random((10000, 3, 1))
  e = np.sum((_bumped((np.floor(x * 4) + 0.5) / 4) - net.apply(x)) ** 2, axis=(1, 2))
  assert cert.terms['fbar_gbar'] ** 2 >= e.mean() - 4 * e.std() / np.sqrt(len(e))
  # and the total dominates d_2(f, g)
  x = x[:600]
  e = np.sum((_bumped(x) - g.apply(x)) ** 2, axis=(1, 2))
  assert cert.total ** 2 >= e.mean() + 3 * e.std() / np.sqrt(len(e))


@pytest.mark.parametrize('kwargs,match', [
    ({'resolution': 1}, r'resolution=1; it must be an integer >= 2'),
    ({'resolution': 2.5}, r'resolution=2.5; it must be an integer >= 2'),
    ({'d': 0}, r'd=0; it must be an integer >= 1'),
    ({'p': 0.5}, 'p must be a finite number >= 1'),
    ({'lipschitz': 1}, 'lipschitz=1 is below the proved constant 2 '),
    ({'target': lambda x: x}, 'no known modulus of continuity'),
    ({'target': lambda x: x, 'modulus': lambda c, delta: -c}, 'negative or non-finite'),
])
def test_bound_bad_input_one_line(kwargs, match):
  args = {'target': 'token_times_mean', 'd': 1, 'n': 3, 'resolution': 4, **kwargs}
  with pytest.raises(ValueError, match=match) as e:
    f_term.bound(args.pop('target'), **args)
  assert '\n' not in str(e.value)
