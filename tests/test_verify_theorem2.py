"""verify.theorem2: up-front refusals of grids too large or beyond the memory budget."""

import pytest

from transformer_ua.verify import theorem2
from transformer_ua.yun.grid import Grid


def test_too_large_grid_hint_suggests_multiset_only_when_not_set():
  from transformer_ua.verify import theorem2
  with pytest.raises(ValueError, match='use --grid=multiset'):
    theorem2.verify_theorem2(Grid(1, 2, 4), enumeration='full', max_points=1)
  with pytest.raises(ValueError) as info:
    theorem2.verify_theorem2(Grid(1, 2, 4), enumeration='multiset', max_points=1)
  assert '--grid=multiset' not in str(info.value) and 'max_points' in str(info.value)


def test_memory_budget_refused_up_front():
  with pytest.raises(ValueError, match='GiB'):
    theorem2.verify_theorem2(Grid(2, 4, 9), enumeration='multiset', progress=False)
