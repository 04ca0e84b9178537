"""``yun.approximate`` (yun.search): its constructions, its choice, its refusals, its progress.

Oracles: sizes worked out by hand from the paper's layer counts (module docstring of
``yun.grid``) and the T^{2,1,4} block's weights; the f-term's closed form
L (delta / 2) (nd nd / (nd + p))^{1/p} solved for N by hand.
"""

import dataclasses
import math
import re
from fractions import Fraction

import numpy as np
import pytest

from transformer_ua import yun
from transformer_ua.yun import search, term_estimates
from transformer_ua.yun.bounds import certificate
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.variants import registry

# One T^{2,1,4} block at d = 1: attention W_Q, b_Q, W_K, W_V, W_O of 2 heads of size 1
# (2 + 2 + 2 + 2 + 2 = 10) and the width-4 feed-forward W_1 4, b_1 4, W_2 4, b_2 1 (13).
BLOCK_PARAMS_D1 = 23
# d = 2: attention 2 (2 + 1 + 2 + 2 + 2) = 18, feed-forward 8 + 4 + 8 + 2 = 22.
BLOCK_PARAMS_D2 = 40

# d = 1, n = 2, N = 3 (M = N^d = 3 cells), by hand, + 1 clamp block each:
#   paper          g_q d(N+1) = 4, g_c N^d + 1 = 4, g_v n C(3, 2) + d + 1 = 8      -> 17
#   ties_complete  g_q 4, g_c N^d + 3 = 6, g_v M C(M + n - 2, n - 1) + 2 = 9 + 2   -> 22
#   one_layer      g_q 4, g_c 1 attention + 1 shift = 2, g_v 9 bumps              -> 16
#   positional     g_q d n N = 6, g_c n N^d + 1 = 7, g_v n N^(dn) + 2 = 20        -> 34 (+ E: 2)
HAND_BLOCKS = {'paper': 17, 'ties_complete': 22, 'one_layer': 16, 'positional': 34}
HAND_PARAMS = {k: v * BLOCK_PARAMS_D1 + (2 if k == 'positional' else 0)
               for k, v in HAND_BLOCKS.items()}


@pytest.fixture
def by_hand(monkeypatch):
  """The search restricted to what this file works out by hand: the four deep
  constructions (other registry entries have their own tests) and the global-modulus
  f-term L (delta / 2) (nd nd / (nd + p))^{1/p} (the per-cube one is tighter and is
  tested with ``f_term``)."""
  monkeypatch.setattr(registry, 'VARIANTS',
                      {k: v for k, v in registry.VARIANTS.items() if k in HAND_BLOCKS})
  monkeypatch.setattr(term_estimates, 'f_term_estimate', lambda *a, d, n, resolution, p, **_: (
      certificate.f_fbar_bound(a[-1], Grid(d, n, resolution), p=p)['bound']))


def test_registry_names_and_theorems():
  assert {'paper', 'ties_complete', 'positional', 'one_layer'} <= set(registry.VARIANTS)
  assert yun.VARIANTS is registry.VARIANTS
  for name, c in registry.VARIANTS.items():
    assert c.name == name and c.theorem in ('Theorem 2', 'Theorem 3') and c.summary
  assert registry.VARIANTS['positional'].theorem == 'Theorem 3'
  for c in registry.VARIANTS.values():   # Theorem 3 applies to every f, Theorem 2's not
    assert c.applies(False) and c.applies(True) == (c.theorem == 'Theorem 3')


@pytest.mark.parametrize('name', sorted(HAND_BLOCKS))
def test_closed_form_size_matches_the_hand_count(name):
  size = registry.VARIANTS[name](Grid(1, 2, 3)).size()
  assert size['blocks'] == HAND_BLOCKS[name]
  assert size['params'] == HAND_PARAMS[name]
  assert size['max_width'] == 4


def test_block_params_at_d2_by_hand():
  # one_layer, d = 2, n = 2, N = 2: M = 4; g_q 2 (2 + 1) = 6, g_c 2, ids 4 C(4, 1) = 16,
  # clamp ceil(2 / 2) = 1 -> 25 blocks
  size = registry.VARIANTS['one_layer'](Grid(2, 2, 2)).size()
  assert size['blocks'] == 25 and size['params'] == 25 * BLOCK_PARAMS_D2


def test_closed_form_size_is_the_built_network():
  # the hand count above is also what is built (ties_complete: the explicit test below)
  net = registry.VARIANTS['one_layer'](Grid(1, 2, 3)).build('token_times_mean')
  g = net.realize(margin=Fraction(1, 64), tolerance=1e-6, dtype='exact', clamp=True)
  assert g.depth() == HAND_BLOCKS['one_layer'] and g.num_params() == HAND_PARAMS['one_layer']


def test_default_picks_the_fewest_parameters_and_says_so(by_hand):
  # token_times_mean: L = 2, d = 1, n = 2, p = 2: d_p(f, f_bar) <= (1/N) (4/4)^(1/2) = 1/N;
  # 1/N <= 9/10 * 0.45 = 0.405 first at N = 3; at N = 3 the hand sizes order
  # one_layer (368) < paper (391, and its bad set needs a larger N) < ties_complete (506)
  lines = []
  res = search.approximate('token_times_mean', 0.45, arithmetic='exact', d=1, n=2, workers=1,
                           progress=lines.append)
  assert res.construction == 'one_layer' and res.rule == search.RULE
  assert 'fewest parameters' in res.rule
  assert res.net.resolution == 3 and res.certificate.total <= 0.45
  assert res.g.num_params() == HAND_PARAMS['one_layer']
  assert [a['construction'] for a in res.attempts] == ['one_layer']
  assert res.attempts[0]['params'] == 368 and res.attempts[0]['holds']
  assert res.attempts[0]['estimated_seconds'] > 0 and res.attempts[0]['seconds'] > 0


def test_explicit_construction_is_built(by_hand):
  res = search.approximate('token_times_mean', 0.45, arithmetic='exact', d=1, n=2, workers=1,
                           construction='ties_complete')
  assert res.construction == 'ties_complete' and res.rule == 'construction= given'
  assert res.g.num_params() == HAND_PARAMS['ties_complete']
  assert res.g.depth() == HAND_BLOCKS['ties_complete']
  assert res.certificate.total <= 0.45 and res.certificate.clamp
  assert res.certificate.terms['fbar_gbar'] == 0.0   # no bad set


def test_refusal_over_the_layer_limit_names_construction_n_layers_minutes(by_hand):
  # L (delta/2) sqrt(nd nd / (nd + p)) = (1/N) sqrt(9/5) <= 0.9 * 0.01 first at N = 150;
  # one_layer there: g_q 151 + 2 + 150 C(151, 2) = 1,698,750 bumps + 1 clamp
  blocks = 151 + 2 + 150 * math.comb(151, 2) + 1
  with pytest.raises(ValueError) as e:
    search.approximate('token_times_mean', 0.01, arithmetic='exact', d=1, n=3)
  msg = str(e.value)
  assert '\n' not in msg
  assert "N >= 150 with the smallest construction 'one_layer'" in msg
  assert f'{blocks:,} layers (blocks)' in msg and f'{blocks * BLOCK_PARAMS_D1:,} params' in msg
  assert 'estimated' in msg and 'min' in msg and 'max_layers=100000' in msg


def test_refusal_over_the_time_budget_names_the_smallest(by_hand):
  with pytest.raises(ValueError) as e:
    search.approximate('token_times_mean', 0.45, arithmetic='exact', d=1, n=2, max_minutes=1e-4)
  msg = str(e.value)
  assert '\n' not in msg
  assert "N >= 3 with the smallest construction 'one_layer'" in msg
  assert '16 layers (blocks), 368 params, estimated' in msg and 'max_minutes=0.0001' in msg


def test_the_old_silent_case_now_answers_before_building(by_hand):
  # token_times_mean at 0.05 (d = 1, n = 3) ran 35 minutes without a line. Now its plan is
  # known before building: N = 30 (sqrt(9/5) / 30 = 0.0447 <= 0.045 < sqrt(9/5) / 29),
  # one_layer, and a budget of a second refuses it in one line with that size.
  with pytest.raises(ValueError) as e:
    search.approximate('token_times_mean', 0.05, arithmetic='exact', d=1, n=3, max_minutes=1 / 60)
  blocks = 31 + 2 + 30 * math.comb(31, 2) + 1
  assert f"N >= 30 with the smallest construction 'one_layer'" in str(e.value)
  assert f'{blocks:,} layers' in str(e.value)


def test_unknown_construction_lists_the_allowed():
  with pytest.raises(ValueError) as e:
    search.approximate('token_times_mean', 0.45, arithmetic='exact', d=1, n=2, construction='wide')
  msg = str(e.value)
  assert msg.startswith("construction='wide'; allowed: None") and '\n' not in msg
  for name in registry.VARIANTS:
    assert repr(name) in msg


def test_theorem2_construction_refused_for_theorem3():
  with pytest.raises(ValueError, match=r"construction='one_layer' is Theorem 2 .* "
                                       r"'positional'"):
    search.approximate('prefix_mean', 0.45, arithmetic='exact', d=1, n=2, positional=True,
                       construction='one_layer')


@pytest.mark.parametrize('kwargs,match', [
    ({'n': '3'}, "n='3'; it must be an integer in \\[2, 1024\\]"),
    ({'n': 10 ** 6}, 'n=1000000; it must be an integer in \\[2, 1024\\]'),
    ({'n': np.int64(10 ** 6)}, 'n=1000000; it must be'),
    ({'n': 10 ** 5000}, r'n=~10\^5000; it must be'),
    ({'n': True}, 'n=True; it must be an integer'),
    ({'n': 1}, 'n=1; it must be an integer in'),
    ({'d': 2.0}, 'd=2.0; it must be an integer in \\[1, 16\\]'),
    ({'d': 0}, 'd=0; it must be'),
    ({'epsilon': '0.1'}, "epsilon='0.1'; it must be a positive finite number"),
    ({'epsilon': True}, 'epsilon=True; it must be a positive'),
    ({'epsilon': 0.0}, 'epsilon=0.0; it must be a positive'),
    ({'epsilon': -1.0}, 'epsilon=-1.0'),
    ({'epsilon': float('nan')}, 'epsilon=nan'),
    ({'epsilon': np.float64(-0.5)}, r'epsilon=-0.5; it must'),
    ({'p': '2'}, "p='2'; it must be a finite number >= 1"),
    ({'p': 0.5}, 'p must be a finite number >= 1'),
    ({'p': True}, 'p must be a finite number >= 1'),
    ({'workers': 0}, 'workers=0; it must be an integer in'),
    ({'workers': '2'}, "workers='2'; it must be an integer"),
    ({'workers': True}, 'workers=True'),
    ({'max_minutes': 0}, 'max_minutes=0; it must be a positive'),
    ({'max_layers': 1.5}, 'max_layers=1.5; it must be an integer >= 1'),
    ({'positional': 'no'}, "positional='no'; it must be True or False"),
    ({'progress': 'yes'}, "progress='yes'; it must be None .*True, False or a callable"),
    ({'lipschitz': 0}, 'lipschitz=0; it must be a positive'),
    ({'lipschitz': float('nan')}, 'lipschitz=nan'),
    ({'epsilon': 1e-3, 'max_layers': 1000}, r'needs resolution N >= \d+ .* layers'),
    ({'f': lambda x: x}, 'no known modulus of continuity'),
])
def test_bad_input_one_line(kwargs, match, by_hand):
  args = {'f': 'token_times_mean', 'epsilon': 0.45, 'd': 1, 'n': 3, 'arithmetic': 'exact',
          **kwargs}
  f, eps = args.pop('f'), args.pop('epsilon')
  with pytest.raises(ValueError, match=match) as e:
    search.approximate(f, eps, **args)
  assert '\n' not in str(e.value) and 'np.' not in str(e.value)


class _Stop(Exception):
  pass


def test_progress_line_comes_before_the_build(monkeypatch, by_hand):
  lines, seen = [], []
  entry = registry.VARIANTS['one_layer']

  def build(*args):
    seen.append(list(lines))
    raise _Stop

  monkeypatch.setitem(registry.VARIANTS, 'one_layer', type('Stub', (entry,), {'build': build}))
  with pytest.raises(_Stop):
    search.approximate('token_times_mean', 0.45, arithmetic='exact', d=1, n=2, progress=lines.append)
  assert len(seen) == 1 and len(seen[0]) == 3   # the search's lines, the attempt's, no more
  assert seen[0][0].startswith('approximate: epsilon=0.45, d=1, n=2, p=2, arithmetic=exact: choosing N for ')
  # the candidates in the order of the rule, sizes by hand (the paper's N is larger)
  assert seen[0][1].startswith('approximate: candidates, fewest parameters first: one_layer '
                               'N=3 (368 params, ')
  assert seen[0][1].index('ties_complete N=3 (506 params') < seen[0][1].index('positional N=3 '
                                                                             '(784 params')
  assert seen[0][2].startswith('approximate: attempt 1: one_layer N=3: 16 blocks, 368 params, '
                               'estimated ')


def test_progress_true_prints_start_and_end(capsys, by_hand):
  search.approximate('token_times_mean', 0.45, arithmetic='exact', d=1, n=2, workers=1, progress=True)
  out = capsys.readouterr().out.splitlines()
  starts = [s for s in out if s.startswith('approximate: attempt 1: one_layer N=3: ')]
  ends = [s for s in out if s.startswith('approximate: attempt 1: one_layer N=3 done in ')]
  assert len(starts) == 1 and len(ends) == 1 and out.index(starts[0]) < out.index(ends[0])
  assert '<= 0.45' in ends[0]


def test_a_failing_certificate_queues_the_next_resolution(monkeypatch, by_hand):
  # the first certificate is made to fail (its total replaced by 1): the search goes on
  # with the next candidate by parameters, one_layer at N = 4, and records both attempts
  lines, real, calls = [], certificate.certify_lp, []

  def certify_lp(*args, **kw):
    calls.append(1)
    cert = real(*args, **kw)
    return dataclasses.replace(cert, total=1.0) if len(calls) == 1 else cert

  monkeypatch.setattr(certificate, 'certify_lp', certify_lp)
  res = search.approximate('token_times_mean', 0.45, arithmetic='exact', d=1, n=2, workers=1,
                           construction='one_layer', progress=lines.append)
  assert [a['resolution'] for a in res.attempts] == [3, 4]
  assert not res.attempts[0]['holds'] and res.attempts[1]['holds']
  assert 'the certificate does not hold' in lines[3]
  assert lines[4].startswith('approximate: attempt 2: one_layer N=4: ')


def test_approximate_result_exports_to_onnx(tmp_path, by_hand):
  import onnxruntime   # pylint: disable=import-outside-toplevel
  from transformer_ua.networks import export_onnx   # pylint: disable=import-outside-toplevel
  res = search.approximate('token_times_mean', 0.45, arithmetic='exact', d=1, n=2, workers=1,
                           construction='ties_complete')
  path = export_onnx.export_onnx(res.g, tmp_path / 'g.onnx')
  sess = onnxruntime.InferenceSession(str(path))
  x = (np.asarray([[[0], [2]], [[1], [1]]]) + 0.5) / res.net.resolution
  (y,) = sess.run(None, {'X': x})
  assert y.shape == (2, 2, 1)
  # float64 rounds the planned ramps' cancellations (the exact g is what is certified),
  # but the last layers still clamp every output into the range of g_bar
  lo, hi = (float(v[0]) for v in res.net.output_range())
  assert np.all(y >= lo - 1e-9) and np.all(y <= hi + 1e-9), y


def test_f_term_slack_is_a_tenth_of_epsilon(by_hand):
  # the chosen N leaves >= epsilon / 10 for the realization, and N - 1 would not
  res = search.approximate('token_times_mean', 0.45, arithmetic='exact', d=1, n=2, workers=1)
  t1 = res.certificate.terms['f_fbar']
  assert t1 <= 0.9 * 0.45
  assert certificate.f_fbar_bound(Fraction(2), Grid(1, 2, 2), p=2.0)['bound'] > 0.405


def test_unreachable_epsilon_is_one_line_naming_the_windows(by_hand):
  # with the clamp, the windows' term at margin m is (n spread^2 (1 - (1 - 2m)^{nd}))^{1/2}
  # ~ (2 n^2 d m)^{1/2} spread: at m = 2^-28 about 1e-4, far above 1e-9
  with pytest.raises(ValueError) as e:
    search.approximate('token_times_mean', 1e-9, arithmetic='exact', d=1, n=2)
  msg = str(e.value)
  assert '\n' not in msg and 'smallest margin 2^-28' in msg and 'one_layer' in msg


def test_huge_sizes_print_as_powers_of_ten(by_hand):
  with pytest.raises(ValueError) as e:
    search.approximate('token_times_mean', 0.1, arithmetic='exact', d=16, n=2)
  msg = str(e.value)
  assert '\n' not in msg and len(msg) < 400
  assert re.search(r'~10\^\d+\.\d layers \(blocks\), ~10\^\d+\.\d params, estimated '
                   r'~10\^\d+\.\d min', msg), msg


def test_a_candidate_over_the_budget_is_skipped_with_a_line(monkeypatch, by_hand):
  # one_layer made to look slow: the next smallest by hand, ties_complete (506 params),
  # is attempted next, and the skip is said before it starts
  lines = []
  one = registry.VARIANTS['one_layer']
  ties = registry.VARIANTS['ties_complete']

  def build(*args):
    raise _Stop

  monkeypatch.setitem(registry.VARIANTS, 'one_layer',
                      type('Slow', (one,), {'seconds': lambda self, size, classes: 1e9}))
  monkeypatch.setitem(registry.VARIANTS, 'ties_complete', type('Stub', (ties,), {'build': build}))
  with pytest.raises(_Stop):
    search.approximate('token_times_mean', 0.45, arithmetic='exact', d=1, n=2, progress=lines.append)
  assert lines[2].startswith('approximate: skipped one_layer N=3: 16 blocks, 368 params, '
                             'estimated ')
  assert lines[2].endswith(': over the 10 min left of max_minutes=10')
  assert lines[3].startswith('approximate: attempt 1: ties_complete N=3: 22 blocks, 506 params')


def test_a_callable_with_only_a_local_modulus_is_certified_and_says_so():
  """f(X) = X with modulus delta / 2 (sup |x - c| on a cube): the f-term is the modulus
  bound (nd (delta / 2)^2)^(1/2) = sqrt(2) / 6 at N = 3, n = 2, d = 1, by hand."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  res = search.approximate(lambda x: x, 0.3, arithmetic='exact', d=1, n=2, workers=1,
                           modulus=lambda c, delta: np.full(c.shape, delta / 2))
  cert = res.certificate
  assert cert.resolution == 3 and cert.total <= 0.3
  assert cert.terms['f_fbar'] == pytest.approx(math.sqrt(2) / 6, rel=1e-9)
  assert cert.terms['f_fbar'] >= math.sqrt(2) / 6
  assert 'modulus' in str(cert) and 'given by the caller' in str(cert)


# -- the search's frictions: monotone N, hints, bounds rounded up ------------------------


def test_the_doubling_does_not_jump_past_the_per_cube_range(monkeypatch):
  # token_times_mean, d=1, n=3: per-cube T1(10) = 0.0379 > 0.9 x 0.0385 >= T1(11) = 0.0344,
  # while the global bound needs N = 44 (L-term 0.0838 at 16, halving with N). With the
  # per-cube range ending at N = 13 (F_TERM_CLASSES = 500: C(15, 3) = 455), the doubling
  # 2, 4, 8, 16 used to land at 16 on the global bound and bisect to ~44.
  monkeypatch.setattr(term_estimates, 'F_TERM_CLASSES', 500)
  target = search.targets_lib.get_target('token_times_mean', d=1, n=3)
  lip = search.target_bounds.check_lipschitz(None, target, 1, 3)
  s = search._Search(target, lip, epsilon=0.0385, d=1, n=3, p=2.0, clamp=True)
  c = registry.VARIANTS['integer_ids']
  assert s.per_cube_limit(c) == 13
  assert s.resolution(c) == 11
  assert s.f_term_method(c, 11) == 'per cube'
  assert s.f_term_method(c, 14).startswith('global Lipschitz bound')
  assert s.per_cube_estimate(c) >= 14


def test_a_refusal_past_the_per_cube_range_names_the_method_and_the_n_it_would_need(
    monkeypatch):
  monkeypatch.setattr(term_estimates, 'F_TERM_CLASSES', 500)
  with pytest.raises(ValueError) as e:
    yun.approximate('token_times_mean', 0.02, d=1, n=3, max_layers=5)
  msg = str(e.value)
  assert 'by the global Lipschitz bound' in msg and 'would need about N=' in msg
  said = int(re.search(r'would need about N=(\d+)', msg).group(1))
  needs = int(re.search(r'needs resolution N >= (\d+)', msg).group(1))
  assert 13 < said < needs and '\n' not in msg


def test_a_float32_jax_callable_refused_as_not_equivariant_hears_of_x64():
  jnp = pytest.importorskip('jax.numpy')

  def f(x):
    return jnp.asarray(x) * jnp.mean(x, axis=1, keepdims=True)
  with pytest.raises(ValueError, match='not permutation equivariant') as e:
    yun.approximate(f, 0.1, d=1, n=3, lipschitz=2.0)
  assert 'float32' in str(e.value) and 'jax_enable_x64' in str(e.value)


def test_a_non_equivariant_f_that_slips_the_probes_hears_of_positional(monkeypatch):
  monkeypatch.setattr(search.targets_lib, 'equivariance_error', lambda t, d, n: None)

  def prefix(x):
    return np.cumsum(x, axis=1) / 2
  with pytest.raises(ValueError, match='no certificate') as e:
    yun.approximate(prefix, 0.02, d=1, n=2, lipschitz=1.0)
  assert 'not permutation equivariant on' in str(e.value)
  assert 'positional=True' in str(e.value)


def test_progress_lines_print_bounds_rounded_up():
  lines = []
  res = yun.approximate('token_times_mean', 0.05, d=1, n=3, progress=lines.append)
  done = [ln for ln in lines if ' done in ' in ln][-1]
  said = Fraction(re.search(r'd_p\(f, g\) <= ([0-9.e-]+) <=', done).group(1))
  assert said >= Fraction(res.certificate.total)


def test_the_default_says_on_stderr_when_an_attempt_is_long(monkeypatch, capsys):
  monkeypatch.setattr(search, 'QUIET_SECONDS', 0.0)     # every attempt counts as long
  yun.approximate('token_times_mean', 0.2, d=1, n=3)
  err = capsys.readouterr().err
  assert 'approximate: attempt 1: integer_ids' in err and 'attempt 1 done in' in err
  monkeypatch.setattr(search, 'QUIET_SECONDS', 1e9)
  yun.approximate('token_times_mean', 0.2, d=1, n=3)
  assert capsys.readouterr().err == ''
  monkeypatch.setattr(search, 'QUIET_SECONDS', 0.0)
  yun.approximate('token_times_mean', 0.2, d=1, n=3, progress=False)
  assert capsys.readouterr().err == ''
