"""Lemma 6 at scale: planned lam/epsilon/bits, exact params, certified evaluation.

The oracle here is ``transformer_ua.oracle``: the realized network evaluated literally
in mpmath (params converted from the exact rationals, softmax with the max subtracted,
ReLU as max(0, .)) at twice the plan's precision; it shares no code with exact.ball.
"""

import warnings
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from transformer_ua import oracle
from transformer_ua.studies import realization_certified
from transformer_ua.yun import build_approximator
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.realization import plan
from transformer_ua.yun.stages import contextual_ties as ct
from transformer_ua.yun.bounds import decomposition

from realization_fixtures import exact134, net134, ties134  # pylint: disable=unused-import



def test_planned_lam_epsilon_reproduce_g_bar_in_float64(net134, exact134):
  p, _ = exact134
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', plan.FloatRealizationWarning)
    g = net134.realize(lam=float(p.lam), epsilon=float(p.epsilon), dtype='float64')
  rep = decomposition.realization_error(net134, g, samples=512)
  assert rep['reproduces'], rep


def test_exact_params_same_structure_as_float(net134, exact134):
  p, g = exact134
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', plan.FloatRealizationWarning)
    gf = net134.realize(lam=float(p.lam), epsilon=float(p.epsilon), dtype='float64')
  ex = g.exact_params()
  for i in range(len(g.segments)):
    for part in ('attention', 'feedforward'):
      for key, val in ex[f'segment_{i}'][part].items():
        fl = gf.params[f'segment_{i}'][part][key]
        assert val.shape == fl.shape, (i, part, key)
        assert all(isinstance(v, (int, Fraction)) for v in val.ravel())
        np.testing.assert_allclose(val.astype(np.float64), fl, rtol=1e-12, atol=0)
  att = ex['segment_1']['attention']
  assert att['W_Q'].ndim == 4 and att['b_Q'].ndim == 3 and att['W_O'].ndim == 4


@pytest.mark.parametrize('positional', [False, True])
def test_apply_certified_encloses_mpmath_at_twice_the_bits(positional):
  net = build_approximator('token_times_mean', d=1, n=3 if not positional else 2,
                           resolution=4, positional=positional)
  p = plan.plan_realization(net)
  g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact')
  rng = np.random.default_rng(3)
  # an arbitrary point (possibly inside a ramp window: g != g_bar there, still
  # enclosed) and two cube-interior points (where g ~ g_bar)
  x = np.concatenate([rng.random((1, net.n, 1)),
                      decomposition.interior_points(rng, 2, Grid(1, net.n, 4))])
  mid, rad = g.apply_certified(x)
  assert np.all(rad < 1e-6)
  for b in range(x.shape[0]):
    ref = oracle.MpNetwork(g.segments, g.exact_params(), g.positional, 2 * p.bits)(x[b])
    for j in range(net.n):
      with mpmath.workprec(2 * p.bits):
        assert abs(ref[j][0] - mpmath.mpf(mid[b, j, 0])) <= mpmath.mpf(rad[b, j, 0])
  np.testing.assert_allclose(mid[1:], net.apply(x[1:]), atol=1e-6)


def test_certified_bound_dominates_sampled_errors(net134, exact134):
  p, g = exact134
  cert = g.certify_interiors(workers=1)
  assert cert['certified'] and cert['cubes'] == 20   # C(4 + 3 - 1, 3) multisets
  rng = np.random.default_rng(0)
  x = decomposition.interior_points(rng, 4, Grid(1, 3, 4))
  gbar = net134.apply(x)
  for b in range(x.shape[0]):
    ref = oracle.MpNetwork(g.segments, g.exact_params(), g.positional, 2 * p.bits)(x[b])
    err = max(abs(float(ref[j][0]) - gbar[b, j, 0]) for j in range(3))
    assert err <= cert['max_abs_error']


def test_low_lam_or_low_bits_is_not_certified(net134, exact134):
  p, g = exact134
  low_lam = net134.realize(lam=8, epsilon=p.epsilon, dtype='exact')
  assert not low_lam.certify_interiors(workers=1)['certified']
  low_bits = g.certify_interiors(bits=24, check_plan=False, workers=1)
  assert not low_bits['certified']


def test_bad_input_one_line_errors(net134, exact134):
  p, g = exact134
  for tol in (0, -1e-3):
    with pytest.raises(ValueError, match='tolerance'):
      plan.plan_realization(net134, tolerance=tol)
  with pytest.raises(ValueError, match='dtype'):
    net134.realize(lam=1.0, epsilon=0.01, dtype='float16')
  with pytest.raises(ValueError, match='below'):
    g.apply_certified(np.full((1, 3, 1), 0.3), bits=p.bits - 1)
  with pytest.raises(ValueError, match=r'\[0, 1\)'):
    g.apply_certified(np.full((1, 3, 1), 1.5))
  with pytest.raises(ValueError, match='shape'):
    g.apply_certified(np.zeros((1, 2, 1)))
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', plan.FloatRealizationWarning)
    gf = net134.realize(lam=1e3, epsilon=0.01, dtype='float64')
  with pytest.raises(ValueError, match="dtype='exact'"):
    gf.apply_certified(np.zeros((1, 3, 1)))


def test_study_selects_rows_by_parts_of_their_labels():
  assert [c[0] for c in realization_certified.select('T3')] == ['T3 prefix_mean (1,3,4)']
  assert [c[0] for c in realization_certified.select('ties=complete attention')] == [
      'T2 ties=complete attention_map (1,3,8)']
  assert len(realization_certified.select('')) == 11
  with pytest.raises(ValueError, match="'T9' is in no row label"):
    realization_certified.select('T9')


@pytest.mark.slow
def test_theorem2_n16_every_cube_interior_certified():
  net = build_approximator('token_times_mean', d=1, n=3, resolution=16)
  p = plan.plan_realization(net)
  g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact')
  cert = g.certify_interiors()
  assert cert['cubes'] == 816 and cert['certified'], cert


# -- ties='complete' (yun.stages.contextual_ties): offset FF layer, sweep with shift V + 2n,
# global min head, max + counting heads; planned, realized exactly and certified by the
# same code path.


def _repeated_points(rng, N):
  """Cube-interior points with repeated cells (2 and 3 tokens in one cell), n = 3, d = 1."""
  k = np.asarray([[0, 0, 0], [1, 1, 3], [2, 0, 2], [N - 1, N - 1, N - 1]])[..., None]
  return (k + 0.25 + 0.5 * rng.random(k.shape)) / N


def test_ties_apply_certified_encloses_mpmath_at_twice_the_bits(ties134):
  net, p, g = ties134
  rng = np.random.default_rng(5)
  x = np.concatenate([rng.random((1, 3, 1)), _repeated_points(rng, 4)])
  mid, rad = g.apply_certified(x)
  assert np.all(rad[1:] < 1e-6)
  for b in range(x.shape[0]):
    ref = oracle.MpNetwork(g.segments, g.exact_params(), g.positional, 2 * p.bits)(x[b])
    for j in range(3):
      with mpmath.workprec(2 * p.bits):
        assert abs(ref[j][0] - mpmath.mpf(mid[b, j, 0])) <= mpmath.mpf(rad[b, j, 0])
  # repeated cells are not the bad set here: g ~ g_bar = f_bar != 0 there
  np.testing.assert_allclose(mid[1:], net.apply(x[1:]), atol=1e-6)
  assert np.all(np.abs(net.apply(x[1:])) > 0)


def test_ties_certified_bound_dominates_sampled_errors(ties134):
  net, p, g = ties134
  cert = g.certify_interiors(workers=1)
  assert cert['certified'] and cert['cubes'] == 20
  rng = np.random.default_rng(1)
  x = np.concatenate([_repeated_points(rng, 4),
                      decomposition.interior_points(rng, 2, Grid(1, 3, 4))])
  gbar = net.apply(x)
  for b in range(x.shape[0]):
    ref = oracle.MpNetwork(g.segments, g.exact_params(), g.positional, 2 * p.bits)(x[b])
    err = max(abs(float(ref[j][0]) - gbar[b, j, 0]) for j in range(3))
    assert err <= cert['max_abs_error']
  assert not g.certify_interiors(bits=24, check_plan=False, workers=1)['certified']


@pytest.mark.slow
@pytest.mark.parametrize('N', [2, 8])
def test_ties_every_cube_interior_certified(N):
  net = build_approximator('token_times_mean', d=1, n=3, resolution=N, ties='complete')
  p = plan.plan_realization(net)
  g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact')
  cert = g.certify_interiors()
  assert cert['cubes'] == ct.num_classes(Grid(1, 3, N)) and cert['certified'], cert
