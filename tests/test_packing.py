"""Sequence packing for Appendix H pre-training: packed batches (transformer_ua/data/text.py)
and segment-aware mixing (transformer_ua/models/mixers.py, encoder.py).

The model check: a packed row computes, for every instance in it, what that instance
computes alone in a padded row of its own (same parameters, deterministic): the encoder
output at each of its tokens, its masked-LM logits and its sentence-pair logits. float32
on CPU; the only differences are summation order, so the tolerance is absolute 1e-5 on
values of order 1 (layer-normed hidden states and logits); the largest difference seen
was 1.4e-6.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua.data import text, wordnet
from transformer_ua.models import encoder as enc
from transformer_ua.train import mixing as mixing_train

FIXTURE = os.path.join(os.path.dirname(__file__), 'fixtures', 'wordnet')
ATOL = 1e-5

# Every mixing layer, and a hybrid (Figure 1: sepconv lower layer, attention above).
MODELS = {'attention': dict(mixing='attention'), 'average': dict(mixing='average'),
          'bilinear': dict(mixing='bilinear'), 'sepconv': dict(mixing='sepconv'),
          'hybrid k=1': dict(mixing='attention', num_conv_layers=1)}


def _row(rng, lengths, n, V):
  """One packed row of instances of the given lengths: ids, types, segments, positions."""
  ids, types, seg, pos, cls = (np.zeros(n, np.int32) for _ in range(5))
  cls = []
  start = 0
  for s, l in enumerate(lengths):
    ids[start:start + l] = rng.integers(5, V, l)
    ids[start] = text.CLS
    types[start + l // 2:start + l] = 1
    seg[start:start + l] = s + 1
    pos[start:start + l] = np.arange(l)
    cls.append(start)
    start += l
  return ids, types, seg, pos, cls


@pytest.mark.parametrize('name', list(MODELS))
def test_packed_row_equals_its_instances_alone(name):
  n, V, S = 24, 50, 3
  cfg = enc.EncoderConfig(vocab_size=V, max_len=n, hidden=16, num_layers=2, num_heads=2,
                          mlp_dim=32, dropout=0.0, conv_filters=4, conv_width=5,
                          **MODELS[name]).validate()
  model = enc.BertPretrainer(cfg)
  rng = np.random.default_rng(0)
  rows = [_row(rng, [7, 9, 5], n, V), _row(rng, [13, 11], n, V)]      # 21 / 24 filled
  ids, types, seg, pos = (np.stack([r[i] for r in rows]) for i in range(4))
  cls = np.zeros((2, S), np.int32)
  for b, r in enumerate(rows):
    cls[b, :len(r[4])] = r[4]
  mask = seg > 0
  mlm_pos = np.stack([np.flatnonzero(m)[1::4][:5] for m in mask]).astype(np.int32)
  params = model.init(jax.random.PRNGKey(1), ids, types, mask, mlm_pos)['params']
  # Random (not initial) parameters, so that W_P, the filters and the biases matter.
  leaves, tree = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(2), len(leaves))
  params = jax.tree_util.tree_unflatten(
      tree, [l + 0.3 * jax.random.normal(k, l.shape) for l, k in zip(leaves, keys)])
  seq_packed = model.apply({'params': params}, ids, types, mask, segment_ids=seg,
                           positions=pos, num_segments=S,
                           method=lambda m, *a, **k: m.encoder(*a, **k))
  mlm_packed, nsp_packed = model.apply({'params': params}, ids, types, mask, mlm_pos,
                                       segment_ids=seg, positions=pos, cls_positions=cls)
  checked = 0
  for b, r in enumerate(rows):
    for s, start in enumerate(r[4]):
      l = int((seg[b] == s + 1).sum())
      alone = lambda a: np.pad(a[b, start:start + l], (0, n - l))[None]
      a_ids, a_types = alone(ids), alone(types)
      a_mask = np.arange(n)[None] < l
      inside = [(j, p) for j, p in enumerate(mlm_pos[b]) if start <= p < start + l]
      a_mlm = np.array([[p - start for _, p in inside] or [0]], np.int32)
      seq_alone = model.apply({'params': params}, a_ids, a_types, a_mask,
                              method=lambda m, *a, **k: m.encoder(*a, **k))
      mlm_alone, nsp_alone = model.apply({'params': params}, a_ids, a_types, a_mask, a_mlm)
      np.testing.assert_allclose(seq_packed[b, start:start + l], seq_alone[0, :l],
                                 atol=ATOL, rtol=0)
      np.testing.assert_allclose(nsp_packed[b, s], nsp_alone[0], atol=ATOL, rtol=0)
      for i, (j, _) in enumerate(inside):
        np.testing.assert_allclose(mlm_packed[b, j], mlm_alone[0, i], atol=ATOL, rtol=0)
      checked += 1
  assert checked == 5
  # The check can fail: without the segment masks the instances do mix.
  unmasked = model.apply({'params': params}, ids, types, mask,
                         method=lambda m, *a, **k: m.encoder(*a, **k))
  assert np.abs(np.asarray(unmasked[0, 7:16]) - np.asarray(seq_packed[0, 7:16])).max() > 1e-2


@pytest.fixture(scope='module')
def data():
  synsets = wordnet.load(FIXTURE)
  tok = text.train_tokenizer(text.pretraining_text(synsets, 0.1), 400)
  return text.PretrainData.from_synsets(synsets, tok, heldout=False, heldout_fraction=0.1,
                                        max_len=96, max_predictions=12, seed=3)


def test_packed_batches(data):
  B, S = 16, 4
  p, q = data.batch(5, B, S), data.batch(5, B, S)
  for k in p:
    np.testing.assert_array_equal(p[k], q[k])                 # a function of (seed, step)
  assert p['segment_ids'].shape == (B, 96) and p['nsp_labels'].shape == (B, S)
  np.testing.assert_array_equal(p['mask'], p['segment_ids'] > 0)
  assert not p['input_ids'][~p['mask']].any() and not p['positions'][~p['mask']].any()
  unpacked = data.batch(5, B)
  assert p['mask'].mean() > 1.5 * unpacked['mask'].mean()   # padding drops (0.49 -> 0.90)
  assert (p['segment_ids'].max(1) >= 2).sum() > B // 2       # most rows hold >= 2
  for b in range(B):
    seg, pos = p['segment_ids'][b], p['positions'][b]
    k = int(seg.max())
    assert 1 <= k <= S and (p['nsp_weights'][b, k:] == 0).all()
    real = seg[seg > 0]
    assert (np.diff(real) >= 0).all() and set(real) == set(range(1, k + 1))  # contiguous
    for s in range(k):
      where = np.flatnonzero(seg == s + 1)
      start = p['cls_positions'][b, s]
      assert where[0] == start and p['input_ids'][b, start] == text.CLS
      np.testing.assert_array_equal(pos[where], np.arange(len(where)))
      assert p['type_ids'][b, start] == 0
    w = p['mlm_weights'][b] > 0
    at = p['mlm_positions'][b][w]
    assert w.any() and p['mask'][b, at].all()
    assert not np.isin(p['mlm_ids'][b][w], [text.PAD, text.CLS, text.SEP]).any()
  assert p['nsp_weights'].sum() > 0
  with pytest.raises(ValueError, match='max_segments must be a positive integer'):
    data.batch(0, 2, 0)


def test_packed_pretraining_runs_and_counts_real_tokens(tmp_path):
  from tests.test_mixing_train import small_config
  c = small_config(tmp_path, mixing='bilinear')
  c.data.max_segments = 3
  c.pretrain.update(steps_per_call=2, log_every=2, tensorboard=False)
  r = mixing_train.pretrain(c, str(tmp_path / 'packed'))
  assert r['step'] == 4 and r['max_segments'] == 3
  assert 0 < r['train_tokens_per_s'] < r['train_row_tokens_per_s']
  assert np.isfinite(r['eval']['mlm_loss'])
  c.data.max_segments = 0
  with pytest.raises(ValueError, match='max_segments must be a positive integer'):
    mixing_train.pretrain(c, str(tmp_path / 'bad'))
