"""One softmax attention layer as the contextual mapping (yun.one_layer, verify.one_layer)."""

import itertools
import json
import math
import os
import subprocess
import sys
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from transformer_ua.verify import one_layer as verify_ol
from transformer_ua.yun import one_layer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, 'experiments', 'verify_contextual_mapping.py')


def _token_times_mean(x):
  """f(X)_j = x_j * mean_k x_k (entrywise): the built-in target, written out here."""
  return x * x.mean(axis=1, keepdims=True)


# -- plan (hand-computed constants) --------------------------------------------


def test_cauchy_constant_bounds_b():
  with mpmath.workprec(200):
    b = 1 + mpmath.log(mpmath.sec(1)) + mpmath.pi / 2
    assert b < mpmath.mpf(one_layer.CAUCHY_B.numerator) / one_layer.CAUCHY_B.denominator
    assert b > 3.18   # and the rational bound is tight to 1e-3
    assert float(one_layer.CAUCHY_B) - float(b) < 1e-3


def test_plan_d1_n3_n4_by_hand():
  # M = 4, h = 3/2, beta* = 1 / (16 B 3 1! 3^2 (3/2)^3) = 1 / (16 B 3 9 27/8)
  p = one_layer.plan(1, 3, 4)
  beta_star = 1 / (16 * Fraction(3187, 1000) * 3 * 9 * Fraction(27, 8))
  assert p.beta_star == beta_star
  # beta* / (2 (M - 1)) = 3.59e-5: 2^-15 = 3.05e-5 <= it < 2^-14
  assert p.lam == Fraction(1, 2 ** 15)
  assert p.w == (4,) and p.T == 3 and p.id_scale == Fraction(1, 6)
  # gamma_mean = (lam (M - 1))^(n-2) / (2 n^(n-1) (n-2)!) = 3 / 2^15 / 18
  assert p.gamma_mean == Fraction(3, 2 ** 15) / 18
  q = one_layer.plan(2, 3, 4)
  assert q.M == 16 and q.w == (4, 16)


def test_plan_refuses_grids_past_the_limit():
  with pytest.raises(ValueError, match='at most'):
    one_layer.plan(2, 4, 64)
  with pytest.raises(ValueError, match='n'):
    one_layer.plan(1, 1, 4)


# -- certified separation ----------------------------------------------------------


@pytest.mark.parametrize('d,n,N', [(1, 2, 4), (1, 3, 4), (1, 3, 16), (2, 3, 4), (2, 4, 4)])
def test_every_context_separated(d, n, N):
  r = verify_ol.verify_one_layer(d=d, n=n, resolution=N, samples=16)
  M = N ** d
  assert r['contexts'] == math.comb(M + n - 1, n)
  assert r['ids'] == M * math.comb(M + n - 2, n - 1)
  assert r['violations'] == 0 and r['overlaps'] == 0 and r['all_hold']
  assert r['certified_min_gap_mean'] >= r['proved_gap_mean'] > 0
  assert r['certified_min_cross_token_gap'] >= 0.5
  assert r['mpmath']['outside'] == 0 and r['mpmath']['closest_pair']['consistent']
  assert r['float64']['disagreements'] == 0


def test_repeated_tokens_are_ids_of_their_own():
  # M = 4, n = 3: 40 (context, token) pairs; contexts without repeats are the C(4, 3) = 4
  # sets, 3 tokens each: 12 pairs; the other 28 have a repeated token.
  r = verify_ol.verify_one_layer(d=1, n=3, resolution=4, samples=8)
  assert r['ids'] == 40 and r['ids_with_repeated_tokens'] == 28
  assert r['violations'] == 0
  # the contexts {0, 0, 1} and {0, 1, 1} differ only in multiplicity: token 0's means
  # are (e^0 * 0 * 2 + e^b) / (2 + e^b) and (2 e^b) / (1 + 2 e^b), b = beta_0 = 3 lam
  table = one_layer.mean_enclosures(4, 3, Fraction(1, 2 ** 15), bits=80)
  lam = Fraction(1, 2 ** 15)
  with mpmath.workprec(200):
    e = mpmath.exp(mpmath.mpf(3 * lam.numerator) / lam.denominator)
    want = {(0, 1): e / (2 + e), (1, 1): 2 * e / (1 + 2 * e)}
  got = {}
  for i in range(len(table)):
    if table.tokens[i] == 0 and tuple(table.rests[i]) in want:
      got[tuple(table.rests[i])] = (Fraction(table.lo[i], 2 ** 80), Fraction(table.hi[i], 2 ** 80))
  with mpmath.workprec(200):
    for rest, v in want.items():
      lo, hi = got[rest]
      assert mpmath.mpf(lo.numerator) / lo.denominator <= v
      assert v <= mpmath.mpf(hi.numerator) / hi.denominator
  assert got[(0, 1)][1] < got[(1, 1)][0]


def test_plain_mean_collides_and_is_reported():
  # lam = 0: softmax is the plain mean; pairs of one token whose contexts have equal sums
  # collide. Count them independently: per token, rows minus distinct sums.
  M, n = 4, 3
  want = 0
  for t in range(M):
    sums = [t + sum(r) for r in itertools.combinations_with_replacement(range(M), n - 1)]
    want += len(sums) - len(set(sums))
  r = verify_ol.verify_one_layer(d=1, n=n, resolution=M, lam=0, samples=4)
  assert want > 0 and r['overlaps'] == want
  assert not r['all_hold']


def test_lambda_too_small_violates_the_margin():
  p = one_layer.plan(1, 3, 16)
  r = verify_ol.verify_one_layer(d=1, n=3, resolution=16, lam=p.lam / 2 ** 10, samples=4)
  assert r['violations'] > 0 and not r['all_hold']
  # still injective (softmax of a transcendental base), only closer than the margin
  assert r['certified_min_gap_mean'] > 0


# -- end to end ---------------------------------------------------------------------


@pytest.fixture(scope='module')
def net():
  return one_layer.build('token_times_mean', d=1, n=3, resolution=4)


def test_g_bar_is_f_bar_on_every_cube(net):
  k = np.asarray(list(itertools.product(range(4), repeat=3)))[:, :, None]
  x = (k + 0.5) / 4
  np.testing.assert_array_equal(net.apply(x), _token_times_mean(x))


def test_realized_network_has_one_attention_layer_and_certifies(net):
  g = net.realize()
  dep = g.block_counts()
  assert dep['attention_on'] == 1
  # quantization d (N + 1) = 5, shift 1, one bump per id: 40
  assert dep['blocks'] == 5 + 1 + 1 + 40
  assert net.layer_counts() == {'quantization': {'feedforward': 5},
                                'contextual': {'attention': 1, 'feedforward': 1},  # + shift
                                'value': {'feedforward': 40}}
  assert g.depth() == net.depth() == 5 + 1 + 1 + 40
  cert = g.certify_interiors(workers=1)
  assert cert['certified'] and cert['cubes'] == 20 and cert['max_abs_error'] < 1e-12
  # repeated cells included: two tokens in cell 1, one in cell 3; compared with f itself
  x = np.asarray([[[0.3], [0.31], [0.8]], [[0.1], [0.1], [0.1]]])
  mid, rad = g.apply_certified(x)
  k = np.floor(x * 4)
  want = _token_times_mean((k + 0.5) / 4)
  assert np.all(np.abs(mid - want) <= rad + 1e-15)
  assert np.all(rad < 1e-12)


def test_build_refuses_overlapping_ids():
  with pytest.raises(ValueError, match='positive'):
    one_layer.build('token_times_mean', d=1, n=3, resolution=4, lam=0.0)
  # equal-sum contexts ({1, 3, 3}, {2, 2, 3}) differ by ~ lam at this scale: 2^-60 is
  # below what 40-bit enclosures resolve
  with pytest.raises(ValueError, match='overlap'):
    one_layer.build('token_times_mean', d=1, n=3, resolution=4, lam=Fraction(1, 2 ** 60),
                    id_bits=40)


def test_realize_refuses_other_dtypes(net):
  with pytest.raises(ValueError, match="allowed: 'exact', 'float64'"):
    net.realize(dtype='float32')
  with pytest.raises(ValueError, match="dtype='exact'"):
    net.realize(dtype='float64').certify_interiors()


def test_float64_realization_reproduces_f_bar_on_interiors():
  # decreasing bump order keeps every crossed bump exactly off in float64
  net8 = one_layer.build('token_times_mean', d=1, n=3, resolution=8, lam='search')
  g = net8.realize(dtype='float64')
  rng = np.random.default_rng(0)
  k = rng.integers(0, 8, size=(256, 3, 1))
  x = (k + 0.25 + 0.5 * rng.random(k.shape)) / 8
  assert np.max(np.abs(g.apply(x) - _token_times_mean((k + 0.5) / 8))) < 1e-8


# -- the binary -----------------------------------------------------------------------


def _run(*args):
  return subprocess.run([sys.executable, BINARY, *args], capture_output=True, text=True,
                        timeout=300, cwd=ROOT)


def test_binary_one_layer(tmp_path):
  out = tmp_path / 'd1_n3_N4.json'
  r = _run('--contextual=one_layer', '--d=1', '--n=3', '--resolution=4',
           f'--output_dir={tmp_path}')
  assert r.returncode == 0, r.stderr
  assert 'ALL PROPERTIES HOLD' in r.stdout
  res = json.loads(out.read_text())
  assert res['ids'] == 40 and res['provenance']['command']


@pytest.mark.parametrize('args,fragment', [
    (('--contextual=hardmax',), 'allowed values are paper and one_layer'),
    (('--contextual=one_layer', '--d=2', '--n=4', '--resolution=64'), 'at most'),
    (('--contextual=one_layer', '--lam=-2'), '--lam=-2'),
])
def test_binary_bad_input_is_one_line(args, fragment):
  r = _run(*args)
  assert r.returncode == 2
  first = r.stderr.strip().splitlines()[0]
  assert first.startswith('error:') and fragment in first
  assert 'Traceback' not in r.stderr


# -- build_approximator dispatch --------------------------------------------------------


def test_build_approximator_dispatch():
  from transformer_ua import yun
  net = yun.build_approximator('token_times_mean', d=1, n=2, resolution=4,
                               contextual='one_layer')
  assert isinstance(net, one_layer.OneLayerApproximator)
  # n = 2, M = 4: 4 tokens x 4 partners = 16 ids, one bump each
  assert net.layer_counts()['value'] == {'feedforward': 16}
  with pytest.raises(ValueError, match="'paper', 'one_layer'"):
    yun.build_approximator('token_times_mean', d=1, n=2, resolution=4, contextual='hardmax')
  with pytest.raises(ValueError, match='positional=False'):
    yun.build_approximator('token_times_mean', d=1, n=2, resolution=4, positional=True,
                           contextual='one_layer')


def test_search_lam_beats_the_proved_gap():
  r = one_layer.search_lam(1, 3, 8)
  p = one_layer.plan(1, 3, 8)
  assert r['lam'] >= p.lam and r['min_gap_mean'] >= p.gamma_mean
  net = one_layer.build('token_times_mean', d=1, n=3, resolution=8, lam='search')
  assert net.lam == r['lam'] and net.min_gap > 0


def test_verifier_with_searched_lam():
  r = verify_ol.verify_one_layer(d=1, n=3, resolution=8, lam='search', samples=8)
  assert r['all_hold'] and r['lam'] > r['planned_lam']
  assert r['certified_min_gap_mean'] > r['proved_gap_mean']
  with pytest.raises(ValueError, match='search'):
    verify_ol.verify_one_layer(d=1, n=3, resolution=8, lam='largest')


# -- the whole-domain certificate (yun.certify_lp) --------------------------------------

CERT_MARGIN = Fraction(1, 64)


def _f_bar_range_by_hand(N):
  """min and max of token_times_mean over every cube centre of the (1, 3, N) grid."""
  k = np.asarray(list(itertools.product(range(N), repeat=3)))[:, :, None]
  vals = _token_times_mean((k + 0.5) / N)
  return float(vals.min()), float(vals.max())


@pytest.fixture(scope='module')
def certified(net):
  from transformer_ua.yun import certificate  # pylint: disable=import-outside-toplevel
  out = {}
  for clamp in (True, False):
    g = net.realize(margin=CERT_MARGIN, clamp=clamp)
    out[clamp] = (g, certificate.certify_lp(net, g, margin=CERT_MARGIN, workers=1))
  return out


def test_clamped_one_layer_network_is_certified_and_keeps_one_attention_layer(net, certified):
  g, cert = certified[True]
  dep = g.block_counts()
  # one clamp block (2 ReLUs, d = 1) after the 47 blocks; its attention is off
  assert dep['attention_on'] == 1 and dep['blocks'] == 5 + 1 + 1 + 40 + 1
  assert cert.clamp and g.clamp is not None
  # L (delta / 2) (nd nd / (nd + p))^(1/2) with L = 2 (token_times_mean), N = 4, nd = 3
  assert cert.terms['f_fbar'] >= 0.25 * math.sqrt(9 / 5)
  assert cert.terms['f_fbar'] == pytest.approx(0.25 * math.sqrt(9 / 5), rel=1e-12)
  assert cert.interior_sup < 1e-12 and cert.total < 1


def test_one_layer_certificate_has_no_bad_set(certified):
  for _, cert in certified.values():
    assert cert.terms['fbar_gbar'] == 0.0
    assert cert.details['fbar_gbar']['cubes_differing'] == 0


def test_one_layer_output_range_and_clamped_windows(net, certified):
  lo, hi = _f_bar_range_by_hand(4)
  got_lo, got_hi = net.output_range()
  assert (float(got_lo[0]), float(got_hi[0])) == (lo, hi)
  _, cert = certified[True]
  # (an arb ball's radius carries 30 bits: the enclosure of [lo, hi] is a hair wider)
  assert cert.window_sup <= (hi - lo) * (1 + 1e-8)
  _, raw = certified[False]
  assert raw.window_sup > 50 * cert.window_sup
  assert raw.terms['gbar_g'] > 50 * cert.terms['gbar_g']


def test_one_layer_certificate_dominates_monte_carlo_dp(net, certified):
  rng = np.random.default_rng(5)
  x = rng.random((200, 3, 1))
  # half the points with one entry within the margin of a cell edge (the windows)
  j = rng.integers(0, 3, 100)
  edge = rng.integers(1, 4, 100) + (2 * rng.random(100) - 1) * float(CERT_MARGIN)
  x[np.arange(100), j, 0] = edge / 4
  for g, cert in certified.values():
    mid, rad = g.apply_certified(x)
    err = np.maximum(np.abs(_token_times_mean(x) - mid) - rad, 0)
    e = np.sum(err ** 2, axis=(1, 2))
    upper = math.sqrt(np.mean(e) + 3 * np.std(e) / math.sqrt(len(e)))
    assert upper <= cert.total
    # and pointwise: |g - g_bar| at every sample is within the certified sups
    gbar = _token_times_mean((np.floor(x * 4) + 0.5) / 4)
    assert np.max(np.abs(mid - gbar) - rad) <= max(cert.interior_sup, cert.window_sup)


def test_clamped_float64_one_layer_stays_in_the_range(net):
  lo, hi = _f_bar_range_by_hand(4)
  g = net.realize(dtype='float64', clamp=True)
  x = np.random.default_rng(1).random((64, 3, 1))
  y = g.apply(x)
  assert np.all(y >= lo - 1e-12) and np.all(y <= hi + 1e-12)
  with pytest.raises(ValueError, match='clamp must be True or False'):
    net.realize(clamp='yes')


def test_certify_lp_refuses_another_nets_one_layer_g(certified):
  from transformer_ua.yun import certificate  # pylint: disable=import-outside-toplevel
  g, _ = certified[True]
  other = one_layer.build('token_times_mean', d=1, n=3, resolution=4)
  with pytest.raises(ValueError, match='not a realization of this net'):
    certificate.certify_lp(other, g)
