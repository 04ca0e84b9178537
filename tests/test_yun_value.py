"""yun.stages.value (Lemma 9): counts, literal network == compact == target on whole grids."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua import layers, modules
from transformer_ua.exact import limbs
from transformer_ua.yun.stages import value
from transformer_ua.yun.stages import contextual
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.variants.paper import Paper


def _expected_outputs(points, reps, numerators, factor):
  """Independent Lemma 9 target: A_L column j = A_C[position of L_j in C] on G~, else 0."""
  index = {tuple(map(tuple, r)): c for c, r in enumerate(reps)}
  out = np.zeros(points.shape, dtype=object)
  for b, pt in enumerate(points):
    cols = [tuple(c) for c in pt]
    if min(pt.reshape(-1)) < 0 or len(set(cols)) < len(cols):
      continue  # Categories 2 and 3: zero
    rep = sorted(cols, key=lambda c: sum(v * 10 ** (3 * i) for i, v in enumerate(c)))
    c = index[tuple(rep)]
    for j, col in enumerate(cols):
      out[b, j] = numerators[c, rep.index(col)].astype(object) * factor
  return out


@pytest.mark.parametrize('N,d,n,arithmetic', [
    (2, 1, 2, 'auto'), (2, 2, 3, 'limbs'),
    pytest.param(3, 1, 2, 'limbs', marks=pytest.mark.slow),
    pytest.param(2, 2, 2, 'auto', marks=pytest.mark.slow),
    pytest.param(3, 2, 2, 'auto', marks=pytest.mark.slow)])
def test_literal_equals_compact_equals_target_on_full_grid(N, d, n, arithmetic):
  cm = contextual.ContextualMapping.build(Grid(d, n, N), arithmetic=arithmetic)
  variant = Paper(Grid(d, n, N))
  targets = value.random_targets(variant, seed=N + d + n)
  vm = value.build_value_mapping(cm, targets, variant=variant, denominator=2)
  assert vm.depth() == n * math.comb(N ** d, n) + d + 1
  points = np.asarray(list(itertools.product(range(-1, N), repeat=n * d))).reshape(-1, n, d)
  out = cm.forward(points)
  compact, bump, killed = vm.select(out['z'])
  with jax.enable_x64(True):
    literal = jax.jit(vm.literal_fn())(vm.to_literal(out['z']))
  ar = vm.literal_arithmetic
  lit = (limbs.to_python(np.asarray(literal), ar.spec) if ar.kind == 'limbs'
         else np.asarray(literal).astype(object))
  np.testing.assert_array_equal(lit, cm.ops.to_python(compact))
  reps = Paper(Grid(d, n, N)).representatives()
  np.testing.assert_array_equal(cm.ops.to_python(compact),
                                _expected_outputs(points, reps, targets, cm.scale // 2))
  # Bumps fire exactly on G~ columns; the kill fires exactly elsewhere (Lemma 8.3/8.4).
  in_g_tilde = np.asarray([min(p.reshape(-1)) >= 0 and len({tuple(c) for c in p}) == n
                           for p in points])
  assert np.all((np.asarray(bump) >= 0) == in_g_tilde[:, None])
  assert np.all(np.asarray(killed) == ~in_g_tilde[:, None])
  # A float payload is reproduced exactly through the bump indices.
  payload = np.random.default_rng(0).normal(size=targets.shape)
  got = vm.payload(bump, payload)
  flat = payload.reshape(-1, d)
  for b in np.nonzero(in_g_tilde)[0][:20]:
    for j in range(n):
      assert np.array_equal(got[b, j], flat[int(bump[b, j])])


@pytest.mark.parametrize('N,d,n', [(3, 2, 2), pytest.param(2, 1, 2, marks=pytest.mark.slow),
                                   pytest.param(2, 2, 3, marks=pytest.mark.slow)])
def test_counts_and_params_structure(N, d, n):
  cm = contextual.ContextualMapping.build(Grid(d, n, N))
  variant = Paper(Grid(d, n, N))
  vm = value.build_value_mapping(cm, value.random_targets(variant), variant=variant)
  layers_expected = n * math.comb(N ** d, n) + d + 1      # n C(delta^-d, n) + d + 1
  assert vm.depth() == layers_expected == variant.value_layers()
  segments, params = vm.params('float64')
  assert sum(s.depth for s in segments) == layers_expected
  assert layers.count_params(params) == layers_expected * (3 * d + 1) == vm.num_params()
  net = modules.Network(segments)
  shapes = jax.eval_shape(net.init, jax.random.PRNGKey(0), jnp.zeros((1, n, d)))['params']
  assert jax.tree_util.tree_map(lambda a: a.shape, shapes) == \
      jax.tree_util.tree_map(lambda a: a.shape, params)


def test_trap_and_bad_targets_are_refused():
  cm = contextual.ContextualMapping.build(Grid(1, 2, 2))
  v = Paper(Grid(1, 2, 2))
  shape = (math.comb(2, 2), 2, 1)
  limit = cm.t_l - cm.scale / (2 * cm.resolution) / cm.scale  # t_l - delta/2
  big = np.full(shape, int(limit) + 1)
  with pytest.raises(ValueError, match='trap'):
    value.build_value_mapping(cm, variant=v, targets=big)
  value.build_value_mapping(cm, variant=v, targets=np.full(shape, int(limit) - 1))  # just below: accepted
  with pytest.raises(ValueError, match='shape'):
    value.build_value_mapping(cm, variant=v, targets=np.zeros((2, 2, 1), int))
  with pytest.raises(ValueError, match='dividing the scale'):
    value.build_value_mapping(cm, variant=v, targets=np.zeros(shape, int), denominator=3)
  with pytest.raises(ValueError, match='integer numerators'):
    value.build_value_mapping(cm, variant=v, targets=np.zeros(shape))


def test_round_targets_states_its_error():
  num, err = value.round_targets([[0.3, -0.26]], 4)
  assert num.tolist() == [[1, -1]] and err == pytest.approx(0.05)
  assert err <= 1 / 8
