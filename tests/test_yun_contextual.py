"""yun.stages.contextual (Lemma 8 / 10): exact outputs vs an independent paper reference."""

import itertools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua import layers
from transformer_ua.exact import planner
from transformer_ua.yun.stages import contextual
from transformer_ua.yun.stages import contextual_params
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.variants.paper import Paper


# ---------------------------------------------------------------------------
# Independent reference: the paper's g_c with Fractions and the *literal* score
# matrix + hardmax (ties split evenly), no scaling, no rank-one identity.
# ---------------------------------------------------------------------------


def _value(k, N, d, n):
  k = int(k)  # never let NumPy int64 into the Fractions (it would overflow silently)
  return Fraction(k, N) if k >= 0 else Fraction(-(N ** (n * d)))


def paper_gc(K, N, d, n):
  """Returns (ids after the sweep, ids after g_c, g_c(L) columns), all Fractions."""
  delta = Fraction(1, N)
  u = [delta ** -i for i in range(d)]
  Z = [[_value(k, N, d, n) for k in row] for row in K]

  def ids():
    return [sum(a * b for a, b in zip(u, col)) for col in Z]

  def psi(b_q):  # first-row output of one head (before its W_O scale)
    v = ids()
    out = []
    for j in range(n):
      scores = [v[k] * (v[j] - b_q) for k in range(n)]
      top = max(scores)
      tied = [k for k in range(n) if scores[k] == top]
      out.append(sum(v[k] for k in tied) / len(tied))
    return out

  for l in range(N ** d):
    lo, hi = psi(l * delta - delta / 2), psi(l * delta + delta / 2)
    for j in range(n):
      Z[j][0] += delta ** -d * (lo[j] - hi[j])
  swept = ids()
  last = psi(0)
  for j in range(n):
    Z[j][0] += delta ** (-(n + 1) * d) * last[j]
  return swept, ids(), Z


def _points(N, d, n, count, seed):
  """Random grid points with every category represented."""
  rng = np.random.default_rng(seed)
  k = rng.integers(-1, N, size=(count, n, d))
  k[: count // 3] = np.abs(k[: count // 3])  # in range (categories 1, 2)
  k[0, :] = 0  # all columns equal
  if N ** d >= n:  # a Category-1 point with distinct columns
    cols = rng.choice(N ** d, size=n, replace=False)
    k[1] = (cols[:, None] // N ** np.arange(d)) % N
  return k


_slow = pytest.mark.slow
REFERENCE_CASES = [(2, 1, 2, 'auto'), (2, 2, 3, 'auto'), (3, 1, 3, 'limbs'), (2, 2, 2, 'limbs'),
                   pytest.param(3, 1, 3, 'auto', marks=_slow),
                   pytest.param(2, 2, 2, 'auto', marks=_slow),
                   pytest.param(5, 1, 2, 'auto', marks=_slow),
                   pytest.param(2, 1, 2, 'limbs', marks=_slow),
                   pytest.param(2, 2, 3, 'limbs', marks=_slow),
                   pytest.param(5, 1, 2, 'limbs', marks=_slow)]


@pytest.mark.parametrize('N,d,n,arithmetic', REFERENCE_CASES)
def test_outputs_equal_paper_reference(N, d, n, arithmetic):
  cm = contextual.ContextualMapping.build(Grid(d, n, N), arithmetic=arithmetic)
  k = _points(N, d, n, 24, seed=N * 100 + d * 10 + n)
  out = cm.forward(k)
  assert int(out['inexact']) == 0
  swept = cm.to_fractions(out['sweep_ids'])
  final = cm.to_fractions(out['ids'])
  z = cm.to_fractions(out['z'])
  for b in range(len(k)):
    ref_swept, ref_final, ref_z = paper_gc(k[b], N, d, n)
    assert list(swept[b]) == ref_swept
    assert list(final[b]) == ref_final
    assert [list(r) for r in z[b]] == ref_z
  assert cm.column_ids(k[1]) == paper_gc(k[1], N, d, n)[1]


def test_category1_closed_form_and_lemma10_bounds():
  N, d, n = 3, 1, 3
  cm = contextual.ContextualMapping.build(Grid(d, n, N))
  delta = Fraction(1, N)
  pts = np.asarray([[[a], [b], [c]] for a, b, c in itertools.permutations(range(N), n)])
  out = cm.forward(pts)
  q, swept = cm.to_fractions(out['ids']), cm.to_fractions(out['sweep_ids'])
  for b, kk in enumerate(pts):
    ids = [Fraction(int(x), N) for x in kk[:, 0]]
    order = np.argsort(ids)
    l = [ids[i] for i in order]  # l_1 < ... < l_n
    tilde = [l[j] + sum(delta ** (-kk_ * d) * (l[j - kk_] - l[j - kk_ + 1])
                        for kk_ in range(1, j + 1)) + delta ** (-(j + 1) * d) * (l[-1] - l[0])
             for j in range(n)]
    got_sorted = [swept[b][i] for i in order]
    assert got_sorted == tilde
    assert cm.id_lower <= tilde[-1] <= cm.id_upper
    assert [q[b][i] for i in order] == [t + delta ** (-(n + 1) * d) * tilde[-1] for t in tilde]


@pytest.mark.parametrize('N,d,n', [(2, 1, 2), (2, 1, 3), (3, 1, 2), (2, 2, 2), (3, 2, 2)])
def test_bit_bound_dominates_every_grid_point_and_is_tight(N, d, n):
  """The planner's bound >= |every entry and id| over all of G+ (brute force), within 1 bit."""
  S = 2 * N
  worst = 0
  cols = list(itertools.product(range(-1, N), repeat=d))
  for ms in itertools.combinations_with_replacement(cols, n):
    swept, final, z = paper_gc(np.asarray(ms), N, d, n)
    worst = max(worst, *(abs(v) for v in swept + final), *(abs(v) for c in z for v in c))
  bound = contextual_params.contextual_mapping_bound(Grid(d, n, N))
  assert bound >= S * worst
  assert planner.bits_for(bound) <= planner.bits_for(math.ceil(S * worst)) + 1


@pytest.mark.parametrize('N,d,n', [(2, 1, 2), (2, 3, 4), (7, 1, 5),
                                   pytest.param(3, 2, 2, marks=_slow),
                                   pytest.param(4, 2, 3, marks=_slow)])
def test_layer_and_parameter_counts_equal_paper_formulas(N, d, n):
  cm = contextual.ContextualMapping.build(Grid(d, n, N))
  assert cm.depth() == N ** d + 1                       # delta^-d + 1
  per_head = 3 * d + 1 + d                                  # W_Q, W_K, W_V, b_Q, W_O (m = 1)
  assert cm.num_params() == N ** d * 2 * per_head + per_head
  assert cm.num_params() == contextual.ContextualMapping.count_parameters(Grid(d, n, N))
  assert [s.num_heads for s in cm.segments] == [2, 1]
  # The params are exactly the pytree Network.init gives (structure and shapes).
  net = cm.network()  # a float64 network: its init shapes are taken under x64
  with jax.enable_x64(True):
    shapes = jax.eval_shape(net.init, jax.random.PRNGKey(0), jnp.zeros((1, n, d)))['params']
  assert jax.tree_util.tree_structure(shapes) == jax.tree_util.tree_structure(cm.params)
  assert jax.tree_util.tree_map(lambda a: a.shape, shapes) == \
      jax.tree_util.tree_map(lambda a: a.shape, cm.params)


def test_paper_valued_float_params_run_as_a_network():
  N, d, n = 2, 1, 2
  cm = contextual.ContextualMapping.build(Grid(d, n, N))
  k = _points(N, d, n, 9, seed=1)
  x = np.vectorize(lambda v: float(_value(int(v), N, d, n)))(k)
  with jax.enable_x64(True):
    y = np.asarray(cm.network().apply({'params': cm.params}, jnp.asarray(x)))
  exact = cm.to_fractions(cm.forward(k)['z'])
  np.testing.assert_array_equal(y, exact.astype(float))  # small values: float64 is exact here


def test_scale_is_a_free_multiple_of_2n():
  k = _points(3, 1, 3, 10, seed=2)
  a = contextual.ContextualMapping.build(Grid(1, 3, 3))
  b = contextual.ContextualMapping.build(Grid(1, 3, 3), scale=24)
  assert b.scale == 24 and b.bits_required >= a.bits_required
  np.testing.assert_array_equal(a.to_fractions(a.column_ids_batch(k)),
                                b.to_fractions(b.column_ids_batch(k)))
  with pytest.raises(ValueError, match='multiple of 2N'):
    contextual.ContextualMapping.build(Grid(1, 3, 3), scale=9)


@pytest.mark.parametrize('kwargs,match', [
    (dict(d=1, n=2, resolution=1), 'resolution'), (dict(d=1, n=1, resolution=2), 'n=1'),
    (dict(d=0, n=2, resolution=2), 'd=0'), (dict(d=1, n=2, resolution=2.0), 'integer'),
    (dict(d=True, n=2, resolution=2), 'integer'), (dict(d=1, n='3', resolution=2), 'integer')])
def test_invalid_configurations_are_refused(kwargs, match):
  with pytest.raises(ValueError, match=match):
    contextual.ContextualMapping.build(Grid(kwargs['d'], kwargs['n'], kwargs['resolution']))


def test_column_ids_validates_its_input():
  cm = contextual.ContextualMapping.build(Grid(2, 2, 2))
  with pytest.raises(ValueError, match='shape'):
    cm.column_ids(np.zeros((3, 2), int))
  with pytest.raises(ValueError, match='-1, 0, ..., 1'):
    cm.column_ids(np.full((2, 2), 2))
  with pytest.raises(ValueError, match='integers'):
    cm.column_ids(np.zeros((2, 2)))


def test_too_narrow_arithmetic_is_refused_not_wrong():
  """int64 is refused where it would overflow -- and running it anyway is wrong."""
  N, d, n = 4, 2, 5  # needs 67 bits
  with pytest.raises(ValueError, match='needs 67 bits'):
    contextual.ContextualMapping.build(Grid(d, n, N), arithmetic='int64')
  with pytest.raises(ValueError, match='needs 67 bits'):
    contextual.ContextualMapping.build(Grid(d, n, N), arithmetic='limbs:2:30')
  # Bypass the planner: the same int64 layers silently overflow on a Category-3 point.
  segments, params = contextual_params.contextual_mapping_params(Grid(d, n, N), dtype='int64')
  k = np.asarray([[[-1, -1], [0, 0], [1, 0], [2, 0], [3, 0]]])
  cm = contextual.ContextualMapping.build(Grid(d, n, N))  # limbs, planned
  with jax.enable_x64(True):
    x64 = jnp.where(jnp.asarray(k) < 0, -cm.scale * N ** (n * d), jnp.asarray(k) * 2)
    y0, _, _ = layers.apply_segment(segments[0], params['segment_0'], x64)
    y1, _, _ = layers.apply_segment(segments[1], params['segment_1'], y0)
  wrong = np.asarray(y1) @ np.asarray(cm.u)
  right = [int(v * cm.scale) for v in paper_gc(k[0], N, d, n)[1]]
  assert cm.column_ids(k[0]) == [Fraction(v, cm.scale) for v in right]
  assert list(wrong.astype(object)) != right



@pytest.mark.parametrize('arithmetic', ['auto', 'limbs'])
def test_fast_kernel_equals_core_layers_on_whole_grid(arithmetic):
  """The shared-projection kernels compute the same integers as the core layers."""
  N, d, n = 2, 2, 3
  cm = contextual.ContextualMapping.build(Grid(d, n, N), arithmetic=arithmetic)
  points = np.asarray(list(itertools.product(range(-1, N), repeat=n * d))).reshape(-1, n, d)
  with jax.enable_x64(True):
    core = jax.jit(cm.forward_fn('core'))(cm.exact_params, jnp.asarray(points))
    fast = jax.jit(cm.forward_fn('fast'))(cm.exact_params, jnp.asarray(points))
  for key in ('sweep_ids', 'ids', 'z', 'inexact'):
    np.testing.assert_array_equal(np.asarray(core[key]), np.asarray(fast[key]))
  with pytest.raises(ValueError, match='kernel'):
    cm.forward_fn('turbo')


def test_lemma8_stage_hooks():
  """What the id-only sweep, the report and the check read off a Lemma 8 map."""
  from transformer_ua.yun.stages import contextual_ties
  cm = contextual.ContextualMapping.build(Grid(1, 2, 2))
  assert type(cm) is contextual.ContextualMapping and not cm.positional
  assert type(Paper(Grid(1, 2, 2)).build_contextual(scale=None, arithmetic='auto')) is \
      contextual.ContextualMapping
  assert cm.id_sweep and cm.id_sweep_bound == contextual_params.sweep_bound(Grid(1, 2, 2), cm.scale)
  assert cm.grid_points(limit=8) is None and cm.grid_points(limit=9).shape == (9, 2, 1)
  assert not contextual_ties.build(Grid(1, 2, 2)).id_sweep
  with pytest.raises(ValueError, match=r'\{-1, 0, \.\.\., 1\}'):
    cm.check_indices(np.array([[[-2], [0]]]))


@pytest.mark.parametrize('positional', [False, True])
@pytest.mark.parametrize('arithmetic', ['auto', 'limbs'])
def test_encode_python_gives_the_integers_of_encode(positional, arithmetic):
  """The host encoder (the sweep kernel's column tables) against the device one, on every
  index of every token: out of range (-1, where the map has it) and in range."""
  N, d, n = 3, 2, 3
  build = (contextual.PositionalContextualMapping if positional else
           contextual.ContextualMapping).build
  cm = build(Grid(d, n, N), arithmetic=arithmetic)
  low = 0 if positional else -1
  k = np.stack(np.meshgrid(*[np.arange(low, N)] * 2, indexing='ij'), -1).reshape(-1, 1, d)
  k = np.broadcast_to(k, (len(k), n, d))
  with jax.enable_x64(True):
    device = cm.ops.to_python(cm.encode(jnp.asarray(k)))
  host = cm.encode_python(k)
  assert host.dtype == object and host.shape == k.shape
  assert all(type(v) is int for v in host.reshape(-1))
  np.testing.assert_array_equal(host, device)
  # Theorem 3's E: token j is offset by j S (the plain map: no offset).
  assert (host[:, 1] - host[:, 0] == (cm.scale if positional else 0)).all()
