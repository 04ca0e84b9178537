"""``exact.ball`` is sound: every point of a box maps into the box's enclosure.

Random small realized networks (exact rational weights, some with denominator 3 so
that balls round; d = 1 and 2; n = 1 to 3; attention on or off per layer; feed-forward
layers that are separable, one-direction, Lemma 6 bumps (identity outside an interval,
so runs skip them), general or zero; b_2 often non-zero), random boxes (points, and
boxes of width up to 1 that straddle kinks), and points of each box evaluated by the
independent mpmath oracle (``transformer_ua.oracle``, no code shared with ``exact.ball``):
each value must lie in the box's ball, up to the oracle's own rounding (2^-120
relative at 256 bits). A sweep over fixed seeds also checks that every evaluation path
was taken: attention, the exact piece, the straddling box in its separable,
one-direction and unit-by-unit forms, and runs of feed-forward layers.
"""

import random
from fractions import Fraction

import hypothesis
import hypothesis.strategies as st
import mpmath
import numpy as np
import pytest

from transformer_ua import layers, oracle
from transformer_ua.exact import ball

ORACLE_PREC = 256
TOL = mpmath.mpf(2) ** -120


def _q(rng, nums=range(-4, 5), dens=(1, 2, 3, 4)):
  return Fraction(rng.choice(list(nums)), rng.choice(dens))


def _feedforward(rng, kind, d, r):
  """(W_1 [r, d], b_1 [r], W_2 [d, r], b_2 [d]) of one layer of the given kind."""
  zero = Fraction(0)
  w1 = [[zero] * d for _ in range(r)]
  b1 = [zero] * r
  w2 = [[zero] * r for _ in range(d)]
  if kind == 'separable':          # unit s reads z_l, writes z_l
    for s in range(r):
      l = rng.randrange(d)
      w1[s][l] = _q(rng, [-2, -1, 1, 2])
      b1[s] = _q(rng)
      w2[l][s] = _q(rng)
  elif kind == 'direction':        # rows a_s w
    w = [_q(rng, [-2, -1, 1, 2]) for _ in range(d)]
    for s in range(r):
      a = _q(rng, [-2, -1, 1, 2])
      w1[s] = [a * wi for wi in w]
      b1[s] = _q(rng)
      for i in range(d):
        w2[i][s] = _q(rng)
  elif kind == 'bump':             # Lemma 6: v (R(t-a) - R(t-b) - R(t-c) + R(t-e)) / h
    w = [_q(rng, [-1, 1, 2]) for _ in range(d)]
    a, h = _q(rng, range(-2, 3)), _q(rng, [1, 2], (2, 3, 4))
    c = a + h + _q(rng, range(0, 3), (2, 4))
    kinks, signs = (a, a + h, c, c + h), (1, -1, -1, 1)
    v = [_q(rng) for _ in range(d)]
    for s in range(min(r, 4)):
      w1[s] = list(w)
      b1[s] = -kinks[s]
      for i in range(d):
        w2[i][s] = v[i] * signs[s] / h
  elif kind == 'general':
    for s in range(r):
      w1[s] = [_q(rng) for _ in range(d)]
      b1[s] = _q(rng)
      for i in range(d):
        w2[i][s] = _q(rng)
  b2 = [_q(rng) if rng.random() < 0.6 else zero for _ in range(d)]
  return w1, b1, w2, b2


def build(rng):
  """(segments, exact params, positional, boxes): a random realized network and boxes
  (each box [n][d] of (lo, hi) Fractions)."""
  d, n = rng.choice([1, 2]), rng.choice([1, 2, 3])
  depth, h, m, r = rng.randint(1, 4), rng.choice([1, 2]), rng.choice([1, 2]), 4
  att = {k: np.empty(s, object) for k, s in (('W_Q', (depth, h, m, d)), ('b_Q', (depth, h, m)),
                                             ('W_K', (depth, h, m, d)), ('W_V', (depth, h, m, d)),
                                             ('W_O', (depth, h, d, m)))}
  ff = {k: np.empty(s, object) for k, s in (('W_1', (depth, r, d)), ('b_1', (depth, r)),
                                            ('W_2', (depth, d, r)), ('b_2', (depth, d)))}
  for layer in range(depth):
    on = rng.random() < 0.5
    for key, arr in att.items():
      for idx in np.ndindex(arr.shape[1:]):
        arr[(layer,) + idx] = (Fraction(0) if key == 'W_O' and not on else _q(rng))
    kind = rng.choice(['separable', 'direction', 'bump', 'general', 'zero'])
    for key, val in zip(('W_1', 'b_1', 'W_2', 'b_2'), _feedforward(rng, kind, d, r)):
      ff[key][layer] = np.asarray(val, object)
  seg = layers.Segment(kind='block', depth=depth, num_heads=h, head_size=m,
                       normalizer='softmax', lam=1.0, width=r, activation='relu')
  params = {'segment_0': {'attention': att, 'feedforward': ff}}
  positional = rng.random() < 0.3
  if positional:
    params['E'] = np.asarray([[_q(rng) for _ in range(d)] for _ in range(n)], object)
  boxes = []
  for _ in range(3):
    half = rng.choice([Fraction(0), Fraction(1, 16), Fraction(1, 4), Fraction(1, 2)])
    box = []
    for _ in range(n):
      row = []
      for _ in range(d):
        c = Fraction(rng.randint(-4, 20), 16)
        row.append((c - half, c + half))
      box.append(row)
    boxes.append(box)
  return [seg], params, positional, boxes


def _sample(rng, box, k):
  """k points of the box (its two extreme corners, then uniform), floats [k, n, d]."""
  lo = np.asarray([[float(a) for a, _ in row] for row in box])
  hi = np.asarray([[float(b) for _, b in row] for row in box])
  pts = [lo, hi] + [lo + (hi - lo) * np.asarray([[rng.random() for _ in row] for row in lo])
                    for _ in range(k - 2)]
  return np.clip(np.asarray(pts), lo, hi)


def _to_mpf(v):
  man, exp = v.man_exp()
  return mpmath.ldexp(mpmath.mpf(int(man)), int(exp))


def _inside(value, b) -> bool:
  if not b.is_finite():
    return True
  with mpmath.workprec(ORACLE_PREC):
    slack = TOL * (1 + abs(value))
    return _to_mpf(b.lower()) - slack <= value <= _to_mpf(b.upper()) + slack


def check_enclosures(rng, bits, points_per_box=5):
  segments, params, positional, boxes = build(rng)
  mp = oracle.MpNetwork(segments, params, positional, ORACLE_PREC)
  with ball.precision(bits):
    net = ball.BallNetwork(segments, params, positional)
    for box in boxes:
      out = net.forward([[ball.interval(a, b) for a, b in row] for row in box])
      for x in _sample(rng, box, points_per_box):
        ref = mp(x)
        for j, row in enumerate(ref):
          for i, v in enumerate(row):
            assert _inside(v, out[j][i]), (
                f'token {j} entry {i}: oracle {mpmath.nstr(v, 20)} outside '
                f'{out[j][i].str(20)} at x={x.tolist()}; box={box}; params={params}')


@hypothesis.given(st.randoms(use_true_random=False), st.sampled_from([53, 64, 128]))
@hypothesis.settings(max_examples=100)
def test_box_enclosure_contains_every_sampled_value(rng, bits):
  check_enclosures(rng, bits)


@pytest.mark.slow
@hypothesis.given(st.randoms(use_true_random=False), st.sampled_from([24, 53, 64, 128]))
@hypothesis.settings(max_examples=600)
def test_box_enclosure_contains_every_sampled_value_many(rng, bits):
  check_enclosures(rng, bits, points_per_box=8)


def test_every_evaluation_path_is_checked(monkeypatch):
  hits = {}

  def record(name, fn):
    def wrapped(self, *args):
      hits[name(self) if callable(name) else name] = True
      return fn(self, *args)
    return wrapped

  monkeypatch.setattr(ball._FeedForward, 'apply_box',  # pylint: disable=protected-access
                      record(lambda self: 'box:' + self._structure()[0],  # pylint: disable=protected-access
                             ball._FeedForward.apply_box))  # pylint: disable=protected-access
  monkeypatch.setattr(ball._FeedForward, 'apply_piece',  # pylint: disable=protected-access
                      record('piece', ball._FeedForward.apply_piece))  # pylint: disable=protected-access
  monkeypatch.setattr(ball._Layer, 'attention',  # pylint: disable=protected-access
                      record(lambda self: 'attention' if self.groups else 'no attention',
                             ball._Layer.attention))  # pylint: disable=protected-access
  orig_candidates = ball._FeedForwardRun._candidates  # pylint: disable=protected-access

  def candidates(self, x, pos):
    got = orig_candidates(self, x, pos)
    if len(self.layers) > 1:
      hits['run of several layers'] = True
    if len(got) < len(self.layers) - pos:
      hits['layer skipped outside its interval'] = True
    return got
  monkeypatch.setattr(ball._FeedForwardRun, '_candidates', candidates)  # pylint: disable=protected-access
  for seed in range(30):
    check_enclosures(random.Random(seed), 53, points_per_box=3)
  assert set(hits) >= {'box:separable', 'box:direction', 'box:general', 'piece', 'attention',
                       'run of several layers', 'layer skipped outside its interval'}, sorted(hits)


@pytest.mark.parametrize('d', [1, 2])
def test_output_bias_of_a_straddling_layer_is_kept(d):
  """z + ReLU(z - 1/2) + 1 (each coordinate) on [0, 1]^d: the range is [1, 2.5]."""
  eye = np.asarray([[Fraction(int(i == k)) for k in range(d)] for i in range(d)], object)
  zero = lambda *s: np.full(s, Fraction(0), object)  # noqa: E731
  params = {'segment_0': {
      'attention': {'W_Q': zero(1, 1, 1, d), 'b_Q': zero(1, 1, 1), 'W_K': zero(1, 1, 1, d),
                    'W_V': zero(1, 1, 1, d), 'W_O': zero(1, 1, d, 1)},
      'feedforward': {'W_1': eye[None], 'b_1': np.full((1, d), Fraction(-1, 2), object),
                      'W_2': eye[None], 'b_2': np.full((1, d), Fraction(1), object)}}}
  seg = layers.Segment(kind='block', depth=1, num_heads=1, head_size=1,
                       normalizer='softmax', lam=1.0, width=d, activation='relu')
  with ball.precision(53):
    out = ball.BallNetwork([seg], params).forward([[ball.interval(0, 1)] * d])
  for i in range(d):
    assert out[0][i].lower() <= 1 and out[0][i].upper() >= 2.5 \
        and out[0][i].upper() < 2.5 + 1e-6, out[0][i]   # radii: 30-bit mantissas
