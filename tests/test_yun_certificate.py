"""The whole-domain certificate of d_p(f, g) (yun.bounds.certificate) and its pieces.

Oracles: closed forms computed by hand here, the float Monte Carlo and bad-set code of
``yun.bounds.distances`` (another code path), and a literal mpmath evaluation of the realized
network (``transformer_ua.oracle``, no code shared with ``exact.ball``).
"""

import itertools
import math
import warnings
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from transformer_ua import oracle, realize
from transformer_ua.exact import ball
from transformer_ua.targets import bounds as target_bounds
from transformer_ua.targets import distances
from transformer_ua.targets import functions as targets
from transformer_ua.yun import build_approximator, search
from transformer_ua.yun.bounds import bad_set
from transformer_ua.yun.bounds import certificate
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.realization import plan


MARGIN = Fraction(1, 64)


def _realized(ties, clamp, lam_scale=1):
  net = build_approximator('token_times_mean', d=1, n=3, resolution=4, ties=ties)
  p = plan.plan_realization(net, tolerance=1e-6, margin=float(MARGIN))
  g = net.realize(lam=p.lam * lam_scale, epsilon=p.epsilon, dtype='exact', clamp=clamp)
  return net, g


@pytest.fixture(scope='module', params=['paper', 'complete'])
def clamped(request):
  net, g = _realized(request.param, True)
  return net, g, certificate.certify_lp(net, g, margin=MARGIN, workers=1)


@pytest.fixture(scope='module')
def unclamped():
  net, g = _realized('paper', False)
  return net, g, certificate.certify_lp(net, g, margin=MARGIN, workers=1)


def _window_points(rng, count, N, margin):
  """Uniform points with one random entry inside a window (within margin delta of a
  cell edge) and the rest anywhere."""
  x = rng.random((count, 3, 1))
  j = rng.integers(0, 3, count)
  k = rng.integers(0, N + 1, count)
  off = (2 * rng.random(count) - 1) * float(margin) / N
  x[np.arange(count), j, 0] = np.clip((k + off) / N, 0, 1 - 1e-12)
  return x


# -- term 1: d_p(f, f_bar) ---------------------------------------------------


def test_f_fbar_closed_form_by_hand():
  # L = 2, N = 4, nd = 3, p = 2: (2 / 8) sqrt(3 * 3 / 5) = 0.3354101966249685
  got = certificate.f_fbar_bound(Fraction(2), Grid(1, 3, 4), p=2.0)
  assert got['lipschitz_part'] == pytest.approx(0.25 * math.sqrt(9 / 5), rel=1e-14)
  assert got['lipschitz_part'] >= 0.25 * math.sqrt(9 / 5)
  # p = 1: (2 / 8) * 3 * 3 / 4
  got = certificate.f_fbar_bound(Fraction(2), Grid(1, 3, 4), p=1.0)
  assert got['bound'] == pytest.approx(0.5625, rel=1e-14)


@pytest.mark.parametrize('name,positional', [('token_times_mean', False),
                                             ('attention_map', False),
                                             ('prefix_mean', True)])
def test_f_fbar_bound_dominates_monte_carlo(name, positional):
  f = targets.get_target(name, d=1, n=3)
  lip = target_bounds.check_lipschitz(None, f, 1, 3)
  bound = certificate.f_fbar_bound(lip, Grid(1, 3, 4), p=2.0)['bound']
  est = distances.dp_distances({'f': f, 'f_bar': targets.piecewise_constant(f, 4)},
                               [('f', 'f_bar')], d=1, n=3, p=2.0, samples=20000, seed=3)
  assert est['f|f_bar'].ci_high <= bound


@pytest.mark.parametrize('name', ['token_times_mean', 'attention_map', 'prefix_mean'])
def test_builtin_lipschitz_constants_hold_on_random_pairs(name):
  d, n = 2, 3
  f = targets.get_target(name, d=d, n=n)
  lip = float(target_bounds.builtin_lipschitz(name, d, n))
  rng = np.random.default_rng(0)
  x = rng.random((4000, n, d))
  y = np.clip(x + rng.normal(scale=0.02, size=x.shape), 0, 1)
  ratio = np.max(np.abs(f(x) - f(y)), axis=(1, 2)) / np.max(np.abs(x - y), axis=(1, 2))
  assert np.max(ratio) <= lip


def test_exact_values_enclose_the_float_table():
  f = targets.get_target('attention_map', d=2, n=3)
  k = np.asarray([[[0, 1], [3, 2], [1, 1]]])
  vals = target_bounds.exact_values(f, k, 4)
  table = targets.grid_values(f, k, 4)
  for j in range(3):
    for i in range(2):
      assert abs(float(vals[0][j][i].mid()) - table[0, j, i]) < 1e-14


def test_f_fbar_term_is_the_exact_integral_for_a_polynomial_builtin(clamped):
  net, _, cert = clamped
  # the per-cube term replaced the global Lipschitz bound: it is d_2(f, f_bar) itself,
  # so it sits between a plain Monte Carlo of d_2(f, f_bar) and that bound
  assert cert.f_term_method == 'exact polynomial integral'
  lip = certificate.f_fbar_bound(Fraction(2), Grid(1, 3, 4), p=2.0)['bound']
  assert cert.terms['f_fbar'] < lip / 3
  rng = np.random.default_rng(9)
  x = rng.random((200000, 3, 1))
  e = np.sum((net.target(x) - net.target((np.floor(x * 4) + 0.5) / 4)) ** 2, axis=(1, 2))
  se = np.std(e) / math.sqrt(len(e))
  assert np.mean(e) - 4 * se <= cert.terms['f_fbar'] ** 2 <= np.mean(e) + 4 * se
  # and the closed form worked out by hand: on a cube with centre c, f_j(c + u) - f_j(c)
  # = sum_k alpha_k u_k + u_j mean(u), alpha_k = c_j / 3 + mean(c) [k = j], so with
  # E u^2 = h^2 / 3, E u^4 = h^4 / 5, odd moments 0 (h = 1/8):
  # E (f_j - f_j(c))^2 = (h^2 / 3) sum_k alpha_k^2 + (h^4 / 9) (1/5 + 2/9)
  h = Fraction(1, 8)
  total = Fraction(0)
  for k in itertools.product(range(4), repeat=3):
    c = [Fraction(2 * v + 1, 8) for v in k]
    for j in range(3):
      alpha = [c[j] / 3 + (sum(c) / 3 if i == j else 0) for i in range(3)]
      total += h * h / 3 * sum(a * a for a in alpha) + h ** 4 / 9 * Fraction(19, 45)
  want = math.sqrt(total / 4 ** 3)
  assert cert.terms['f_fbar'] == pytest.approx(want, rel=1e-12)
  assert cert.terms['f_fbar'] >= want * (1 - 1e-15)


def test_builtin_certificate_says_it_assumes_nothing(clamped):
  _, _, cert = clamped
  assert 'assuming nothing: the integral of |f - f_bar|^2 over every cube' in str(cert)
  assert cert.details['assumptions'] == [] and cert.lipschitz == 2.0


def test_lipschitz_below_the_proved_constant_is_refused_in_one_line(clamped):
  net, g, _ = clamped
  with pytest.raises(ValueError, match=r'lipschitz=0.1 is below the proved constant 2 ') as e:
    certificate.certify_lp(net, g, lipschitz=0.1, margin=MARGIN, workers=1)
  assert '\n' not in str(e.value)
  with pytest.raises(ValueError, match=r'below the proved constant 2 ') as e:
    search.approximate('token_times_mean', 0.1, d=1, n=3, lipschitz=0.1, workers=1)
  assert '\n' not in str(e.value)


def test_lipschitz_above_the_proved_constant_is_used_and_recorded(clamped):
  net, g, cert = clamped
  big = certificate.certify_lp(net, g, lipschitz=3, margin=MARGIN, workers=1)
  assert big.lipschitz == 3.0
  src = big.details['f_fbar']['lipschitz_source']
  assert src == 'given by the caller, above the proved constant 2'
  # the fallback uses it: (3 / 8) sqrt(9 / 5) at N = 4
  assert big.details['f_fbar']['parts']['lipschitz'] == pytest.approx(
      0.375 * math.sqrt(9 / 5), rel=1e-14)
  assert big.terms['f_fbar'] == cert.terms['f_fbar']    # the exact integral is smaller
  assert target_bounds.lipschitz_source(Fraction(2), net.target, 1, 3) == 'proved constant'


# -- term 2: d_p(f_bar, g_bar) -------------------------------------------------


def test_fbar_gbar_is_the_bad_set_mass_for_the_paper_and_0_without_bad_set(clamped):
  net, _, cert = clamped
  if net.ties == 'complete':
    assert cert.terms['fbar_gbar'] == 0.0
    assert cert.details['fbar_gbar']['cubes_differing'] == 0
  else:
    ref = bad_set.dp_on_bad_set(net.target, Grid(1, 3, 4), p=2.0)
    assert cert.terms['fbar_gbar'] == pytest.approx(ref, rel=1e-12)
    # the bad cubes: 4^3 - 4 * 3 * 2 = 40 of the 64 ordered cubes, 16 multisets
    assert cert.details['fbar_gbar']['cubes_differing'] == 16


# -- term 3: d_p(g_bar, g) -----------------------------------------------------


def test_gbar_g_formula_by_hand():
  # margin 1/4, nd = 3: interiors (1/2)^3 = 1/8, windows 7/8
  got = certificate.gbar_g_bound(d=1, n=3, p=2.0, margin=Fraction(1, 4), interior_sup=0.5,
                                 window_sup=np.full((3, 1), 2.0))
  want = math.sqrt(3 * 0.25 / 8 + 3 * 4.0 * 7 / 8)
  assert got['bound'] == pytest.approx(want, rel=1e-14) and got['bound'] >= want
  assert got['interior_fraction'] == 0.125 and got['window_measure'] == 0.875


def test_clamped_window_sup_within_the_range_of_f_bar(clamped):
  net, _, cert = clamped
  lo, hi = net.output_range()
  # (an arb ball's radius carries 30 bits: the enclosure of [lo, hi] is a hair wider)
  assert cert.window_sup <= float(hi[0] - lo[0]) * (1 + 1e-8)
  assert cert.clamp


def test_certificate_dominates_sampled_errors_in_interiors_and_windows(clamped, unclamped):
  rng = np.random.default_rng(7)
  for net, g, cert in (clamped, unclamped):
    m = float(cert.margin)
    inner = ((rng.integers(0, 4, (12, 3, 1)) + m + (1 - 2 * m) * rng.random((12, 3, 1)))
             / 4)
    # |g - g_bar| at a sample is at least |mid - g_bar| - rad (mid is rounded to float64)
    mid, rad = g.apply_certified(inner)
    assert np.max(np.abs(mid - net.apply(inner)) - rad) <= cert.interior_sup
    win = _window_points(rng, 12, 4, cert.margin)
    mid, rad = g.apply_certified(win)
    # g_bar of a window point: the value of the cube it lies in
    sampled = np.max(np.abs(mid - net.apply(win)) - rad)
    assert sampled <= cert.window_sup
    if not cert.clamp:      # the windows really are wild without the clamp
      assert sampled > 1e3


def test_window_points_agree_with_mpmath(unclamped):
  net, g, cert = unclamped
  x = _window_points(np.random.default_rng(11), 3, 4, cert.margin)
  mid, rad = g.apply_certified(x)
  for b in range(len(x)):
    ref = oracle.MpNetwork(g.segments, g.exact_params(), g.positional, 2 * cert.bits)(x[b])
    for j in range(3):
      with mpmath.workprec(2 * cert.bits):
        assert abs(ref[j][0] - mpmath.mpf(mid[b, j, 0])) <= mpmath.mpf(rad[b, j, 0])


def test_total_dominates_monte_carlo_dp_of_f_and_g(clamped):
  net, g, cert = clamped
  rng = np.random.default_rng(5)
  x = rng.random((300, 3, 1))
  mid, rad = g.apply_certified(x)
  err = np.maximum(np.abs(net.target(x) - mid) - rad, 0)
  e = np.sum(err ** 2, axis=(1, 2))
  upper = math.sqrt(np.mean(e) + 3 * np.std(e) / math.sqrt(len(e)))
  assert upper <= cert.total


def test_the_clamp_tames_the_windows(clamped, unclamped):
  _, _, with_clamp = clamped
  _, _, without = unclamped
  assert without.window_sup > 1e6 * with_clamp.window_sup
  assert with_clamp.terms['gbar_g'] < 1 < 1e6 < without.terms['gbar_g']


def test_lam_far_below_the_plan_is_not_certified():
  net, g = _realized('paper', True, lam_scale=Fraction(1, 2 ** 10))
  cert = certificate.certify_lp(net, g, margin=MARGIN, workers=1)
  ok_net, ok_g = _realized('paper', True)
  ok = certificate.certify_lp(ok_net, ok_g, margin=MARGIN, workers=1)
  assert cert.interior_sup > 1e-3 > 1e6 * ok.interior_sup
  assert cert.total > ok.total


def test_bits_far_below_the_plan_are_not_certified(clamped):
  net, g, cert = clamped
  low = certificate.certify_lp(net, g, margin=MARGIN, bits=12, workers=1)
  assert low.interior_sup > 1e3 * cert.interior_sup


# -- pieces of the realization ----------------------------------------------------


def test_output_clamp_is_clip_on_points():
  lo, hi = [Fraction(-1, 2), Fraction(0)], [Fraction(3, 4), Fraction(1, 8)]
  segs, params = realize.output_clamp(lo, hi, exact=True)
  assert realize.is_output_clamp(segs[0], params['segment_0'], lo, hi)
  assert not realize.is_output_clamp(segs[0], params['segment_0'], lo, [Fraction(1), hi[1]])
  bn = ball.BallNetwork(segs, params)
  rng = np.random.default_rng(2)
  for z in rng.normal(size=(20, 3, 2)):
    out = ball.mid_rad(bn.forward(ball.points(z)))[0]
    want = np.clip(z, [float(v) for v in lo], [float(v) for v in hi])
    assert np.array_equal(out, want)


def test_box_of_a_clamp_is_the_clamped_box_not_twice_as_wide():
  segs, params = realize.output_clamp([Fraction(-1)], [Fraction(1)], exact=True)
  bn = ball.BallNetwork(segs, params)
  out = bn.forward([[ball.interval(-3, 3)]])[0][0]
  # (a hair wider than [-1, 1]: an arb radius carries 30 bits; unit by unit: [-7, 7])
  assert -1 - 1e-8 <= float(out.lower()) <= -1 and 1 <= float(out.upper()) <= 1 + 1e-8


def test_domain_enclosure_contains_sampled_outputs(unclamped):
  net, g, cert = unclamped
  lo, hi = (np.asarray(a) for a in cert.details['window_enclosure'])
  x = np.random.default_rng(4).random((20, 3, 1))
  mid, _ = g.apply_certified(x)
  assert np.all(mid >= lo) and np.all(mid <= hi)


def test_certify_lp_refuses_a_float_g_and_a_foreign_g(clamped):
  net, g, _ = clamped
  other = build_approximator('token_times_mean', d=1, n=3, resolution=4)
  with pytest.raises(ValueError, match='not a realization of this net'):
    certificate.certify_lp(other, g)
  with warnings.catch_warnings():   # a float g may warn about its precision; not the point
    warnings.simplefilter('ignore', plan.FloatRealizationWarning)
    g_float = net.realize(lam=2 ** 12, epsilon=2 ** -4)
  with pytest.raises(ValueError, match="dtype='exact'"):
    certificate.certify_lp(net, g_float)


def test_margin_below_what_arb_boxes_hold_is_refused(clamped):
  net, g, _ = clamped
  with pytest.raises(ValueError, match=r'below .* \(2\^-28\)'):
    certificate.certify_lp(net, g, margin=Fraction(1, 2 ** 30))


def test_default_margin_keeps_interiors_off_the_ramps(clamped):
  _, g, _ = clamped
  m = certificate.default_margin(g)
  assert m * g.source.resolution ** -1 >= 2 * g.epsilon
  assert m / 2 * g.source.resolution ** -1 < 2 * g.epsilon or m == certificate.MAX_MARGIN
  assert plan.DEFAULT_MARGIN == 0.25
