"""flax_import and read_network on (flax.linen.Module, variables): traced to a jaxpr, read
into the v2 dict, checked against the Flax apply; masks, planted faults and bad modules."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua.networks import flax_import, network_apply, network_dict, source_check

ACT = {'gelu': nn.gelu, 'relu': nn.relu, 'gelu_erf': lambda t: nn.gelu(t, approximate=False)}


class Block(nn.Module):
  """Dense embed, one block (MultiHeadDotProductAttention with its default biases, 2 heads;
  a Dense-act-Dense FF), post-LN or pre-LN, [final LayerNorm], Dense readout."""
  pre: bool = False
  act: str = 'gelu'
  causal: bool = False
  final_ln: bool = False

  @nn.compact
  def __call__(self, x):
    z = nn.Dense(8)(x)
    mask = nn.make_causal_mask(jnp.ones(x.shape[:2])) if self.causal else None
    attn = nn.MultiHeadDotProductAttention(num_heads=2)
    ff = lambda t: nn.Dense(8)(ACT[self.act](nn.Dense(16)(t)))  # noqa: E731
    if self.pre:
      z = z + attn(nn.LayerNorm()(z), mask=mask)
      z = z + ff(nn.LayerNorm()(z))
    else:
      z = nn.LayerNorm()(z + attn(z, mask=mask))
      z = nn.LayerNorm()(z + ff(z))
    if self.final_ln:
      z = nn.LayerNorm()(z)
    return nn.Dense(1)(z)


def build(**kw):
  m = Block(**kw)
  return m, m.init(jax.random.PRNGKey(0), jnp.ones((1, 3, 1)))


X = np.random.default_rng(3).random((32, 3, 1))


@pytest.mark.parametrize('pre,act,causal', [
    (False, 'gelu', False), (False, 'relu', True), (True, 'gelu_erf', True)])
def test_block_read_and_checked_against_the_apply(pre, act, causal):
  m, v = build(pre=pre, act=act, causal=causal, final_ln=pre)
  net, text = source_check.read_network((m, v), d=1, n=3, arithmetic='float32')
  assert 'Flax apply of Block on 1024 points in float32' in text and '\n' not in text
  b = net.blocks[0]
  assert b.norm == ('pre' if pre else 'post') and b.attention.causal == causal
  assert b.ff.activation == {'gelu': 'gelu_tanh', 'relu': 'relu', 'gelu_erf': 'gelu'}[act]
  assert b.heads == 2 and b.attention.b_k is not None and b.attention.b_o is not None
  assert (net.final_ln is not None) == pre and b.attention.scale == 0.5
  want = np.asarray(m.apply(v, jnp.asarray(X, jnp.float32)), np.float64)
  assert np.abs(network_apply.apply(net, X, np.float32) - want).max() < 2e-6


def test_float64_under_x64():
  with jax.enable_x64(True):
    m, v = build(pre=True)
    v = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), v)
    net, text = source_check.read_network((m, v), d=1, n=3, arithmetic='float64')
    assert 'in float64' in text
    want = np.asarray(m.apply(v, jnp.asarray(X)))
  assert np.abs(network_apply.apply(net, X) - want).max() < 1e-9


def test_dropped_bias_caught_by_the_apply():
  """A planted fault: the key bias dropped from the import (the old b_K refusal's trap)."""
  m, v = build()
  raw, _, source, dtype = flax_import.read(m, v, d=1, n=3)
  raw['blocks'][0]['b_V'] = np.zeros_like(raw['blocks'][0]['b_V'])
  v2 = jax.tree_util.tree_map(lambda a: a, v)
  leaf = v2['params']['MultiHeadDotProductAttention_0']['value']['bias']
  v2['params']['MultiHeadDotProductAttention_0']['value']['bias'] = leaf + 0.5
  net = network_dict.check(flax_import.read(m, v2, d=1, n=3)[0], d=1, n=3)
  with pytest.raises(ValueError, match='differs from') as err:
    source_check.compare(net, source, dtype=dtype, what='the Flax apply')
  assert '\n' not in str(err.value)


def test_float16_variables_refused():
  m, v = build()
  v = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float16), v)
  with pytest.raises(ValueError, match='float16') as err:
    source_check.read_network((m, v), d=1, n=3, arithmetic='float32')
  assert '\n' not in str(err.value)


def test_bfloat16_variables_only_with_the_bfloat16_arithmetic():
  m, v = build()
  v = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.bfloat16), v)
  with pytest.raises(ValueError, match="accepted only with arithmetic='bfloat16'") as err:
    source_check.read_network((m, v), d=1, n=3, arithmetic='float32')
  assert '\n' not in str(err.value) and 'params' in str(err.value)


class Bad(nn.Module):
  kind: str = 'sigmoid'

  @nn.compact
  def __call__(self, x):
    z = nn.Dense(4)(x)
    if self.kind == 'sigmoid':
      return nn.Dense(1)(z + nn.sigmoid(z))
    if self.kind == 'conv':
      return nn.Conv(1, (1,))(z)
    if self.kind == 'seq_norm':
      return nn.Dense(1)(z + nn.LayerNorm(reduction_axes=-2, feature_axes=-2)(z))
    return nn.Dense(1)(z + nn.Dropout(0.5, deterministic=False)(z, rng=jax.random.PRNGKey(0)))


@pytest.mark.parametrize('kind,what', [('sigmoid', 'logistic'), ('conv', 'conv'),
                                       ('seq_norm', 'across tokens'), ('dropout', 'random')])
def test_outside_the_class_refused_in_one_line(kind, what):
  m = Bad(kind)
  v = m.init(jax.random.PRNGKey(0), jnp.ones((1, 3, 1)))
  with pytest.raises(ValueError, match=what) as err:
    source_check.read_network((m, v), d=1, n=3, arithmetic='float32')
  assert '\n' not in str(err.value)
