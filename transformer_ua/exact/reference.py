"""NumPy reference of the core layers (int64, Python-int or Fraction object arrays).

``numpy_apply_segment`` is a straightforward vectorized NumPy implementation of the
same layers (int64 or Python-int ``object`` arrays): the independent oracle for
tests and the baseline of ``benchmarks/verify_throughput.py``. The one reference
attention ``numpy_attention_update`` covers both exact normalizers:

    hardmax    (m = 1)  mixed_j = mean of V_k over argmax_k key_k * query_j (ties exact)
    onehot_max (any m)  mixed_j = sum_k [s_jk = max_k' s_jk'] s_jk V_k

and ``numpy_feedforward_update`` is ``W_2 act(W_1 x + b_1) + b_2`` with act = Phi or
ReLU. On ``fractions.Fraction`` object arrays they are Fang et al.'s exact literal path.
"""

from __future__ import annotations

import jax
import numpy as np

from transformer_ua import activations


def _np_tie_avg(numer, count, inexact):
  if numer.dtype == object or np.issubdtype(numer.dtype, np.integer):
    inexact[0] += int(np.sum(numer % count != 0))
    return numer // count
  return numer / count


def numpy_attention_update(p, x, inexact=None, *, normalizer: str = 'hardmax'):
  """Reference attention part (no residual), NumPy, batched.

  ``normalizer='hardmax'``: m = 1 through the rank-one identity (ties average, the
  inexact integer averages are counted in ``inexact[0]``); ``'onehot_max'``: Fang et
  al.'s one-hot maximum (weights keep the max score value), any m.

  p: NumPy params W_Q, W_K, W_V [h, m, d], b_Q [h, m], W_O [h, d, m]; x [..., n, d].
  """
  if normalizer == 'onehot_max':
    return _onehot_max_attention_update(p, x)
  if normalizer != 'hardmax':
    raise ValueError(f"the NumPy reference runs normalizer 'hardmax' or 'onehot_max', "
                     f'got {normalizer!r}.')
  inexact = [0] if inexact is None else inexact
  h = p['W_Q'].shape[0]
  out = np.zeros_like(x)
  for i in range(h):
    q = x @ p['W_Q'][i, 0] + p['b_Q'][i, 0]  # [..., n]
    k = x @ p['W_K'][i, 0]
    v = x @ p['W_V'][i, 0]
    kmax = k.max(axis=-1, keepdims=True)
    kmin = k.min(axis=-1, keepdims=True)
    is_max, is_min = k == kmax, k == kmin
    s_max = (v * is_max).sum(-1, keepdims=True)
    s_min = (v * is_min).sum(-1, keepdims=True)
    s_all = v.sum(-1, keepdims=True)
    c_max = is_max.sum(-1, keepdims=True)
    c_min = is_min.sum(-1, keepdims=True)
    numer = np.where(q > 0, s_max, np.where(q < 0, s_min, s_all))
    count = np.where(q > 0, c_max, np.where(q < 0, c_min, x.shape[-2]))
    mixed = _np_tie_avg(numer, count, inexact)  # [..., n]
    out = out + mixed[..., None] * p['W_O'][i, :, 0]
  return out


def _onehot_max_attention_update(p, x):
  """``layers.attention_update`` with the one-hot maximum (object arrays ok)."""
  queries = np.einsum('...nd,hmd->...hnm', x, p['W_Q']) + p['b_Q'][:, None, :]
  keys = np.einsum('...nd,hmd->...hnm', x, p['W_K'])
  values = np.einsum('...nd,hmd->...hnm', x, p['W_V'])
  scores = np.einsum('...hjm,...hkm->...hjk', queries, keys)
  is_max = scores == np.max(scores, axis=-1, keepdims=True)
  weights = np.where(is_max, scores, 0 * scores)   # one-hot maximum keeps the value
  mixed = np.einsum('...jk,...ke->...je', weights, values)
  return np.einsum('...hnm,hdm->...nd', mixed, p['W_O'])


def numpy_phi(phi, t):
  """Phi units on pre-activations t [..., r] (NumPy; exact on ints/objects)."""
  idx = np.zeros(t.shape, dtype=np.int64)
  for i in range(activations.MAX_PIECES - 1):
    c, lc = phi['breaks'][:, i], phi['left_closed'][:, i]
    idx = idx + np.where(lc, t > c, t >= c).astype(np.int64)
  slopes = np.take_along_axis(np.broadcast_to(phi['slopes'], t.shape + (3,)),
                              idx[..., None], -1)[..., 0]
  inter = np.take_along_axis(np.broadcast_to(phi['intercepts'], t.shape + (3,)),
                             idx[..., None], -1)[..., 0]
  return slopes * t + inter


def numpy_feedforward_update(p, x):
  """``layers.feedforward_update`` (Phi or ReLU) in NumPy (object ok). x: [..., n, d]."""
  pre = x @ p['W_1'].T + p['b_1']
  act = numpy_phi(p['phi'], pre) if 'phi' in p else np.where(pre > 0, pre, 0 * pre)
  return act @ p['W_2'].T + p['b_2']


def numpy_apply_segment(segment, params, x, trace: bool = False):
  """``layers.apply_segment`` in NumPy, a Python loop over the stacked layers.

  Returns (y, outputs list or None, inexact tie count).
  """
  params = jax.tree_util.tree_map(np.asarray, params)
  inexact = [0]
  outputs = [] if trace else None
  for l in range(segment.depth):
    p = jax.tree_util.tree_map(lambda a: a[l], params)
    if segment.has_attention:
      x = x + numpy_attention_update(p['attention'], x, inexact)
    if segment.has_feedforward:
      x = x + numpy_feedforward_update(p['feedforward'], x)
    if trace:
      outputs.append(x)
  return x, outputs, inexact[0]


def as_object(tree):
  """Every numeric leaf -> NumPy object array of Python ints (bool leaves kept)."""
  return jax.tree_util.tree_map(
      lambda a: np.asarray(a) if np.asarray(a).dtype == bool
      else np.asarray(a).astype(object), tree)
