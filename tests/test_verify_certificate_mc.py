"""The independent stratified Monte Carlo of the certificate (verify.certificate_mc).

Oracles: measures and estimator values worked by hand, closed forms of tiny networks
(softmax of two scores, a ReLU), and the arb enclosures of ``exact.ball`` (another code
path) at fixed points.
"""

import math
import types
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from transformer_ua import executor, layers, oracle
from transformer_ua.verify import certificate_mc as cmc
from transformer_ua.yun import build_approximator
from transformer_ua.yun.bounds import certificate
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.single_attention import one_layer_wide
from transformer_ua.yun.realization import plan
from transformer_ua.yun.variants.one_layer_wide import OneLayerWide


@pytest.mark.parametrize('margin,d,n,interior', [
    (Fraction(1, 8), 1, 3, Fraction(27, 64)),                # (3/4)^3
    (Fraction(1, 4), 2, 1, Fraction(1, 4)),                  # (1/2)^2
    (Fraction(1, 64), 2, 2, Fraction(31 ** 4, 32 ** 4)),     # (31/32)^4
])
def test_weights_are_the_exact_measures(margin, d, n, interior):
  w_in, w_win = cmc.weights(margin, d, n)
  assert (w_in, w_win) == (interior, 1 - interior)
  assert isinstance(w_in, Fraction) and isinstance(w_win, Fraction)


def test_stratified_estimator_by_hand():
  w_in, w_win = Fraction(27, 64), Fraction(37, 64)
  # h = 1 on the interiors, 0 in the windows: int h = F exactly, no spread
  got = cmc._stratified(np.ones(5), np.zeros(7), w_in, w_win, None)  # pylint: disable=protected-access
  assert got['estimate'] == got['ci_low'] == got['ci_high'] == 27 / 64
  assert (got['interior'], got['window']) == (27 / 64, 0.0)
  # h in {0, 2} on the windows (mean 1, sample variance 4/3 over 4 points), p = 2
  got = cmc._stratified(np.ones(3), np.asarray([0., 2., 0., 2.]), w_in, w_win, 2.0)  # pylint: disable=protected-access
  se = (37 / 64) * math.sqrt((4 / 3) / 4)
  assert got['estimate'] == pytest.approx(math.sqrt(1.0), rel=1e-15)
  assert got['ci_high'] == pytest.approx(math.sqrt(1 + 1.959963984540054 * se), rel=1e-15)
  assert got['ci_low'] == pytest.approx(math.sqrt(1 - 1.959963984540054 * se), rel=1e-15)


def test_compare_allows_float64_noise_and_nothing_more():
  """Bounds of exactly 0 against sampled float noise are met, against more are not.
  Slack by hand: n d = 3, p = 2, V = 1: s = sqrt(3) 2^-50 ~ 1.54e-15 on a d_p, and on
  a p-th power (0 + s)^2 ~ 2.37e-30."""
  cert = types.SimpleNamespace(
      terms={'f_fbar': 0.5, 'fbar_gbar': 0.0, 'gbar_g': 0.25}, total=0.75,
      details={'gbar_g': {'interior_part': 0.0, 'window_part': 0.01}})
  slack = math.sqrt(3) * 2.0 ** -50

  def rows(low, low_power):
    term = lambda v: {'estimate': v, 'ci_low': v, 'ci_high': v}  # noqa: E731
    mc = {'p': 2.0, 'slack': slack, 'terms': {
        name: term(low_power if name.endswith(('_interior', '_window')) else low)
        for name in ('f_fbar', 'fbar_gbar', 'gbar_g_interior', 'gbar_g_window', 'gbar_g',
                     'total')}}
    return {r['term']: r for r in cmc.compare(mc, cert)}
  got = rows(1e-15, 2e-30)
  assert all(r['below'] and r['slack'] == slack for r in got.values())
  got = rows(2e-15, 3e-30)
  assert not got['fbar_gbar']['below'] and not got['gbar_g_interior']['below']
  assert got['f_fbar']['below'] and got['gbar_g_window']['below'] and got['total']['below']
  got = rows(0.5 + 1e-6, 0.0)
  assert not got['f_fbar']['below'] and got['total']['below']


def _offsets(x, N):
  return x * N - np.floor(x * N)


def test_samplers_are_uniform_on_their_regions():
  rng = np.random.default_rng(0)
  N, m, d, n, count = 4, Fraction(1, 8), 1, 3, 20000
  x = cmc.sample_interiors(rng, count, grid=Grid(d, n, N), margin=m)
  off = _offsets(x, N)
  assert np.all((off >= 1 / 8 - 1e-12) & (off <= 7 / 8 + 1e-12)) and np.all(x < 1)
  x = cmc.sample_windows(rng, count, grid=Grid(d, n, N), margin=m)
  strip = (_offsets(x, N) < 1 / 8) | (_offsets(x, N) >= 7 / 8)
  assert np.all(strip.any(axis=(1, 2))) and np.all((x >= 0) & (x < 1))
  # uniform on W: P(entry e in a strip | W) = 2m / (1 - F) = (1/4) / (37/64) = 16/37
  frac = strip.reshape(count, -1).mean(axis=0)
  se = math.sqrt((16 / 37) * (21 / 37) / count)
  assert np.all(np.abs(frac - 16 / 37) < 5 * se), frac
  # and the cells are uniform too
  cells = np.floor(x * N).reshape(-1)
  assert np.all(np.abs(np.bincount(cells.astype(int), minlength=N) / cells.size - 1 / N) < 0.01)


def _tiny(positional):
  """One block, d = 1, n = 2: attention q = k = v = z (one head, W_O = 1), then
  z + ReLU(z - 1/2) + 1."""
  one = lambda *s: np.full(s, Fraction(1), object)  # noqa: E731
  params = {'segment_0': {
      'attention': {'W_Q': one(1, 1, 1, 1), 'b_Q': np.full((1, 1, 1), Fraction(0), object),
                    'W_K': one(1, 1, 1, 1), 'W_V': one(1, 1, 1, 1), 'W_O': one(1, 1, 1, 1)},
      'feedforward': {'W_1': one(1, 1, 1), 'b_1': np.full((1, 1), Fraction(-1, 2), object),
                      'W_2': one(1, 1, 1), 'b_2': one(1, 1)}}}
  if positional:
    params['E'] = np.asarray([[Fraction(1, 2)], [Fraction(0)]], object)
  seg = layers.Segment(kind='block', depth=1, num_heads=1, head_size=1,
                       normalizer='softmax', lam=1.0, width=1, activation='relu')
  return [seg], params


def test_oracle_equals_closed_forms():
  segments, params = _tiny(False)
  net = oracle.MpNetwork(segments, params, False, 200)
  with mpmath.workprec(200):
    e = mpmath.e
    # X = (0, 1): scores of token 0 are (0, 0) -> mixed 1/2; token 1: (0, 1) -> e/(1+e)
    z0, z1 = mpmath.mpf(1) / 2, 1 + e / (1 + e)
    want = [z0 + max(z0 - mpmath.mpf(1) / 2, 0) + 1, z1 + max(z1 - mpmath.mpf(1) / 2, 0) + 1]
    got = net(np.asarray([[0.0], [1.0]]))
    assert abs(got[0][0] - want[0]) < mpmath.mpf(2) ** -190
    assert abs(got[1][0] - want[1]) < mpmath.mpf(2) ** -190
  # positional: X + E = (0 + 1/2, 1/2 + 0), an exact tie: mixed 1/2, z = 1, then
  # 1 + ReLU(1/2) + 1 = 5/2 for both tokens
  segments, params = _tiny(True)
  got = oracle.MpNetwork(segments, params, True, 200)(np.asarray([[0.0], [0.5]]))
  assert got[0][0] == got[1][0] == mpmath.mpf(5) / 2


def test_oracle_refuses_bad_input():
  segments, params = _tiny(False)
  with pytest.raises(ValueError, match='prec=8; the mpmath precision'):
    oracle.MpNetwork(segments, params, False, 8)
  seg = layers.Segment(kind='block', depth=1, num_heads=1, head_size=1, normalizer='hardmax',
                       width=1)
  with pytest.raises(ValueError, match='segment 0 is a block \\(hardmax, relu\\)'):
    oracle.MpNetwork([seg], params, False, 100)
  with pytest.raises(ValueError, match='points must be \\[batch, n, d\\]'):
    oracle.MpNetwork(segments, params, False, 100).values(np.zeros((2, 1)))


@pytest.fixture(scope='module')
def small():
  """N = 2, d = 1, n = 2 token_times_mean, clamped, certified at margin 1/64."""
  net = build_approximator('token_times_mean', d=1, n=2, resolution=2, ties='complete')
  p = plan.plan_realization(net, tolerance=1e-6, margin=1 / 64)
  g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact', clamp=True)
  return net, g, certificate.certify_lp(net, g, margin=Fraction(1, 64), workers=1)


def test_mc_evaluator_equals_oracle_and_lies_in_the_enclosures(small):
  net, g, cert = small
  rng = np.random.default_rng(2)
  x = np.concatenate([
      np.asarray([[[0.0], [0.5]], [[0.3], [0.7]], [[0.999], [0.001]]]),
      cmc.sample_windows(rng, 3, grid=Grid(1, 2, 2), margin=Fraction(1, 64))])
  got, where, used = cmc.evaluate_g(g, x, 2 * cert.bits, workers=1)
  assert (where, used) == ('in-process', 1)
  direct = oracle.MpNetwork(g.segments, g.params, g.positional, 2 * cert.bits)
  for b in range(len(x)):
    assert got[b].tolist() == [[float(v) for v in row] for row in direct(x[b])]
  mid, rad = g.apply_certified(x)
  # the float64 rounding of the oracle's value is within one ulp
  assert np.all(np.abs(got - mid) <= rad + np.spacing(np.abs(mid)) + 1e-300)


def test_mc_is_below_every_certified_term(small):
  net, g, cert = small
  mc = cmc.certificate_mc(net, g, cert, points=150, seed=1, min_points=100)
  assert mc['weights']['interior'] == Fraction(31, 32) ** 2
  assert mc['points'] == {'interior': 150, 'window': 150}
  rows = cmc.compare(mc, cert)
  assert [r['term'] for r in rows] == ['f_fbar', 'fbar_gbar', 'gbar_g_interior',
                                       'gbar_g_window', 'gbar_g', 'total']
  for r in rows:
    assert r['ci_low'] <= r['estimate'] <= r['ci_high']
    assert r['below'] and r['estimate'] <= r['bound'], r
  # the ramps are really sampled: g leaves g_bar in the windows, not in the interiors
  assert mc['max_window_gap'] > 0.1 and mc['max_interior_gap'] < 1e-6
  # d_p(f, g) is not 0 (a check that can fail): f is not piecewise constant
  assert mc['terms']['total']['ci_low'] > 0.05


@pytest.fixture(scope='module')
def wide():
  """one_layer_wide, token_times_mean, N = 4, d = 1, n = 3 (widths 8, 160, 4), certified
  at margin 1/64."""
  net = one_layer_wide.build('token_times_mean', OneLayerWide(Grid(1, 3, 4)))
  g = net.realize(margin=Fraction(1, 64))
  return net, g, certificate.certify_lp(net, g, p=2, margin=Fraction(1, 64), workers=1)


def test_mc_on_a_wide_network_is_below_every_certified_term(wide):
  net, g, cert = wide
  mc = cmc.certificate_mc(net, g, cert, points=200, seed=5, min_points=100, workers=1)
  assert (mc['where'], mc['workers']) == ('in-process', 1)
  assert mc['weights']['interior'] == Fraction(31, 32) ** 3
  # V = max |value| <= 1 for token_times_mean on [0, 1): s = sqrt(3) 2^-50 V
  assert 0.5 < mc['value_scale'] <= 1.0
  assert mc['slack'] == math.sqrt(3) * 2.0 ** -50 * mc['value_scale']
  for r in cmc.compare(mc, cert):
    assert r['below'] and r['estimate'] <= r['bound'], r
  # the quantization ramps are sampled in the windows; the interiors are g_bar's
  assert mc['max_window_gap'] > 0.1 and mc['max_interior_gap'] < 1e-9
  assert mc['terms']['total']['ci_low'] > 0.05


def test_mc_through_two_processes_equals_in_process(wide):
  net, g, cert = wide
  here = cmc.certificate_mc(net, g, cert, points=100, seed=7, min_points=100, workers=1)
  pool = cmc.certificate_mc(net, g, cert, points=100, seed=7, min_points=100,
                            workers=executor.Workers(2, min_pool_seconds=0))
  assert (pool['where'], pool['workers']) == ('processes', 2)
  assert pool['terms'] == here['terms']
  assert (pool['max_window_gap'], pool['max_interior_gap']) == (
      here['max_window_gap'], here['max_interior_gap'])


def test_mc_refuses_too_few_points(small):
  net, g, cert = small
  with pytest.raises(ValueError, match='points=10; it must be an integer >= 1000'):
    cmc.certificate_mc(net, g, cert, points=10)


def test_mc_refuses_a_g_of_another_net(small):
  net, g, cert = small
  other = build_approximator('token_times_mean', d=1, n=2, resolution=2, ties='complete')
  with pytest.raises(ValueError, match='g is not a realization of this net'):
    cmc.certificate_mc(other, g, cert)


@pytest.mark.slow
@pytest.mark.parametrize('ties', ['paper', 'complete'])
def test_mc_at_full_size_is_below_every_certified_term(ties):
  """10^3 points per stratum (the default) on N = 4, d = 1, n = 3 (55 blocks)."""
  net = build_approximator('token_times_mean', d=1, n=3, resolution=4, ties=ties)
  p = plan.plan_realization(net, tolerance=1e-6, margin=1 / 64)
  g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact', clamp=True)
  cert = certificate.certify_lp(net, g, margin=Fraction(1, 64), workers=1)
  mc = cmc.certificate_mc(net, g, cert, seed=3)
  assert mc['points'] == {'interior': 1000, 'window': 1000}
  rows = {r['term']: r for r in cmc.compare(mc, cert)}
  for r in rows.values():
    assert r['below'], r
  # d_p(f_bar, g_bar) is certified exactly (the bad set's mass; 0 for 'complete'), and so
  # is d_2(f, f_bar) of this polynomial target (rounded up): the sampled intervals
  # contain them, up to the float64 slack
  assert cert.details['f_fbar']['method'] == 'exact polynomial integral'
  for name in ('fbar_gbar', 'f_fbar'):
    r = rows[name]
    assert r['ci_low'] - r['slack'] <= r['bound'] <= r['ci_high'] + r['slack'], r
  assert (rows['fbar_gbar']['bound'] > 0.4) == (ties == 'paper')
  for name in ('gbar_g_interior', 'gbar_g_window', 'gbar_g'):
    assert rows[name]['ci_high'] <= rows[name]['bound'], rows[name]
