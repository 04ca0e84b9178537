"""Tests of transformer_ua/models (Yun et al. 2020 Appendix H mixing layers, encoder)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua.models import encoder as enc
from transformer_ua.models import mixers as mixing


def expected_params(V, N, d, L, r, kinds, H=16, K=128, types=2):
  """Encoder + pooler parameter count, by hand from the layer formulas."""
  emb = V * d + N * d + types * d + 2 * d
  mix = {'attention': 4 * d * d + 4 * d, 'average': d * d + d,
         'bilinear': d * d + d + N * N, 'sepconv': 3 * d * d + 3 * d + H * K}
  ff = d * r + r + r * d + d
  return emb + sum(mix[k] + ff + 4 * d for k in kinds) + d * d + d


def test_bert_base_is_bert_base():
  # Hugging Face BertModel('bert-base-uncased') has 109,482,240 parameters.
  cfg = enc.EncoderConfig(vocab_size=30522, max_len=512, hidden=768, num_layers=12,
                          num_heads=12, mlp_dim=3072)
  counts = enc.param_counts(cfg)
  assert counts['encoder_pooler'] == 109_482_240
  # BertForPreTraining adds the MLM transform + LN + output bias and the NSP head.
  assert counts['pretrainer'] == 109_482_240 + 768 * 768 + 768 + 2 * 768 + 30522 + 768 * 2 + 2


@pytest.mark.parametrize('mixing_kind', mixing.MIXING_KINDS)
@pytest.mark.parametrize('named', ['tiny', 'bert_base'])
def test_param_counts_named_configs(mixing_kind, named):
  if named == 'tiny':
    V, N, d, L, h, r, H, K = 4000, 64, 64, 4, 4, 256, 16, 31
  else:
    V, N, d, L, h, r, H, K = 30522, 512, 768, 12, 12, 3072, 16, 128
  cfg = enc.EncoderConfig(vocab_size=V, max_len=N, hidden=d, num_layers=L, num_heads=h,
                          mlp_dim=r, mixing=mixing_kind, conv_filters=H, conv_width=K)
  got = enc.param_counts(cfg)['encoder_pooler']
  assert got == expected_params(V, N, d, L, r, [mixing_kind] * L, H, K)


def test_hybrid_param_count_and_kinds():
  cfg = enc.EncoderConfig(vocab_size=100, max_len=16, hidden=32, num_layers=4, num_heads=2,
                          mlp_dim=64, num_conv_layers=3, conv_filters=4, conv_width=5)
  assert cfg.kinds == ('sepconv',) * 3 + ('attention',)
  kinds = ['sepconv'] * 3 + ['attention']
  assert enc.param_counts(cfg)['encoder_pooler'] == expected_params(100, 16, 32, 4, 64, kinds,
                                                                    4, 5)


@pytest.mark.parametrize('kw, match', [
    (dict(mixing='conv'), "unknown mixing layer 'conv'; choose one of"),
    (dict(num_conv_layers=5), r'num_conv_layers \(k\) must be in \[0, 4\]'),
    (dict(num_conv_layers=-1), r'must be in \[0, 4\]'),
    (dict(num_heads=3), 'not divisible by num_heads=3'),
])
def test_bad_configs(kw, match):
  base = dict(vocab_size=50, max_len=8, hidden=16, num_layers=4, num_heads=2, mlp_dim=32)
  with pytest.raises(ValueError, match=match):
    enc.EncoderConfig(**{**base, **kw}).validate()


def _apply(layer, x, mask, seed=0):
  params = layer.init(jax.random.PRNGKey(seed), x, mask)
  return params, layer.apply(params, x, mask)


def _data(B=2, n=7, d=8, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(B, n, d)).astype(np.float32)
  mask = np.ones((B, n), bool)
  mask[1, 5:] = False
  return x, mask


def test_self_attention_matches_numpy():
  x, mask = _data()
  params, u = _apply(mixing.SelfAttention(num_heads=2), x, mask)
  p = jax.tree_util.tree_map(np.asarray, params['params'])
  lin = lambda name, t: t @ p[name]['kernel'] + p[name]['bias']
  q, k, v = (lin(nm, x).reshape(2, 7, 2, 4) for nm in ('query', 'key', 'value'))
  s = np.einsum('bjhm,bkhm->bhjk', q, k) / 2.0
  s = np.where(mask[:, None, None, :], s, -np.inf)
  a = np.exp(s - s.max(-1, keepdims=True))
  a /= a.sum(-1, keepdims=True)
  o = np.einsum('bhjk,bkhm->bjhm', a, v).reshape(2, 7, 8)
  np.testing.assert_allclose(u, lin('out', o), rtol=1e-4, atol=1e-5)


def test_average_attention_is_mean_over_real_tokens():
  x, mask = _data()
  params, u = _apply(mixing.AverageAttention(), x, mask)
  p = params['params']['out']
  for b in range(2):
    mean = x[b][mask[b]].mean(0)
    want = mean @ np.asarray(p['kernel']) + np.asarray(p['bias'])
    np.testing.assert_allclose(u[b], np.broadcast_to(want, (7, 8)), rtol=1e-5, atol=1e-5)


def test_bilinear_matches_eq5_and_refuses_long_inputs():
  x, mask = _data()
  layer = mixing.BilinearProjection(max_len=10)
  params, u = _apply(layer, x, mask)
  p = jax.tree_util.tree_map(np.asarray, params['params'])
  y = (x @ p['out']['kernel'] + p['out']['bias']) * mask[..., None]
  want = np.einsum('kj,bkd->bjd', p['w_p'][:7, :7], y)
  np.testing.assert_allclose(u, want, rtol=1e-5, atol=1e-5)
  long = np.zeros((1, 11, 8), np.float32)
  with pytest.raises(ValueError, match='tied to its max length: W_P is 10 x 10'):
    layer.apply(params, long, np.ones((1, 11), bool))


@pytest.mark.parametrize('K', [3, 4, 9])
def test_lightweight_conv_matches_direct_convolution(K):
  x, mask = _data(n=9, d=8)
  layer = mixing.LightweightConv(num_filters=2, width=K)
  params, u = _apply(layer, x, mask, seed=K)
  p = jax.tree_util.tree_map(np.asarray, params['params'])
  g = x @ p['glu']['kernel'] + p['glu']['bias']
  g = g[..., :8] / (1 + np.exp(-g[..., 8:])) * mask[..., None]
  w = np.exp(p['filters'])
  w /= w.sum(-1, keepdims=True)                      # softmax over the width
  left = (K - 1) // 2
  y = np.zeros_like(g)
  for b in range(2):
    for j in range(9):
      for c in range(8):
        h = c // 4                                   # 8 dims / 2 filters
        for t in range(K):
          src = j + t - left
          if 0 <= src < 9:
            y[b, j, c] += w[h, t] * g[b, src, c]
  want = y @ p['out']['kernel'] + p['out']['bias']
  np.testing.assert_allclose(u, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('mixing_kind', mixing.MIXING_KINDS)
def test_encoder_ignores_padding_content(mixing_kind):
  cfg = enc.EncoderConfig(vocab_size=40, max_len=12, hidden=16, num_layers=2, num_heads=2,
                          mlp_dim=32, mixing=mixing_kind, conv_filters=4, conv_width=5)
  model = enc.Encoder(cfg)
  rng = np.random.default_rng(1)
  ids = rng.integers(5, 40, size=(2, 12)).astype(np.int32)
  types = np.zeros_like(ids)
  mask = np.ones((2, 12), bool)
  mask[:, 8:] = False
  params = model.init(jax.random.PRNGKey(0), ids, types, mask)
  out1 = model.apply(params, ids, types, mask)
  ids2 = ids.copy()
  ids2[:, 8:] = rng.integers(5, 40, size=(2, 4))
  out2 = model.apply(params, ids2, types, mask)
  np.testing.assert_allclose(out1[:, :8], out2[:, :8], rtol=1e-5, atol=1e-5)
  assert not np.allclose(out1[:, 8:], out2[:, 8:])     # the padding itself did change
  # And real tokens do see each other: a change at token 0 reaches token 1 (sepconv's
  # receptive field here is 2 layers x 2 taps each side; attention reaches all).
  ids3 = ids.copy()
  ids3[:, 0] = (ids[:, 0] - 5 + 1) % 35 + 5
  out3 = model.apply(params, ids3, types, mask)
  assert not np.allclose(out1[:, 1], out3[:, 1])


def test_encoder_refuses_sequences_longer_than_max_len():
  cfg = enc.EncoderConfig(vocab_size=40, max_len=6, hidden=16, num_layers=1, num_heads=2,
                          mlp_dim=32)
  ids = jnp.zeros((1, 6), jnp.int32)
  params = enc.Encoder(cfg).init(jax.random.PRNGKey(0), ids, ids, ids > -1)
  long = jnp.zeros((1, 7), jnp.int32)
  with pytest.raises(ValueError, match='exceeds max_len=6'):
    enc.Encoder(cfg).apply(params, long, long, long > -1)
