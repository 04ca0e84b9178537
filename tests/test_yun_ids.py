"""yun.realization.ids: g_c simulated on column ids, every grid class, exactly (Lemma 6's inputs)."""

import numpy as np
import pytest

from transformer_ua.yun import build_approximator
from transformer_ua.yun import enumeration
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.realization import ids, plan
from transformer_ua.yun.stages import contextual_ties as ct


def test_grid_classes_are_the_multisets_of_cells():
  net = build_approximator('token_times_mean', d=2, n=2, resolution=2)
  k = ids.grid_classes(net)
  assert k.shape == (10, 2, 2)                    # C(4 + 1, 2) multisets of 4 cells
  cells = enumeration.column_number(k, 2)
  assert np.all(np.diff(cells, axis=-1) >= 0)
  assert len({tuple(c) for c in cells}) == 10


@pytest.mark.parametrize('N', [2, 4, 8])
def test_ties_simulation_equals_the_reference_g_c_on_every_class(N):
  """The plan's id simulation (from the exact params' layer list) against the
  independent pure-Python g_c of contextual_ties.reference_ids, every multiset with
  repeats; the ids are distinct per (multiset, value) pair."""
  net = build_approximator('token_times_mean', d=1, n=3, resolution=N, ties='complete')
  sim = ids.simulate(net)
  assert len(sim['classes']) == ct.num_classes(Grid(1, 3, N))
  assert sim['tied_heads'] == 1   # the counting head: exact in softmax
  owners = {}
  for k, q_ids in zip(sim['classes'], sim['ids']):
    ticks = [int(c) for c in k[:, 0]]
    swept, q = ct.reference_ids(ticks, Grid(1, 3, N))
    assert [v / N for v in q] == q_ids
    for t, v in zip(ticks, q_ids):
      assert owners.setdefault(v, (tuple(sorted(ticks)), t)) == (tuple(sorted(ticks)), t)
    assert max(abs(v) for v in swept) / N <= sim['max_id']
  assert len(owners) == ct.num_ids(Grid(1, 3, N))
  p = plan.plan_realization(net)
  assert p.bounds['clearance_offset'] == 1     # offset: t = 0, breakpoints -1, 1
  assert p.bounds['t_l'] == ct.interval(Grid(1, 3, N))[0]


def test_a_g_c_layer_not_reading_u_is_refused_in_one_line():
  """The id simulation models layers whose projections are multiples of u^T (every
  Lemma 8 and tie-complete layer); anything else is refused, not mis-planned."""
  assert ids._multiple_of([2, 8], [1, 4], 'W_Q') == 2  # pylint: disable=protected-access
  with pytest.raises(ValueError, match='W_Q is not a multiple of u'):
    ids._multiple_of([1, 2], [1, 4], 'W_Q')  # pylint: disable=protected-access
