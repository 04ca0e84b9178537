"""yun.grid: Grid(d, n, N) and the variants, chosen once from the public keywords."""

import math

import pytest

from transformer_ua.yun import grid
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import contextual_ties, pipeline
from transformer_ua.yun.variants import registry
from transformer_ua.yun.variants.one_layer import OneLayer
from transformer_ua.yun.variants.paper import Paper
from transformer_ua.yun.variants.positional import Positional
from transformer_ua.yun.variants.ties_complete import TiesComplete
from transformer_ua.yun.single_attention import one_layer_ids


def test_grid_is_validated_and_frozen():
  g = grid.Grid(2, 3, 4)
  assert (g.d, g.n, g.N, g.resolution, g.cells) == (2, 3, 4, 4, 16)
  with pytest.raises(ValueError, match='n=1 is not allowed'):
    grid.Grid(1, 1, 4)
  with pytest.raises(ValueError, match='resolution=1.5'):
    grid.Grid(1, 2, 1.5)
  with pytest.raises(Exception):
    g.d = 3


@pytest.mark.parametrize('kw,cls', [
    ({}, Paper), ({'positional': True}, Positional),
    ({'ties': 'complete'}, TiesComplete), ({'contextual': 'one_layer'}, OneLayer)])
def test_choose_maps_the_public_keywords_to_one_variant(kw, cls):
  v = registry.choose(1, 3, 2, **kw)
  assert type(v) is cls and v.grid == grid.Grid(1, 3, 2)
  assert v.positional == kw.get('positional', False)
  assert v.ties == kw.get('ties', 'paper')
  assert v.contextual == kw.get('contextual', 'paper')
  assert registry.VARIANTS[v.name] is cls
  assert v.at(3).grid == grid.Grid(1, 3, 3) and type(v.at(3)) is cls


@pytest.mark.parametrize('kw,match', [
    ({'positional': 1}, 'positional must be True or False, got 1'),
    ({'ties': 'yes'}, "ties='yes'; allowed"),
    ({'ties': 'complete', 'positional': True}, 'Theorem 2 variant'),
    ({'contextual': 'hardmax'}, "'paper', 'one_layer'"),
    ({'contextual': 'one_layer', 'positional': True}, 'positional=False'),
    ({'contextual': 'one_layer', 'arithmetic': 'limbs'}, "arithmetic='auto'")])
def test_choose_refuses_with_the_old_messages(kw, match):
  with pytest.raises(ValueError, match=match):
    registry.choose(1, 2, 2, **kw)


@pytest.mark.parametrize('d,n,N', [(1, 2, 3), (2, 2, 2), (1, 3, 2)])
def test_counts_by_hand(d, n, N):
  V = N ** d
  assert Paper(grid.Grid(d, n, N)).layer_counts() == {
      'quantization': d * (N + 1), 'contextual': V + 1, 'value': n * math.comb(V, n) + d + 1}
  assert Positional(grid.Grid(d, n, N)).layer_counts() == {
      'quantization': d * n * N, 'contextual': n * V + 1,
      'value': n * N ** (d * n) + d + 1}
  ids = V * math.comb(V + n - 2, n - 1)
  assert TiesComplete(grid.Grid(d, n, N)).layer_counts() == {
      'quantization': d * (N + 1), 'contextual': V + 3, 'value': ids + d + 1}
  ol = OneLayer(grid.Grid(d, n, N))
  assert ol.layer_counts() == {'quantization': d * (N + 1), 'contextual': 2, 'value': ids}
  assert ol.num_classes() == one_layer_ids.num_classes(Grid(d, n, N))
  assert ol.num_bump_layers() == one_layer_ids.num_ids(Grid(d, n, N))
  assert ol.representatives().shape == (ol.num_classes(), n, d)


def test_variants_agree_with_the_built_networks():
  for v in (Paper(grid.Grid(1, 2, 3)), Positional(grid.Grid(1, 2, 2)),
            TiesComplete(grid.Grid(1, 3, 2))):
    reps = v.representatives()
    assert reps.shape == (v.num_classes(), v.n, v.d)
    g = pipeline.build_g_bar(v, reps * 0)
    assert g.variant is v and g.positional == v.positional
    counts = {s: sum(k.values()) for s, k in g.layer_counts().items()}
    assert counts == v.layer_counts() and g.depth() == v.depth()
    assert g.num_params() == sum(v.parameter_counts().values())
    assert g.contextual.t_l == v.interval()[0] and g.contextual.t_r == v.interval()[1]
    assert registry.choose(v.d, v.n, v.N, positional=v.positional, ties=v.ties).num_classes() \
        == v.num_classes()


def test_check_ties_accepts_complete():
  assert contextual_ties.check_ties('complete') == 'complete'
