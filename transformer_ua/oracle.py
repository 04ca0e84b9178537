r"""A realized Transformer evaluated in mpmath: the second reading, sharing no code.

A realized network (``realize``: softmax attention, ReLU feed-forward, exact rational
params) is a real-number function g. ``exact.ball`` / ``exact.wide_ball`` enclose it in
arb balls with the tricks a certificate needs (score differences, grouped heads, exact
affine pieces, skipped identity layers, bisection on kinks). This module is the second
reading, in mpmath floating point at ``prec`` bits, importing nothing of the project.

What is shared with the certificate's evaluator, exactly:

* code: none (this module imports only mpmath, NumPy and the standard library);
* the algorithm, on attention and on narrow feed-forward layers: none; the formula
  below is evaluated as written (every score, every exp, every hidden unit);
* the algorithm, on wide feed-forward layers (groups of >= 2 parallel rows of W_1, the
  default ``grouped=True``): the same idea as ``exact.wide_ball``: rows grouped by
  direction, kinks sorted exactly, the active units selected by one bisection, so an
  error in that identity's derivation (below) would repeat in both. ``grouped=False``
  evaluates every unit literally and shares no algorithm; ``tests/test_oracle.py``
  checks that the two paths agree on random wide layers and on a whole shallow-wide
  network. The literal path costs about 6 microseconds per hidden unit per token
  (mpmath 1.3, 186 bits, 2-core Xeon): fine for samples of networks a few thousand units
  wide, about 1 s per token at the 162,712 units of the size law's widest row, which is
  why the sampled checks (``verify.certificate_mc``) use the grouped path.

Per block (Yun et al. eqs. (1)-(2), token-major: z_j is token j, a d-vector; head i):

    z_j <- z_j + E_j                                    (positional, first block only)
    q_j = W_Q^i z_j + b_Q^i,  k_j = W_K^i z_j,  v_j = W_V^i z_j
    s_jk = lam q_j . k_k
    a_jk = exp(s_jk - max_k' s_jk') / sum_k'' exp(s_jk'' - max_k' s_jk')
    z_j <- z_j + sum_i W_O^i sum_k a_jk v_k
    z_j <- z_j + W_2 max(0, W_1 z_j + b_1) + b_2

Params are converted from the exact rationals to ``prec``-bit mpf once; sums skip
exactly zero weights (their terms are exactly 0), heads with W_O = 0 and hidden units
with a zero column of W_2 (both add exactly 0).

Wide feed-forward layers: parallel rows, one sorted sum (``FeedForward``). Write row c
of W_1 as w_c = u_c v with v the row scaled so that its first non-zero entry is 1
(exact rationals; u_c != 0 that entry). Rows with the same v form a group G (the
staircase and bump layers are a few groups of thousands of units); with t = v . z and
the kink k_c = -b_c / u_c of each unit,

    max(0, u_c t + b_c) = u_c t + b_c   if u_c > 0 and k_c < t, or u_c < 0 and k_c >= t,
                          0             otherwise

(at t = k_c both sides are 0, so the tie may go either way; this one suits a single
count). Sort G's kinks ascending, k_(1) <= ... <= k_(|G|), and let m = #{c : k_c < t}:
the units with u_c > 0 among the first m are on, and those with u_c < 0 among the rest.
So, an identity,

    sum_{c in G} W_2[:, c] max(0, u_c t + b_c) = t A_m + B_m,
    A_m = sum_{i <= m, u_(i) > 0} W_2[:, (i)] u_(i) + sum_{i > m, u_(i) < 0} W_2[:, (i)] u_(i),
    B_m = the same sums of W_2[:, (i)] b_(i),       m = 0, ..., |G|.

At construction the kinks are sorted exactly (Fractions) and A_m, B_m are summed
exactly (integers over a common denominator, from A_0 = the sum over u < 0: step
m -> m + 1 adds the unit's term if u > 0, removes it if u < 0). At evaluation t is
computed in mpf, m is one bisection comparing the exact binary value of t with the
exact kinks, and the group adds t A_m + B_m, A_m and B_m each rounded once (correctly)
to ``prec`` bits: one product and one sum per output. A group of one unit, and a zero
row, stay on the literal path. One token costs O(groups log width) instead of O(width);
``MpNetwork(grouped=False)`` keeps every unit literal (the tests' reference).

Rounding. Write R(t) = |t| sum_c |W_2[:, c] u_c| + sum_c |W_2[:, c] b_c| (entrywise)
for the group's scale. Given the computed t, the grouped sum's error is at most
~ 3 2^-prec R(t) (A_m, B_m rounded once each, one product, one sum); the
literal sum rounds each u_c t + b_c to 2^-prec (|u_c t| + |b_c|) and sums W_2 times
those, an error ~ 2^-prec R(t) with the same R. So the two paths agree to a small
multiple of 2^-prec R(t) (tested in tests/test_oracle.py), and neither is better than
that: R(t) is the cancellation a wide layer does (the bumps of one_layer_wide add
~1/r-sized terms that cancel to O(1)). Measured on ``search.approximate``'s
token_times_mean networks (d = 1, n = 3, |t| up to the largest kink + 1): R < 2^31.4,
2^38.8, 2^49.0, 2^56.9 at eps = 0.1, 0.05, 0.02, 0.01 (N = 5, 9, 22, 43; prec = 2 x 76,
81, 88, 93 bits), so 3 2^-prec R < 2^-118, 2^-121, 2^-125, 2^-127 in every output:
far below the ~1e-3 a Monte Carlo of 10^3 points resolves. Then t's own rounding (relative
2^-prec) moves the value by at most |t - t'| |A| <= 2^-prec R(t) as well.

The result is a floating value, not an enclosure: its relative error is a small
multiple of 2^-prec per operation (2^-prec R on the wide layers), far below anything a
test or a Monte Carlo resolves at ``prec`` >= 2 x the plan's bits.

Shapes: one point X is [n, d] (token-major), a batch [batch, n, d]; outputs alike.
"""

from __future__ import annotations

import bisect
import math
from fractions import Fraction

import mpmath
import numpy as np

#: Smallest mpmath precision accepted (bits).
MIN_PREC = 53
_ZERO = mpmath.mpf(0)        # exact at every precision


def check_prec(prec) -> int:
  if isinstance(prec, bool) or not isinstance(prec, (int, np.integer)) or prec < MIN_PREC:
    raise ValueError(f'prec={prec!r}; the mpmath precision must be an integer >= {MIN_PREC} '
                     'bits.')
  return int(prec)


def mp_value(v) -> mpmath.mpf:
  """An exact number (int, Fraction, float) as an mpf at the current precision,
  correctly rounded."""
  if isinstance(v, (int, np.integer)):
    return mpmath.mpf(int(v))
  q = Fraction(v)
  return mpmath.mp.make_mpf(mpmath.libmp.from_rational(
      q.numerator, q.denominator, mpmath.mp.prec, mpmath.libmp.round_nearest))


def exact_value(x: mpmath.mpf) -> Fraction:
  """The exact binary value of a finite mpf, as a Fraction."""
  return Fraction(*mpmath.libmp.to_rational(x._mpf_))


def _sparse(mat) -> list:
  """Rows of a matrix as [(column, mpf)] over its non-zero entries."""
  return [[(c, mp_value(v)) for c, v in enumerate(row) if v != 0] for row in np.asarray(mat)]


def _dot(row, z):
  """sum_c w_c z_c over a sparse row [(c, w_c)] (one term: its product, as fsum gives)."""
  if len(row) == 1:
    c, w = row[0]
    return w * z[c]
  return mpmath.fsum(w * z[c] for c, w in row)


def _exact(v):
  """An exact param (int, Fraction, float) as an int or a Fraction."""
  return int(v) if isinstance(v, (int, np.integer)) else Fraction(v)


def _num_den(v) -> tuple[int, int]:
  return (v, 1) if isinstance(v, int) else (v.numerator, v.denominator)


class _Group:
  """Units c of one W_1 direction v: pre-activation u_c t + b_c, t = v . z (module doc).

  Built from exact (u_c, b_c, W_2[:, c]) (ints or Fractions); holds the kinks sorted
  ascending (Fractions) and the exact sums A_m, B_m as integers over common
  denominators (``a[i][m] / a_den`` = A_m[i]), each rounded to an mpf the first time t
  selects it (kept in ``rounded``: call at the one precision of the network).
  """

  def __init__(self, v, units, d_out: int):
    self.v = [(c, mp_value(w)) for c, w in enumerate(v) if w != 0]
    kinks = [Fraction(-b) / u for u, b, _ in units]
    order = sorted(range(len(units)), key=lambda i: float(kinks[i]))
    order.sort(key=kinks.__getitem__)      # exact; a few comparisons on sorted input
    self.kinks = [kinks[i] for i in order]
    units = [units[i] for i in order]
    # terms W_2[i, c] u_c and W_2[i, c] b_c as (numerator, denominator), then integers
    # over the least common denominators
    terms_a = [[_num_den(col[i] * u) for u, _, col in units] for i in range(d_out)]
    terms_b = [[_num_den(col[i] * b) for u, b, col in units] for i in range(d_out)]
    self.a_den = math.lcm(*(q for row in terms_a for _, q in row))
    self.b_den = math.lcm(*(q for row in terms_b for _, q in row))
    negative = [u < 0 for u, _, _ in units]
    self.a = [self._sums(row, self.a_den, negative) for row in terms_a]
    self.b = [self._sums(row, self.b_den, negative) for row in terms_b]
    self.size = len(units)
    self.rounded = {}

  @staticmethod
  def _sums(terms, den: int, negative) -> list:
    """[S_0, ..., S_|G|] (integers over ``den``): S_0 = the sum of the terms of units
    u < 0; S_(m+1) = S_m + the m-th term (u > 0) or - it (u < 0)."""
    ints = [p * (den // q) for p, q in terms]
    total = sum(x for x, neg in zip(ints, negative) if neg)
    out = [total]
    for x, neg in zip(ints, negative):
      total = total - x if neg else total + x
      out.append(total)
    return out

  def __call__(self, z) -> list:
    """sum_{c in G} W_2[:, c] max(0, u_c v . z + b_c): d_out mpf."""
    t = _dot(self.v, z)
    m = bisect.bisect_left(self.kinks, exact_value(t))
    if m not in self.rounded:
      self.rounded[m] = [(mp_value(Fraction(a[m], self.a_den)),
                          mp_value(Fraction(b[m], self.b_den))) for a, b in zip(self.a, self.b)]
    return [t * a_m + b_m for a_m, b_m in self.rounded[m]]


class FeedForward:
  """z -> W_2 max(0, W_1 z + b_1) + b_2 (the update; the block adds z), in mpf.

  Args:
    w1 [r, d], b1 [r], w2 [d_out, r], b2 [d_out]: exact params (ints, Fractions, floats).
    grouped: sum groups of >= 2 parallel rows of W_1 by one bisection each (module doc);
      False: every unit literally.
  Call under ``mpmath.workprec`` of the precision it was built at.
  """

  def __init__(self, w1, b1, w2, b2, grouped: bool = True):
    w1, b1, w2 = np.asarray(w1), np.asarray(b1), np.asarray(w2)
    d_out = w2.shape[0]
    alive = np.flatnonzero(np.any(w2 != 0, axis=0))      # a zero column adds exactly 0
    nonzero_row = np.any(w1 != 0, axis=1)
    by_direction = {}
    literal = []
    for c in alive:
      if not (grouped and nonzero_row[c]):
        literal.append(int(c))
        continue
      row = [_exact(w) for w in w1[c]]
      u = Fraction(next(w for w in row if w != 0))       # row = u v, v's lead entry 1
      by_direction.setdefault(tuple(w / u for w in row), []).append((int(c), u))
    self.groups = []
    for v, members in by_direction.items():
      if len(members) == 1:
        literal.append(members[0][0])
        continue
      units = [(u, _exact(b1[c]), [_exact(w) for w in w2[:, c]]) for c, u in members]
      self.groups.append(_Group(v, units, d_out))
    literal.sort()
    self.w1 = _sparse(w1[literal]) if literal else []
    self.b1 = [mp_value(b1[c]) for c in literal]
    self.w2 = _sparse(w2[:, literal]) if literal else [[] for _ in range(d_out)]
    self.b2 = [mp_value(v) for v in np.asarray(b2)]
    self.literal = len(literal)

  def __call__(self, z) -> list:
    act = [max(_ZERO, _dot(r, z) + b) for r, b in zip(self.w1, self.b1)]
    out = [_dot(self.w2[i], act) + self.b2[i] for i in range(len(self.b2))]
    for group in self.groups:
      out = [o + s for o, s in zip(out, group(z))]
    return out


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
    grouped: feed-forward layers sum parallel rows by bisection (``FeedForward``);
      False: every hidden unit literally (slow on wide layers; the tests' reference).
  """

  def __init__(self, segments, params: dict, positional: bool, prec: int,
               grouped: bool = True):
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
          self.blocks.append((lam, heads, FeedForward(
              np.asarray(ff['W_1'])[layer], np.asarray(ff['b_1'])[layer],
              np.asarray(ff['W_2'])[layer], np.asarray(ff['b_2'])[layer], grouped)))
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
      for lam, heads, ff in self.blocks:
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
          z[j] = [zi + ui for zi, ui in zip(z[j], ff(z[j]))]
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
