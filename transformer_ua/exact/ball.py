r"""Certified evaluation of a standard Transformer with exact params, in arb ball arithmetic.

A realized network (``realize``: softmax attention, ReLU feed-forward, params exact
rationals) is a real-number function. This module encloses its exact output: every
number is an arb ball [mid +- rad] (python-flint, precision ``bits``) that provably
contains the exact real value, so ``mid +- rad`` is a certificate, not an estimate.
Inputs may be boxes (a ball per entry), e.g. a whole cube interior.

Attention (Yun et al. eq. (1), token-major, head i, query j, keys k):

    q_j = W_Q z_j + b_Q,  k_k = W_K z_k,  v_k = W_V z_k        (lambda folded in W_Q, b_Q)
    s_jk = k_k . q_j,     w_jk = softmax_k(s_j.)_k = 1 / sum_k' exp(s_jk' - s_jk)
    z_j <- z_j + sum_i W_O^i sum_k w_jk v_k

The weights are formed from score *differences* s_jk' - s_jk = (k_k' - k_k) . q_j
(rank one for m = 1: a key difference times the query), so no exp(lam s) overflows
or squares the magnitudes, and ``exp`` of a very negative argument is a tiny ball.

Feed-forward z <- z + W_2 ReLU(W_1 z + b_1) + b_2. Evaluated unit by unit a box never
shrinks (the dependency problem: ReLU(t - a) - ReLU(t - b) on a box of width w has
width 2w). Instead, with a_s = W_1[s] z + b_1[s] the pre-activations (balls):

    if every a_s is certainly >= 0 or <= 0 (the box stays off every ReLU kink, i.e.
    outside every epsilon window of Lemma 6), the active set P is constant on the box
    and the layer *is* the affine map
        z <- (I + sum_{s in P} W_2[:, s] W_1[s]) z + sum_{s in P} W_2[:, s] b_1[s] + b_2,
    applied as one matrix (its entries are exact sums, e.g. 1 - 1 = 0 on a
    quantization bin, where the box collapses to a point);
    otherwise the units are evaluated one by one (ReLU of a ball), still rigorous.

Shapes: a state is a list of n tokens, each a list of d arb balls.
"""

from __future__ import annotations

import contextlib
from fractions import Fraction
from typing import Sequence

import numpy as np
from flint import arb, ctx, fmpq

#: Smallest working precision accepted (bits).
MIN_BITS = 8


def check_bits(bits) -> int:
  if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or bits < MIN_BITS:
    raise ValueError(f'bits={bits!r}; the working precision must be an integer >= {MIN_BITS}.')
  return int(bits)


@contextlib.contextmanager
def precision(bits: int):
  """arb working precision ``bits`` inside the block."""
  with ctx.workprec(check_bits(bits)):
    yield


def to_arb(v) -> arb:
  """An exact number (int, Fraction, float) as an arb ball (exact when representable)."""
  if isinstance(v, Fraction):
    return arb(fmpq(v.numerator, v.denominator))
  if isinstance(v, (int, np.integer)):
    return arb(int(v))
  return arb(float(v))


def interval(lo, hi) -> arb:
  """A ball containing the closed interval [lo, hi] (exact endpoints)."""
  return to_arb(lo).union(to_arb(hi))


def _is_zero(v) -> bool:
  return v == 0


class _Layer:
  """One block (attention then feed-forward) with arb params and cached affine pieces."""

  def __init__(self, att, ff):
    # Attention heads whose W_O is exactly zero are switched off (as_blocks padding).
    # Heads with the same W_V (exactly) are grouped: their outputs are combined as
    # sum_k (sum_h w^h_jk W_O^h) v_k, so that two heads selecting the same value (a
    # selective shift that does not fire: psi(b-) - psi(b+)) cancel coefficient-wise
    # instead of as two independent balls.
    self.groups = []
    if att is not None:
      conv = lambda a: [[to_arb(v) for v in row] for row in np.asarray(a)]  # noqa: E731
      by_v = {}
      for h in range(np.asarray(att['W_O']).shape[0]):
        w_o = np.asarray(att['W_O'][h])
        if all(_is_zero(v) for v in w_o.ravel()):
          continue
        key = tuple(np.asarray(att['W_V'][h]).ravel().tolist())
        if key not in by_v:
          by_v[key] = (conv(att['W_V'][h]), [])
          self.groups.append(by_v[key])
        by_v[key][1].append((conv(att['W_Q'][h]),
                             [to_arb(v) for v in np.asarray(att['b_Q'][h])],
                             conv(att['W_K'][h]), conv(w_o)))
    self.ff = None
    if ff is not None:
      w1, b1 = np.asarray(ff['W_1']), np.asarray(ff['b_1'])
      w2, b2 = np.asarray(ff['W_2']), np.asarray(ff['b_2'])
      units = [s for s in range(w1.shape[0])
               if not all(_is_zero(v) for v in w2[:, s])]       # units with an output
      if units or not all(_is_zero(v) for v in b2):
        self.ff = ([[to_arb(v) for v in w1[s]] for s in units],
                   [to_arb(b1[s]) for s in units],
                   [[to_arb(w2[i, s]) for s in units] for i in range(w2.shape[0])],
                   [to_arb(v) for v in b2], all(_is_zero(v) for v in b2))
      self.pieces = {}

  # -- attention ---------------------------------------------------------------

  def attention(self, z, rep):
    if not self.groups:
      return z
    n, d = len(z), len(z[0])
    reps = sorted(set(rep))
    out = [list(row) for row in z]
    lin = lambda w, x, b: [sum((w[a][i] * x[i] for i in range(d)), b[a])  # noqa: E731
                           for a in range(len(w))]
    for w_v, heads in self.groups:
      m = len(w_v)
      zero = [arb(0)] * m
      v = [lin(w_v, z[j], zero) for j in range(n)]
      # coef[j][k][i][a] = sum_h w^h_jk W_O^h[i][a]
      coef = {j: [[[arb(0)] * m for _ in range(d)] for _ in range(n)] for j in reps}
      for w_q, b_q, w_k, w_o in heads:
        q = {j: lin(w_q, z[j], b_q) for j in reps}
        k = [lin(w_k, z[j], zero) for j in range(n)]
        # key differences dk[k2][k1] = k_k2 - k_k1: exactly 0 for tokens known equal
        # (otherwise the dependency problem would blow up exact ties)
        dk = [[None if rep[k2] == rep[k1] else [k[k2][a] - k[k1][a] for a in range(m)]
               for k1 in range(n)] for k2 in range(n)]
        for j in reps:
          for k1 in range(n):
            denom = arb(0)
            for k2 in range(n):   # w_jk1 = 1 / sum_k2 exp(s_jk2 - s_jk1)
              if dk[k2][k1] is None:
                denom += 1
              else:
                denom += sum((dk[k2][k1][a] * q[j][a] for a in range(m)), arb(0)).exp()
            w = 1 / denom
            c = coef[j][k1]
            for i in range(d):
              for a in range(m):
                if not w_o[i][a].is_zero():
                  c[i][a] = c[i][a] + w * w_o[i][a]
      for j in reps:
        for i in range(d):
          out[j][i] = out[j][i] + sum((coef[j][k1][i][a] * v[k1][a]
                                       for k1 in range(n) for a in range(m)), arb(0))
    return [out[rep[j]] for j in range(n)]

  # -- feed-forward --------------------------------------------------------------

  def _piece(self, active):
    """(M, c) of the affine map for the active set (cached per layer)."""
    got = self.pieces.get(active)
    if got is None:
      w1, b1, w2, b2, _ = self.ff
      d = len(w2)
      mat = [[arb(1 if i == l else 0) for l in range(d)] for i in range(d)]
      c = list(b2)
      for s in active:
        for i in range(d):
          if w2[i][s] == 0:
            continue
          for l in range(d):
            mat[i][l] = mat[i][l] + w2[i][s] * w1[s][l]
          c[i] = c[i] + w2[i][s] * b1[s]
      zero_rows = [all(v.is_zero() for v in row) for row in mat]
      got = self.pieces[active] = (mat, c, zero_rows)
    return got

  def feedforward(self, z, rep):
    if self.ff is None:
      return z
    w1, b1, w2, b2, b2_zero = self.ff
    d = len(w2)
    out = []
    for j, x in enumerate(z):
      if rep[j] != j:
        out.append(out[rep[j]])
        continue
      pre = [sum((w1[s][i] * x[i] for i in range(d)), b1[s]) for s in range(len(b1))]
      active = []
      determined = True
      for s, a in enumerate(pre):
        if a > 0:
          active.append(s)
        elif not (a < 0 or a.is_zero()):
          determined = False
          break
      if determined:
        if not active and b2_zero:
          out.append(x)
          continue
        mat, c, zero_rows = self._piece(tuple(active))
        # a zero row makes the entry the constant c[i]: the *same* object for every
        # token on this piece, which is how equal tokens are recognized (``forward``)
        out.append([c[i] if zero_rows[i] else sum((mat[i][l] * x[l] for l in range(d)), c[i])
                    for i in range(d)])
      else:  # straddles a kink: unit by unit (rigorous, not tight)
        relu = [a.nonnegative_part() for a in pre]
        out.append([x[i] + sum((w2[i][s] * relu[s] for s in range(len(relu))), b2[i])
                    for i in range(d)])
    return out

  def __call__(self, z, rep):
    z = self.attention(z, rep)
    return self.feedforward(z, rep)


class BallNetwork:
  """A realized network (block segments, exact params) ready for ball evaluation.

  Build and evaluate inside ``precision(bits)`` (params are rounded to ``bits`` once).

  Args:
    segments: ``layers.Segment``s of kind 'block' (softmax, ReLU), as ``realize`` makes.
    params: exact params pytree (object arrays of ints / Fractions, or floats).
    positional: add ``params['E']`` first.
  """

  def __init__(self, segments: Sequence, params: dict, positional: bool = False):
    self.layers = []
    for i, seg in enumerate(segments):
      if seg.kind != 'block' or seg.normalizer != 'softmax' or seg.activation != 'relu' \
          or seg.lam != 1.0:
        raise ValueError(f'segment {i} is a {seg.kind} ({seg.normalizer}, {seg.activation}); '
                         'ball evaluation takes realized blocks (softmax, ReLU, lam folded).')
      p = params[f'segment_{i}']
      for layer in range(seg.depth):
        att = {k: np.asarray(v)[layer] for k, v in p['attention'].items()}
        ff = {k: np.asarray(v)[layer] for k, v in p['feedforward'].items()}
        self.layers.append(_Layer(att, ff))
    self.e = None
    if positional:
      self.e = [[to_arb(v) for v in row] for row in np.asarray(params['E'])]

  def forward(self, z):
    """Encloses the network's output on the box ``z`` (n lists of d arbs)."""
    if self.e is not None:
      z = [[z[j][i] + self.e[j][i] for i in range(len(z[j]))] for j in range(len(z))]
    rep = list(range(len(z)))
    for layer in self.layers:
      rep = _equal_tokens(z, rep)
      z = layer(z, rep)
    return z


def _equal_tokens(z, rep):
  """rep[j]: the first token known to equal token j exactly.

  Tokens are known equal when every entry is the same ball *object* (a constant piece
  produced it for both, ``_Layer.feedforward``) or they were equal before: every layer
  is permutation equivariant, so equal tokens stay equal. Equal tokens are computed
  once and their key differences are exactly 0.
  """
  n = len(z)
  out = list(rep)
  for j in range(n):
    if out[j] != j:
      continue
    for k in range(j):
      if out[k] == k and all(a is b for a, b in zip(z[j], z[k])):
        out[j] = k
        break
  for j in range(n):
    out[j] = out[out[j]]
  return out


def points(x) -> list:
  """A float array [n, d] as exact point balls."""
  return [[arb(float(v)) for v in row] for row in np.asarray(x, np.float64)]


def mid_rad(z) -> tuple[np.ndarray, np.ndarray]:
  """Balls [n][d] -> (mid, rad) float64 with [mid - rad, mid + rad] containing each ball."""
  n, d = len(z), len(z[0])
  mid, rad = np.zeros((n, d)), np.zeros((n, d))
  for j in range(n):
    for i in range(d):
      b = z[j][i]
      if not b.is_finite():
        mid[j, i], rad[j, i] = np.nan, np.inf
        continue
      m = float(b.mid())
      err = float(abs(b - arb(m)).upper())
      mid[j, i], rad[j, i] = m, np.nextafter(err, np.inf)
  return mid, rad


def abs_error_bound(z, target) -> float:
  """Rigorous float upper bound on max |ball - target| over entries (target exact floats)."""
  worst = 0.0
  for row, trow in zip(z, np.asarray(target, np.float64)):
    for b, t in zip(row, trow):
      if not b.is_finite():
        return float('inf')
      worst = max(worst, np.nextafter(float(abs(b - arb(float(t))).upper()), np.inf))
  return float(worst)
