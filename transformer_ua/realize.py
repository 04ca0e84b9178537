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

Number type: the passes are one code path for float arrays and for exact ones.
Given NumPy object arrays of ``int`` / ``fractions.Fraction`` (and a rational lam,
epsilon) every operation above is exact rational arithmetic, so the realized params
are exactly the rationals the construction defines (``dtype='exact'`` realizations);
given float arrays they are those rationals rounded.
"""

from __future__ import annotations

import dataclasses
import numbers
from fractions import Fraction
from typing import Sequence

import jax
import numpy as np

from transformer_ua import activations
from transformer_ua.layers import Segment

#: Heads, head size and width of the realized class T^{2,1,4} (Theorem 2).
BLOCK_HEADS, BLOCK_HEAD_SIZE, BLOCK_WIDTH = 2, 1, 4


def _check_positive(name, value):
  if isinstance(value, bool) or not isinstance(value, numbers.Real) \
      or not np.isfinite(float(value)) or value <= 0:
    raise ValueError(f'{name} must be a positive finite number, got {value!r}.')


def _is_exact(a) -> bool:
  """Object arrays (Python ints / Fractions) are the exact number type."""
  return np.asarray(a).dtype == object


def _scalar_like(value, a):
  """``value`` in the number type of array ``a``: Fraction (exact) or a's float dtype."""
  return Fraction(value) if _is_exact(a) else np.asarray(value, np.asarray(a).dtype)


def _pad_after(a, widths):
  """Zero-pads ``a`` after each axis by ``widths[i][1]`` (Python int 0 for exact arrays)."""
  a = np.asarray(a)
  out = _zeros_like_leaf(a, tuple(s + w for s, (_, w) in zip(a.shape, widths)))
  out[tuple(slice(0, s) for s in a.shape)] = a
  return out


def _zeros_like_leaf(leaf, shape):
  dtype = np.asarray(leaf).dtype
  return np.zeros(shape, dtype) if dtype != object else np.full(shape, 0, object)


def softmax_realization(segments: Sequence[Segment], params: dict, lam: float):
  """Every hardmax head -> softmax with lambda folded into W_Q and b_Q."""
  _check_positive('lambda', lam)
  new_segments, new_params = [], dict(params)
  for i, seg in enumerate(segments):
    key = f'segment_{i}'
    if seg.has_attention and seg.normalizer == 'hardmax':
      att = dict(params[key]['attention'])
      att['W_Q'] = np.asarray(att['W_Q']) * _scalar_like(lam, att['W_Q'])
      att['b_Q'] = np.asarray(att['b_Q']) * _scalar_like(lam, att['b_Q'])
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
  return activations.Phi(tuple(br), tuple(pcs), tuple(lc))


def relu_expansion_arrays(phi: dict, epsilon: float):
  """Lemma 6 for stacked Phi arrays ``[..., r, ...]``.

  Python work is one ``relu_expansion`` per *distinct* Phi; the rest is gathers, so
  a million identical-shaped layers expand in one pass.

  Returns:
    alpha [..., r], kappa/sign/tau [..., r, 4]: float64 NumPy arrays, or object arrays
    of exact rationals when ``phi`` holds object arrays (then epsilon is taken exactly).
  """
  _check_positive('epsilon', epsilon)
  exact = _is_exact(phi['breaks'])
  dt = object if exact else np.float64
  if exact:
    epsilon = Fraction(epsilon)
  rows = np.concatenate([
      np.asarray(phi['breaks'], dt), np.asarray(phi['slopes'], dt),
      np.asarray(phi['intercepts'], dt), np.asarray(phi['left_closed']).astype(dt)
  ], axis=-1)
  lead = rows.shape[:-1]
  flat = rows.reshape(-1, rows.shape[-1])
  if exact:  # np.unique does not take object rows: a dict of distinct rows
    index = {}
    inverse = np.asarray([index.setdefault(tuple(row), len(index)) for row in flat], np.int64)
    uniq = [np.asarray(row, object) for row in index]
  else:
    uniq, inverse = np.unique(flat, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
  table = []
  for row in uniq:
    phi_u = _phi_from_row(row[0:2], row[2:5], row[5:8], [bool(v) for v in row[8:10]])
    table.append(activations.relu_expansion(phi_u, epsilon))
  col = lambda vals: np.asarray(vals, dt)[inverse]  # noqa: E731
  alpha = col([e.alpha for e in table]).reshape(lead)
  kappa = col([e.kappa for e in table]).reshape(lead + (4,))
  sign = col([e.sign for e in table]).reshape(lead + (4,))
  tau = col([e.tau for e in table]).reshape(lead + (4,))
  return alpha, kappa, sign, tau


def relu_realization(segments: Sequence[Segment], params: dict, epsilon: float,
                     dtype=None):
  """Every Phi feed-forward segment of width r -> a ReLU segment of width 4r.

  Float params give ``dtype`` (default: W_1's) arrays; object (exact) params give
  object arrays of exact rationals.
  """
  _check_positive('epsilon', epsilon)
  new_segments, new_params = [], dict(params)
  for i, seg in enumerate(segments):
    key = f'segment_{i}'
    if seg.has_feedforward and seg.activation == 'phi':
      ff = params[key]['feedforward']
      alpha, kappa, sign, tau = relu_expansion_arrays(ff['phi'], epsilon)
      exact = _is_exact(ff['W_1'])
      dt = object if exact else np.float64
      w1 = np.asarray(ff['W_1'], dt)  # [L, r, d]
      b1 = np.asarray(ff['b_1'], dt)  # [L, r]
      w2 = np.asarray(ff['W_2'], dt)  # [L, d, r]
      b2 = np.asarray(ff['b_2'], dt)  # [L, d]
      lead = w1.shape[:-2]
      r, d = w1.shape[-2:]
      new_w1 = (sign[..., None] * w1[..., :, None, :]).reshape(lead + (4 * r, d))
      new_b1 = (sign * (b1[..., None] - tau)).reshape(lead + (4 * r,))
      new_w2 = (w2[..., :, :, None] * kappa[..., None, :, :]).reshape(lead + (d, 4 * r))
      new_b2 = b2 + np.sum(w2 * alpha[..., None, :], axis=-1)
      out_dtype = object if exact else (dtype or np.asarray(ff['W_1']).dtype)
      new_params[key] = {**params[key], 'feedforward': {
          'W_1': np.asarray(new_w1, out_dtype), 'b_1': np.asarray(new_b1, out_dtype),
          'W_2': np.asarray(new_w2, out_dtype), 'b_2': np.asarray(new_b2, out_dtype)}}
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
    leaf = jax.tree_util.tree_leaves(p)[0]
    z = lambda *s: _zeros_like_leaf(leaf, (L,) + s)  # noqa: E731
    pad = _pad_after
    if seg.has_attention:
      if seg.num_heads > num_heads or seg.head_size > head_size:
        raise ValueError(f'segment {i} has {seg.num_heads} heads of size {seg.head_size}; '
                         f'the block class allows {num_heads} of size {head_size}.')
      att = p['attention']
      pad_h, pad_m = num_heads - seg.num_heads, head_size - seg.head_size
      p['attention'] = {
          k: pad(v, [(0, 0), (0, pad_h)] + [(0, pad_m) if ax == 'm' else (0, 0)
                                            for ax in spec])
          for (k, v), spec in ((kv, _HEAD_AXES[kv[0]]) for kv in att.items())}
    else:
      d = p['feedforward']['W_1'].shape[-1]
      p['attention'] = {'W_Q': z(num_heads, head_size, d), 'b_Q': z(num_heads, head_size),
                        'W_K': z(num_heads, head_size, d), 'W_V': z(num_heads, head_size, d),
                        'W_O': z(num_heads, d, head_size)}
    if seg.has_feedforward:
      if seg.activation != 'relu' or seg.width > width:
        raise ValueError(f'segment {i} has a {seg.activation} feed-forward of width '
                         f'{seg.width}; blocks need ReLU of width <= {width} '
                         '(apply relu_realization first).')
      ff = p['feedforward']
      extra = width - seg.width
      p['feedforward'] = {'W_1': pad(ff['W_1'], [(0, 0), (0, extra), (0, 0)]),
                          'b_1': pad(ff['b_1'], [(0, 0), (0, extra)]),
                          'W_2': pad(ff['W_2'], [(0, 0), (0, 0), (0, extra)]),
                          'b_2': np.asarray(ff['b_2'])}
    else:
      d = p['attention']['W_Q'].shape[-1]
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


# ---------------------------------------------------------------------------
# The output clamp (a last ReLU layer that keeps g inside the range of f_bar).
# ---------------------------------------------------------------------------

#: Output coordinates one clamp block handles: 2 ReLUs each, BLOCK_WIDTH wide.
CLAMP_COORDS_PER_BLOCK = BLOCK_WIDTH // 2


def output_clamp(lo: Sequence, hi: Sequence, *, exact: bool, name: str = 'clamp'):
  """Blocks that clamp each output coordinate i to [lo_i, hi_i], inside T^{2,1,4}.

      clamp_i(z) = z_i - ReLU(z_i - hi_i) + ReLU(lo_i - z_i) = min(max(z_i, lo_i), hi_i)

  as a residual feed-forward layer: units (i, +): W_1 = e_i^T, b_1 = -hi_i, W_2 = -e_i;
  units (i, -): W_1 = -e_i^T, b_1 = lo_i, W_2 = +e_i (lo_i <= hi_i, so at most one of a
  coordinate's two units is active). Two ReLUs per coordinate: ceil(d / 2) blocks of
  width 4, attention switched off (W_O = 0), the realized class unchanged.

  Args:
    lo, hi: [d] bounds (exact rationals when ``exact``, else floats), lo <= hi.
  Returns:
    (segments, params) with params keyed 'segment_0', ... (one block segment).
  """
  d = len(lo)
  if len(hi) != d or d < 1:
    raise ValueError(f'lo and hi must be [d] with the same d >= 1, got {len(lo)}, {len(hi)}.')
  conv = Fraction if exact else float
  lo, hi = [conv(v) for v in lo], [conv(v) for v in hi]
  if any(not a <= b for a, b in zip(lo, hi)):
    raise ValueError(f'output clamp needs lo <= hi in every coordinate, got {lo}, {hi}.')
  per = CLAMP_COORDS_PER_BLOCK
  depth = -(-d // per)
  dt = object if exact else np.float64
  zero = 0 if exact else 0.0
  full = lambda *s: np.full(s, zero, dt)  # noqa: E731
  w1, b1 = full(depth, BLOCK_WIDTH, d), full(depth, BLOCK_WIDTH)
  w2, b2 = full(depth, d, BLOCK_WIDTH), full(depth, d)
  for i in range(d):
    layer, slot = divmod(i, per)
    up, down = 2 * slot, 2 * slot + 1
    w1[layer, up, i], b1[layer, up], w2[layer, i, up] = 1, -hi[i], -1
    w1[layer, down, i], b1[layer, down], w2[layer, i, down] = -1, lo[i], 1
  att = {'W_Q': full(depth, BLOCK_HEADS, BLOCK_HEAD_SIZE, d),
         'b_Q': full(depth, BLOCK_HEADS, BLOCK_HEAD_SIZE),
         'W_K': full(depth, BLOCK_HEADS, BLOCK_HEAD_SIZE, d),
         'W_V': full(depth, BLOCK_HEADS, BLOCK_HEAD_SIZE, d),
         'W_O': full(depth, BLOCK_HEADS, d, BLOCK_HEAD_SIZE)}
  seg = Segment('block', depth, num_heads=BLOCK_HEADS, head_size=BLOCK_HEAD_SIZE,
                normalizer='softmax', width=BLOCK_WIDTH, activation='relu', name=name)
  return (seg,), {'segment_0': {'attention': att,
                                'feedforward': {'W_1': w1, 'b_1': b1, 'W_2': w2, 'b_2': b2}}}


def is_output_clamp(segment: Segment, params: dict, lo: Sequence, hi: Sequence) -> bool:
  """True iff (segment, params) are exactly ``output_clamp(lo, hi, exact=True)``'s blocks:
  the structural fact behind |clamp(z)_i - y_i| <= hi_i - lo_i for y_i in [lo_i, hi_i]."""
  want_segs, want = output_clamp(lo, hi, exact=True)
  if segment != want_segs[0]:
    return False
  got = jax.tree_util.tree_leaves(params)
  ref = jax.tree_util.tree_leaves(want['segment_0'])
  return len(got) == len(ref) and all(
      np.shape(a) == np.shape(b) and all(Fraction(x) == Fraction(y) for x, y in
                                         zip(np.ravel(a), np.ravel(b)))
      for a, b in zip(got, ref))
