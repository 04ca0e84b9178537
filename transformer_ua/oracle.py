r"""A realized Transformer evaluated literally in mpmath: the check that shares no code.

A realized network (``realize``: softmax attention, ReLU feed-forward, exact rational
params) is a real-number function g. ``exact.ball`` encloses it in arb balls with the
tricks a certificate needs (score differences, grouped heads, exact affine pieces,
skipped identity layers). This module is the independent second reading: the formula
as written, in mpmath floating point at ``prec`` bits, importing nothing of the
project, so a bug in one evaluator does not repeat in the other.

Per block (Yun et al. eqs. (1)-(2), token-major: z_j is token j, a d-vector; head i):

    z_j <- z_j + E_j                                    (positional, first block only)
    q_j = W_Q^i z_j + b_Q^i,  k_j = W_K^i z_j,  v_j = W_V^i z_j
    s_jk = lam q_j . k_k
    a_jk = exp(s_jk - max_k' s_jk') / sum_k'' exp(s_jk'' - max_k' s_jk')
    z_j <- z_j + sum_i W_O^i sum_k a_jk v_k
    z_j <- z_j + W_2 max(0, W_1 z_j + b_1) + b_2

Params are converted from the exact rationals to ``prec``-bit mpf once; sums skip
exactly zero weights (their terms are exactly 0). The result is a floating value, not
an enclosure: its relative error is a small multiple of 2^-prec per operation, far
below anything a test or a Monte Carlo resolves at ``prec`` >= 2 x the plan's bits.

Shapes: one point X is [n, d] (token-major), a batch [batch, n, d]; outputs alike.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np

#: Smallest mpmath precision accepted (bits).
MIN_PREC = 53


def check_prec(prec) -> int:
  if isinstance(prec, bool) or not isinstance(prec, (int, np.integer)) or prec < MIN_PREC:
    raise ValueError(f'prec={prec!r}; the mpmath precision must be an integer >= {MIN_PREC} '
                     'bits.')
  return int(prec)


def mp_value(v) -> mpmath.mpf:
  """An exact number (int, Fraction, float) as an mpf at the current precision."""
  v = Fraction(v)
  return mpmath.mpf(v.numerator) / v.denominator


def _sparse(mat) -> list:
  """Rows of a matrix as [(column, mpf)] over its non-zero entries."""
  return [[(c, mp_value(v)) for c, v in enumerate(row) if v != 0] for row in np.asarray(mat)]


def _dot(row, z):
  return mpmath.fsum(w * z[c] for c, w in row)


class MpNetwork:
  """A realized network, literally, in mpmath at ``prec`` bits (module doc).

  Args:
    segments: segments of kind 'block' with softmax attention and ReLU feed-forward
      (objects with ``kind``, ``depth``, ``normalizer``, ``activation``, ``lam``).
    params: the exact params pytree ({'segment_i': {'attention': {W_Q [L, h, m, d],
      b_Q [L, h, m], W_K, W_V [L, h, m, d], W_O [L, h, d, m]}, 'feedforward': {W_1
      [L, r, d], b_1 [L, r], W_2 [L, d, r], b_2 [L, d]}}, and 'E' [n, d] when
      positional), entries ints, Fractions or floats.
    positional: add ``params['E']`` first.
    prec: mpmath precision in bits (>= ``MIN_PREC``).
  """

  def __init__(self, segments, params: dict, positional: bool, prec: int):
    self.prec = check_prec(prec)
    self.blocks = []
    with mpmath.workprec(self.prec):
      for s, seg in enumerate(segments):
        if (seg.kind, seg.normalizer, seg.activation) != ('block', 'softmax', 'relu'):
          raise ValueError(f'segment {s} is a {seg.kind} ({seg.normalizer}, '
                           f'{seg.activation}); the oracle evaluates realized blocks '
                           '(softmax, ReLU).')
        att, ff = params[f'segment_{s}']['attention'], params[f'segment_{s}']['feedforward']
        lam = mp_value(seg.lam)
        for layer in range(seg.depth):
          heads = []
          for h in range(np.shape(att['W_Q'])[1]):
            w_o = np.asarray(att['W_O'])[layer, h]
            if all(v == 0 for v in w_o.ravel()):
              continue                      # the head adds exactly 0
            heads.append((_sparse(np.asarray(att['W_Q'])[layer, h]),
                          [mp_value(v) for v in np.asarray(att['b_Q'])[layer, h]],
                          _sparse(np.asarray(att['W_K'])[layer, h]),
                          _sparse(np.asarray(att['W_V'])[layer, h]), _sparse(w_o)))
          self.blocks.append((lam, heads, _sparse(np.asarray(ff['W_1'])[layer]),
                              [mp_value(v) for v in np.asarray(ff['b_1'])[layer]],
                              _sparse(np.asarray(ff['W_2'])[layer]),
                              [mp_value(v) for v in np.asarray(ff['b_2'])[layer]]))
      self.e = None
      if positional:
        self.e = [[mp_value(v) for v in row] for row in np.asarray(params['E'])]

  def __call__(self, x) -> list:
    """g(X) for one point X [n, d] (floats, taken exactly): n lists of d mpf."""
    x = np.asarray(x, np.float64)
    with mpmath.workprec(self.prec):
      z = [[mpmath.mpf(float(v)) for v in row] for row in x]
      n, d = len(z), len(z[0])
      if self.e is not None:
        z = [[z[j][i] + self.e[j][i] for i in range(d)] for j in range(n)]
      for lam, heads, w1, b1, w2, b2 in self.blocks:
        upd = [[mpmath.mpf(0)] * d for _ in range(n)]
        for w_q, b_q, w_k, w_v, w_o in heads:
          q = [[_dot(r, z[j]) + b for r, b in zip(w_q, b_q)] for j in range(n)]
          k = [[_dot(r, z[j]) for r in w_k] for j in range(n)]
          v = [[_dot(r, z[j]) for r in w_v] for j in range(n)]
          m = len(w_v)
          for j in range(n):
            s = [lam * mpmath.fsum(q[j][a] * k[kk][a] for a in range(m)) for kk in range(n)]
            top = max(s)
            e = [mpmath.exp(sv - top) for sv in s]
            tot = mpmath.fsum(e)
            mixed = [mpmath.fsum(e[kk] * v[kk][a] for kk in range(n)) / tot for a in range(m)]
            for i in range(d):
              upd[j][i] += _dot(w_o[i], mixed)
        z = [[z[j][i] + upd[j][i] for i in range(d)] for j in range(n)]
        for j in range(n):
          act = [max(mpmath.mpf(0), _dot(r, z[j]) + b) for r, b in zip(w1, b1)]
          z[j] = [z[j][i] + _dot(w2[i], act) + b2[i] for i in range(d)]
      return z

  def values(self, x) -> np.ndarray:
    """g(X) for a batch X [batch, n, d], rounded to float64 [batch, n, d]."""
    x = np.asarray(x, np.float64)
    if x.ndim != 3:
      raise ValueError(f'points must be [batch, n, d], got shape {tuple(x.shape)}.')
    out = np.empty(x.shape)
    for b in range(x.shape[0]):
      out[b] = [[float(v) for v in row] for row in self(x[b])]
    return out


def evaluate_chunk(segments, params: dict, positional: bool, prec: int, x) -> np.ndarray:
  """g(X) [batch, n, d] (float64) for a chunk X [batch, n, d]: a pure function of its
  arguments, for ``executor.map`` over chunks of points."""
  return MpNetwork(segments, params, positional, prec).values(x)
