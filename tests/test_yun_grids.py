"""yun.enumeration: on-device decoding is a bijection, counts equal brute force."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua.yun import enumeration
from transformer_ua.yun.grid import Grid


def _category(pt):
  cols = [tuple(c) for c in pt]
  if min(pt.reshape(-1)) < 0:
    return 3
  return 1 if len(set(cols)) == len(cols) else 2


@pytest.mark.parametrize('N,d,n', [(2, 1, 3), (2, 2, 3), (3, 1, 4), (3, 2, 2)])
def test_full_and_multiset_grids_enumerate_every_point_once(N, d, n):
  g = Grid(d, n, N)
  codec = enumeration.make_codec(g)
  with jax.enable_x64(True):
    full = np.asarray(codec['decode_full'](jnp.arange(enumeration.grid_size(g, 'full'))))
    multi = np.asarray(codec['decode_multiset'](jnp.arange(enumeration.grid_size(g, 'multiset'))))
    cats_full = np.asarray(codec['category'](jnp.asarray(full)))
    cols = np.asarray(codec['column_index'](jnp.asarray(multi)))
    ranks = np.asarray(codec['rank_multiset'](jnp.asarray(cols)))
  brute = sorted(itertools.product(range(-1, N), repeat=n * d))
  assert sorted(map(tuple, full.reshape(len(full), -1))) == brute
  assert np.all(np.diff(cols, axis=1) >= 0)                         # representatives sorted
  assert np.array_equal(ranks, np.arange(len(multi)))                # rank o unrank = id
  classes = {tuple(sorted(map(tuple, p))) for p in np.asarray(brute).reshape(-1, n, d)}
  assert len(classes) == len(multi) == len({tuple(map(tuple, p)) for p in multi})
  for grid, pts, cats in (('full', full, cats_full),):
    expected = enumeration.category_counts(Grid(d, n, N), grid)
    brute_cats = [_category(p) for p in pts]
    assert list(cats) == brute_cats
    assert {k: brute_cats.count(k) for k in (1, 2, 3)} == expected
  expected_m = enumeration.category_counts(Grid(d, n, N), 'multiset')
  assert {k: [_category(p) for p in multi].count(k) for k in (1, 2, 3)} == expected_m


@pytest.mark.parametrize('N,d,n', [(2, 2, 3), (3, 1, 2), (4, 1, 3)])
def test_class_codec_enumerates_category1_classes(N, d, n):
  codec = enumeration.make_class_codec(Grid(d, n, N))
  c = math.comb(N ** d, n)
  with jax.enable_x64(True):
    reps = np.asarray(codec['decode'](jnp.arange(c)))
    ranks = np.asarray(codec['rank'](jnp.asarray(reps)))
  assert np.array_equal(ranks, np.arange(c))
  seen = {tuple(map(tuple, r)) for r in reps}
  cols = list(itertools.product(range(N), repeat=d))
  brute = {tuple(sorted(s, key=lambda t: sum(v * N ** i for i, v in enumerate(t))))
           for s in itertools.combinations(cols, n)}
  assert seen == brute


def test_grid_sizes_and_errors():
  assert enumeration.grid_size(Grid(2, 3, 4), 'full') == 5 ** 6
  assert enumeration.grid_size(Grid(2, 3, 4), 'multiset') == math.comb(25 + 2, 3)
  with pytest.raises(ValueError, match='allowed'):
    enumeration.grid_size(Grid(1, 2, 2), 'sparse')
