"""The mpmath oracle's grouped feed-forward sums (transformer_ua.oracle.FeedForward).

A group of parallel W_1 rows is summed by one bisection on its sorted kinks and exact
prefix sums; the literal path sums every unit. Oracles: values worked by hand (dyadic,
so both paths must be exact at 200 bits), the layer evaluated exactly in Fractions
(sum_c W_2[:, c] max(0, w_c . z + b_c) + b_2, written here), and the literal path.
Tolerance where a value is not exact: the module doc's rounding bound, 8 2^-prec R with
R = |t| sum |W_2 u| + sum |W_2 b| + |b_2| computed exactly per output.
"""

from fractions import Fraction

import mpmath
import numpy as np
import pytest

from transformer_ua import oracle
from transformer_ua.yun.single_attention import one_layer_wide
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.variants.one_layer_wide import OneLayerWide

PREC = 200
F = Fraction


def _layer(w1, b1, w2, b2):
  return (np.asarray(w1, object), np.asarray(b1, object), np.asarray(w2, object),
          np.asarray(b2, object))


def _build(layer, grouped):
  with mpmath.workprec(PREC):
    return oracle.FeedForward(*layer, grouped=grouped)


def _call(ff, z):
  """ff(z) at PREC, z taken exactly (floats, or dyadic Fractions)."""
  with mpmath.workprec(PREC):
    zs = [oracle.mp_value(v) for v in z]
    assert [oracle.exact_value(a) for a in zs] == [F(v) for v in z]    # taken exactly
    return ff(zs)


def _run(layer, z, grouped):
  ff = _build(layer, grouped)
  return ff, _call(ff, z)


def _exact(layer, z):
  """The layer in Fractions: W_2 max(0, W_1 z + b_1) + b_2."""
  w1, b1, w2, b2 = layer
  z = [F(v) for v in z]
  act = [max(F(0), sum(F(w) * x for w, x in zip(row, z)) + F(b)) for row, b in zip(w1, b1)]
  return [sum(F(w) * a for w, a in zip(w2[i], act)) + F(b2[i]) for i in range(len(b2))]


def _scale(layer, z):
  """R per output (module doc): sum_c |W_2[i, c]| (|w_c . z| + |b_c|) + |b_2[i]|, exactly."""
  w1, b1, w2, b2 = layer
  z = [F(v) for v in z]
  pre = [abs(sum(F(w) * x for w, x in zip(row, z))) + abs(F(b)) for row, b in zip(w1, b1)]
  return [sum(abs(F(w)) * p for w, p in zip(w2[i], pre)) + abs(F(b2[i]))
          for i in range(len(b2))]


# d = 1, four units on one direction: kinks 1/2 (u = 1), 1/2 (u = 2: a tie),
# 1/4 (u = -1), 3/4 (u = 1); W_2 = (1, 3, 5, 7), b_2 = 1/8:
#   f(t) = 1/8 + max(0, t - 1/2) + 3 max(0, 2t - 1) + 5 max(0, 1/4 - t) + 7 max(0, t - 3/4)
HAND_1D = _layer([[1], [2], [-1], [1]], [F(-1, 2), -1, F(1, 4), F(-3, 4)], [[1, 3, 5, 7]],
                 [F(1, 8)])


@pytest.mark.parametrize('t,want', [
    (-1.0, F(51, 8)),      # 1/8 + 5 (5/4): only the u < 0 unit
    (0.0, F(11, 8)),       # 1/8 + 5/4
    (0.25, F(1, 8)),       # at the u < 0 kink: every unit 0
    (0.5, F(1, 8)),        # at the tied kinks: every unit 0
    (0.75, F(15, 8)),      # 1/8 + 1/4 + 3/2, at the last kink
    (1.0, F(43, 8)),       # 1/8 + 1/2 + 3 + 7/4
])
def test_one_direction_by_hand(t, want):
  for grouped in (True, False):
    ff, got = _run(HAND_1D, [t], grouped)
    assert got == [mpmath.mpf(want.numerator) / want.denominator], (grouped, got)
  ff, _ = _run(HAND_1D, [0.0], True)
  assert (len(ff.groups), ff.groups[0].size, ff.literal) == (1, 4, 0)
  ff, _ = _run(HAND_1D, [0.0], False)
  assert (len(ff.groups), ff.literal) == (0, 4)


# d = 2: (1, 2) and (-2, -4) are one group (t = z_1 + 2 z_2; u = 1, kink 1; u = -2,
# kink 3/2); (0, 3) is alone and (0, 0) is a zero row (both literal); (5, 5) has a zero
# column of W_2 (dropped). W_2 columns (1, -1), (1/2, 2), (1, 1), (4, 0), (0, 0); b_2 = (0, 1).
HAND_2D = _layer([[1, 2], [-2, -4], [0, 3], [0, 0], [5, 5]], [-1, 3, 0, F(1, 2), 0],
                 [[1, F(1, 2), 1, 4, 0], [-1, 2, 1, 0, 0]], [0, 1])


@pytest.mark.parametrize('z,want', [
    # t = 3/2 (the u < 0 kink): (1/2)(1, -1) + 0 + (3/2)(1, 1) + (1/2)(4, 0) + (0, 1)
    ((0.5, 0.5), [F(4), F(2)]),
    # t = 1/2: 0 + 2 (1/2, 2) + (3/4)(1, 1) + (2, 0) + (0, 1)
    ((0.0, 0.25), [F(15, 4), F(23, 4)]),
    # t = 1 (the u > 0 kink): 0 + 1 (1/2, 2) + 0 + (2, 0) + (0, 1)
    ((1.0, 0.0), [F(5, 2), F(3)]),
])
def test_two_directions_a_singleton_and_a_zero_row_by_hand(z, want):
  for grouped in (True, False):
    ff, got = _run(HAND_2D, z, grouped)
    assert got == [mpmath.mpf(w.numerator) / w.denominator for w in want], (grouped, got)
  ff, _ = _run(HAND_2D, (0.0, 0.0), True)
  assert [g.size for g in ff.groups] == [2] and ff.literal == 2


def _random_layer(rng, d, width, directions, dyadic):
  """``width`` units on a few directions (plus singletons and zero rows), mixed-sign u,
  kinks from a small set (ties), W_2 with denominators 3 and 7 (so sums round)."""
  dirs = [[F(int(rng.choice([-4, -2, -1, 0, 1, 2, 4])), 1 if dyadic else 3)
           for _ in range(d)] for _ in range(directions)]
  dirs = [v if any(v) else [F(1)] * d for v in dirs]
  kinks = [F(int(k), 8) for k in rng.integers(-8, 17, 6)]
  us = [F(1, 2), F(1), F(3), F(5, 4), F(-1, 2), F(-1), F(-3), F(-5, 4)]
  w1, b1 = [], []
  for c in range(width):
    kind = rng.random()
    if kind < 0.05:
      row = [F(0)] * d                                     # a zero row
    elif kind < 0.1:
      row = [F(int(rng.integers(-9, 10)), 5) for _ in range(d)]   # (likely) alone
    else:
      u = us[rng.integers(len(us))]
      row = [u * w for w in dirs[rng.integers(directions)]]
    lead = next((w for w in row if w != 0), F(1))
    w1.append(row)
    b1.append(-kinks[rng.integers(len(kinks))] * lead)     # kink of the unit's direction
  w2 = [[F(int(rng.integers(-20, 21)), int(rng.choice([1, 3, 7]))) for _ in range(width)]
        for _ in range(d)]
  b2 = [F(int(rng.integers(-5, 6)), 3) for _ in range(d)]
  return _layer(w1, b1, w2, b2), dirs, kinks


@pytest.mark.parametrize('seed,d,dyadic', [(0, 1, True), (1, 2, True), (2, 3, False),
                                           (3, 2, False)])
def test_grouped_equals_literal_and_exact_on_random_wide_layers(seed, d, dyadic):
  rng = np.random.default_rng(seed)
  layer, dirs, kinks = _random_layer(rng, d, 400, 3, dyadic)
  points = [[F(int(k), 8) for k in rng.integers(-16, 17, d)] for _ in range(12)]
  # points with v . z = a kink k (exactly, when v is dyadic): the first coordinate on
  # which v is not 0 solves v . z = k (v's entries are +-2^j or +-2^j / 3)
  for v in dirs:
    i0 = next(i for i, w in enumerate(v) if w != 0)
    for k in kinks[:3]:
      z = [F(int(a), 8) for a in rng.integers(-16, 17, d)]
      z[i0] = (k - sum(w * x for i, (w, x) in enumerate(zip(v, z)) if i != i0)) / v[i0]
      assert sum(w * x for w, x in zip(v, z)) == k
      points.append(z)
  grouped_ff, literal_ff = _build(layer, True), _build(layer, False)
  assert len(grouped_ff.groups) >= min(d, 2) and grouped_ff.literal >= 1
  assert sum(g.size for g in grouped_ff.groups) > 300
  worst = 0.0
  for z in points:
    want = _exact(layer, z)
    scale = _scale(layer, z)
    got, lit = _call(grouped_ff, z), _call(literal_ff, z)
    with mpmath.workprec(PREC):
      for i in range(d):
        tol = 8 * mpmath.mpf(2) ** -PREC * oracle.mp_value(scale[i])
        exact_i = oracle.mp_value(want[i])
        assert abs(got[i] - exact_i) <= tol, (z, i)
        assert abs(lit[i] - exact_i) <= tol, (z, i)
        assert abs(got[i] - lit[i]) <= tol, (z, i)
        worst = max(worst, float(abs(got[i] - exact_i) / oracle.mp_value(scale[i])))
  assert worst < 2.0 ** -190


@pytest.fixture(scope='module')
def wide4():
  """one_layer_wide, token_times_mean, d = 1, n = 3, N = 4 (widths 8, 160, 4)."""
  net = one_layer_wide.build('token_times_mean', OneLayerWide(Grid(1, 3, 4)))
  return net, net.realize(margin=Fraction(1, 64))


def test_grouped_network_equals_literal_network(wide4):
  net, g = wide4
  prec = 2 * g.bits()
  grouped = oracle.MpNetwork(g.segments, g.params, g.positional, prec)
  literal = oracle.MpNetwork(g.segments, g.params, g.positional, prec, grouped=False)
  assert [(len(ff.groups), ff.literal) for _, _, ff in grouped.blocks] == [(1, 0)] * 3
  assert [len(ff.groups) for _, _, ff in literal.blocks] == [0, 0, 0]
  rng = np.random.default_rng(4)
  x = np.concatenate([rng.random((6, 3, 1)),
                      np.asarray([[[0.0], [0.25], [0.5]], [[0.75], [0.75], [0.999]]]),
                      # next to a cube edge, inside the quantization ramps
                      0.25 + 1e-9 * rng.standard_normal((3, 3, 1))])
  with mpmath.workprec(prec):
    tol = mpmath.mpf(2) ** -(prec - 64)
    for b in range(len(x)):
      a, c = grouped(x[b]), literal(x[b])
      for j in range(3):
        assert abs(a[j][0] - c[j][0]) <= tol, (b, j, a[j][0], c[j][0])
  # and the values are g_bar's on the cube interiors (a check that can fail)
  inner = (np.floor(x[:6] * 4) + 0.5) / 4
  assert np.max(np.abs(grouped.values(inner) - net.apply(inner))) < 1e-9
