"""Every construction object answers ``transformer_ua.construction``'s contract.

Small configurations (d = 1, n = 2 or 3, N = 2 or 3), each object run through
``construction.check``: types, shapes, depth() == sum of layer_counts() == layers of
network(), num_params() == weight entries of float_params(), apply vs apply_exact, and
the literal float network network().apply({'params': float_params()}, x) where its
values fit float64.
"""

import ast
import dataclasses
import os
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua import construction, fang
from transformer_ua.yun.variants import registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _interior(rng, batch, n, d, N):
  k = rng.integers(0, N, size=(batch, n, d))
  return (k + 0.25 + 0.5 * rng.random(k.shape)) / N


def _literal(obj, x):
  with jax.enable_x64(True):
    return np.asarray(obj.network().apply({'params': obj.float_params()},
                                          jnp.asarray(np.asarray(x, np.float64))))


@pytest.fixture(scope='module')
def nets():
  return {
      'paper': registry.build_approximator('token_times_mean', d=1, n=2, resolution=3),
      'positional': registry.build_approximator('prefix_mean', d=1, n=2, resolution=2,
                                                    positional=True),
      'ties': registry.build_approximator('token_times_mean', d=1, n=2, resolution=2,
                                              ties='complete'),
      'one_layer': registry.build_approximator('token_times_mean', d=1, n=2,
                                                   resolution=2, contextual='one_layer'),
  }


@pytest.mark.parametrize('variant', ['paper', 'positional', 'ties', 'one_layer'])
def test_approximator_and_its_g_bar(nets, variant):
  net = nets[variant]
  x = _interior(np.random.default_rng(0), 8, net.n, net.d, net.resolution)
  out = construction.check(net, x)
  assert isinstance(net, construction.Construction)
  # exact bump selection: apply is apply_exact rounded, and the literal float network
  # agrees on cube interiors (small values)
  np.testing.assert_allclose(_literal(net, x), net.apply(x), atol=1e-9)
  assert out['max_abs_difference'] == 0.0
  if variant != 'one_layer':
    gb = net.g_bar
    assert gb.depth() == net.depth() and gb.layer_counts() == net.layer_counts()
    # g_bar's own values are the rounded numerators (multiples of 1/(2N))
    construction.check(gb, x)
    np.testing.assert_allclose(gb.apply_literal(x), gb.apply(x), atol=1e-9)
    assert construction.stage_counts(net.layer_counts()) == net.paper_layer_counts()


@pytest.mark.parametrize('variant', ['paper', 'positional', 'ties'])
def test_stages(nets, variant):
  gb = nets[variant].g_bar
  q, cm, vm = gb.quantization, gb.contextual, gb.value
  n, d, N = cm.n, cm.d, cm.resolution
  x = _interior(np.random.default_rng(1), 6, n, d, N)
  construction.check(q, x, atol=0)
  y = q.apply_exact(x)                        # G+ points (Theorem 3: + E)
  assert q.layer_counts() == {'quantization': {'feedforward': q.depth()}}
  c_out = construction.check(cm, np.asarray(y, np.float64), rtol=1e-15)
  z = cm.apply_exact(np.asarray(y, np.float64))
  construction.check(vm, z)
  # the stages compose to g_bar exactly
  np.testing.assert_array_equal(vm.apply_exact(z), gb.apply_exact(x))
  kinds = cm.layer_counts()['contextual']
  assert kinds.get('feedforward', 0) == (1 if variant == 'ties' else 0)
  assert c_out['depth'] == cm.depth()


def test_one_layer_attention_counts(nets):
  net = nets['one_layer']
  assert construction.kind_counts(net.layer_counts())['attention'] == 1
  assert net.stage_names() == ('quantization', 'contextual', 'contextual', 'value')
  assert construction.stage_counts(net.layer_counts()) == net.variant.layer_counts()
  assert net.num_params() == sum(net.variant.parameter_counts().values())


@pytest.mark.parametrize('clamp', [False, True])
def test_realized(nets, clamp):
  net = nets['paper']
  g = net.realize(lam=1e4, epsilon=1e-2, dtype='float64', clamp=clamp)
  x = _interior(np.random.default_rng(2), 4, net.n, net.d, net.resolution)
  construction.check(g, x)
  counts = g.layer_counts()
  assert set(counts) == {'quantization', 'contextual', 'value'} | ({'clamp'} if clamp else set())
  assert construction.stage_counts(counts)['contextual'] == net.g_bar.contextual.depth()
  assert g.block_counts()['blocks'] == g.depth()
  bare = dataclasses.replace(g, source=None)     # a Realized built by hand has no stages
  assert bare.layer_counts() == {'realized': {'block': g.depth()}}
  np.testing.assert_allclose(_literal(g, x), g.apply(x), atol=1e-12)


def test_realized_exact_and_one_layer_realized(nets):
  net = nets['paper']
  g = net.realize(lam=2 ** 12, epsilon=Fraction(1, 64), dtype='exact')
  x = _interior(np.random.default_rng(3), 2, net.n, net.d, net.resolution)
  construction.check(g, x)
  ol = nets['one_layer']
  go = ol.realize(dtype='float64')
  construction.check(go, _interior(np.random.default_rng(4), 2, ol.n, ol.d, ol.resolution))
  assert construction.kind_counts(go.layer_counts()) == {'block': go.depth()}


def test_fang_polynomial_transformer():
  poly = {(2, 0): Fraction(1), (0, 1): Fraction(-3, 2), (0, 0): Fraction(1, 3)}
  model = fang.build_polynomial_transformer(poly, d=2, bound=3.0, exact=True)
  rows = np.asarray([[Fraction(1, 2), Fraction(-1, 3)], [Fraction(0), Fraction(1)],
                     [Fraction(6, 5), Fraction(8, 5)]], dtype=object)
  x = rows.astype(np.float64)
  out = construction.check(model, x, atol=1e-12)
  assert out['depth'] == model.q == 2
  want = [fang.evaluate_poly_exact(poly, r) for r in rows.tolist()]
  assert list(model.apply_exact(rows)) == want
  assert model.apply_exact(rows.reshape(3, 1, 2)).shape == (3, 1)
  np.testing.assert_allclose(_literal(model, x), model.apply(x), rtol=1e-12, atol=1e-12)


def test_check_can_fail(nets):
  class Wrong:
    """The paper net with its depth off by one."""

    def __init__(self, net):
      self.net = net

    def __getattr__(self, name):
      return getattr(self.net, name)

    def depth(self):
      return self.net.depth() + 1

  x = _interior(np.random.default_rng(5), 2, 2, 1, 3)
  with pytest.raises(AssertionError, match='sums to'):
    construction.check(Wrong(nets['paper']), x)


def test_construction_module_imports_no_construction():
  """construction.py sits below yun/ and fang/ (they may import it, not the reverse)."""
  tree = ast.parse(open(os.path.join(ROOT, 'transformer_ua', 'construction.py')).read())
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names |= {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom):
      names |= {f'{node.module}.{a.name}' for a in node.names}
  assert not [m for m in names if m.startswith(('transformer_ua.yun', 'transformer_ua.fang',
                                                 'transformer_ua.verify', 'experiments'))]
