"""yun.stages.contextual_ties (ties='complete'): exact, whole small grids, repeats included."""

import itertools

import jax
import numpy as np
import pytest

from transformer_ua import construction, yun
from transformer_ua.verify.checks import count_duplicates
from transformer_ua.yun.bounds import decomposition
from transformer_ua.yun.stages import contextual_ties as ct
from transformer_ua.yun.stages import contextual
from transformer_ua.yun.stages import value
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.variants.ties_complete import TiesComplete


def _in_range_multisets(N, d, n):
  """Every multiset of n in-range columns as tick lists (a in [0, N^d))."""
  return list(itertools.combinations_with_replacement(range(N ** d), n))


# Prototype sizes of the task: N = 2..5 (d = 1, n = 2..4) and d = 2 (N = 2, 3; n = 2, 3).
PROTOTYPE_SIZES = ([(1, n, N) for N in range(2, 6) for n in range(2, 5)]
                   + [(2, n, N) for N in (2, 3) for n in (2, 3)])


@pytest.mark.parametrize('d,n,N', PROTOTYPE_SIZES)
def test_reference_is_one_to_one_on_multisets_with_repeats(d, n, N):
  """The pure-Python reference: every (multiset, value) pair gets its own id, in
  [t_l, t_r]; the id count is V C(V + n - 2, n - 1) (counted independently here)."""
  t_l, t_r = ct.interval(Grid(d, n, N))
  owner = {}
  for ms in _in_range_multisets(N, d, n):
    _, q = ct.reference_ids(ms, Grid(d, n, N))
    for a, v in zip(ms, q):
      assert owner.setdefault(v, (ms, a)) == (ms, a)
      assert t_l <= v / N <= t_r
  pairs = sum(len(set(ms)) for ms in _in_range_multisets(N, d, n))
  assert len(owner) == pairs == ct.num_ids(Grid(d, n, N))
  assert min(owner) / N == t_l  # attained by the all-zero input


@pytest.mark.parametrize('d,n,N', [(1, 3, 3), (2, 2, 2), (1, 2, 4)])
def test_reference_kills_every_out_of_range_point(d, n, N):
  omega = N ** (n * d)
  t_l, t_r = ct.interval(Grid(d, n, N))
  cols = list(itertools.product(range(-1, N), repeat=d))
  for ms in itertools.combinations_with_replacement(cols, n):
    if not any(k < 0 for col in ms for k in col):
      continue
    ticks = [sum((k if k >= 0 else -N * omega) * N ** i for i, k in enumerate(col))
             for col in ms]
    _, q = ct.reference_ids(ticks, Grid(d, n, N))
    assert all(not t_l <= v / N <= t_r for v in q)


def test_paper_map_collides_on_repeats_and_the_check_sees_it():
  """The check used for T1 does fail on Lemma 8's map (N=4, d=1, n=3: repeated
  multisets clash), so a zero count for the new map is informative."""
  cm = contextual.ContextualMapping.build(Grid(1, 3, 4))
  ms = np.asarray(_in_range_multisets(4, 1, 3))[..., None]
  q = np.asarray(cm.forward(ms)['ids'])
  owners = (np.arange(len(ms))[:, None] * 8 + ms[..., 0]).reshape(-1)
  assert count_duplicates(cm.ops, q.reshape(-1), owners) > 0
  cmc = ct.build(Grid(1, 3, 4))
  qc = np.asarray(cmc.forward(ms)['ids'])
  assert count_duplicates(cmc.ops, qc.reshape(-1), owners) == 0


@pytest.mark.parametrize('d,n,N', [(1, 3, 4), (2, 2, 3)])
def test_layers_equal_reference_on_whole_grid(d, n, N):
  cm = ct.build(Grid(d, n, N))
  k = np.asarray(list(itertools.product(range(-1, N), repeat=n * d))).reshape(-1, n, d)
  out = cm.forward(k)
  q = cm.to_fractions(out['ids'])
  sw = cm.to_fractions(out['sweep_ids'])
  omega = N ** (n * d)
  for i in range(0, len(k), 7):
    ticks = [sum((v if v >= 0 else -N * omega) * N ** c for c, v in enumerate(row))
             for row in k[i]]
    s_ref, q_ref = ct.reference_ids(ticks, Grid(d, n, N))
    assert [v / N for v in q_ref] == list(q[i])
    assert [v / N for v in s_ref] == list(sw[i])


def test_counts_next_to_paper():
  cm = ct.build(Grid(2, 3, 3))
  assert cm.depth() == ct.layer_count(2, 3) == 3 ** 2 + 3
  assert cm.depth() == contextual.ContextualMapping.build(Grid(2, 3, 3)).depth() + 2
  assert cm.num_params() == ct.parameter_count(Grid(2, 3, 3))


def test_bad_arguments():
  with pytest.raises(ValueError, match='multiple of N lcm'):
    ct.build(Grid(1, 3, 4), scale=8)
  with pytest.raises(ValueError, match='ties='):
    ct.check_ties('both')
  with pytest.raises(ValueError, match='n must be'):
    ct.build(Grid(1, 1, 4))


# ---------------------------------------------------------------------------
# Value mapping over every multiset, and Theorem 2 without the bad set.
# ---------------------------------------------------------------------------


def _max_target(x):
  """f(X)_j = X_j max_k X_k: permutation equivariant *exactly* in floating point."""
  return x * np.max(x, axis=1, keepdims=True)


@pytest.mark.parametrize('d,n,N', [(1, 3, 4), (2, 2, 2)])
def test_value_mapping_literal_equals_compact_on_full_grid(d, n, N):
  """One bump per (multiset, value); the literal Phi layers (repeated tokens share a
  bump) equal the compact selection on every ordered point of G+, and give A_L on G
  (the representative's targets, permuted back), 0 on Category 3."""
  cm = ct.build(Grid(d, n, N))
  c = ct.num_classes(Grid(d, n, N))
  rng = np.random.default_rng(0)
  reps = TiesComplete(Grid(d, n, N)).representatives()
  # An equivariant integer target: equal columns of a representative get equal rows.
  table = rng.integers(-5, 6, size=(N ** d, d))
  idx = np.sum(reps * N ** np.arange(d), axis=-1)               # [C, n]
  targets = table[idx] * (1 + np.sum(idx, axis=-1))[:, None, None] % 7
  vm = value.build_value_mapping(cm, targets, variant=TiesComplete(Grid(d, n, N)))
  assert vm.depth() == TiesComplete(Grid(d, n, N)).value_layers() \
      == ct.num_ids(Grid(d, n, N)) + d + 1
  k = np.asarray(list(itertools.product(range(-1, N), repeat=n * d))).reshape(-1, n, d)
  z = cm.forward(k)['z']
  out_c = vm.apply_compact(z)
  with jax.enable_x64(True):
    out_l = jax.jit(vm.literal_fn())(vm.to_literal(z))
  assert np.array_equal(np.asarray(out_c), np.asarray(out_l))
  # Expected: rank of the sorted in-range multiset -> targets, permuted back.
  col = np.sum(k * N ** np.arange(d), axis=-1)
  inside = np.all(k >= 0, axis=(1, 2))
  order = np.argsort(col, axis=1, kind='stable')
  rank_of = {tuple(r): i for i, r in enumerate(idx.tolist())}
  for i in range(len(k)):
    if not inside[i]:
      assert np.all(np.asarray(out_c[i]) == 0)
      continue
    r = rank_of[tuple(col[i][order[i]])]
    exp = np.empty((n, d), np.int64)
    exp[order[i]] = targets[r]
    assert np.array_equal(np.asarray(out_c[i]) // cm.scale, exp)
  assert c == len(reps)


@pytest.mark.parametrize('d,n,N', [(1, 3, 4), (2, 2, 3), (1, 4, 3)])
def test_theorem2_without_bad_set(d, n, N):
  """g_bar = f_bar on every cube (centres), exactly; d_p(f_bar, g_bar) = 0; the paper's
  construction differs from f_bar on the repeated cubes (its bad set)."""
  complete = yun.build_approximator(_max_target, d=d, n=n, resolution=N, ties='complete')
  paper = yun.build_approximator(_max_target, d=d, n=n, resolution=N)
  assert decomposition.dp_f_bar_g_bar_on_grid(complete, p=2) == 0.0
  assert decomposition.dp_f_bar_g_bar_on_grid(complete, p=1) == 0.0
  assert decomposition.dp_f_bar_g_bar_on_grid(paper, p=2) > 0.0
  k = np.asarray(list(itertools.product(range(N), repeat=n * d))).reshape(-1, n, d)
  x = (k + 0.5) / N
  assert np.array_equal(complete.apply(x), complete.f_bar(x))
  repeated = np.array([len({tuple(r) for r in p}) < n for p in k])
  assert np.any(paper.apply(x)[repeated] != complete.f_bar(x)[repeated])
  built = construction.stage_counts(complete.layer_counts())
  assert built == complete.paper_layer_counts()
  assert built['contextual'] == construction.stage_counts(paper.layer_counts())['contextual'] + 2


def test_approximator_ties_argument_errors():
  with pytest.raises(ValueError, match='ties='):
    yun.build_approximator('token_times_mean', d=1, n=2, resolution=2, ties='yes')
  with pytest.raises(ValueError, match='Theorem 2 variant'):
    yun.build_approximator('token_times_mean', d=1, n=2, resolution=2, ties='complete',
                           positional=True)


def test_error_decomposition_reports_exact_zero():
  net = yun.build_approximator(_max_target, d=1, n=3, resolution=3, ties='complete')
  out = yun.error_decomposition(net, samples=2000)
  assert out.exact.dp_f_bar_g_bar == 0.0
  assert out.exact.bad_set_measure == 0.0
  assert out.estimates[('f_bar', 'g_bar')].value == 0.0


def test_depth_by_kind_counts_the_offset_layer_as_feedforward():
  net = yun.build_approximator(_max_target, d=1, n=2, resolution=2, ties='complete')
  kinds = construction.kind_counts(net.layer_counts())
  assert kinds['attention'] == 2 ** 1 + 2
  assert sum(kinds.values()) == net.depth()


def test_exact_realization_is_planned_and_certified():
  """yun.realization.plan / yun.realization.rational take g_c as its layer list, so the tie-complete map is
  planned, realized with exact params and certified on every cube interior (repeated
  cells included); tests/test_realization_certified.py checks it against mpmath."""
  net = yun.build_approximator(_max_target, d=1, n=2, resolution=2, ties='complete')
  p = yun.plan_realization(net)
  g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact')
  cert = g.certify_interiors(workers=1)
  assert cert['cubes'] == ct.num_classes(Grid(1, 2, 2)) == 3 and cert['certified'], cert
  mid, rad = g.apply_certified(np.full((1, 2, 1), 0.25))   # both tokens in cell 0
  np.testing.assert_allclose(mid, net.apply(np.full((1, 2, 1), 0.25)), atol=1e-6)
  assert np.all(rad < 1e-6)
