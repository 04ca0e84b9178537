"""int64 kernels with the shared-projection identity (W_Q = W_K = W_V).

When W_Q = W_K = W_V (every Yun selective-shift head), one projection gives the keys,
the values and (plus b_Q) the queries, and the average over tied arg-max keys is the
max key itself (tied keys are equal, so are their values):

    keys = X W_K,   queries = keys + b_Q
    mixed_j = max_k keys_k   if queries_j > 0
              min_k keys_k   if queries_j < 0
              floor(sum_k keys_k / n)   if queries_j = 0  (counted when inexact)

The same integers as ``layers.attention_update`` (hardmax, m = 1) on int64 arrays
with a third of the projections and no tie division; tests compare them on whole grids.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def int64_shared_attention_update(p, x):
  """``layers.attention_update`` (hardmax, m = 1) for W_Q = W_K = W_V, int64.

  Same identity as ``limb_attention_update(shared_qkv=True)``: one projection gives
  keys = values and queries = keys + b_Q; tied arg-max (arg-min) keys are equal, so
  their average is the max (min) key; only an all-key tie (query 0) divides.
  Returns ([..., n, d], number of inexact tie averages) like the core.
  """
  keys = jnp.sum(x[..., :, None, :] * p['W_K'][:, 0], axis=-1)       # [..., n, h]
  queries = keys + p['b_Q'][:, 0]
  k_max = jnp.max(keys, axis=-2, keepdims=True)
  k_min = jnp.min(keys, axis=-2, keepdims=True)
  total = jnp.sum(keys, axis=-2, keepdims=True)
  n = x.shape[-2]
  mixed = jnp.where(queries > 0, k_max, jnp.where(queries < 0, k_min, total // n))
  inexact = jnp.sum((queries == 0) & (total % n != 0))
  out = jnp.sum(mixed[..., :, None, :] * p['W_O'][:, :, 0].T, axis=-1)  # [..., n, d]
  return out, inexact.astype(jnp.int32)


def int64_apply_segment(segment, params, x):
  """``layers.apply_segment`` for attention segments with W_Q = W_K = W_V (int64)."""
  if segment.kind != 'attention' or segment.normalizer != 'hardmax':
    raise ValueError('the shared-projection int64 kernel runs hardmax attention segments.')

  def layer(z, p):
    upd, inexact = int64_shared_attention_update(p['attention'], z)
    return z + upd, inexact

  y, inexact = jax.lax.scan(layer, x, params)
  return y, None, inexact
