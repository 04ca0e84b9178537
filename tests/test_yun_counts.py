"""Layer and parameter counts equal the paper's formulas across many configurations.

Shapes come from ``Network(segments).init`` under ``jax.eval_shape`` (nothing is
compiled or allocated), so the formulas are checked on configurations far larger
than anything built elsewhere in the suite; the builders' params are checked to
have exactly the init shapes in test_yun_{quantize,contextual,value}.py.
"""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua import modules
from transformer_ua.yun.stages import contextual, quantize, value
from transformer_ua.yun.stages import contextual_params
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.variants.paper import Paper

CONFIGS = [(N, d, n) for N, d, n in itertools.product((2, 3, 5, 8), (1, 2, 3), (2, 3, 5))
           if math.comb(N ** d, n) * n <= 2 * 10 ** 6]


def _init_count(segments, n, d):
  shapes = jax.eval_shape(modules.Network(tuple(segments)).init, jax.random.PRNGKey(0),
                          jnp.zeros((1, n, d)))['params']
  # Phi descriptors are data, not weights (layers.count_params excludes them too).
  flat = jax.tree_util.tree_flatten_with_path(shapes)[0]
  return sum(int(np.prod(leaf.shape)) for path, leaf in flat
             if not any(getattr(k, 'key', None) == 'phi' for k in path))


@pytest.mark.parametrize('N,d,n', CONFIGS)
def test_counts_equal_paper_formulas(N, d, n):
  delta_inv_d = N ** d
  # Depths: d/delta + d, delta^-d + 1, n C(delta^-d, n) + d + 1.
  q_segs = quantize.quantization_segments(Grid(d, n, N))
  c_segs = contextual_params.contextual_mapping_segments(delta_inv_d)
  v_segs = value.segments_for(Paper(Grid(d, n, N)))
  assert sum(s.depth for s in q_segs) == d * N + d
  assert sum(s.depth for s in c_segs) == delta_inv_d + 1
  assert sum(s.depth for s in v_segs) == n * math.comb(delta_inv_d, n) + d + 1
  assert Paper(Grid(d, n, N)).layer_counts() == {'quantization': d * N + d,
                                       'contextual': delta_inv_d + 1,
                                       'value': n * math.comb(delta_inv_d, n) + d + 1}
  # Weights per layer type: FF (r = 1): W_1 d + b_1 1 + W_2 d + b_2 d = 3d + 1;
  # attention head (m = 1): W_Q, W_K, W_V d each + b_Q 1 + W_O d = 4d + 1.
  ff, head = 3 * d + 1, 4 * d + 1
  assert _init_count(q_segs, n, d) == (d * N + d) * ff == \
      quantize.parameter_count(Grid(d, n, N))
  assert _init_count(c_segs, n, d) == delta_inv_d * 2 * head + head == \
      contextual.ContextualMapping.count_parameters(Grid(d, n, N))
  assert _init_count(v_segs, n, d) == (n * math.comb(delta_inv_d, n) + d + 1) * ff == \
      Paper(Grid(d, n, N)).value_parameters()
  # Theorem 2 uses two heads of size one and one hidden unit: T-bar^{2,1,1}.
  assert max(s.num_heads for s in c_segs) == 2 and {s.head_size for s in c_segs} == {1}
  assert {s.width for s in q_segs + v_segs} == {1}
