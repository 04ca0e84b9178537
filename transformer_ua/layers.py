"""Paper-faithful Transformer layers as pure functions (Yun et al. 2020 eqs. (1)-(4); Fang
et al. 2022). Their Flax modules (Attention, FeedForward, Network) are in ``modules``.

Shape glossary (token-major, as JAX code is; the papers are column-major):

    B  batch dims (any number, written ...)     n  tokens (sequence length)
    d  embedding dimension                      h  heads        m  head size
    r  feed-forward width                       L  layers in a segment

The paper writes ``X in R^{d x n}`` with tokens as *columns*; here ``x[..., j, :]``
is column ``X[:, j]``. Parameters keep the paper's orientation, so a builder can be
read against the paper line by line:

    W_Q, W_K, W_V : [h, m, d]   (paper: W^i in R^{m x d})
    b_Q           : [h, m]      (paper footnote 1: query bias b_Q^i)
    W_O           : [h, d, m]   (paper: W_O^i in R^{d x m})
    W_1 : [r, d]   b_1 : [r]    W_2 : [d, r]   b_2 : [d]

Self-attention, eq. (1) with the query bias:

    Attn(X) = X + sum_i W_O^i W_V^i X . sigma[(W_K^i X)^T (W_Q^i X + b_Q^i 1_n^T)]

The score matrix ``S = (W_K X)^T (W_Q X + b_Q)`` has one row per key ``k`` and one
column per query ``j``; ``sigma`` normalizes each column over keys. Token-major:
``s[..., i, j, k] = key_k . query_j`` and the normalizer acts on the last axis.

Normalizers (``Segment.normalizer``):

* ``'softmax'``   -- ``softmax(lam * s)`` over keys (the standard Transformer).
* ``'hardmax'``   -- sigma_H of Yun et al., Appendix A: one-hot of the arg max;
  ``k`` tied maxima get ``1/k`` each, exactly.
* ``'onehot_max'`` -- Fang et al.'s one-hot maximum ``m^(alpha)``: keeps the largest
  score *value* and zeros the rest (tied maxima all keep the value).

Feed-forward, eq. (2), token-wise with residual:

    FF(X) = X + W_2 act(W_1 X + b_1 1_n^T) + b_2 1_n^T,   act = ReLU or phi in Phi.

Exact integer mode: when every parameter and the input are integer arrays (int64
under ``jax.enable_x64``) and the normalizer is hardmax or one-hot maximum, every
operation is integer arithmetic; nothing passes through floating point. A hardmax
tie splits weight ``1/k``; in integer mode the tied values' sum is divided exactly
when divisible, and every non-divisible average is counted (the second value each
update returns) so that exact verifiers can refuse the result (``modules.exact_apply``).

No Flax here: a program that only runs segments on their params (the exact verifiers)
imports this module and never loads Flax.

Rank-one fast path (m = 1, hardmax): ``s[j, k] = key_k * query_j`` with scalars, so

    argmax_k s[j, k] = argmax_k key_k   if query_j > 0
                       argmin_k key_k   if query_j < 0
                       all k (tie)      if query_j = 0.

This is an identity, not an approximation; it costs O(n) per head instead of O(n^2)
and never forms a product of two large numbers. ``fast_path=False`` forces the
literal score-matrix path, which must agree wherever both are exact.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import activations

NORMALIZERS = ('softmax', 'hardmax', 'onehot_max')
ACTIVATIONS = ('relu', 'phi')
SEGMENT_KINDS = ('attention', 'feedforward', 'block')


# ---------------------------------------------------------------------------
# Normalizers as pure functions.
# ---------------------------------------------------------------------------


def is_integer(x) -> bool:
  return jnp.issubdtype(jnp.asarray(x).dtype, jnp.integer)


def _tie_average(numer, count):
  """numer / count; exact integer division when integer, with a count of misses."""
  if is_integer(numer):
    inexact = jnp.sum(numer % count != 0)
    return numer // count, inexact
  return numer / count, jnp.zeros((), jnp.int32)


def hardmax_mix(scores, values):
  """sum_k sigma_H(scores)[..., j, k] values[..., k, :] with exact tie splitting.

  Args:
    scores: [..., n_q, n_k].
    values: [..., n_k, e].
  Returns:
    ([..., n_q, e], number of inexact integer tie averages).
  """
  is_max = scores == jnp.max(scores, axis=-1, keepdims=True)
  count = jnp.sum(is_max, axis=-1, keepdims=True).astype(values.dtype)
  numer = jnp.einsum('...jk,...ke->...je', is_max.astype(values.dtype), values)
  return _tie_average(numer, count)


def onehot_max_mix(scores, values):
  """Fang et al.'s one-hot maximum: weights keep the max score *value*, rest 0."""
  is_max = scores == jnp.max(scores, axis=-1, keepdims=True)
  weights = jnp.where(is_max, scores, jnp.zeros_like(scores))
  return jnp.einsum('...jk,...ke->...je', weights.astype(values.dtype), values)


def softmax_mix(scores, values, lam=1.0):
  """softmax(lam * scores) over keys, applied to values."""
  weights = jax.nn.softmax(lam * scores, axis=-1)
  return jnp.einsum('...jk,...ke->...je', weights, values)


def rank_one_hardmax_mix(keys, queries, values):
  """The m = 1 identity: hardmax of ``s[j,k] = key_k * query_j`` without forming s.

  Args:
    keys, queries: [..., n] scalars per token.
    values: [..., n, e].
  Returns:
    ([..., n, e], number of inexact integer tie averages).
  """
  dt = values.dtype

  def tie_sum(mask):  # sum of values over the masked keys, and the count
    numer = jnp.einsum('...k,...ke->...e', mask.astype(dt), values)
    return numer, jnp.sum(mask, axis=-1).astype(dt)

  s_max, c_max = tie_sum(keys == jnp.max(keys, axis=-1, keepdims=True))
  s_min, c_min = tie_sum(keys == jnp.min(keys, axis=-1, keepdims=True))
  s_all, c_all = tie_sum(jnp.ones_like(keys, dtype=bool))
  sign = jnp.sign(queries)[..., None]  # [..., n, 1]
  numer = jnp.where(sign > 0, s_max[..., None, :],
                    jnp.where(sign < 0, s_min[..., None, :], s_all[..., None, :]))
  count = jnp.where(sign > 0, c_max[..., None, None],
                    jnp.where(sign < 0, c_min[..., None, None], c_all[..., None, None]))
  return _tie_average(numer, count)


# ---------------------------------------------------------------------------
# Attention and feed-forward updates (the residual is added by the caller).
# ---------------------------------------------------------------------------


def attention_update(p, x, *, normalizer, lam=1.0, fast_path=True):
  """The attention part ``sum_i W_O^i W_V^i X sigma[...]`` (no residual), pure.

  Args:
    p: dict with W_Q, b_Q, W_K, W_V [h, m, d] / [h, m] and W_O [h, d, m].
    x: [..., n, d].
  Returns:
    ([..., n, d], number of inexact integer tie averages).
  """
  integer = is_integer(x)
  if normalizer == 'softmax' and integer:
    raise ValueError('softmax attention cannot run in exact integer mode; '
                     'use hardmax or onehot_max, or a float input.')
  queries = jnp.einsum('...nd,hmd->...hnm', x, p['W_Q']) + p['b_Q'][:, None, :]
  keys = jnp.einsum('...nd,hmd->...hnm', x, p['W_K'])
  values = jnp.einsum('...nd,hmd->...hnm', x, p['W_V'])
  inexact = jnp.zeros((), jnp.int32)
  m = p['W_Q'].shape[1]
  if normalizer == 'hardmax' and fast_path and m == 1:
    mixed, inexact = rank_one_hardmax_mix(keys[..., 0], queries[..., 0], values)
  else:
    scores = jnp.einsum('...hjm,...hkm->...hjk', queries, keys)
    if normalizer == 'softmax':
      mixed = softmax_mix(scores, values, lam)
    elif normalizer == 'hardmax':
      mixed, inexact = hardmax_mix(scores, values)
    else:
      mixed = onehot_max_mix(scores, values)
  out = jnp.einsum('...hnm,hdm->...nd', mixed, p['W_O'])
  return out, inexact


def feedforward_update(p, x):
  """``W_2 act(W_1 X + b_1) + b_2`` token-wise (no residual), pure. x: [..., n, d]."""
  pre = jnp.einsum('...nd,rd->...nr', x, p['W_1']) + p['b_1']
  act = activations.apply_phi_arrays(p['phi'], pre) if 'phi' in p else jax.nn.relu(pre)
  return jnp.einsum('...nr,dr->...nd', act, p['W_2']) + p['b_2']


# ---------------------------------------------------------------------------
# Segments.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Segment:
  """A run of ``depth`` identically shaped layers, params stacked ``[depth, ...]``.

  kind: 'attention' (Attn only), 'feedforward' (FF only) or 'block' (Attn then FF).
  """

  kind: str
  depth: int
  num_heads: int = 0
  head_size: int = 0
  normalizer: str = 'hardmax'
  lam: float = 1.0
  width: int = 0
  activation: str = 'relu'
  fast_path: bool = True
  name: str | None = None

  def __post_init__(self):
    if self.kind not in SEGMENT_KINDS:
      raise ValueError(f'segment kind {self.kind!r}; allowed: {SEGMENT_KINDS}.')
    if not isinstance(self.depth, (int, np.integer)) or self.depth < 1:
      raise ValueError(f'segment depth must be a positive integer, got {self.depth!r}.')
    if self.kind in ('attention', 'block'):
      if self.num_heads < 1 or self.head_size < 1:
        raise ValueError(f'{self.kind} segment needs num_heads >= 1 and head_size >= 1, '
                         f'got {self.num_heads}, {self.head_size}.')
      if self.normalizer not in NORMALIZERS:
        raise ValueError(f'normalizer {self.normalizer!r}; allowed: {NORMALIZERS}.')
    if self.kind in ('feedforward', 'block'):
      if self.width < 1:
        raise ValueError(f'{self.kind} segment needs width >= 1, got {self.width}.')
      if self.activation not in ACTIVATIONS:
        raise ValueError(f'activation {self.activation!r}; allowed: {ACTIVATIONS}.')

  @property
  def has_attention(self) -> bool:
    return self.kind in ('attention', 'block')

  @property
  def has_feedforward(self) -> bool:
    return self.kind in ('feedforward', 'block')


def apply_segment(segment: Segment, params: dict, x, trace: bool = False):
  """Applies a segment's layers by ``lax.scan`` over the stacked params, pure.

  Args:
    segment: the segment's description.
    params: ``{'attention': ..., 'feedforward': ...}`` stacked ``[depth, ...]``.
    x: [..., n, d].
    trace: also return every layer's output.
  Returns:
    (y [..., n, d], outputs [depth, ..., n, d] or None, inexact tie count [depth]).
  """

  def layer(z, p):
    z, inexact = apply_layer(segment, p, z)
    return z, (z if trace else None, inexact)

  y, (outputs, inexact) = jax.lax.scan(layer, x, params)
  return y, outputs, inexact


def apply_layer(segment: Segment, p: dict, x):
  """One layer of ``segment`` (params ``p`` of that layer, not stacked), pure.

  Returns (y [..., n, d], number of inexact integer tie averages, int32 scalar).
  """
  inexact = jnp.zeros((), jnp.int32)
  if segment.has_attention:
    upd, inexact = attention_update(p['attention'], x, normalizer=segment.normalizer,
                                    lam=segment.lam, fast_path=segment.fast_path)
    x = x + upd
  if segment.has_feedforward:
    x = x + feedforward_update(p['feedforward'], x)
  return x, inexact.astype(jnp.int32)


# ---------------------------------------------------------------------------
# Parameter pytree helpers.
# ---------------------------------------------------------------------------


def _weight_leaves(params):
  """Leaves that are weights (activation descriptors under 'phi' excluded)."""
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  return [leaf for path, leaf in flat
          if not any(getattr(k, 'key', None) == 'phi' for k in path)]


def count_params(params) -> int:
  """Total number of weight entries (Phi descriptors are not weights). The one parameter
  count of the package: any pytree of arrays or ``jax.ShapeDtypeStruct`` (shapes only)."""
  return int(sum(math.prod(np.shape(l)) for l in _weight_leaves(params)))


def count_nonzero(params) -> int:
  """Number of non-zero weight entries."""
  return int(sum(int(np.count_nonzero(np.asarray(l))) for l in _weight_leaves(params)))


def unstack_layer(segment_params: dict, index: int) -> dict:
  """The params of layer ``index`` of a stacked segment."""
  return jax.tree_util.tree_map(lambda x: x[index], segment_params)
