"""Token-mixing layers compared in Yun et al. 2020, Appendix H (Table 1, Figure 1).

Shape glossary (token-major; the paper writes X in R^{d x n} with tokens as columns):

    B  batch      n  tokens (sequence length)      d  hidden size
    h  heads      m = d / h  head size              N  max_len (bi-linear only)
    H  separable-convolution filters               K  filter width

Every layer maps ``x [B, n, d]`` and ``mask [B, n]`` (True on real tokens) to the
*update* ``u [B, n, d]``; the encoder block adds the skip connection and the layer
norm (``LN(x + dropout(u))``, post-LN as BERT), so ``x + u`` is the paper's layer.

* ``SelfAttention`` — eq. (1) with softmax: ``u_j = sum_i W_O^i sum_k a^i_{jk} W_V^i x_k``,
  ``a^i_{j.} = softmax_k(<W_Q^i x_j, W_K^i x_k> / sqrt(m))`` over non-padding keys k.
  Params ``4 d^2 + 4 d``.
* ``AverageAttention`` — H.4: the attention matrix replaced by ``1/n'`` where ``n'`` is
  the number of non-padding tokens: ``u_j = W_O (1/n' sum_k x_k) + b_O``, the same for
  every j ("the average of projections of all the other tokens"). With the matrix fixed,
  ``W_O W_V`` is one linear map, so one projection is kept: params ``d^2 + d``
  (BERT-base: 88.2M, the paper's Table 1 says 88.3M).
* ``BilinearProjection`` — eq. (5) ``BProj(X) = X + W_O X W_P``: token-major
  ``u[b, j] = sum_k W_P[k, j] (W_O x[b, k] + b_O)`` over non-padding k; ``W_P`` is
  ``N x N``, so the model is tied to its max length N (shorter inputs use the leading
  ``n x n`` block; longer ones are refused). Params ``d^2 + d + N^2``.
* ``LightweightConv`` — H.2 eq. (6) as implemented in H.4 after Wu et al. 2019: a GLU
  input projection ``g = (W_1 x + b_1) * sigmoid(W_2 x + b_2)``, then a depth-wise
  convolution along the tokens with ``H`` filters of width ``K``, each softmax-normalised
  over its width and shared by ``d / H`` consecutive channels (paper: H = 16, K = 128,
  d = 768, so 48 channels per filter), non-causal (centred: ``(K-1)//2`` taps to the
  left, ``K//2`` to the right), with padding tokens zeroed before mixing; then the
  output projection ``W_O``. Params ``3 d^2 + 3 d + H K``.

Packed rows (sequence packing in pre-training, ``transformer_ua.data.text``): with
``segment_ids [B, n]`` (s >= 1 on the tokens of instance s, 0 on padding) and
``positions [B, n]`` (the index inside the instance), every layer mixes token j only
with the tokens k of its own instance, ``same[b, j, k] = (seg_j == seg_k) & mask_k``,
and computes what the instance alone (at positions 0.., padded) would:

* attention: the keys of other instances are masked like padding;
* average: ``u_j = W_O (sum_k same[j, k] x_k / sum_k same[j, k]) + b_O`` (the mean of
  j's own instance: a block-diagonal n x n matmul, 2 n d FLOPs per token instead of 2 d);
* bi-linear: ``u_j = sum_k same[j, k] W_P[pos_k, pos_j] (W_O x_k + b_O)`` (each
  instance uses the leading block of ``W_P``, as it would alone);
* sepconv: taps reaching another instance read 0, as they read padding zeros alone:
  ``y = sum_s [seg = s] * conv(g * [seg = s])`` over the ``num_segments`` = S slots,
  i.e. S masked copies of g through the same banded matmul (S x 2 n d FLOPs per token;
  one [B, H, n, n] matrix per row would cost 2 n d but runs as tiny per-row matmuls
  of d / H columns, slower on CPU).

``segment_ids=None`` is the unpacked path, unchanged.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

MIXING_KINDS = ('attention', 'average', 'bilinear', 'sepconv')


def _dense(features, name, init_std=0.02):
  return nn.Dense(features, name=name, kernel_init=nn.initializers.normal(init_std))


def same_segment(segment_ids, mask):
  """``same[b, j, k] = (seg[b, j] == seg[b, k]) & mask[b, k]``: ``[B, n, n]`` bool."""
  return (segment_ids[:, :, None] == segment_ids[:, None, :]) & mask[:, None, :]


class SelfAttention(nn.Module):
  """Multi-head softmax self-attention with a padding mask over keys."""
  num_heads: int
  dropout: float = 0.0

  @nn.compact
  def __call__(self, x, mask, *, segment_ids=None, positions=None, num_segments=None,
               deterministic: bool = True):
    B, n, d = x.shape
    if d % self.num_heads:
      raise ValueError(f'hidden size {d} is not divisible by num_heads={self.num_heads}')
    m = d // self.num_heads
    split = lambda t: t.reshape(B, n, self.num_heads, m)
    q = split(_dense(d, 'query')(x))
    k = split(_dense(d, 'key')(x))
    v = split(_dense(d, 'value')(x))
    s = jnp.einsum('bjhm,bkhm->bhjk', q, k) / jnp.sqrt(m).astype(x.dtype)
    keys = (mask[:, None, None, :] if segment_ids is None
            else same_segment(segment_ids, mask)[:, None])
    s = jnp.where(keys, s, jnp.finfo(s.dtype).min)
    a = jax.nn.softmax(s, axis=-1)
    a = nn.Dropout(self.dropout)(a, deterministic=deterministic)
    o = jnp.einsum('bhjk,bkhm->bjhm', a, v).reshape(B, n, d)
    return _dense(d, 'out')(o)


class AverageAttention(nn.Module):
  """Attention with the matrix 1/n' over the n' non-padding tokens (H.4)."""

  @nn.compact
  def __call__(self, x, mask, *, segment_ids=None, positions=None, num_segments=None,
               deterministic: bool = True):
    d = x.shape[-1]
    if segment_ids is not None:          # the mean over j's own instance
      a = same_segment(segment_ids, mask).astype(x.dtype)
      a = a / jnp.maximum(a.sum(-1, keepdims=True), 1)
      return _dense(d, 'out')(jnp.einsum('bjk,bkd->bjd', a, x))
    w = mask.astype(x.dtype)[..., None]
    mean = (x * w).sum(-2, keepdims=True) / jnp.maximum(w.sum(-2, keepdims=True), 1)
    return _dense(d, 'out')(jnp.broadcast_to(mean, x.shape))


class BilinearProjection(nn.Module):
  """``W_O X W_P`` of eq. (5); ``W_P`` is max_len x max_len."""
  max_len: int

  @nn.compact
  def __call__(self, x, mask, *, segment_ids=None, positions=None, num_segments=None,
               deterministic: bool = True):
    n, d = x.shape[-2:]
    if n > self.max_len:
      raise ValueError(
          f'bilinear projection is tied to its max length: W_P is {self.max_len} x '
          f'{self.max_len}, got a sequence of length {n}; use sequences of at most '
          f'{self.max_len} tokens or build the model with max_len >= {n}')
    w_p = self.param('w_p', nn.initializers.normal(1.0 / self.max_len ** 0.5),
                     (self.max_len, self.max_len))
    y = _dense(d, 'out')(x) * mask.astype(x.dtype)[..., None]
    if segment_ids is not None:          # W_P[pos_k, pos_j] within each instance
      same = same_segment(segment_ids, mask)
      w = w_p[positions[:, :, None], positions[:, None, :]]           # [B, k, j]
      w = jnp.where(jnp.swapaxes(same, 1, 2), w, 0.0)
      return jnp.einsum('bkj,bkd->bjd', w.astype(y.dtype), y)
    return jnp.einsum('kj,bkd->bjd', w_p[:n, :n], y)


class LightweightConv(nn.Module):
  """GLU -> softmax-normalised depth-wise conv (H filters shared over d/H channels) -> W_O."""
  num_filters: int
  width: int
  dropout: float = 0.0

  @nn.compact
  def __call__(self, x, mask, *, segment_ids=None, positions=None, num_segments=None,
               deterministic: bool = True):
    B, n, d = x.shape
    H, K = self.num_filters, self.width
    if d % H:
      raise ValueError(f'hidden size {d} is not divisible by conv_filters={H}')
    g = _dense(2 * d, 'glu')(x)
    g = g[..., :d] * jax.nn.sigmoid(g[..., d:])
    g = g * mask.astype(x.dtype)[..., None]                    # padding-aware
    w = self.param('filters', nn.initializers.normal(0.02), (H, K))
    w = jax.nn.softmax(w, axis=-1)
    w = nn.Dropout(self.dropout)(w, deterministic=deterministic)
    # Banded (Toeplitz) matrices A[h, j, k] = w[h, k - j + left] for |offset| in range:
    # the convolution as a matmul, much faster on CPU than a grouped lax.conv.
    left = (K - 1) // 2
    tap = jnp.arange(n)[None, :] - jnp.arange(n)[:, None] + left       # [n, n]
    band = (tap >= 0) & (tap < K)
    a = jnp.where(band[None], w[:, jnp.clip(tap, 0, K - 1)], 0.0)         # [H, n, n]
    g = g.reshape(B, n, H, d // H)
    if segment_ids is not None:          # taps into another instance read 0
      if num_segments is None:
        raise ValueError('packed rows need num_segments (instances per row at most)')
      one = (segment_ids[:, None, :] == jnp.arange(1, num_segments + 1)[None, :, None])
      one = one.astype(g.dtype)[..., None, None]                      # [B, S, n, 1, 1]
      y = jnp.einsum('hjk,bskhc->bsjhc', a.astype(g.dtype), g[:, None] * one)
      y = (y * one).sum(1)
    else:
      y = jnp.einsum('hjk,bkhc->bjhc', a.astype(g.dtype), g)
    y = y.reshape(B, n, d)
    return _dense(d, 'out')(y)


def layer_kinds(mixing: str, num_layers: int, num_conv_layers: int = 0) -> tuple[str, ...]:
  """Per-layer mixing: the first ``num_conv_layers`` are 'sepconv', the rest ``mixing``.

  ``layer_kinds('attention', 12, 2)`` is Figure 1's hybrid with k = 2.
  """
  if mixing not in MIXING_KINDS:
    raise ValueError(f'unknown mixing layer {mixing!r}; choose one of {MIXING_KINDS}')
  if not 0 <= num_conv_layers <= num_layers:
    raise ValueError(f'num_conv_layers (k) must be in [0, {num_layers}] for '
                     f'{num_layers} layers, got {num_conv_layers}')
  return ('sepconv',) * num_conv_layers + (mixing,) * (num_layers - num_conv_layers)


def make_mixing(kind: str, *, num_heads: int, max_len: int, conv_filters: int,
                conv_width: int, dropout: float, name: str):
  if kind == 'attention':
    return SelfAttention(num_heads, dropout, name=name)
  if kind == 'average':
    return AverageAttention(name=name)
  if kind == 'bilinear':
    return BilinearProjection(max_len, name=name)
  if kind == 'sepconv':
    return LightweightConv(conv_filters, conv_width, dropout, name=name)
  raise ValueError(f'unknown mixing layer {kind!r}; choose one of {MIXING_KINDS}')
