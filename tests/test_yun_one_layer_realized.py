"""The realized one-layer network g (yun.single_attention.one_layer_realized): blocks, certified
evaluation, the clamp and the whole-domain certificate."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from transformer_ua.yun.single_attention import one_layer
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.variants.one_layer import OneLayer

from one_layer_fixtures import net, token_times_mean, token_times_mean_d2  # pylint: disable=unused-import


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
  want = token_times_mean((k + 0.5) / 4)
  assert np.all(np.abs(mid - want) <= rad + 1e-15)
  assert np.all(rad < 1e-12)


def test_realize_refuses_other_dtypes(net):
  with pytest.raises(ValueError, match="allowed: 'exact', 'float64'"):
    net.realize(dtype='float32')
  with pytest.raises(ValueError, match="dtype='exact'"):
    net.realize(dtype='float64').certify_interiors()


def test_float64_realization_reproduces_f_bar_on_interiors():
  # decreasing bump order keeps every crossed bump exactly off in float64
  net8 = one_layer.build('token_times_mean', OneLayer(Grid(1, 3, 8)), lam='search')
  g = net8.realize(dtype='float64')
  rng = np.random.default_rng(0)
  k = rng.integers(0, 8, size=(256, 3, 1))
  x = (k + 0.25 + 0.5 * rng.random(k.shape)) / 8
  assert np.max(np.abs(g.apply(x) - token_times_mean((k + 0.5) / 8))) < 1e-8


# -- the whole-domain certificate (yun.certify_lp) --------------------------------------


CERT_MARGIN = Fraction(1, 64)


def _f_bar_range_by_hand(N):
  """min and max of token_times_mean over every cube centre of the (1, 3, N) grid."""
  k = np.asarray(list(itertools.product(range(N), repeat=3)))[:, :, None]
  vals = token_times_mean((k + 0.5) / N)
  return float(vals.min()), float(vals.max())


@pytest.fixture(scope='module')
def certified(net):
  from transformer_ua.yun.bounds import certificate  # pylint: disable=import-outside-toplevel
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
  # the Lipschitz fallback: L (delta / 2) (nd nd / (nd + p))^(1/2) with L = 2
  # (token_times_mean), N = 4, nd = 3
  lip = cert.details['f_fbar']['parts']['lipschitz']
  assert lip >= 0.25 * math.sqrt(9 / 5)
  assert lip == pytest.approx(0.25 * math.sqrt(9 / 5), rel=1e-12)
  # the term itself is tighter: d_2(f, f_bar) exactly (yun.bounds.f_term), worked out by hand
  assert cert.terms['f_fbar'] == pytest.approx(token_times_mean_d2(3, 4), rel=1e-12)
  assert cert.terms['f_fbar'] >= token_times_mean_d2(3, 4) * (1 - 1e-15)
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
    err = np.maximum(np.abs(token_times_mean(x) - mid) - rad, 0)
    e = np.sum(err ** 2, axis=(1, 2))
    upper = math.sqrt(np.mean(e) + 3 * np.std(e) / math.sqrt(len(e)))
    assert upper <= cert.total
    # and pointwise: |g - g_bar| at every sample is within the certified sups
    gbar = token_times_mean((np.floor(x * 4) + 0.5) / 4)
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
  from transformer_ua.yun.bounds import certificate  # pylint: disable=import-outside-toplevel
  g, _ = certified[True]
  other = one_layer.build('token_times_mean', OneLayer(Grid(1, 3, 4)))
  with pytest.raises(ValueError, match='not a realization of this net'):
    certificate.certify_lp(other, g)
