"""verify.contextual_ties: the whole-grid exact check of the tie-complete map."""

import pytest

from transformer_ua.verify import entry
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import contextual_ties as ct


@pytest.mark.parametrize('d,n,N,grid,arithmetic', [
    (1, 3, 4, 'full', 'auto'),       # int64
    (2, 2, 3, 'full', 'auto'),
    (1, 3, 3, 'multiset', 'limbs'),  # limbs
    (1, 4, 5, 'multiset', 'auto'),   # beyond 64 bits: limbs chosen by the planner
])
def test_whole_grid_exact(d, n, N, grid, arithmetic):
  cm = ct.build(Grid(d, n, N), arithmetic=arithmetic)
  res = entry.verify(cm, enumeration=grid)
  assert res['all_hold'], res['violations']
  assert res['distinct_ids'] == ct.num_ids(Grid(d, n, N))
  if (d, n, N) == (1, 4, 5):
    assert cm.limbs and cm.bits_required > 64
