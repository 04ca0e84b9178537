"""Lemma 6 of Yun et al.: modified Transformer -> standard Transformer, on params.

Appendix F. Two replacements, each a pure function of (segments, params):

1. Hardmax -> softmax with scale lambda. ``sigma[lam A] -> sigma_H[A]`` as
   ``lam -> inf``. The scale is folded into the query projection,

       W_Q <- lam W_Q,   b_Q <- lam b_Q,   normalizer <- softmax (scale 1),

   so the result is literally a member of T^{h,m,r}.

2. Phi unit -> four ReLU units (``activations.relu_expansion``). For hidden unit
   ``u`` with ``phi~_u(t) = alpha_u + sum_s kappa_us ReLU(sign_us (t - tau_us))``
   and pre-activation ``t = W_1[u] x + b_1[u]``:

       W_1'[(u,s)] = sign_us W_1[u]          b_1'[(u,s)] = sign_us (b_1[u] - tau_us)
       W_2'[:, (u,s)] = kappa_us W_2[:, u]   b_2' = b_2 + sum_u alpha_u W_2[:, u]

   so width r becomes 4r and the layer equals the Phi layer outside the epsilon
   windows of every unit.

``as_blocks`` then packs attention-only and feed-forward-only segments into
Transformer blocks, switching the missing half off with zero weights (the skip
connection makes a zero update the identity).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import activations
from transformer_ua.layers import Segment

#: Heads, head size and width of the realized class T^{2,1,4} (Theorem 2).
BLOCK_HEADS, BLOCK_HEAD_SIZE, BLOCK_WIDTH = 2, 1, 4


def _check_positive(name, value):
  if not (isinstance(value, (int, float, np.floating)) and np.isfinite(value) and value > 0):
    raise ValueError(f'{name} must be a positive finite number, got {value!r}.')


def softmax_realization(segments: Sequence[Segment], params: dict, lam: float):
  """Every hardmax head -> softmax with lambda folded into W_Q and b_Q."""
  _check_positive('lambda', lam)
  new_segments, new_params = [], dict(params)
  for i, seg in enumerate(segments):
    key = f'segment_{i}'
    if seg.has_attention and seg.normalizer == 'hardmax':
      att = dict(params[key]['attention'])
      att['W_Q'] = att['W_Q'] * jnp.asarray(lam, att['W_Q'].dtype)
      att['b_Q'] = att['b_Q'] * jnp.asarray(lam, att['b_Q'].dtype)
      new_params[key] = {**params[key], 'attention': att}
      seg = dataclasses.replace(seg, normalizer='softmax', lam=1.0)
    new_segments.append(seg)
  return tuple(new_segments), new_params


def _phi_from_row(breaks, slopes, inter, closed) -> activations.Phi:
  """Rebuilds a Phi from one padded row, dropping redundant (padding) breakpoints."""
  br, pcs, lc = list(breaks), list(zip(slopes, inter)), list(closed)
  i = 0
  while i < len(br):
    if pcs[i] == pcs[i + 1]:  # same piece on both sides: breakpoint is redundant
      del br[i], lc[i], pcs[i + 1]
    else:
      i += 1
  return activations.Phi(tuple(float(b) for b in br),
                         tuple((float(a), float(b)) for a, b in pcs), tuple(lc))


def relu_expansion_arrays(phi: dict, epsilon: float):
  """Lemma 6 for stacked Phi arrays ``[..., r, ...]``.

  Python work is one ``relu_expansion`` per *distinct* Phi; the rest is gathers, so
  a million identical-shaped layers expand in one pass.

  Returns:
    alpha [..., r], kappa/sign/tau [..., r, 4] as float64 NumPy arrays.
  """
  _check_positive('epsilon', epsilon)
  rows = np.concatenate([
      np.asarray(phi['breaks'], np.float64), np.asarray(phi['slopes'], np.float64),
      np.asarray(phi['intercepts'], np.float64), np.asarray(phi['left_closed'], np.float64)
  ], axis=-1)
  lead = rows.shape[:-1]
  flat = rows.reshape(-1, rows.shape[-1])
  uniq, inverse = np.unique(flat, axis=0, return_inverse=True)
  table = []
  for row in uniq:
    phi_u = _phi_from_row(row[0:2], row[2:5], row[5:8], row[8:10].astype(bool))
    table.append(activations.relu_expansion(phi_u, epsilon))
  alpha = np.asarray([e.alpha for e in table])[inverse].reshape(lead)
  kappa = np.asarray([e.kappa for e in table])[inverse].reshape(lead + (4,))
  sign = np.asarray([e.sign for e in table])[inverse].reshape(lead + (4,))
  tau = np.asarray([e.tau for e in table])[inverse].reshape(lead + (4,))
  return alpha, kappa, sign, tau


def relu_realization(segments: Sequence[Segment], params: dict, epsilon: float,
                     dtype=None):
  """Every Phi feed-forward segment of width r -> a ReLU segment of width 4r."""
  _check_positive('epsilon', epsilon)
  new_segments, new_params = [], dict(params)
  for i, seg in enumerate(segments):
    key = f'segment_{i}'
    if seg.has_feedforward and seg.activation == 'phi':
      ff = params[key]['feedforward']
      alpha, kappa, sign, tau = relu_expansion_arrays(ff['phi'], epsilon)
      w1 = np.asarray(ff['W_1'], np.float64)  # [L, r, d]
      b1 = np.asarray(ff['b_1'], np.float64)  # [L, r]
      w2 = np.asarray(ff['W_2'], np.float64)  # [L, d, r]
      b2 = np.asarray(ff['b_2'], np.float64)  # [L, d]
      lead = w1.shape[:-2]
      r, d = w1.shape[-2:]
      new_w1 = (sign[..., None] * w1[..., :, None, :]).reshape(lead + (4 * r, d))
      new_b1 = (sign * (b1[..., None] - tau)).reshape(lead + (4 * r,))
      new_w2 = (w2[..., :, :, None] * kappa[..., None, :, :]).reshape(lead + (d, 4 * r))
      new_b2 = b2 + np.einsum('...dr,...r->...d', w2, alpha)
      out_dtype = dtype or ff['W_1'].dtype
      new_params[key] = {**params[key], 'feedforward': {
          'W_1': jnp.asarray(new_w1, out_dtype), 'b_1': jnp.asarray(new_b1, out_dtype),
          'W_2': jnp.asarray(new_w2, out_dtype), 'b_2': jnp.asarray(new_b2, out_dtype)}}
      seg = dataclasses.replace(seg, activation='relu', width=4 * seg.width)
    new_segments.append(seg)
  return tuple(new_segments), new_params


def as_blocks(segments: Sequence[Segment], params: dict, *, num_heads=BLOCK_HEADS,
              head_size=BLOCK_HEAD_SIZE, width=BLOCK_WIDTH, normalizer='softmax'):
  """Packs every segment into Transformer blocks of the class T^{h,m,r}.

  An attention-only segment gets a zero feed-forward (width ``width``, ReLU); a
  feed-forward-only segment gets zero attention heads (W_O = 0). Heads and widths
  narrower than the block's are zero-padded. Raises ValueError if a segment is wider.
  """
  new_segments, new_params = [], dict(params)
  for i, seg in enumerate(segments):
    key = f'segment_{i}'
    p = dict(params[key])
    L = seg.depth
    dtype = jax.tree_util.tree_leaves(p)[0].dtype
    if seg.has_attention:
      if seg.num_heads > num_heads or seg.head_size > head_size:
        raise ValueError(f'segment {i} has {seg.num_heads} heads of size {seg.head_size}; '
                         f'the block class allows {num_heads} of size {head_size}.')
      att = p['attention']
      pad_h, pad_m = num_heads - seg.num_heads, head_size - seg.head_size
      p['attention'] = {
          k: jnp.pad(v, [(0, 0), (0, pad_h)] + [(0, pad_m) if ax == 'm' else (0, 0)
                                                for ax in spec])
          for (k, v), spec in ((kv, _HEAD_AXES[kv[0]]) for kv in att.items())}
    else:
      d = p['feedforward']['W_1'].shape[-1]
      z = lambda *s: jnp.zeros((L,) + s, dtype)  # noqa: E731
      p['attention'] = {'W_Q': z(num_heads, head_size, d), 'b_Q': z(num_heads, head_size),
                        'W_K': z(num_heads, head_size, d), 'W_V': z(num_heads, head_size, d),
                        'W_O': z(num_heads, d, head_size)}
    if seg.has_feedforward:
      if seg.activation != 'relu' or seg.width > width:
        raise ValueError(f'segment {i} has a {seg.activation} feed-forward of width '
                         f'{seg.width}; blocks need ReLU of width <= {width} '
                         '(apply relu_realization first).')
      ff = p['feedforward']
      pad = width - seg.width
      p['feedforward'] = {'W_1': jnp.pad(ff['W_1'], [(0, 0), (0, pad), (0, 0)]),
                          'b_1': jnp.pad(ff['b_1'], [(0, 0), (0, pad)]),
                          'W_2': jnp.pad(ff['W_2'], [(0, 0), (0, 0), (0, pad)]),
                          'b_2': ff['b_2']}
    else:
      d = p['attention']['W_Q'].shape[-1]
      z = lambda *s: jnp.zeros((L,) + s, dtype)  # noqa: E731
      p['feedforward'] = {'W_1': z(width, d), 'b_1': z(width), 'W_2': z(d, width), 'b_2': z(d)}
    new_params[key] = p
    new_segments.append(Segment(
        'block', L, num_heads=num_heads, head_size=head_size,
        normalizer=seg.normalizer if seg.has_attention else normalizer,
        lam=seg.lam, width=width, activation='relu', name=seg.name))
  return tuple(new_segments), new_params


# Which axes (after the leading layer and head axes) are the head-size axis m.
_HEAD_AXES = {'W_Q': ('m', 'd'), 'b_Q': ('m',), 'W_K': ('m', 'd'), 'W_V': ('m', 'd'),
              'W_O': ('d', 'm')}
