r"""The integer-id network's blocks as exact rationals (``realize_network``'s parameters).

For g_bar of ``integer_ids`` (phi, high, the ids t_i and the value table; d, n, N), with
D = d + 2 (the token, then A1 = d and A2 = d + 1), s = 1/e a power of two, sigma the
format's snap constant (``rounding``) and kinks a_k = ceil(k/N 2^J)/2^J + e/2, k = 1..N-1:

    quantization  per coordinate l and kink a: N^l (ReLU(s x_l - s a + 1) - ReLU(s x_l - s a))
                  into A1, and - ReLU(x_l) into coordinate l (the token is consumed)
    snap          + sigma on A1, a block of its own (added once to the finished sum)
    code          - ReLU(A1) into A1 (cleared), and for k = 0..K-1 the unit
                  ReLU(A1 - sigma - k) with the staircase coefficients
                  (``staircase_coefficients``) of high - phi into A1 and of phi into A2
    attention     one head, every score 0: A2 <- A2 + n mean_k A2_k, then + sigma on A2
    value         for each id t_i, i = 1..P-1, and coordinate l:
                  (v_i,l - v_(i-1),l) 2^-value_bits (ReLU(y - sigma - t_i + 1) -
                  ReLU(y - sigma - t_i)), y = A1 + A2; b_2 = v_0 2^-value_bits
    clamp         ``realize.output_clamp`` on the first d coordinates (optional)
    E             positional (Theorem 3): E_j = j N^d on A1

``exact_blocks`` returns them as (segments, params, kinks, clamp range); the realized g
(``integer_ids_realized``) holds them and checks its own against a fresh copy.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from transformer_ua import layers, realize as realize_lib
from transformer_ua import rounding


def _zeros(*shape) -> np.ndarray:
  return np.full(shape, Fraction(0), object)


def _off_attention(D: int) -> dict:
  return {'W_Q': _zeros(1, 1, 1, D), 'b_Q': _zeros(1, 1, 1), 'W_K': _zeros(1, 1, 1, D),
          'W_V': _zeros(1, 1, 1, D), 'W_O': _zeros(1, 1, D, 1)}


def _ff(width: int, D: int) -> dict:
  return {'W_1': _zeros(1, width, D), 'b_1': _zeros(1, width), 'W_2': _zeros(1, D, width),
          'b_2': _zeros(1, D)}


def staircase_coefficients(values) -> list:
  """c_k = dF_(k+1) - dF_k (dF_0 = dF_K = 0) for F = ``values`` on 0..K-1: then
  F(m) = F(0) + sum_k c_k ReLU(m - k) on those integers."""
  v = [Fraction(x) for x in values]
  dv = [Fraction(0)] + [v[k] - v[k - 1] for k in range(1, len(v))] + [Fraction(0)]
  return [dv[k + 1] - dv[k] for k in range(len(v))]


def exact_blocks(net, e: Fraction, clamp: bool) -> tuple:
  """(segments, exact params, kinks a_k, clamp range or None) of the blocks for ``net`` (an
  ``integer_ids.IntegerIdsApproximator``) at the quantization ramp ``e`` = 1/s (module
  docstring)."""
  fmt = rounding.FORMATS[net.number_format]
  d, n, N = net.d, net.n, net.resolution
  D, A1, A2 = d + 2, d, d + 1
  sigma = fmt.snap
  s = 1 / e
  J = int(math.log2(s)) + 2
  kinks = [Fraction(math.ceil(Fraction(k, N) * 2 ** J), 2 ** J) + e / 2 for k in range(1, N)]
  # quantize
  q = _ff(2 * (N - 1) * d + d, D)
  u = 0
  for l in range(d):
    for a in kinks:
      for bias in (-s * a + 1, -s * a):
        q['W_1'][0, u, l], q['b_1'][0, u] = s, bias
        q['W_2'][0, A1, u] = Fraction(N ** l) * (1 if bias == -s * a + 1 else -1)
        u += 1
    q['W_1'][0, u, l], q['W_2'][0, l, u] = Fraction(1), Fraction(-1)
    u += 1
  # snap: a block of its own, a zero dot product plus the bias sigma, so that sigma is added
  # once to the finished sum whatever order a runtime sums the quantization in
  q_snap = _ff(1, D)
  q_snap['b_2'][0, A1] = Fraction(sigma)
  # code
  K = len(net.phi)
  c = _ff(K + 1, D)
  c['W_1'][0, 0, A1], c['W_2'][0, A1, 0] = Fraction(1), Fraction(-1)
  c_phi = staircase_coefficients(net.phi)
  c_hi = staircase_coefficients([h - p for h, p in zip(net.high, net.phi)])
  for k in range(K):
    c['W_1'][0, k + 1, A1], c['b_1'][0, k + 1] = Fraction(1), Fraction(-(sigma + k))
    c['W_2'][0, A1, k + 1], c['W_2'][0, A2, k + 1] = c_hi[k], c_phi[k]
  # attention + snap
  att = _off_attention(D)
  att['W_V'][0, 0, 0, A2], att['W_O'][0, 0, A2, 0] = Fraction(1), Fraction(n)
  snap = _ff(1, D)
  snap['b_2'][0, A2] = Fraction(sigma)
  # value
  P, scale = net.num_ids, Fraction(1, 2 ** net.value_bits)
  v = _ff(2 * (P - 1), D)
  v['W_1'][0, :, A1] = Fraction(1)
  v['W_1'][0, :, A2] = Fraction(1)
  for i in range(1, P):
    ti = int(net.ids[i])
    v['b_1'][0, 2 * i - 2], v['b_1'][0, 2 * i - 1] = Fraction(-(sigma + ti - 1)), \
        Fraction(-(sigma + ti))
    for l in range(d):
      step = (net.value_num[i, l] - net.value_num[i - 1, l]) * scale
      v['W_2'][0, l, 2 * i - 2], v['W_2'][0, l, 2 * i - 1] = step, -step
  for l in range(d):
    v['b_2'][0, l] = net.value_num[0, l] * scale
  block = functools.partial(layers.Segment, 'block', 1, num_heads=1, head_size=1,
                            normalizer='softmax', lam=1.0, activation='relu')
  segments = (block(width=2 * (N - 1) * d + d, name='quantization'),
              block(width=1, name='snap'),
              block(width=K + 1, name='code'),
              block(width=1, name='attention'),
              block(width=2 * (P - 1), name='value'))
  params = {'segment_0': {'attention': _off_attention(D), 'feedforward': q},
            'segment_1': {'attention': _off_attention(D), 'feedforward': q_snap},
            'segment_2': {'attention': _off_attention(D), 'feedforward': c},
            'segment_3': {'attention': att, 'feedforward': snap},
            'segment_4': {'attention': _off_attention(D), 'feedforward': v}}
  bounds = None
  if clamp:
    lo, hi = net.output_range()
    segs, cp = realize_lib.output_clamp(lo, hi, exact=True)
    params['segment_5'] = _pad_clamp(cp['segment_0'], d, D)
    segments = segments + segs
    bounds = (tuple(lo), tuple(hi))
  if net.positional:
    E = _zeros(n, D)
    for j in range(n):
      E[j, A1] = Fraction(j * N ** d)
    params['E'] = E
  return segments, params, tuple(kinks), bounds


def _pad_clamp(p: dict, d: int, D: int) -> dict:
  """``realize.output_clamp``'s block on d coordinates, acting on the first d of D."""
  def pad(a, axis):
    width = [(0, 0)] * a.ndim
    width[axis] = (0, D - d)
    return np.pad(a, width, constant_values=Fraction(0))
  att, ff = p['attention'], p['feedforward']
  return {'attention': {'W_Q': pad(att['W_Q'], 3), 'b_Q': att['b_Q'], 'W_K': pad(att['W_K'], 3),
                        'W_V': pad(att['W_V'], 3), 'W_O': pad(att['W_O'], 2)},
          'feedforward': {'W_1': pad(ff['W_1'], 2), 'b_1': ff['b_1'], 'W_2': pad(ff['W_2'], 1),
                          'b_2': pad(ff['b_2'], 1)}}
