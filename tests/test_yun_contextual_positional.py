"""Theorem 3's contextual mapping and quantization (Appendix G; yun.stages.contextual_positional
and the positional parts of yun.stages.contextual / yun.stages.quantize)."""

from fractions import Fraction

import numpy as np
import pytest

from transformer_ua.yun.stages import contextual, contextual_positional, quantize
from transformer_ua.yun.variants import registry
from transformer_ua.yun.bounds import decomposition
from transformer_ua.yun.stages import contextual_params
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.variants.positional import Positional


@pytest.mark.parametrize('d,n,N', [(1, 3, 4), (2, 2, 3)])
def test_positional_contextual_mapping_is_one_to_one_on_whole_grid(d, n, N):
  cm = contextual.PositionalContextualMapping.build(Grid(d, n, N))
  k = contextual_positional.positional_grid(Grid(d, n, N))
  assert k.shape == (N ** (d * n), n, d)
  out = cm.forward(k)
  assert int(out['inexact']) == 0
  q = cm.ops.to_python(out['ids']).reshape(-1)
  assert len(set(q.tolist())) == q.size  # every (context, token) gets its own value
  lo, hi = cm.t_l * cm.scale, cm.t_r * cm.scale
  assert all(lo <= v <= hi for v in q)
  # The exhaustive Python-int simulation and the compiled layers agree on the max id.
  sweep = cm.ops.to_python(out['sweep_ids'])
  assert Fraction(int(sweep.max()), cm.scale) == contextual_positional.positional_sweep_max(Grid(d, n, N))
  # The proven bound covers every output the layers produced.
  assert int(np.max(np.abs(cm.ops.to_python(out['z'])))) <= cm.bound


def test_positional_double_shift_breaks_the_papers_ordering():
  """Appendix G.2 claims l~_1 < ... < l~_n; N=2, d=1, n=2, L+E = (1/2, 1) shifts
  column 1 twice and ends with ids (5/2, 2). The mapping stays one-to-one."""
  cm = contextual.PositionalContextualMapping.build(Grid(1, 2, 2))
  out = cm.forward(np.array([[[1], [0]]]))
  ids = [Fraction(int(v), cm.scale) for v in cm.ops.to_python(out['sweep_ids'])[0]]
  assert ids == [Fraction(5, 2), Fraction(2)]


def test_positional_limbs_equal_int64_and_narrow_arithmetic_is_refused():
  a = contextual.PositionalContextualMapping.build(Grid(1, 3, 4))
  b = contextual.PositionalContextualMapping.build(Grid(1, 3, 4),
                                   arithmetic='limbs')
  assert a.arithmetic.kind == 'int64' and b.arithmetic.kind == 'limbs'
  k = contextual_positional.positional_grid(Grid(1, 3, 4))
  np.testing.assert_array_equal(a.ops.to_python(a.column_ids_batch(k)),
                                b.ops.to_python(b.column_ids_batch(k)))
  with pytest.raises(ValueError, match='bits'):
    contextual.PositionalContextualMapping.build(Grid(1, 3, 8),
                                 arithmetic='limbs:1:30')  # needs 33 bits


def test_positional_indices_and_grid_limits():
  cm = contextual.PositionalContextualMapping.build(Grid(1, 2, 2))
  with pytest.raises(ValueError, match='no out-of-range value'):
    cm.forward(np.array([[[-1], [0]]]))
  with pytest.raises(ValueError, match='at most'):
    contextual_positional.positional_grid(Grid(2, 3, 8))


@pytest.mark.parametrize('d,n,N', [(1, 2, 2), (1, 3, 4), (2, 2, 3), (3, 2, 2)])
def test_theorem3_layer_and_parameter_counts_match_formulas(d, n, N):
  counts = Positional(Grid(d, n, N)).layer_counts()
  assert counts == {'quantization': d * n * N, 'contextual': n * N ** d + 1,
                    'value': n * N ** (d * n) + d + 1}
  g_q = quantize.PositionalQuantization.build(Grid(d, n, N))
  assert g_q.depth() == d * n * N
  assert g_q.num_params() == d * n * N * (3 * d + 1) + n * d  # + E
  cm = contextual.PositionalContextualMapping.build(Grid(d, n, N))
  assert cm.depth() == n * N ** d + 1
  assert cm.num_params() == contextual.PositionalContextualMapping.count_parameters(Grid(d, n, N)) == \
      (2 * n * N ** d + 1) * (4 * d + 1)


def test_positional_quantization_is_exact_on_interiors():
  g_q = quantize.PositionalQuantization.build(Grid(2, 3, 5))
  x = decomposition.interior_points(np.random.default_rng(0), 500, Grid(2, 3, 5),
                                   margin=0.01)
  np.testing.assert_array_equal(g_q.to_indices(g_q.apply(x)), np.floor(x * 5))


def test_theorem3_sweep_and_scale_hooks():
  ids = contextual_positional.theorem3_sweep_ids(Grid(2, 3, 2))
  # s_j / delta = (j - 1) * (1 + N) * N; each block has N^d ids; increasing.
  assert len(ids) == 3 * 4 and np.all(np.diff(ids) > 0)
  assert list(ids[:4]) == [0, 1, 2, 3] and list(ids[4:8]) == [6, 7, 8, 9]
  assert contextual_positional.theorem3_final_scale(Grid(2, 3, 2)) == 3 * 2 ** 9
  segs, p = contextual_params.contextual_mapping_params(Grid(2, 3, 2), sweep_ids=ids,
                                                 final_scale=contextual_positional.theorem3_final_scale(Grid(2, 3, 2)))
  assert segs[0].depth == 12 and p['segment_0']['attention']['b_Q'].shape == (12, 2, 1)


def test_theorem3_stages_are_subclasses_chosen_once():
  """Theorem 3's g_q and g_c are subclasses (their overrides carry Appendix G); the bool
  builders and the Positional variant pick the same classes."""
  v = registry.choose(1, 2, 2, positional=True)
  g_q, cm = v.build_quantization(), v.build_contextual(scale=None, arithmetic='auto')
  assert type(g_q) is quantize.PositionalQuantization and g_q.positional
  assert type(cm) is contextual.PositionalContextualMapping and cm.positional
  assert type(Positional(Grid(1, 2, 2)).build_quantization()) is quantize.PositionalQuantization
  assert type(Positional(Grid(1, 2, 2)).build_contextual(scale=None, arithmetic='auto')) is \
      contextual.PositionalContextualMapping
  assert type(quantize.PositionalQuantization.build(Grid(1, 2, 2))) is \
      quantize.PositionalQuantization
  assert type(contextual.PositionalContextualMapping.build(Grid(1, 2, 2))) is \
      contextual.PositionalContextualMapping
  paper = registry.choose(1, 2, 2)
  assert type(paper.build_quantization()) is quantize.Quantization
  assert type(paper.build_contextual(scale=None, arithmetic='auto')) is \
      contextual.ContextualMapping
  assert g_q.unit_input_bound == 4 and paper.build_quantization().unit_input_bound == 2
  assert cm.id_sweep and cm.id_sweep_bound == cm.bound
  np.testing.assert_array_equal(cm.grid_points(limit=0), contextual_positional.positional_grid(Grid(1, 2, 2)))
  np.testing.assert_array_equal(v.grid_classes(), contextual_positional.positional_grid(Grid(1, 2, 2)))
