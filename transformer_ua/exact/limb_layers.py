"""Hardmax attention and Phi/ReLU feed-forward layers on limb numbers.

Same math as ``layers.attention_update`` / ``layers.feedforward_update`` (same
layers ``layers.apply_segment`` scans), on limb numbers of ``exact.limbs``.

``limb_attention_update`` (hardmax, head size ``m = 1``, through the rank-one
identity of ``layers.rank_one_hardmax_mix``) and ``limb_feedforward_update`` (Phi
or ReLU activations) implement the same math as ``layers.attention_update`` /
``layers.feedforward_update`` on limb numbers, generically on the built params;
``limb_apply_segment`` scans them over stacked params exactly like
``layers.apply_segment``. Everything is jit/vmap-able and runs on any JAX device.

Shared projections: when W_Q = W_K = W_V (every Yun selective-shift head; checked by
``shared_projections``), one projection gives the keys, the values and (plus b_Q)
the queries, and the average over tied arg-max keys is the max key itself (tied keys
are equal, so are their values). ``limb_attention_update(shared_qkv=True)`` and
``int64_shared_attention_update`` use this identity: the same integers as the core
layers with a third of the projections and no tie division (tests compare them on
whole grids).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from transformer_ua import activations
from transformer_ua.exact.limbs import (LimbSpec, add, compare, const_to_limbs, div_small,
                                        extreme_mask, is_negative, limb_sum, linear,
                                        mul_const, sign)


def limb_attention_update(p, x, spec: LimbSpec, shared_qkv: bool = False):
  """Hardmax attention part (no residual) for head size m = 1, on limb numbers.

  The rank-one identity (``layers.rank_one_hardmax_mix``): with scalar keys and
  queries, hardmax over keys picks the arg max of the keys when the query is > 0,
  the arg min when < 0, and ties every key when = 0; ties average exactly.

  With ``shared_qkv`` (the caller guarantees W_Q = W_K = W_V, as in every Yun
  selective-shift head) one projection serves as keys, values and (plus b_Q)
  queries, and the average over tied arg-max (arg-min) keys is the max (min) key
  itself -- tied keys are equal, hence so are their values: an identity, no division.

  Args:
    p: digit-constant params W_Q, W_K, W_V [h, 1, d, Kc], b_Q [h, 1, Kc], W_O [h, d, 1, Kc].
    x: [..., n, d, K].
    shared_qkv: W_Q = W_K = W_V holds (static; checked by the builder).
  Returns:
    ([..., n, d, K], number of inexact tie averages).
  """
  if shared_qkv:
    return _shared_attention_update(p, x, spec)
  if p['W_Q'].shape[1] != 1:
    raise ValueError('limb attention implements head size m = 1 only (the rank-one '
                     f'identity); got m = {p["W_Q"].shape[1]}.')
  queries = linear(x, p['W_Q'][:, 0], spec)  # [..., n, h, K]
  queries = add(queries, const_to_limbs(p['b_Q'][:, 0], spec), spec)
  keys = linear(x, p['W_K'][:, 0], spec)
  values = linear(x, p['W_V'][:, 0], spec)
  n = x.shape[-3]

  def tie_sum(mask):  # mask [..., n, h] -> (sum [..., h, K], count [..., h])
    s = limb_sum(jnp.where(mask[..., None], values, 0), -2, spec)
    return s, jnp.sum(mask, axis=-2)

  s_max, c_max = tie_sum(extreme_mask(keys, -2, spec, largest=True))
  s_min, c_min = tie_sum(extreme_mask(keys, -2, spec, largest=False))
  s_all = limb_sum(values, -2, spec)
  sg = sign(queries, spec)[..., None]  # [..., n, h, 1]
  numer = jnp.where(sg > 0, s_max[..., None, :, :],
                    jnp.where(sg < 0, s_min[..., None, :, :], s_all[..., None, :, :]))
  count = jnp.where(sg[..., 0] > 0, c_max[..., None, :],
                    jnp.where(sg[..., 0] < 0, c_min[..., None, :], n))
  mixed, inexact = div_small(numer, count, spec)  # [..., n, h, K]
  # out[..., n, d] = sum_h W_O[h, d, 0] mixed[..., n, h]
  w_o = jnp.swapaxes(p['W_O'][:, :, 0], 0, 1)  # [d, h, Kc]
  out = limb_sum(mul_const(mixed[..., :, None, :, :], w_o, spec), -1, spec)
  return out, jnp.sum(inexact).astype(jnp.int32)


def _pick(x, mask, axis):
  """The entry of limb numbers ``x`` at the first True of ``mask`` along leading ``axis``."""
  first = jnp.expand_dims(jnp.argmax(mask, axis=axis), axis)
  return jnp.take_along_axis(x, first[..., None], axis=axis - 1 if axis < 0 else axis)


def _shared_attention_update(p, x, spec):
  """limb_attention_update for W_Q = W_K = W_V (see there)."""
  n = x.shape[-3]
  keys = linear(x, p['W_K'][:, 0], spec)                      # [..., n, h, K]
  queries = add(keys, const_to_limbs(p['b_Q'][:, 0], spec), spec)
  k_max = _pick(keys, extreme_mask(keys, -2, spec, largest=True), -2)   # [..., 1, h, K]
  k_min = _pick(keys, extreme_mask(keys, -2, spec, largest=False), -2)
  mean, inexact = div_small(limb_sum(keys, -2, spec), n, spec)   # all keys tie (query 0)
  sg = sign(queries, spec)[..., None]
  mixed = jnp.where(sg > 0, k_max, jnp.where(sg < 0, k_min, mean[..., None, :, :]))
  inexact = inexact[..., None, :] & (sg[..., 0] == 0)            # [..., n, h]
  w_o = jnp.swapaxes(p['W_O'][:, :, 0], 0, 1)  # [d, h, Kc]
  out = limb_sum(mul_const(mixed[..., :, None, :, :], w_o, spec), -1, spec)
  return out, jnp.sum(inexact).astype(jnp.int32)


def _phi_limbs(phi, pre, spec):
  """Phi units (digit constants) on pre-activations [..., r, K]."""
  idx = jnp.zeros(pre.shape[:-1], jnp.int32)
  for i in range(activations.MAX_PIECES - 1):
    c = const_to_limbs(phi['breaks'][:, i], spec)  # [r, K]
    cmp = compare(pre, c, spec)
    lc = phi['left_closed'][:, i]
    idx = idx + jnp.where(lc, cmp > 0, cmp >= 0).astype(jnp.int32)

  def pick(table):  # [r, 3, Kc] -> [..., r, Kc]
    t = jnp.broadcast_to(table, pre.shape[:-1] + table.shape[-2:])
    return jnp.take_along_axis(t, idx[..., None, None], axis=-2)[..., 0, :]

  return add(mul_const(pre, pick(phi['slopes']), spec),
             const_to_limbs(pick(phi['intercepts']), spec), spec)


def limb_feedforward_update(p, x, spec: LimbSpec):
  """``W_2 act(W_1 X + b_1) + b_2`` token-wise (no residual) on limb numbers.

  Args:
    p: digit-constant params W_1 [r, d, Kc], b_1 [r, Kc], W_2 [d, r, Kc], b_2 [d, Kc],
      and optionally ``phi`` (breaks/slopes/intercepts digit constants, left_closed).
    x: [..., n, d, K].
  """
  pre = add(linear(x, p['W_1'], spec), const_to_limbs(p['b_1'], spec), spec)
  if 'phi' in p:
    act = _phi_limbs(p['phi'], pre, spec)
  else:
    act = jnp.where(is_negative(pre, spec)[..., None], 0, pre)
  out = linear(act, p['W_2'], spec)
  return add(out, const_to_limbs(p['b_2'], spec), spec)


def limb_apply_segment(segment, params, x, spec: LimbSpec, trace: bool = False,
                       shared_qkv: bool = False):
  """``layers.apply_segment`` on limb numbers: lax.scan over stacked digit params.

  ``shared_qkv``: every layer has W_Q = W_K = W_V (see ``limb_attention_update``).
  Returns (y [..., n, d, K], outputs [depth, ..., n, d, K] or None, inexact [depth]).
  """
  if segment.has_attention and segment.normalizer != 'hardmax':
    raise ValueError(f'limb arithmetic runs hardmax attention only, got '
                     f'{segment.normalizer!r}.')

  def layer(z, p):
    inexact = jnp.zeros((), jnp.int32)
    if segment.has_attention:
      upd, inexact = limb_attention_update(p['attention'], z, spec, shared_qkv)
      z = add(z, upd, spec)
    if segment.has_feedforward:
      z = add(z, limb_feedforward_update(p['feedforward'], z, spec), spec)
    return z, (z if trace else None, inexact)

  y, (outputs, inexact) = jax.lax.scan(layer, x, params)
  return y, outputs, inexact
