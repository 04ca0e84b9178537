r"""Certified evaluation of wide ReLU layers in arb balls, in O(log width) per token.

A token-wise feed-forward layer of width r (params exact rationals, ``layers`` shapes
W_1 [r, d], b_1 [r], W_2 [d, r], b_2 [d]),

    z <- z + W_2 ReLU(W_1 z + b_1) + b_2,

whose hidden units read few directions: group the units by the direction u_g of their
row (W_1[s] = a_s u_g, u_g normalized to a first non-zero entry 1), so unit s reads
t_g = u_g^T z through the pre-activation a_s t_g + b_s, with its kink at
tau_s = -b_s / a_s. Sort each group's units by tau once. For a box z (arb balls) and
[lo, hi] the exact ends of the ball t_g:

    unit s is on (pre-activation > 0)  iff a_s > 0, tau_s < lo  or  a_s < 0, tau_s > hi
              off (< 0)                iff a_s > 0, tau_s > hi  or  a_s < 0, tau_s < lo
              undetermined             iff lo <= tau_s <= hi

so two bisections (``bisect``) split the sorted units into [0, i0) (kinks below the box),
[i0, i1) (kinks inside it) and [i1, r) (above it). The on units below and above
contribute the exact affine map A_g t_g + B_g with

    A_g = sum_{s < i0, a_s > 0} W_2[:, s] a_s + sum_{s >= i1, a_s < 0} W_2[:, s] a_s
    (B_g the same with b_s),

read off prefix and suffix sums computed once in exact rationals (flint ``fmpq``); this is the proof
that every other unit is constant on the box (off, or on with its exact linear piece).
With no kink inside any group's box the layer is the exact affine map

    z <- (I + sum_g A_g u_g^T) z + sum_g B_g + b_2,

formed in rationals (cancelling ReLUs cancel exactly: a quantization staircase collapses
the box to a point, a bump's flat top is its value) and applied in balls; constant
outputs are one shared ball object per value, so tokens that reach the same point are
recognized as equal by the attention (``ball._equal_tokens``). Kinks inside a box:
each such group's whole function F_g(t) = A_g t + B_g + sum_{i0 <= s < i1} W_2[:, s]
ReLU(a_s t + b_s) is one continuous piecewise-linear function of t, and its exact range
on [lo, hi] is the hull of its values at lo, hi and the kinks inside (one sweep). A group
that reads and alone writes one coordinate (u_g = e_l) takes the residual z_l into F_g,
so the staircase's z_l - z_l cancels exactly on boxes too.

Cost per token: O(groups (log r + d^2)) without kinks inside, plus O(#kinks inside)
otherwise; the width r enters only through the bisection.

Attention layers are ``exact.ball``'s (``ball._Layer``). Shapes: a state is a list of n
tokens, each a list of d arb balls.
"""

from __future__ import annotations

import bisect
from fractions import Fraction

import numpy as np
from flint import arb, fmpq

from transformer_ua.exact import ball

#: The enclosure of an unbounded range.
_UNBOUNDED = arb(0, float('inf'))


def _q(v) -> fmpq:
  """An exact number (int, Fraction) as a flint rational (exact arithmetic in C)."""
  v = Fraction(v)
  return fmpq(v.numerator, v.denominator)


def exact_ends(t: arb) -> tuple:
  """(lo, hi): the exact ends of a finite ball as flint rationals (dyadic)."""
  def exact(v):
    man, exp = v.man_exp()
    man, exp = int(man), int(exp)
    return fmpq(man * 2 ** exp) if exp >= 0 else fmpq(man, 2 ** -exp)
  return exact(t.lower()), exact(t.upper())


class _Group:
  """The units of one direction u, sorted by kink (module docstring)."""

  def __init__(self, u, units, d):
    # units: (tau, a, b, w2 column (tuple of d rationals), original index), all fmpq
    units.sort(key=lambda s: s[0])
    self.u = u
    self.u_arb = [(l, arb(v)) for l, v in enumerate(u) if v]
    self.kinks = [s[0] for s in units]
    self.a = [s[1] for s in units]
    self.b = [s[2] for s in units]
    self.w2 = [s[3] for s in units]
    self.index = [s[4] for s in units]
    r = len(units)
    zero = (fmpq(0),) * d
    # pos[j] = sum over s < j with a_s > 0 of (W_2 a_s, W_2 b_s); neg[j] over s >= j, a_s < 0
    self.pos_a, self.pos_b = [zero], [zero]
    for s in range(r):
      pa, pb = self.pos_a[-1], self.pos_b[-1]
      if self.a[s] > 0:
        pa = tuple(x + w * self.a[s] for x, w in zip(pa, self.w2[s]))
        pb = tuple(x + w * self.b[s] for x, w in zip(pb, self.w2[s]))
      self.pos_a.append(pa)
      self.pos_b.append(pb)
    na, nb = [zero] * (r + 1), [zero] * (r + 1)
    for s in range(r - 1, -1, -1):
      na[s], nb[s] = na[s + 1], nb[s + 1]
      if self.a[s] < 0:
        na[s] = tuple(x + w * self.a[s] for x, w in zip(na[s], self.w2[s]))
        nb[s] = tuple(x + w * self.b[s] for x, w in zip(nb[s], self.w2[s]))
    self.neg_a, self.neg_b = na, nb
    writes = {i for w in self.w2 for i, v in enumerate(w) if v}
    nz = [l for l, v in enumerate(u) if v]
    # reads one coordinate l (u = e_l) and writes only l: candidate for the residual
    self.coordinate = nz[0] if len(nz) == 1 and writes <= {nz[0]} else None

  def t(self, x) -> arb:
    """t = u^T x; for u = e_l the entry itself (no arithmetic: a ball's radius is held
    with 30 bits, and each operation would widen a cube box by ~2^-30 of itself)."""
    if len(self.u_arb) == 1 and self.u[self.u_arb[0][0]] == 1:
      return x[self.u_arb[0][0]]
    return sum((v * x[l] for l, v in self.u_arb[1:]), self.u_arb[0][1] * x[self.u_arb[0][0]])

  def split(self, lo, hi) -> tuple[int, int]:
    """(i0, i1): kinks < lo are [0, i0), kinks in [lo, hi] are [i0, i1)."""
    return bisect.bisect_left(self.kinks, lo), bisect.bisect_right(self.kinks, hi)

  def affine(self, i0: int, i1: int) -> tuple:
    """(A, B) [d] exact: the on units outside [i0, i1) as A t + B."""
    return (tuple(p + q for p, q in zip(self.pos_a[i0], self.neg_a[i1])),
            tuple(p + q for p, q in zip(self.pos_b[i0], self.neg_b[i1])))

  def pl_range(self, lo, hi, i0, i1, coord, residual) -> arb:
    """The exact range on [lo, hi] of F(t) = (t if residual) + A t + B + sum_{i0 <= s <
    i1} W_2[coord, s] ReLU(a_s t + b_s), coordinate ``coord``, as a ball."""
    a_aff, b_aff = self.affine(i0, i1)
    slope0 = a_aff[coord] + (1 if residual else 0)

    def value(t):
      return slope0 * t + b_aff[coord] + sum(
          (self.w2[s][coord] * max(self.a[s] * t + self.b[s], 0) for s in range(i0, i1)),
          fmpq(0))

    v = value(lo)
    best_lo = best_hi = v
    if hi > lo:
      # slope just right of lo: units with a > 0 and kink <= lo, or a < 0 and kink > lo
      slope = slope0 + sum((self.w2[s][coord] * self.a[s] for s in range(i0, i1)
                            if (self.a[s] > 0) == (self.kinks[s] <= lo)), fmpq(0))
      prev = lo
      s = i0
      while s < i1 and self.kinks[s] <= lo:
        s += 1
      while s < i1 and self.kinks[s] < hi:
        k = self.kinks[s]
        v += slope * (k - prev)
        prev = k
        best_lo, best_hi = min(best_lo, v), max(best_hi, v)
        while s < i1 and self.kinks[s] == k:   # a > 0 turns on, a < 0 turns off
          slope += self.w2[s][coord] * self.a[s] * (1 if self.a[s] > 0 else -1)
          s += 1
      v += slope * (hi - prev)
      best_lo, best_hi = min(best_lo, v), max(best_hi, v)
    return arb(best_lo).union(arb(best_hi))


class WideFeedForward:
  """One ReLU feed-forward layer, units grouped by direction and sorted by kink.

  Args:
    ff: {'W_1' [r, d], 'b_1' [r], 'W_2' [d, r], 'b_2' [d]} exact (ints / Fractions).
  """

  def __init__(self, ff):
    w1, b1 = np.asarray(ff['W_1']), np.asarray(ff['b_1'])
    w2, b2 = np.asarray(ff['W_2']), np.asarray(ff['b_2'])
    d = w2.shape[0]
    self.d = d
    self.b2 = [_q(v) for v in b2]
    groups = {}
    for s in range(w1.shape[0]):
      col = tuple(_q(v) for v in w2[:, s])
      if not any(col):
        continue
      row = [_q(v) for v in w1[s]]
      if not any(row):          # a constant unit: ReLU(b_1) folded into b_2
        for i in range(d):
          self.b2[i] += col[i] * max(_q(b1[s]), 0)
        continue
      a = next(v for v in row if v)
      u = tuple(v / a for v in row)
      b = _q(b1[s])
      groups.setdefault(u, []).append((-b / a, a, b, col, s))
    self.groups = [_Group(u, units, d) for u, units in groups.items()]
    writers = {}
    for g in self.groups:
      for i in {i for w in g.w2 for i, v in enumerate(w) if v}:
        writers[i] = writers.get(i, 0) + 1
    for g in self.groups:   # the residual goes into g only if g alone writes its coordinate
      if g.coordinate is not None and writers.get(g.coordinate, 0) != 1:
        g.coordinate = None
    self.width = int(w1.shape[0])
    self._const = {}

  def _constant(self, v: fmpq) -> arb:
    got = self._const.get(v)
    if got is None:
      got = self._const[v] = arb(v)
    return got

  def classify(self, x) -> tuple[set, set]:
    """(on, undetermined): original indices of the units certainly on, and of those
    whose pre-activation ball may contain 0, on the box x, by bisection."""
    on, mid = set(), set()
    for g in self.groups:
      t = g.t(x)
      if not t.is_finite():
        mid.update(g.index)
        continue
      i0, i1 = g.split(*exact_ends(t))
      mid.update(g.index[i0:i1])
      on.update(g.index[s] for s in range(i0) if g.a[s] > 0)
      on.update(g.index[s] for s in range(i1, len(g.index)) if g.a[s] < 0)
    return on, mid

  def token(self, x) -> list:
    """The layer on one token's box x (d balls)."""
    d = self.d
    parts = []
    straddle = False
    for g in self.groups:
      t = g.t(x)
      if not t.is_finite():
        parts.append((g, t, None, 0, len(g.kinks)))
        straddle = True
        continue
      lo, hi = exact_ends(t)
      i0, i1 = g.split(lo, hi)
      straddle = straddle or i1 > i0
      parts.append((g, t, (lo, hi), i0, i1))
    if not straddle:     # one exact affine piece
      mat = [[fmpq(int(i == l)) for l in range(d)] for i in range(d)]
      c = list(self.b2)
      for g, _, _, i0, i1 in parts:
        a_aff, b_aff = g.affine(i0, i1)
        for i in range(d):
          if a_aff[i]:
            for l, v in enumerate(g.u):
              mat[i][l] += a_aff[i] * v
          c[i] += b_aff[i]
      out = []
      for i in range(d):
        if not any(mat[i]):
          out.append(self._constant(c[i]))
        elif all(mat[i][l] == int(i == l) for l in range(d)) and not c[i]:
          out.append(x[i])
        else:
          out.append(sum((arb(mat[i][l]) * x[l] for l in range(d) if mat[i][l]),
                         arb(c[i])))
      return out
    # a group that alone reads and writes z_l takes the residual (exact cancellation)
    absorbed = {g.coordinate for g, _, ends, _, _ in parts
                if g.coordinate is not None and ends is not None}
    out = [(arb(0) if i in absorbed else x[i]) + arb(self.b2[i]) for i in range(d)]
    for g, t, ends, i0, i1 in parts:
      if ends is None:
        out = [_UNBOUNDED if any(w[i] for w in g.w2) else out[i] for i in range(d)]
        continue
      a_aff, b_aff = g.affine(i0, i1)
      for i in range(d):
        residual = g.coordinate == i
        if residual or i1 > i0:
          if residual or a_aff[i] or b_aff[i] or any(w[i] for w in g.w2[i0:i1]):
            out[i] = out[i] + g.pl_range(ends[0], ends[1], i0, i1, i, residual)
        elif a_aff[i] or b_aff[i]:
          out[i] = out[i] + arb(a_aff[i]) * t + arb(b_aff[i])
    return out

  def __call__(self, z, rep):
    out = []
    for j, x in enumerate(z):
      out.append(out[rep[j]] if rep[j] != j else self.token(x))
    return out


class WideBallNetwork(ball.BallNetwork):
  """A network of blocks (softmax attention, wide ReLU feed-forward), exact params,
  ready for ball evaluation; build and evaluate inside ``ball.precision(bits)``. As
  ``ball.BallNetwork`` (its arguments and ``forward``), with each feed-forward
  layer its own ``WideFeedForward`` stage.
  """

  @staticmethod
  def make_stages(layers) -> list:
    """ball._Layer (attention, where it has heads) and WideFeedForward, in order."""
    stages = []
    for att, ff in layers:
      if att.groups:
        stages.append(att)
      stages.append(WideFeedForward(ff))
    return stages

  @property
  def feedforwards(self) -> list:
    return [s for s in self.stages if isinstance(s, WideFeedForward)]
