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
    whose matrix and offset are summed in exact rationals (so cancelling ReLUs cancel
    exactly: 1 - 1 = 0 on a quantization bin, where the box collapses to a point) and
    then applied in balls;
    otherwise the units are evaluated one by one (ReLU of a ball), still rigorous.

Speed: a layer is exactly the identity outside an exact interval of t = w.x (its
units read one t, Lemma 6); runs of feed-forward layers find the few candidate layers
per token with one vectorized test and skip the rest (``_FeedForwardRun``). Heads
sharing W_V are combined coefficient-wise, and tokens known to be equal (constant
pieces give them the same ball object, and a token reaching another's state in a
feed-forward run takes its output objects; equivariance keeps them equal) are computed
once with exactly zero key differences: both avoid the dependency problem (without
it, an exact tie between repeated tokens, e.g. the tie-complete map's all-equal
classes, would amplify rounding through every softmax that ties).

Shapes: a state is a list of n tokens, each a list of d arb balls.
"""

from __future__ import annotations

import contextlib
import math
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


def float_upper(x: arb) -> float:
  """A float >= every point of the ball x (inf when unbounded)."""
  if not x.is_finite():
    return math.inf
  u = x.upper()
  f = float(u)
  return f if arb(f) >= u else float(np.nextafter(f, np.inf))


def float_lower(x: arb) -> float:
  """A float <= every point of the ball x."""
  lo = x.lower()
  f = float(lo)
  return f if arb(f) <= lo else float(np.nextafter(f, -np.inf))


def _is_zero(v) -> bool:
  return v == 0


#: Every softmax weight lies in [0, 1] (denominator 1 + sum of exponentials >= 1).
_UNIT = arb(0).union(arb(1))
#: The enclosure of an unbounded range.
_UNBOUNDED = arb(0, float('inf'))


class _Layer:
  """The attention half of one block, with arb params (heads grouped by W_V)."""

  def __init__(self, att):
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
            # the true denominator is >= 1 (one term is exp(0)); a ball too wide to be
            # certainly positive (a box whose scores spread over many orders of
            # magnitude) gets the weight's a priori range [0, 1]
            w = 1 / denom if denom > 0 else _UNIT
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

  def __call__(self, z, rep):
    return self.attention(z, rep)


class _FeedForward:
  """One ReLU feed-forward layer: exact params, and its affine pieces (exact, cached).

  Only units with a non-zero W_2 column matter. For an active set P of them the layer
  is z -> M_P z + c_P with M_P = I + sum_{s in P} W_2[:, s] W_1[s], c_P = sum_{s in P}
  W_2[:, s] b_1[s] + b_2, computed in exact rationals (so cancelling ReLUs, e.g. on a
  constant piece of a Phi unit, cancel exactly) and then rounded to balls.
  """

  def __init__(self, ff):
    w1, b1 = np.asarray(ff['W_1']), np.asarray(ff['b_1'])
    w2, b2 = np.asarray(ff['W_2']), np.asarray(ff['b_2'])
    self.units = [s for s in range(w1.shape[0]) if not all(_is_zero(v) for v in w2[:, s])]
    self.w1 = [[Fraction(v) for v in w1[s]] for s in self.units]
    self.b1 = [Fraction(b1[s]) for s in self.units]
    self.w2 = [[Fraction(w2[i, s]) for s in self.units] for i in range(w2.shape[0])]
    self.b2 = [Fraction(v) for v in b2]
    self.d = w2.shape[0]
    self.pieces = {}
    self.naive = None
    self.shape = None

  @property
  def is_identity_everywhere(self) -> bool:
    return not self.units and not any(self.b2)

  def piece(self, active):
    """(identity, M, c, zero_rows) for the active set (tuple of unit positions)."""
    got = self.pieces.get(active)
    if got is None:
      d = self.d
      mat = [[Fraction(int(i == l)) for l in range(d)] for i in range(d)]
      c = list(self.b2)
      for s in active:
        for i in range(d):
          for l in range(d):
            mat[i][l] += self.w2[i][s] * self.w1[s][l]
          c[i] += self.w2[i][s] * self.b1[s]
      identity = all(mat[i][l] == (i == l) for i in range(d) for l in range(d)) \
          and not any(c)
      # row kind: 0 = constant (zero row), 1 = unchanged (e_i row, c_i = 0), 2 = general
      kinds = [0 if not any(mat[i]) else
               1 if all(mat[i][l] == (i == l) for l in range(d)) and not c[i] else 2
               for i in range(d)]
      got = self.pieces[active] = (identity, [[to_arb(v) for v in row] for row in mat],
                                   [to_arb(v) for v in c], kinds)
    return got

  def apply_naive(self, x, pre):
    """Unit by unit (for a box straddling a kink): rigorous, not tight."""
    if self.naive is None:
      self.naive = ([[to_arb(v) for v in row] for row in self.w2], [to_arb(v) for v in self.b2])
    w2, b2 = self.naive
    relu = [a.nonnegative_part() for a in pre]
    return [x[i] + sum((w2[i][s] * relu[s] for s in range(len(relu))), b2[i])
            for i in range(self.d)]

  def _structure(self):
    """('separable', {l: units}) when every unit reads one coordinate l and writes only
    to it; ('direction', w, a) when every row is a_s w (Lemma 6's units of one Phi);
    else ('general',). Cached."""
    if self.shape is not None:
      return self.shape
    by_coord, separable = {}, True
    for pos, (row, s) in enumerate(zip(self.w1, self.units)):
      reads = [l for l, v in enumerate(row) if v]
      writes = [i for i in range(self.d) if self.w2[i][pos]]
      if len(reads) != 1 or writes != reads:
        separable = False
        break
      by_coord.setdefault(reads[0], []).append(pos)
    if separable:
      self.shape = ('separable', by_coord)
      return self.shape
    w = next((r for r in self.w1 if any(r)), None)
    self.shape = ('general',)
    if w is not None:
      l0 = next(l for l, v in enumerate(w) if v)
      scal = [r[l0] / w[l0] for r in self.w1]
      if all(r[l] == a * w[l] for r, a in zip(self.w1, scal) for l in range(self.d)):
        self.shape = ('direction', w, scal)
    return self.shape

  def apply_box(self, x, pre):
    """The layer on a box that straddles a kink, each Phi unit as one function.

    A naive unit-by-unit evaluation loses the correlation of the ReLUs of one Phi unit
    (ReLU(t - a) - ReLU(t - b) on a box of width w gets width 2w, and through many
    layers the boxes blow up). Instead:

      separable (unit s reads z_l and writes z_l only; Lemma 7's quantization, the
        clean-up layers, the output clamp): z_l <- F_l(z_l), F_l(t) = t + b_2[l] +
        sum_s W_2[l, s] ReLU(W_1[s, l] t + b_1[s]) is one continuous piecewise-linear
        function, and its exact range on [z_l] is the hull of F_l at the interval's
        ends and at the kinks inside (exact rationals); a coordinate no unit reads
        gets z_l + b_2[l];
      one direction (rows a_s w: the units read t = w.z): z <- z + v(t), v_i(t) =
        b_2[i] + sum_s W_2[i, s] ReLU(a_s t + b_1[s]); z and v(t) are enclosed
        separately (the exact range of each v_i on [t]), so widths add instead of
        multiplying;
      otherwise unit by unit (``apply_naive``).
    """
    shape = self._structure()
    if shape[0] == 'separable':
      out = [x[l] + to_arb(self.b2[l]) if self.b2[l] else x[l] for l in range(self.d)]
      for l, units in shape[1].items():
        terms = [(self.w1[p][l], self.b1[p], self.w2[l][p]) for p in units]
        out[l] = _pl_range(x[l], terms, residual=True, offset=self.b2[l])
      return out
    if shape[0] == 'direction':
      w, scal = shape[1], shape[2]
      t = sum((to_arb(wi) * xi for wi, xi in zip(w, x) if wi), arb(0))
      return [x[i] + _pl_range(t, [(a, b, self.w2[i][p]) for p, (a, b) in
                                   enumerate(zip(scal, self.b1))], residual=False,
                               offset=self.b2[i])
              for i in range(self.d)]
    return self.apply_naive(x, pre)

  def apply_piece(self, x, active):
    """Returns (new x, changed?) for a box whose active set is ``active``."""
    identity, mat, c, kinds = self.piece(active)
    if identity:
      return x, False
    # a zero row makes the entry the constant c[i]: the *same* object for every token
    # on this piece, and an unchanged row keeps the entry's object; that is how equal
    # tokens are recognized (``_equal_tokens``)
    return [c[i] if kinds[i] == 0 else x[i] if kinds[i] == 1 else
            sum((mat[i][l] * x[l] for l in range(self.d)), c[i]) for i in range(self.d)], True


def _exact(v: arb) -> Fraction:
  """The exact (dyadic) value of an exact arb, e.g. a ball's lower or upper end."""
  man, exp = v.man_exp()
  man, exp = int(man), int(exp)
  return Fraction(man * 2 ** exp) if exp >= 0 else Fraction(man, 2 ** -exp)


def _pl_range(t: arb, terms, residual: bool, offset: Fraction = Fraction(0)) -> arb:
  """A ball containing {F(s): s in [t]}, F(s) = (s if residual else 0) + offset + sum
  over terms (a, b, c) of c ReLU(a s + b): F in exact rationals at the ends of [t]
  (exact dyadics) and at the kinks inside; unbounded ends use the end slopes."""
  def value(s):
    return (s if residual else 0) + offset + sum(
        (c * max(a * s + b, 0) for a, b, c in terms), Fraction(0))

  def slope(side):   # slope of F beyond every kink, side -1 (left) or +1 (right)
    return (1 if residual else 0) + sum((c * a for a, b, c in terms
                                         if a and (a > 0) == (side > 0)), Fraction(0))

  kinks = sorted({-b / a for a, b, _ in terms if a})
  lo = _exact(t.lower()) if t.is_finite() else -np.inf
  hi = _exact(t.upper()) if t.is_finite() else np.inf
  pts = [k for k in kinks if lo < k < hi]
  ends = []
  for end, side in ((lo, -1), (hi, 1)):
    if end not in (-np.inf, np.inf):
      ends.append(value(end))
    elif slope(side):
      return _UNBOUNDED
  vals = [value(k) for k in pts] + ends or [value(Fraction(0))]
  return interval(min(vals), max(vals))


def _down(f: Fraction) -> float:
  """A float <= f."""
  x = float(f)
  return x if Fraction(x) <= f else float(np.nextafter(x, -np.inf))


def _up(f: Fraction) -> float:
  """A float >= f."""
  x = float(f)
  return x if Fraction(x) >= f else float(np.nextafter(x, np.inf))


def _hull(layer: _FeedForward):
  """(w, lo, hi): the layer is exactly the identity wherever t = w.x < lo or t > hi.

  Lemma 6's units of one Phi read the same t = w.x (rows a_s w). With the kinks
  t = -b_s / a_s sorted, each open region between kinks has one active set; (lo, hi)
  is the hull of the regions whose piece is not the identity (the layer is continuous,
  so a kink between two identity regions is identity too). Returns None when the rows
  are not multiples of one vector (the layer is then always examined).
  """
  rows = layer.w1
  w = next((r for r in rows if any(r)), None)
  if w is None:
    return None
  l0 = next(l for l, v in enumerate(w) if v)
  scal = []
  for r in rows:
    a = r[l0] / w[l0]
    if any(r[l] != a * w[l] for l in range(len(w))):
      return None
    scal.append(a)
  kinks = sorted({-b / a for a, b in zip(scal, layer.b1) if a})
  if not kinks:
    samples = [Fraction(0)]
  else:
    samples = ([kinks[0] - 1] + [(x + y) / 2 for x, y in zip(kinks, kinks[1:])]
               + [kinks[-1] + 1])
  bounds = [-np.inf] + kinks + [np.inf]
  lo, hi = None, None
  for i, t in enumerate(samples):
    active = tuple(s for s, (a, b) in enumerate(zip(scal, layer.b1)) if a * t + b > 0)
    if not layer.piece(active)[0]:
      lo = bounds[i] if lo is None else lo
      hi = bounds[i + 1]
  if lo is None:
    return tuple(w), np.inf, -np.inf    # identity everywhere
  return tuple(w), lo, hi


class _FeedForwardRun:
  """Consecutive feed-forward layers (no attention between them), token by token.

  Each layer gets an exact interval of t = w.x outside which it is exactly the
  identity (``_hull``); with t as a ball per distinct w, one vectorized float test
  (bounds rounded outward) finds the candidate layers, which are then examined in
  order in ball arithmetic: pre-activations, active set, exact affine piece. After a
  layer changes the token, t is recomputed.
  """

  def __init__(self, layers):
    layers = [layer for layer in layers if not layer.is_identity_everywhere]
    self.layers, ws, group, lo, hi = [], {}, [], [], []
    for layer in layers:
      h = _hull(layer)
      if h is not None and h[1] == np.inf:
        continue                       # identity everywhere
      self.layers.append(layer)
      if h is None:
        group.append(-1)
        lo.append(-np.inf)
        hi.append(np.inf)
      else:
        group.append(ws.setdefault(h[0], len(ws)))
        lo.append(h[1] if h[1] == -np.inf else _down(h[1]))
        hi.append(h[2] if h[2] == np.inf else _up(h[2]))
    self.ws = [[to_arb(v) for v in w] for w in ws]
    self.group = np.asarray(group, np.int64)
    self.lo, self.hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    self.arb_rows = [([[to_arb(v) for v in r] for r in layer.w1],
                      [to_arb(v) for v in layer.b1]) for layer in self.layers]

  def _candidates(self, x, pos):
    tlo, thi = np.empty(len(self.ws) + 1), np.empty(len(self.ws) + 1)
    tlo[-1], thi[-1] = -np.inf, np.inf          # group -1: always a candidate
    for g, w in enumerate(self.ws):
      t = sum((wi * xi for wi, xi in zip(w, x)), arb(0))
      if not t.is_finite():
        tlo[g], thi[g] = -np.inf, np.inf
      else:
        tlo[g] = np.nextafter(float(t.lower()), -np.inf)
        thi[g] = np.nextafter(float(t.upper()), np.inf)
    mask = (self.lo <= thi[self.group]) & (self.hi >= tlo[self.group])
    mask[:pos] = False
    return np.flatnonzero(mask)

  def token(self, x, seen=None):
    """Runs one token through the layers. ``seen``: {(position, entry object ids):
    output} of the tokens already run in this call; a token that reaches a state
    another one passed through (the same ball *objects*, e.g. the constants of a
    quantization bin) has the same exact value from there on, so it gets that output
    (the same objects: later layers then know the tokens are equal, ``_equal_tokens``)."""
    seen = {} if seen is None else seen
    pos, total, path = 0, len(self.layers), []
    while pos < total:
      key = (pos, tuple(id(v) for v in x))
      if key in seen:
        x = seen[key][1]
        break
      path.append((key, x))
      nxt = total
      for li in self._candidates(x, pos):
        layer = self.layers[li]
        w1, b1 = self.arb_rows[li]
        pre = [sum((wi * xi for wi, xi in zip(row, x)), b) for row, b in zip(w1, b1)]
        active, determined = [], True
        for s, a in enumerate(pre):
          if a > 0:
            active.append(s)
          elif not (a < 0 or a.is_zero()):
            determined = False
            break
        if not determined:
          x = layer.apply_box(x, pre)
          nxt = li + 1
          break
        x, changed = layer.apply_piece(x, tuple(active))
        if changed:
          nxt = li + 1
          break
      pos = nxt
    for key, state in path:
      seen[key] = (state, x)   # the state is kept so that its object ids stay its own
    return x

  def __call__(self, z, rep):
    if not self.layers:
      return z
    out, seen = [], {}
    for j, x in enumerate(z):
      out.append(out[rep[j]] if rep[j] != j else self.token(x, seen))
    return out


def realized_layers(segments: Sequence, params: dict):
  """(attention ``_Layer``, feed-forward params) of each layer of realized blocks (softmax,
  ReLU, lam folded: 1.0), in order; ValueError (one line) for any other segment."""
  for i, seg in enumerate(segments):
    if seg.kind != 'block' or seg.normalizer != 'softmax' or seg.activation != 'relu' \
        or seg.lam != 1.0:
      raise ValueError(f'segment {i} is a {seg.kind} ({seg.normalizer}, {seg.activation}); '
                       'ball evaluation takes realized blocks (softmax, ReLU, lam folded).')
    p = params[f'segment_{i}']
    for layer in range(seg.depth):
      yield (_Layer({k: np.asarray(v)[layer] for k, v in p['attention'].items()}),
             {k: np.asarray(v)[layer] for k, v in p['feedforward'].items()})


class BallNetwork:
  """A realized network (block segments, exact params) ready for ball evaluation, built
  and evaluated inside ``precision(bits)`` (params rounded to ``bits`` once); consecutive
  feed-forward layers run as one ``_FeedForwardRun`` (``make_stages``, which
  ``wide_ball.WideBallNetwork`` replaces).

  Args:
    segments: ``layers.Segment``s of kind 'block' (softmax, ReLU), as ``realize`` makes.
    params: exact params pytree (object arrays of ints / Fractions, or floats).
    positional: add ``params['E']`` first.
  """

  def __init__(self, segments: Sequence, params: dict, positional: bool = False):
    self.stages = self.make_stages(realized_layers(segments, params))
    self.e = [[to_arb(v) for v in row] for row in np.asarray(params['E'])] \
        if positional else None

  @staticmethod
  def make_stages(layers) -> list:
    """_Layer (attention, where it has heads) and _FeedForwardRun, in order."""
    stages, run = [], []
    for att, ff in layers:
      if att.groups:                       # an attention layer ends the run before it
        stages += ([_FeedForwardRun(run)] if run else []) + [att]
        run = []
      run.append(_FeedForward(ff))
    return stages + ([_FeedForwardRun(run)] if run else [])

  def forward(self, z):
    """Encloses the network's output on the box ``z`` (n lists of d arbs)."""
    if self.e is not None:
      z = [[z[j][i] + self.e[j][i] for i in range(len(z[j]))] for j in range(len(z))]
    rep = list(range(len(z)))
    for stage in self.stages:
      rep = _equal_tokens(z, rep)
      z = stage(z, rep)
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
