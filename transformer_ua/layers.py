"""Paper-faithful Transformer layers (Yun et al. 2020 eqs. (1)-(4); Fang et al. 2022).

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

Normalizers (``Attention.normalizer``):

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
when divisible, and every non-divisible average is counted in the ``diagnostics``
collection (``inexact_ties``) so that exact verifiers can refuse the result.
``exact_apply`` below does that check.

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
import functools
import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import activations

NORMALIZERS = ('softmax', 'hardmax', 'onehot_max')
ACTIVATIONS = ('relu', 'phi')
SEGMENT_KINDS = ('attention', 'feedforward', 'block')
DIAGNOSTICS = 'diagnostics'

Array = Any


# ---------------------------------------------------------------------------
# Normalizers as pure functions.
# ---------------------------------------------------------------------------


def _is_integer(x) -> bool:
  return jnp.issubdtype(jnp.asarray(x).dtype, jnp.integer)


def _tie_average(numer, count):
  """numer / count; exact integer division when integer, with a count of misses."""
  if _is_integer(numer):
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
# Modules.
# ---------------------------------------------------------------------------


def _default_init(scale=0.5):
  return nn.initializers.normal(stddev=scale)


class Attention(nn.Module):
  """Multi-head self-attention of Yun et al. eq. (1), residual included.

  Attributes:
    num_heads: h.
    head_size: m.
    normalizer: 'softmax' | 'hardmax' | 'onehot_max'.
    lam: softmax scale (scores are multiplied by lam); ignored by the others.
    fast_path: use the exact rank-one identity when m = 1 and hardmax.
    param_dtype: dtype of initialized params (builders supply their own).
  Input/output: ``x [..., n, d]``.
  """

  num_heads: int
  head_size: int
  normalizer: str = 'softmax'
  lam: float = 1.0
  fast_path: bool = True
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    if self.normalizer not in NORMALIZERS:
      raise ValueError(f'normalizer={self.normalizer!r}; allowed: {NORMALIZERS}.')
    h, m, d = self.num_heads, self.head_size, x.shape[-1]
    init = _default_init(1.0 / np.sqrt(d))
    w_q = self.param('W_Q', init, (h, m, d), self.param_dtype)
    b_q = self.param('b_Q', nn.initializers.zeros, (h, m), self.param_dtype)
    w_k = self.param('W_K', init, (h, m, d), self.param_dtype)
    w_v = self.param('W_V', init, (h, m, d), self.param_dtype)
    w_o = self.param('W_O', init, (h, d, m), self.param_dtype)
    out, inexact = attention_update(
        dict(W_Q=w_q, b_Q=b_q, W_K=w_k, W_V=w_v, W_O=w_o), x,
        normalizer=self.normalizer, lam=self.lam, fast_path=self.fast_path)
    if _is_integer(x):
      self.sow(DIAGNOSTICS, 'inexact_ties', inexact)
    return x + out


def attention_update(p, x, *, normalizer, lam=1.0, fast_path=True):
  """The attention part ``sum_i W_O^i W_V^i X sigma[...]`` (no residual), pure.

  Args:
    p: dict with W_Q, b_Q, W_K, W_V [h, m, d] / [h, m] and W_O [h, d, m].
    x: [..., n, d].
  Returns:
    ([..., n, d], number of inexact integer tie averages).
  """
  integer = _is_integer(x)
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


class FeedForward(nn.Module):
  """Token-wise feed-forward of Yun et al. eq. (2), residual included.

  Attributes:
    width: r.
    activation: 'relu' or 'phi'. With 'phi' the params carry a ``phi`` entry
      (``activations.phi_arrays``) describing one member of Phi per hidden unit;
      ``init`` fills it with ReLUs.
  """

  width: int
  activation: str = 'relu'
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x):
    if self.activation not in ACTIVATIONS:
      raise ValueError(f'activation={self.activation!r}; allowed: {ACTIVATIONS}.')
    r, d = self.width, x.shape[-1]
    w_1 = self.param('W_1', _default_init(1.0 / np.sqrt(d)), (r, d), self.param_dtype)
    b_1 = self.param('b_1', nn.initializers.zeros, (r,), self.param_dtype)
    w_2 = self.param('W_2', _default_init(1.0 / np.sqrt(r)), (d, r), self.param_dtype)
    b_2 = self.param('b_2', nn.initializers.zeros, (d,), self.param_dtype)
    p = dict(W_1=w_1, b_1=b_1, W_2=w_2, b_2=b_2)
    if self.activation == 'phi':
      p['phi'] = self.param(
          'phi', lambda _: activations.phi_arrays([activations.RELU] * r, self.param_dtype))
    return x + feedforward_update(p, x)


def feedforward_update(p, x):
  """``W_2 act(W_1 X + b_1) + b_2`` token-wise (no residual), pure. x: [..., n, d]."""
  pre = jnp.einsum('...nd,rd->...nr', x, p['W_1']) + p['b_1']
  act = activations.apply_phi_arrays(p['phi'], pre) if 'phi' in p else jax.nn.relu(pre)
  return jnp.einsum('...nr,dr->...nd', act, p['W_2']) + p['b_2']


# ---------------------------------------------------------------------------
# Segments and networks.
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


def init_segment(segment: Segment, key, d: int, param_dtype=jnp.float32) -> dict:
  """Random params of one segment, stacked ``[depth, ...]`` (vmapped module inits)."""
  dummy = jnp.zeros((1, 2, d), param_dtype)

  def one_layer(k):
    k_att, k_ff = jax.random.split(k)
    p = {}
    if segment.has_attention:
      p['attention'] = Attention(segment.num_heads, segment.head_size, segment.normalizer,
                                 segment.lam, segment.fast_path, param_dtype
                                 ).init(k_att, dummy)['params']
    if segment.has_feedforward:
      p['feedforward'] = FeedForward(segment.width, segment.activation, param_dtype
                                     ).init(k_ff, dummy)['params']
    return p

  return jax.vmap(one_layer)(jax.random.split(key, segment.depth))


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


class Network(nn.Module):
  """An ordered list of segments, each applied by ``lax.scan``.

  Params: ``{'E': [n, d] (if positional), 'segment_<i>': {'attention': {...},
  'feedforward': {...}}}`` with every leaf stacked ``[depth_i, ...]``. A builder
  returns this pytree directly; compile time does not grow with depth.

  ``__call__(x, trace=False)`` returns ``y``; with ``trace=True`` it returns
  ``(y, [per-segment outputs [depth_i, ..., n, d]])``, every layer's output.

  Attributes:
    segments: the segments, in order.
    positional: add trainable positional encodings ``E [n, d]`` first
      (Yun et al. Thm 3: ``g_P(X) = g(X + E)``).
    num_tokens: n, required when positional.
    embed_width: None, or D > d: X [.., n, d] is padded with D - d zero coordinates first
      (before E, which is then [n, D]) and the output is the first d coordinates.
  """

  segments: Sequence[Segment]
  positional: bool = False
  num_tokens: int | None = None
  param_dtype: Any = jnp.float32
  embed_width: int | None = None

  @nn.compact
  def __call__(self, x, trace: bool = False):
    if not self.segments:
      raise ValueError('a Network needs at least one segment.')
    d_in = x.shape[-1]
    if self.embed_width is not None:
      if self.embed_width < d_in:
        raise ValueError(f'embed_width={self.embed_width} is below the input width {d_in}.')
      x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, self.embed_width - d_in)])
    d = x.shape[-1]
    if self.positional:
      if self.num_tokens is None:
        raise ValueError('positional=True needs num_tokens (n).')
      if x.shape[-2] != self.num_tokens:
        raise ValueError(f'input has {x.shape[-2]} tokens; this network was built with '
                         f'positional encodings for n={self.num_tokens}.')
      x = x + self.param('E', nn.initializers.zeros, (self.num_tokens, d), self.param_dtype)
    outputs = []
    for i, seg in enumerate(self.segments):
      p = self.param(f'segment_{i}', lambda k, s=seg: init_segment(s, k, d, self.param_dtype))
      x, ys, inexact = apply_segment(seg, p, x, trace)
      if _is_integer(x):
        self.sow(DIAGNOSTICS, f'inexact_ties_{i}', inexact)
      outputs.append(ys)
    x = x[..., :d_in]
    return (x, outputs) if trace else x


@functools.lru_cache(maxsize=32)
def jit_apply(network: Network):
  """``jax.jit((params, x) -> network.apply({'params': params}, x))``, one per network.

  Networks are hashable by their segments and flags, so callers that rebuild an equal
  ``Network`` (e.g. realizations differing only in params) share one compilation.
  """
  return jax.jit(lambda params, x: network.apply({'params': params}, x))


def exact_apply(network: Network, params, x, trace: bool = False):
  """Runs ``network`` in exact integer mode and refuses an inexact tie average.

  Raises:
    ValueError: the input or params are not integer arrays, or a hardmax tie average
      was not an integer (the exact answer is not representable).
  """
  leaves = [l for l in jax.tree_util.tree_leaves(params) if l.dtype != bool]
  if not _is_integer(x) or not all(_is_integer(l) for l in leaves):
    raise ValueError('exact_apply needs integer input and integer params '
                     '(build them with integer dtypes under jax.enable_x64).')
  out, state = network.apply({'params': params}, x, trace, mutable=[DIAGNOSTICS])
  inexact = sum(int(jnp.sum(v)) for v in jax.tree_util.tree_leaves(state))
  if inexact:
    raise ValueError(f'{inexact} hardmax tie averages were not integers; the exact '
                     'output is not an integer array. Scale the input and biases.')
  return out


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
