"""Issue 55: what the certificate used to take on trust, row by row. Each test failed on
the code before the change (a false or misleading certificate, a crash, or a misleading
message) and passes after it.

The independent measure of d_2(f, g) here is a Monte Carlo of the float64 network (JAX,
``layers``), which shares no code with the certificate's arb evaluation."""

import dataclasses
import json
import math
import pickle
import re
import concurrent.futures as cf
from fractions import Fraction

import numpy as np
import pytest

from transformer_ua import decimal_text
from transformer_ua import executor, executor_state
from transformer_ua.targets import bounds as target_bounds
from transformer_ua.targets import callable_checks
from transformer_ua.targets import functions as targets
from transformer_ua.yun import search, term_estimates
from transformer_ua.yun.bounds import certificate, f_term
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.single_attention import one_layer_wide
from transformer_ua.yun.variants.one_layer_wide import OneLayerWide

MARGIN = Fraction(1, 64)
#: A margin at which the windows are small, so the interiors decide the total.
TIGHT = Fraction(1, 2 ** 17)


def _wide(target, n=3, N=4):
  return one_layer_wide.build(target, OneLayerWide(Grid(1, n, N)))


@pytest.fixture(scope='module')
def honest():
  net = _wide('token_times_mean')
  return net, net.realize(margin=MARGIN)


@pytest.fixture(scope='module')
def bad():
  """g with every value weight doubled, at margin 2^-17: its honest certificate is
  0.76, its float64 d_2(f, g) ~0.34 (the honest g: 0.103 and 0.093)."""
  net = _wide('token_times_mean')
  g = net.realize(margin=TIGHT)
  exact = _copy(g.exact)
  exact['segment_1']['feedforward']['W_2'] = exact['segment_1']['feedforward']['W_2'] * 2
  return net, dataclasses.replace(g, exact=exact, params=exact)


def _copy(tree):
  if isinstance(tree, dict):
    return {k: _copy(v) for k, v in tree.items()}
  return np.array(tree, dtype=object) if isinstance(tree, np.ndarray) else tree


def _float_dp(net, g, points=4000, seed=0):
  """(estimate, 95% lower bound) of d_2(f, g) by Monte Carlo of the float64 network."""
  gf = dataclasses.replace(g, dtype='float64', params=g.float_params())
  x = np.random.default_rng(seed).random((points, net.n, net.d))
  h = np.sum((net.target(x) - gf.apply(x)) ** 2, axis=(1, 2))
  mean, se = float(h.mean()), float(h.std(ddof=1) / math.sqrt(points))
  return math.sqrt(mean), math.sqrt(max(0.0, mean - 1.96 * se))


# -- row 1: a resumed state ---------------------------------------------------------


def _zero_chunks(state_dir):
  files = sorted((state_dir / 'certification_0').glob('chunk_*.json'))
  for f in files:
    rec = json.loads(f.read_text())
    rec['result']['worst'] = 0.0
    f.write_text(json.dumps(rec))
  return len(files)


def test_a_resumed_state_with_every_worst_set_to_0_is_refused(bad, tmp_path):
  net, g = bad
  first = certificate.certify_lp(net, g, margin=TIGHT,
                                 workers=executor.Workers(1, state_dir=tmp_path))
  measured = _float_dp(net, g)[1]
  assert first.total > measured > 0.3            # honestly large, and it covers g
  assert _zero_chunks(tmp_path) == 7
  with pytest.raises(ValueError, match=r'chunk_\d+_\d+.json does not carry a valid '
                     r'signature under the state key') as e:
    certificate.certify_lp(net, g, margin=TIGHT,
                           workers=executor.Workers(1, state_dir=tmp_path))
  assert '\n' not in str(e.value)


def test_the_line_says_how_many_chunks_were_resumed_and_rechecked(honest, tmp_path):
  net, g = honest
  certificate.certify_lp(net, g, margin=MARGIN, workers=executor.Workers(1, state_dir=tmp_path))
  again = certificate.certify_lp(net, g, margin=MARGIN,
                                 workers=executor.Workers(1, state_dir=tmp_path))
  assert '7 of 7 chunks resumed from a state directory (each HMAC-SHA256 signed, key ' \
      f'{executor_state.state_key_path()}), 3 of them re-run here and equal' in str(again)
  full = certificate.certify_lp(net, g, margin=MARGIN,
                                workers=executor.Workers(1, state_dir=tmp_path, recheck=1))
  assert '7 of 7 chunks resumed from a state directory (each HMAC-SHA256 signed, key ' \
      f'{executor_state.state_key_path()}), 7 of them re-run here' in str(full)


def test_state_identity_names_the_code_and_the_whole_work(honest, tmp_path):
  """The wide state hashed the params but not the segments: now the work's hash covers
  the segments (and all else the workers build) and the code version is named."""
  net, g = honest
  g.certify_interiors(MARGIN, workers=executor.Workers(1, state_dir=tmp_path))
  ident = json.loads((tmp_path / 'certification_0' / 'identity.json').read_text())
  assert len(ident['work_sha256']) == 64 and ident['code_version'].startswith('0.')
  segments = tuple(dataclasses.replace(s, name=f'{s.name}_renamed') for s in g.segments)
  other = dataclasses.replace(g, segments=segments)       # same params, other segments
  with pytest.raises(ValueError, match='belongs to another certification '
                     r'\(work_sha256: stored') as e:
    other.certify_interiors(MARGIN, workers=executor.Workers(1, state_dir=tmp_path))
  assert '\n' not in str(e.value)


# -- row 2: a caller's executor -------------------------------------------------------


class Lying(cf.Executor):
  """Returns worst = 0 for every chunk without computing anything."""

  def submit(self, fn, *args, **kwargs):  # pylint: disable=arguments-differ
    f = cf.Future()
    f.set_result({'worst': 0.0, 'index': args[3], 'cube': [[0]] * 3})
    return f


def test_a_lying_executor_is_refused(bad):
  net, g = bad
  with pytest.raises(ValueError, match='from the executor Lying differs from its re-run') as e:
    certificate.certify_lp(net, g, margin=TIGHT, workers=Lying())
  assert '\n' not in str(e.value)


def test_the_line_says_what_an_executor_computed(honest):
  net, g = honest
  with cf.ThreadPoolExecutor(2) as pool:
    cert = certificate.certify_lp(net, g, margin=MARGIN, workers=pool)
  assert re.search(r'interiors: \d+ of \d+ computed by ThreadPoolExecutor, 3 of them re-run '
                   'here and equal', str(cert))


# -- row 3: a batch-dependent callable; row 4: a complex one ---------------------------


def test_a_callable_of_the_batch_is_refused():
  with pytest.raises(ValueError, match='is not a function of one point') as e:
    search.approximate(lambda x: x * x.mean(), 0.1, d=1, n=2, lipschitz=2.0, workers=1)
  assert '\n' not in str(e.value)


def test_a_complex_callable_is_refused():
  with pytest.raises(ValueError, match='returned complex values') as e:
    search.approximate(lambda x: x * (1 + 0.5j), 0.3, d=1, n=2, lipschitz=2.0, workers=1)
  assert '\n' not in str(e.value)


def test_complex_values_on_a_centre_of_the_table_are_refused():
  def late(x):     # real on the probes, complex on the cube centres of N = 4
    return x.astype(complex) if np.any(np.isclose(x, 0.125)) else x
  t = targets.get_target(late, d=1, n=2)
  with pytest.raises(ValueError, match='complex'):
    targets.grid_values(t, np.zeros((1, 2, 1), np.int64), 4)


# -- row 5: an understated modulus or L ---------------------------------------------


def _wiggle(x):
  """x + 0.3 sin(2 pi 4 x) entrywise: equal to x on every centre of N = 4 (and of every
  N dividing 4's multiples used here), true constant 1 + 2.4 pi ~ 8.5."""
  return x + 0.3 * np.sin(2 * np.pi * 4 * (x - 0.125))


def _zero_between(x):
  """0 on every centre of N = 4, up to 0.3 between: a modulus ~0 passes the centres."""
  return 0.3 * np.sin(2 * np.pi * 4 * (x - 0.125))


def test_an_understated_lipschitz_is_refuted_inside_the_cubes():
  net = _wide(_wiggle, n=2)
  g = net.realize(margin=MARGIN)
  # the centres alone see quotient 1: the old refutation accepted L = 1
  fv = targets.grid_values(net.target, np.indices((4, 4)).reshape(2, -1).T[:, :, None], 4)
  assert callable_checks.check_lipschitz_on_grid(None, fv, Grid(1, 2, 4)) <= 1 + 1e-9
  with pytest.raises(ValueError, match='lipschitz=1.0000001 is refuted: .* sampled point') as e:
    certificate.certify_lp(net, g, lipschitz=1.0000001, margin=MARGIN, workers=1)
  assert '\n' not in str(e.value)


def test_an_understated_modulus_is_refuted_inside_the_cubes():
  net = _wide(_zero_between, n=2)
  g = net.realize(margin=MARGIN)
  with pytest.raises(ValueError, match='modulus is refuted: at the sampled point') as e:
    certificate.certify_lp(net, g, modulus=lambda c, delta: np.full(c.shape, 1e-12),
                           margin=MARGIN, workers=1)
  assert '\n' not in str(e.value)


def test_the_line_prints_the_largest_quotient_next_to_the_stated_l():
  net = _wide(_wiggle, n=2)
  g = net.realize(margin=MARGIN)
  cert = certificate.certify_lp(net, g, lipschitz=9, margin=MARGIN, workers=1)
  m = re.search(r'largest difference quotient found ([0-9.e+-]+) \(neighbouring centres and '
                r'2048 sampled points\) against the stated L 9', str(cert))
  assert m and 7 < float(m.group(1)) <= 9
  more = certificate.certify_lp(net, g, lipschitz=9, margin=MARGIN, workers=1,
                                refutation_points=8192)
  assert '8192 sampled points' in str(more)


def test_a_refuted_lipschitz_is_refused_before_anything_is_built(monkeypatch):
  def no_build(*a, **k):
    raise AssertionError('built')
  monkeypatch.setattr(OneLayerWide, 'build', no_build)
  with pytest.raises(ValueError, match=r'lipschitz=1.0000001 is refuted: .* of \[0, 1\)') as e:
    search.approximate(_wiggle, 0.3, d=1, n=2, lipschitz=1.0000001, workers=1)
  assert '\n' not in str(e.value)


# -- the printed line is a proof ----------------------------------------------------


def _parse(line):
  num = r'([0-9.]+(?:e[+-]?\d+)?)'
  pats = {'total': rf'd_p\(f, g\) <= {num} certified', 'f_fbar': rf'f-f_bar {num} ',
          'fbar_gbar': rf'f_bar-g_bar {num} ', 'gbar_g': rf'g_bar-g {num};',
          'share': rf'interiors {num}% of the volume', 'interior_sup': rf'volume, sup {num};',
          'window_measure': rf'windows {num}, sup', 'window_sup': rf'windows [^,]+, sup {num};',
          'p': r'\(p=([^;]+);'}
  return {k: re.search(v, line).group(1) for k, v in pats.items()}


@pytest.mark.parametrize('p', [2.0, 1.0000001, 3.0])
def test_every_bound_printed_is_rounded_up_and_every_share_down(honest, p):
  net, g = honest
  cert = certificate.certify_lp(net, g, p=p, margin=MARGIN, workers=1)
  got = _parse(str(cert))
  assert float(got['p']) == p and got['p'] == ('2' if p == 2 else repr(p) if p % 1 else '3')
  for key, stored in (('total', cert.total), ('f_fbar', cert.terms['f_fbar']),
                      ('fbar_gbar', cert.terms['fbar_gbar']),
                      ('gbar_g', cert.terms['gbar_g']), ('interior_sup', cert.interior_sup),
                      ('window_measure', cert.window_measure),
                      ('window_sup', cert.window_sup)):
    assert Fraction(got[key]) >= Fraction(stored), key
  assert Fraction(got['share']) <= 100 * Fraction(cert.interior_fraction)


def test_text_rounding_by_hand():
  assert decimal_text.bound_text(0.15704950, 3) == '0.158'
  assert decimal_text.bound_text(0.157, 3) == '0.158'         # 0.157 is 0.15700000000000000288
  assert decimal_text.bound_text(0.25, 3) == '0.25'
  assert decimal_text.share_text(0.9999996, 6, percent=True) == '99.9999'
  assert decimal_text.share_text(1.0, 6, percent=True) == '100'


# -- bad input never crashes --------------------------------------------------------


def test_huge_p_and_huge_spread_do_not_overflow_the_margin_search():
  assert term_estimates.margin_for(0.1, d=1, n=2, p=1e6, spread=[1.5]) is None   # 1.5^p: none
  assert term_estimates.margin_for(2.0, d=1, n=2, p=1e6, spread=[1.5]) == certificate.MAX_MARGIN
  assert term_estimates.margin_for(0.1, d=1, n=2, p=2.0, spread=[1e300]) is None
  # a small spread: the same margin as the float formula gives
  m = term_estimates.margin_for(0.05, d=1, n=2, p=2.0, spread=[0.5])
  window = -math.expm1(2 * math.log1p(-2 * float(m)))
  assert math.sqrt(2 * 0.25 * window) <= 0.05 < math.sqrt(2 * 0.25 * -math.expm1(
      2 * math.log1p(-4 * float(m))))


def test_p_1e6_and_values_near_1e300_give_one_line_or_a_result():
  # d_1e6 is nearly the sup norm: the windows, where g ramps across the clamp range,
  # cannot go below epsilon = 0.5 (a correct refusal, in one line, not an OverflowError)
  with pytest.raises(ValueError, match=r'ramp windows alone exceed epsilon .*p=1000000') as e:
    search.approximate('token_times_mean', 0.5, d=1, n=2, p=1e6, workers=1)
  assert '\n' not in str(e.value)
  res = search.approximate('token_times_mean', 0.5, d=1, n=2, p=2 + 2 ** -40, workers=1)
  assert res.certificate.total <= 0.5 and f'p={2 + 2 ** -40!r}' in str(res.certificate)
  with pytest.raises(ValueError) as e:
    search.approximate(lambda x: 1e300 * x, 0.3, d=1, n=2, lipschitz=1e301, workers=1)
  assert '\n' not in str(e.value)


@pytest.mark.parametrize('n', [pytest.param(67, marks=pytest.mark.slow), 1024])
def test_f_term_at_large_n_is_a_correct_bound(n):
  got = f_term.bound('token_times_mean', d=1, n=n, resolution=2)
  # independent: Monte Carlo of d_2(f, f_bar) with f_bar at the cube centres
  x = np.random.default_rng(0).random((400, n, 1))
  c = (np.floor(x * 2) + 0.5) / 2
  f = lambda v: v * v.mean(axis=1, keepdims=True)
  est = math.sqrt(float(np.mean(np.sum((f(x) - f(c)) ** 2, axis=(1, 2)))))
  assert got.bound >= est and math.isfinite(got.bound)
  cells = np.asarray([0] * (n // 2) + [1] * (n - n // 2))[None, :, None]
  assert int(f_term.orderings(cells)[0]) == math.comb(n, n // 2)


def test_a_nan_region_is_named_not_blamed_on_the_windows():
  def holes(x):
    return np.where(x > 0.97, np.nan, x)
  with pytest.raises(ValueError, match='non-finite') as e:
    search.approximate(holes, 0.3, d=1, n=2, lipschitz=1.0, workers=1)
  assert 'ramp windows' not in str(e.value) and '\n' not in str(e.value)


def test_an_equivariant_callable_named_like_a_builtin_is_judged_by_behaviour():
  def token_times_mean(x):                 # pylint: disable=redefined-outer-name
    return x * x.mean(axis=1, keepdims=True)
  t = targets.get_target(token_times_mean, d=1, n=3)
  targets.check_equivariant(t, 1, 3)        # no longer refused by its name
  net = _wide(token_times_mean)
  cert = certificate.certify_lp(net, net.realize(margin=MARGIN), lipschitz=2, margin=MARGIN,
                                workers=1)
  assert cert.total < 1


def test_a_mutating_callable_is_refused_as_mutating():
  def inplace(x):
    x -= 0.5
    return x + 0.5
  with pytest.raises(ValueError, match='changed its input array in place') as e:
    targets.get_target(inplace, d=1, n=3)
  assert 'equivariant' not in str(e.value)


def test_lipschitz_just_below_the_proved_constant_is_shown_exactly():
  with pytest.raises(ValueError, match=r'lipschitz=1\.9999999999999998 is below the proved '
                     'constant 2'):
    target_bounds.check_lipschitz(1.9999999999999998, targets.BUILTIN_TARGETS[
        'token_times_mean'], 1, 3)


# -- a new user's slips ---------------------------------------------------------------


def test_a_non_equivariant_callable_under_theorem_2_is_refused_in_one_line():
  with pytest.raises(ValueError, match="not permutation equivariant .*pass positional=True") as e:
    search.approximate(lambda x: np.cumsum(x, axis=1) / 2, 0.3, d=1, n=2, lipschitz=1.0,
                       workers=1)
  assert '\n' not in str(e.value)


def test_equivariance_differences_at_rounding_level_are_said_to_be():
  def ordered(x):       # equivariant in exact arithmetic; its sum's order follows the tokens
    s = (0.1 * x[:, 0] + 0.1 * x[:, 1]) + 0.1 * x[:, 2]
    return x * (s / 0.3)[:, None, :]
  net = _wide(ordered)
  cert = certificate.certify_lp(net, net.realize(margin=MARGIN), lipschitz=2, margin=MARGIN,
                                workers=1)
  eq = cert.details['callable_checks']['equivariance']
  assert eq['cubes'] > 0 and eq['rounding_level']
  assert 'at rounding level' in str(cert) and 'float summation order in f' in str(cert)


def test_print_of_a_wide_network_is_one_line(honest):
  _, g = honest
  text = str(g)
  assert '\n' not in text and len(text) < 200 and '3 blocks' in text


def test_the_approximation_pickles():
  res = search.approximate('token_times_mean', 0.5, d=1, n=2, workers=1)
  back = pickle.loads(pickle.dumps(res))
  assert back.certificate.total == res.certificate.total
  x = np.full((1, 2, 1), 0.3)
  np.testing.assert_array_equal(back.g.apply(x), res.g.apply(x))
  np.testing.assert_array_equal(back.net.f_bar(x), res.net.f_bar(x))


def test_term_2_takes_the_difference_exactly_not_in_float():
  """|A - g_bar| = 1 + 2^-60 on every entry; fl(A - g_bar) = 1 lost the 2^-60 (p = 1:
  the bound is the sum itself, 2 + 2^-59, above the float 2)."""
  class Net:
    resolution, d, n = 2, 1, 2

    def apply(self, centres):
      return np.full(np.shape(centres), -2.0 ** -60)

  k = np.indices((2, 2)).reshape(2, -1).T[:, :, None]
  out = certificate.fbar_gbar_bound(Net(), 1.0, (k, np.ones(4, np.int64)), np.ones((4, 2, 1)))
  assert Fraction(out['bound']) >= 8 * (1 + Fraction(1, 2 ** 60)) / 4


def test_recheck_fraction_is_checked_and_results_compare_exactly():
  with pytest.raises(ValueError, match=r'recheck=1.5; it must be a fraction in \[0, 1\]') as e:
    executor.Workers(1, recheck=1.5)
  assert '\n' not in str(e.value)
  same = executor.same_result
  assert same({'worst': 0.5, 'cube': [[1], [2]]}, {'worst': 0.5, 'cube': ((1,), (2,))})
  assert not same({'worst': 0.5}, {'worst': 0.5000000000000001})
  assert not same({'worst': math.nan}, {'worst': math.nan})
  assert not same({'worst': 0.5}, {'worst': 0.5, 'index': 0})
  assert same(np.arange(3.0), np.arange(3.0)) and not same(np.arange(3.0), np.arange(3))
