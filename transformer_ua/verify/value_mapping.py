r"""Lemma 9: the literal value-mapping network equals its compact equivalent, exactly.

The whole-grid Lemma 9 check (``contextual_mapping.verify_contextual_mapping`` with
``value_mapping=``) runs the compact g_v on every point. This module runs the
*literal* network -- the kill layer, d clean-up layers and all n C(N^d, n) bump
layers, scanned, in its planned exact arithmetic -- on a sample of grid points
(all of them when the grid is small) and counts outputs that differ from the
compact evaluation.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import provenance
from transformer_ua.exact import limbs
from transformer_ua.yun import enumeration
from transformer_ua.yun.grid import Grid


def sample_points(grid: Grid, count: int, seed: int = 0) -> np.ndarray:
  """Grid indices [B, n, d] of ``grid`` (a ``yun.grid.Grid``): every point of G+ if it
  has <= count points, else a random sample, half of it drawn from Category 1 (G~,
  where bumps fire)."""
  d, n, resolution = grid.d, grid.n, grid.N
  total = enumeration.grid_size(grid, 'full')
  codec = enumeration.make_codec(grid)
  rng = np.random.default_rng(seed)
  with jax.enable_x64(True):
    if total <= count:
      return np.asarray(codec['decode_full'](jnp.arange(total)))
    idx = rng.integers(0, total, size=count - count // 2)
    pts = np.asarray(codec['decode_full'](jnp.asarray(idx)))
  v = resolution ** d
  cat1 = np.stack([rng.choice(v, size=n, replace=False) for _ in range(count // 2)]) \
      if v >= n else np.zeros((0, n), np.int64)
  pow_ = resolution ** np.arange(d)
  k1 = (cat1[..., None] // pow_) % resolution
  return np.concatenate([pts, k1.astype(np.int64)])


def verify_literal_value_mapping(vm, points: np.ndarray, batch: int = 256) -> dict:
  """Literal g_v vs compact g_v on g_c(points); returns the mismatch count."""
  t0 = time.time()
  cm = vm.cm
  literal = jax.jit(vm.literal_fn())
  ar = vm.literal_arithmetic
  mismatches = 0
  with jax.enable_x64(True):
    for start in range(0, len(points), batch):
      k = points[start:start + batch]
      out = cm.forward(k)
      compact = vm.apply_compact(out['z'])
      lit = literal(vm.to_literal(out['z']))
      lit_py = (limbs.to_python(np.asarray(lit), ar.spec) if ar.kind == 'limbs'
                else np.asarray(lit).astype(object))
      mismatches += int(np.sum(np.any(lit_py != cm.ops.to_python(compact), axis=(-2, -1))))
  return {'lemma9_literal_equals_compact': mismatches, 'literal_points': int(len(points)),
          'literal_layers': vm.depth(), 'literal_arithmetic': ar.describe(),
          'seconds': round(time.time() - t0, 3), 'provenance': provenance.record()}
