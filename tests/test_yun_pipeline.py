"""yun.stages.pipeline: g_bar = g_v o g_c o g_q on real inputs equals the piecewise-constant target."""

import itertools
from fractions import Fraction

import numpy as np

from transformer_ua import yun
from transformer_ua.yun.grid import Grid


def test_g_bar_equals_target_on_cubes_and_zero_elsewhere():
  N, d, n = 2, 1, 2
  targets = yun.random_targets(Grid(d, n, N), seed=4)
  g = yun.build_g_bar(Grid(d, n, N), targets=targets, denominator=2)
  counts = yun.layer_counts(Grid(d, n, N))
  assert counts == {'quantization': d * N + d, 'contextual': N ** d + 1, 'value': n * 1 + d + 1}
  assert g.depth() == sum(counts.values())
  assert g.num_params() == sum(yun.parameter_counts(Grid(d, n, N)).values())
  rng = np.random.default_rng(0)
  reps = [tuple(map(tuple, r)) for r in yun.representatives(Grid(d, n, N))]
  xs, expected = [], []
  for cube in itertools.product(range(-1, N + 1), repeat=n * d):
    k = np.asarray(cube).reshape(n, d)
    x = (k + rng.uniform(0.05, 0.95, size=k.shape)) / N   # inside cube S_L (or outside [0,1))
    xs.append(x)
    cols = [tuple(c) for c in k]
    out = np.zeros((n, d), dtype=object)
    if k.min() >= 0 and k.max() < N and len(set(cols)) == n:
      rep = tuple(sorted(cols))
      c = reps.index(rep)
      for j, col in enumerate(cols):
        out[j] = [Fraction(int(v), 2) for v in targets[c, rep.index(col)]]
    expected.append(out)
  xs, expected = np.asarray(xs), np.asarray(expected)
  np.testing.assert_array_equal(g.apply_exact(xs), expected)
  # The literal float64 network agrees here (all values are small dyadics).
  np.testing.assert_array_equal(g.apply(xs), expected.astype(float))
  np.testing.assert_array_equal(g.apply_literal(xs), expected.astype(float))
