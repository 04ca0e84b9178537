r"""Flax modules of the layers in ``layers`` (Yun et al. 2020 eqs. (1)-(2)): Attention,
FeedForward, and Network, the ordered list of segments.

Each module holds its params and calls the pure function of ``layers``:

    Attention(X)   = X + layers.attention_update(p, X)        eq. (1), query bias b_Q
    FeedForward(X) = X + layers.feedforward_update(p, X)      eq. (2)
    Network(X)     = S_k o ... o S_1 (X + E),  S_i = layers.apply_segment(segment_i)

with ``E [n, d]`` the positional encodings of Thm. 3 (``positional=True``). In exact
integer mode (integer params and input, hardmax or one-hot maximum) every hardmax tie
average that is not an integer is counted in the ``diagnostics`` collection
(``inexact_ties``); ``exact_apply`` runs a network and refuses such a result.

A construction's ``network()`` returns a ``Network``; training (``certify.trainer``) and
Fang et al.'s models use these modules as any Flax module.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import activations, layers

DIAGNOSTICS = 'diagnostics'


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
    if self.normalizer not in layers.NORMALIZERS:
      raise ValueError(f'normalizer={self.normalizer!r}; allowed: {layers.NORMALIZERS}.')
    h, m, d = self.num_heads, self.head_size, x.shape[-1]
    init = _default_init(1.0 / np.sqrt(d))
    w_q = self.param('W_Q', init, (h, m, d), self.param_dtype)
    b_q = self.param('b_Q', nn.initializers.zeros, (h, m), self.param_dtype)
    w_k = self.param('W_K', init, (h, m, d), self.param_dtype)
    w_v = self.param('W_V', init, (h, m, d), self.param_dtype)
    w_o = self.param('W_O', init, (h, d, m), self.param_dtype)
    out, inexact = layers.attention_update(
        dict(W_Q=w_q, b_Q=b_q, W_K=w_k, W_V=w_v, W_O=w_o), x,
        normalizer=self.normalizer, lam=self.lam, fast_path=self.fast_path)
    if layers.is_integer(x):
      self.sow(DIAGNOSTICS, 'inexact_ties', inexact)
    return x + out


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
    if self.activation not in layers.ACTIVATIONS:
      raise ValueError(f'activation={self.activation!r}; allowed: {layers.ACTIVATIONS}.')
    r, d = self.width, x.shape[-1]
    w_1 = self.param('W_1', _default_init(1.0 / np.sqrt(d)), (r, d), self.param_dtype)
    b_1 = self.param('b_1', nn.initializers.zeros, (r,), self.param_dtype)
    w_2 = self.param('W_2', _default_init(1.0 / np.sqrt(r)), (d, r), self.param_dtype)
    b_2 = self.param('b_2', nn.initializers.zeros, (d,), self.param_dtype)
    p = dict(W_1=w_1, b_1=b_1, W_2=w_2, b_2=b_2)
    if self.activation == 'phi':
      p['phi'] = self.param(
          'phi', lambda _: activations.phi_arrays([activations.RELU] * r, self.param_dtype))
    return x + layers.feedforward_update(p, x)


def init_segment(segment: layers.Segment, key, d: int, param_dtype=jnp.float32) -> dict:
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

  segments: Sequence[layers.Segment]
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
      x, ys, inexact = layers.apply_segment(seg, p, x, trace)
      if layers.is_integer(x):
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
  if not layers.is_integer(x) or not all(layers.is_integer(l) for l in leaves):
    raise ValueError('exact_apply needs integer input and integer params '
                     '(build them with integer dtypes under jax.enable_x64).')
  out, state = network.apply({'params': params}, x, trace, mutable=[DIAGNOSTICS])
  inexact = sum(int(jnp.sum(v)) for v in jax.tree_util.tree_leaves(state))
  if inexact:
    raise ValueError(f'{inexact} hardmax tie averages were not integers; the exact '
                     'output is not an integer array. Scale the input and biases.')
  return out
