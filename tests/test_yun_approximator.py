"""Theorems 2 and 3 end to end: Appendix G's network, build_approximator,
Lemma 6 realization, the error decomposition, and the main job."""

from fractions import Fraction
import itertools
import json
import os

import numpy as np
import pytest

from transformer_ua import activations, construction, yun
from transformer_ua.targets import distances
from transformer_ua.targets import functions as targets
from transformer_ua.yun import approximator
from transformer_ua.yun.bounds import bad_set
from transformer_ua.yun.bounds import decomposition
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.realization import plan
from transformer_ua.yun.stages import contextual_params
from transformer_ua.yun.stages import contextual_ties
from transformer_ua.yun.variants.paper import Paper
from transformer_ua.yun.variants.ties_complete import TiesComplete

#: Tests that realize in float64 where the plan says float64 cannot carry the network:
#: the FloatRealizationWarning that says so is expected there.
FLOAT_ON_PURPOSE = pytest.mark.filterwarnings(
    'ignore::transformer_ua.yun.realization.plan.FloatRealizationWarning')


def _all_cells(d, n, N):
  return np.asarray(list(itertools.product(range(N), repeat=d * n))).reshape(-1, n, d)


# ---------------------------------------------------------------------------
# build_approximator.
# ---------------------------------------------------------------------------


@pytest.fixture(scope='module')
def thm2():
  return yun.build_approximator('token_times_mean', d=1, n=3, resolution=3)


@pytest.fixture(scope='module')
def thm3():
  return yun.build_approximator('prefix_mean', d=1, n=2, resolution=3, positional=True)


def test_theorem2_g_bar_is_f_bar_off_the_bad_set_and_zero_on_it(thm2):
  k = _all_cells(1, 3, 3)
  centers = targets.cell_centers(k, 3)
  out = thm2.apply(centers)
  good = bad_set.distinct_columns(k)
  # A_L is f at the class representative, permuted: equal up to float summation order.
  np.testing.assert_allclose(out[good], thm2.target(centers)[good], rtol=1e-14, atol=0)
  np.testing.assert_array_equal(out[~good], 0.0)
  # The literal float64 network agrees (paper values; small configuration).
  np.testing.assert_allclose(thm2.apply_literal(centers), out, atol=1e-9)
  # Outside the unit cube the API refuses (as for Theorem 3); the network itself keeps
  # the paper's 0 there (Lemma 7 maps X out of range, no bump fires).
  with pytest.raises(ValueError, match=r'\[0, 1\)'):
    thm2.apply(centers[:4] + 1.0)
  _, bump = thm2.g_bar.select(centers[:4] + 1.0)
  np.testing.assert_array_equal(thm2.g_bar.value.payload(np.asarray(bump), thm2.values), 0.0)


def test_theorem2_g_bar_is_permutation_equivariant(thm2):
  x = np.random.default_rng(3).random((200, 3, 1))
  perm = np.array([2, 0, 1])
  np.testing.assert_array_equal(thm2.apply(x[:, perm]), thm2.apply(x)[:, perm])


def test_theorem3_g_bar_equals_f_bar_on_every_cell(thm3):
  k = _all_cells(1, 2, 3)
  centers = targets.cell_centers(k, 3)
  np.testing.assert_array_equal(thm3.apply(centers), thm3.target(centers))
  x = np.random.default_rng(0).random((300, 2, 1))
  np.testing.assert_array_equal(thm3.apply(x), thm3.f_bar(x))
  assert not np.allclose(thm3.target(x[:, ::-1])[:, ::-1], thm3.target(x))  # not PE


def test_depth_reports_match_formulas(thm2, thm3):
  for net in (thm2, thm3):
    built = construction.stage_counts(net.layer_counts())
    assert built == net.paper_layer_counts()
    assert construction.kind_counts(net.layer_counts())['attention'] == built['contextual']
    assert net.depth() == sum(built.values())


@FLOAT_ON_PURPOSE
def test_realization_is_a_standard_transformer_that_reproduces_g_bar(thm2):
  g = thm2.realize(lam=1e4, epsilon=1e-2)
  dep = g.block_counts()
  assert dep['blocks'] == thm2.depth() == g.depth()
  assert (dep['heads'], dep['head_size'], dep['width']) == (2, 1, 4)
  assert dep['attention_on'] == construction.kind_counts(thm2.layer_counts())['attention']
  for seg in g.segments:
    assert (seg.kind, seg.normalizer, seg.activation) == ('block', 'softmax', 'relu')
  rep = decomposition.realization_error(thm2, g, samples=512)
  assert rep['reproduces'], rep
  weak = decomposition.realization_error(thm2, thm2.realize(lam=1.0, epsilon=1e-2), samples=512)
  assert weak['max_abs_error'] > 100 * max(rep['max_abs_error'], 1e-12)


@FLOAT_ON_PURPOSE
def test_positional_realization_keeps_e_and_reproduces(thm3):
  g = thm3.realize(lam=1e4, epsilon=1e-2)
  np.testing.assert_array_equal(g.params['E'][:, 0], [0.0, 1.0])
  assert decomposition.realization_error(thm3, g, samples=256)['reproduces']


# ---------------------------------------------------------------------------
# Bad input.
# ---------------------------------------------------------------------------


def test_bad_inputs_are_one_line_errors(thm2, thm3):
  with pytest.raises(ValueError, match='non-finite'):
    yun.build_approximator(lambda x: x * np.nan, d=1, n=2, resolution=2)
  with pytest.raises(ValueError, match='returned shape'):
    yun.build_approximator(lambda x: x[:, :1], d=1, n=2, resolution=2)
  with pytest.raises(ValueError, match='not permutation equivariant'):
    yun.build_approximator('prefix_mean', d=1, n=2, resolution=2)
  with pytest.raises(ValueError, match='not permutation equivariant'):
    yun.build_approximator(lambda x: x * np.arange(2)[None, :, None], d=1, n=2,
                           resolution=2)
  with pytest.raises(ValueError, match='layers'):
    yun.build_approximator('token_times_mean', d=2, n=4, resolution=64)
  with pytest.raises(ValueError, match='resolution'):
    yun.build_approximator('token_times_mean', d=1, n=2, resolution=1)
  with pytest.raises(ValueError, match='lam must be a positive'):
    thm2.realize(lam=-1.0, epsilon=1e-2)
  with pytest.raises(ValueError, match='epsilon must be a positive'):
    thm2.realize(lam=1.0, epsilon=0.0)
  with pytest.raises(ValueError, match='dtype'):
    thm2.realize(lam=1.0, epsilon=1e-2, dtype='float16')
  with pytest.raises(ValueError, match='p must be'):
    yun.error_decomposition(thm2, p=0.5, samples=10)
  with pytest.raises(ValueError, match='shape'):
    thm2.apply(np.zeros((2, 2, 1)))
  with pytest.raises(ValueError, match=r'\[0, 1\)'):
    thm3.apply(np.full((1, 2, 1), 1.5))
  with pytest.raises(ValueError, match=r'\[0, 1\)'):  # one rule for both theorems
    thm2.apply(np.full((1, 3, 1), -0.5))


@FLOAT_ON_PURPOSE
def test_realized_apply_has_the_same_input_checks(thm2, thm3):
  for net in (thm2, thm3):
    g = net.realize(lam=1e4, epsilon=1e-2)
    n, d = net.n, net.d
    assert g.d == d
    with pytest.raises(ValueError, match='shape'):
      g.apply(np.zeros((2, n + 1, d)))      # wrong n: was silently accepted
    with pytest.raises(ValueError, match='shape'):
      g.apply(np.zeros((2, n, d + 1)))      # wrong d: was a Flax ScopeParamShapeError
    with pytest.raises(ValueError, match='NaN'):
      g.apply(np.full((1, n, d), np.nan))
    with pytest.raises(ValueError, match=r'\[0, 1\)'):
      g.apply(np.full((1, n, d), 1.0))


def test_epsilon_below_float64_resolution_is_refused_before_realizing(thm2):
  # d=1, n=3, N=32: t_r = 32^6 * 31 ~ 3.3e10 has float64 spacing 3.8e-6 > epsilon.
  with pytest.raises(ValueError, match='allowed: epsilon >= 1.53e-05.*largest resolution '
                                       'is N=21'):
    approximator.check_epsilon(1e-6, Paper(Grid(1, 3, 32)))
  approximator.check_epsilon(1e-6, Paper(Grid(1, 3, 21)))  # spacing 2.4e-7: fine
  with pytest.raises(ValueError, match='float64 resolves'):
    thm2.realize(lam=1e4, epsilon=1e-14)  # t_r = 3^6 * 2 = 1458: 4 ulps = 9.1e-13


def test_epsilon_check_is_for_float_dtypes_only(thm2):
  """dtype='exact' carries epsilon as a Fraction (no ulps), so the float64 ramp check does
  not apply to it; the plan's epsilon (what the exact path uses) passes it anyway."""
  g = thm2.realize(lam=1e4, epsilon=1e-14, dtype='exact')  # refused for float64 above
  assert g.dtype == 'exact' and g.epsilon == Fraction(1e-14)
  p = plan.plan_realization(thm2)
  approximator.check_epsilon(float(p.epsilon), thm2.variant)


def test_epsilon_check_follows_the_tie_complete_interval():
  # ties='complete' has its own (t_l, t_r): the check reads that one, not Lemma 8's.
  paper = approximator.min_epsilon(Paper(Grid(1, 3, 8)))
  complete = approximator.min_epsilon(TiesComplete(Grid(1, 3, 8)))
  assert complete > 1000 * paper  # t_r(complete) ~ 5e16 vs t_r(paper) ~ 1.8e6 at N=8
  assert complete == approximator.RAMP_ULPS * float(
      np.spacing(float(contextual_ties.interval(Grid(1, 3, 8))[1])))
  assert paper == approximator.RAMP_ULPS * float(
      np.spacing(float(contextual_params.interval(Grid(1, 3, 8))[1])))


def test_relu_expansion_refuses_a_collapsed_ramp():
  phi = activations.Phi((1e10, 2e10), ((0.0, 0.0), (0.0, 1.0), (0.0, 0.0)))
  with pytest.raises(ValueError, match='zero width'):  # was ZeroDivisionError
    activations.relu_expansion(phi, 1e-7)
  activations.relu_expansion(phi, 1e-3)


@FLOAT_ON_PURPOSE
def test_short_reprs(thm2):
  g = thm2.realize(lam=1e4, epsilon=1e-2)
  for obj in (thm2, g, thm2.g_bar, thm2.g_bar.quantization, thm2.g_bar.contextual,
              thm2.g_bar.value):
    text = repr(obj)
    assert len(text) < 200 and '\n' not in text and 'array' not in text, text
  assert repr(thm2.g_bar.contextual).startswith('ContextualMapping(Lemma 8: d=1, n=3, N=3')


# ---------------------------------------------------------------------------
# The main job.
# ---------------------------------------------------------------------------


@FLOAT_ON_PURPOSE
def test_main_job_writes_json_and_figures(tmp_path):
  from transformer_ua.studies import approximation
  from experiments.configs import approximate as config_lib
  c = config_lib.get_config()
  c.resolution = 3
  c.ladder = (2, 3)
  c.samples = 2000
  c.sweep_samples = 500
  c.map_samples = 128
  c.lam_sweep = (1.0, 1e4)
  c.epsilon_sweep = (1e-2, 1e-6)
  c.certify_epsilon = 0.5   # N = 3
  lines = []
  res = approximation.run(c, str(tmp_path), log=lines.append)
  assert res['depth']['built'] == res['depth']['formula']
  assert [r['resolution'] for r in res['ladders'][0]['rows']] == [2, 3]
  complete = res['ladders'][1]   # config.compare_ties: the same ladder with ties='complete'
  assert complete['ties'] == 'complete'
  # 0 up to float rounding of f itself: token_times_mean sums the mean in another order
  # for a permuted input (exactly 0 for an exactly equivariant f: tests/test_yun_contextual_ties.py).
  assert all(r['exact']['dp_f_bar_g_bar'] < 1e-12 for r in complete['rows'])
  assert any(r['exact']['dp_f_bar_g_bar'] > 0.1 for r in res['ladders'][0]['rows'])
  assert res['realization']['reproduces']
  # the headline: a certified d_p(f, g) <= certify_epsilon; at the main resolution the
  # paper's network, its clamped version and ties='complete' (clamped), each certified
  head = res['certified']['headline']
  assert head['certificate']['total'] <= c.certify_epsilon
  assert lines[[l.startswith('[certified] CERTIFIED: d_p(f, g) <= ') for l in lines].index(True)]
  rows = {r['label']: r['certificate'] for r in res['certified']['main_resolution']}
  assert set(rows) == {'as the paper builds it', 'with the output clamp',
                       'ties=complete, output clamp'}
  assert rows['ties=complete, output clamp']['terms']['fbar_gbar'] == 0
  assert rows['with the output clamp']['total'] < 1 < rows['as the paper builds it']['total']
  report = (tmp_path / 'approximate.md').read_text()
  assert '## Certified: d_p(f, g) over the whole unit cube' in report
  assert 'sampled error decomposition (not certified)' in report
  for path in res['figures']:
    assert os.path.getsize(path) > 1000
  with open(tmp_path / 'approximate.json') as fh:
    saved = json.load(fh)
  assert set(saved['decomposition']['estimates']) == {f'{a}|{b}' for a, b in
                                                      decomposition.DECOMPOSITION}
  assert any('error decomposition' in line for line in lines)


@FLOAT_ON_PURPOSE
def test_main_job_names_a_precision_failure(tmp_path):
  from transformer_ua.studies import approximation
  from experiments.configs import approximate as config_lib
  c = config_lib.get_config()
  c.resolution, c.ladder, c.dtype = 3, (2,), 'float32'  # float32 cannot hold t_r = 1458
  c.samples, c.sweep_samples, c.map_samples = 500, 100, 64
  c.lam_sweep, c.epsilon_sweep = (1e4,), (1e-2,)
  c.certify_epsilon = 0.5
  lines = []
  res = approximation.run(c, str(tmp_path), log=lines.append)
  assert res['decomposition']['precision_failure']
  failure = [l for l in lines if 'PRECISION FAILURE' in l]
  assert len(failure) == 1 and 't_r = 1.46e+03' in failure[0], lines
  sweep = [l for l in lines if l.startswith('  lambda sweep of [float32] at epsilon=0.001:')]
  assert len(sweep) == 1 and 'sampled on 100 uniform points' in sweep[0], lines
  row = [l for l in lines if l.startswith('    lambda=1e+04 ')]
  assert len(row) == 1 and 'd_p(g_bar, g) = ' in row[0]
  assert ' off: ' in row[0], row   # float32 cannot represent g_bar here
  assert any('bad set (inputs with repeated columns, measure' in l for l in lines)


def test_main_job_rejects_bad_config():
  from transformer_ua.studies import approximation
  from experiments.configs import approximate as config_lib
  c = config_lib.get_config()
  c.p = 0.5
  with pytest.raises(approximation.ConfigError, match='p must be'):
    approximation.run(c, '/nonexistent-dir-not-created')
  c = config_lib.get_config()
  c.target = 'nope'
  with pytest.raises(approximation.ConfigError, match='allowed'):
    approximation.run(c, '/nonexistent-dir-not-created')
  c = config_lib.get_config()
  c.target = 'prefix_mean'  # not equivariant: positional=False was silently overridden
  with pytest.raises(approximation.ConfigError, match='positional=True'):
    approximation.run(c, '/nonexistent-dir-not-created')
  c = config_lib.get_config()
  c.resolution, c.epsilon = 32, 1e-6  # was a ZeroDivisionError after minutes of build
  # the suggestion is a flag value the binary accepts
  with pytest.raises(approximation.ConfigError, match=r'allowed: --config.epsilon >= \d'):
    approximation.run(c, '/nonexistent-dir-not-created')
  c = config_lib.get_config()
  c.certify_epsilon = 0.0
  with pytest.raises(approximation.ConfigError, match='config.certify_epsilon=0.0'):
    approximation.run(c, '/nonexistent-dir-not-created')
  c.certify_epsilon, c.certify_margin = 0.2, 0.5
  with pytest.raises(approximation.ConfigError, match='config.certify_margin'):
    approximation.run(c, '/nonexistent-dir-not-created')


def test_main_job_sweeps_skip_ramps_the_dtype_cannot_resolve():
  from transformer_ua.studies import approximation
  from transformer_ua.yun import build_approximator
  from experiments.configs import approximate as config_lib
  c = config_lib.get_config()
  c.lam_sweep, c.epsilon_sweep, c.sweep_samples, c.map_samples = (), (1e-2, 1e-13), 50, 16
  lines = []
  net = build_approximator('token_times_mean', d=1, n=3, resolution=4)
  with pytest.warns(plan.FloatRealizationWarning):
    out = approximation.run_sweeps(net, c, lines.append)   # N=4: 4 ulps of t_r = 7.3e-12
  assert out['skipped_epsilons'] == [1e-13] and [r['epsilon'] for r in out['epsilon']] == [1e-2]
  assert any(l.startswith('  epsilon=1e-13 < ') and 'skipped' in l for l in lines), lines
