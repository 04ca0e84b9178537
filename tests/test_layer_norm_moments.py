"""LayerNorm's mean and variance errors (float_deviation.layer_norm_moments) against exact
emulation of the three algorithms the certificate covers, in Fractions, with every
operation's result perturbed by a relative delta of at most u (round to nearest is one such
choice): two-pass, one-pass E[w^2] - mu^2 and Welford's recurrence, with the division by k
or by D as a division or as a product with a rounded reciprocal, sums in random orders."""

from fractions import Fraction

import numpy as np
import pytest

from transformer_ua import rounding
from transformer_ua.certify import float_deviation
from transformer_ua.certify import intervals as iv

U = Fraction(1, 2 ** 24)


class _Rounder:
  """fl(x) = x (1 + delta), delta drawn from {-u, +u} (mode 'edge'), [-u, u] ('random'),
  or always +u / -u ('up', 'down')."""

  def __init__(self, rng, mode):
    self.rng, self.mode = rng, mode

  def __call__(self, x):
    if self.mode == 'up':
      return x * (1 + U)
    if self.mode == 'down':
      return x * (1 - U)
    if self.mode == 'edge':
      return x * (1 + U * int(self.rng.choice([-1, 1])))
    return x * (1 + U * Fraction(int(self.rng.integers(-2 ** 20, 2 ** 20 + 1)), 2 ** 20))


def _sum(fl, terms, rng):
  order = rng.permutation(len(terms))
  acc = terms[order[0]]
  for i in order[1:]:
    acc = fl(acc + terms[i])
  return acc


def _divide(fl, x, k, by_reciprocal):
  return fl(x * fl(Fraction(1, k))) if by_reciprocal else fl(x / k)


def _two_pass(w, fl, rng, recip):
  mu = _divide(fl, _sum(fl, w, rng), len(w), recip)
  c = [fl(x - mu) for x in w]
  return mu, _divide(fl, _sum(fl, [fl(x * x) for x in c], rng), len(w), recip)


def _one_pass(w, fl, rng, recip):
  mu = _divide(fl, _sum(fl, w, rng), len(w), recip)
  q = _divide(fl, _sum(fl, [fl(x * x) for x in w], rng), len(w), recip)
  return mu, max(Fraction(0), fl(q - fl(mu * mu)))


def _welford(w, fl, rng, recip):
  m, m2 = Fraction(0), Fraction(0)
  for k, x in enumerate(w, start=1):
    d = fl(x - m)
    m = fl(m + _divide(fl, d, k, recip))
    m2 = fl(m2 + fl(d * fl(x - m)))
  return m, _divide(fl, m2, len(w), recip)


ALGORITHMS = {'two_pass': _two_pass, 'one_pass': _one_pass, 'welford': _welford}


def _cases(rng):
  """Vectors of widths 4, 8 and 16: centred, offset (the one-pass variance cancels), tiny
  variance on a large mean, one outlier, and a trained-like affine embedding."""
  for width in (4, 8, 16):
    yield rng.normal(0, 1, width)
    yield 30 + rng.normal(0, 1, width)
    yield 5 + rng.normal(0, 1e-3, width)
    yield np.concatenate([[40.0], rng.normal(0, 0.1, width - 1)])
    yield rng.uniform(-1, 1, width) * rng.random() + rng.uniform(-1, 1, width)


def test_moments_cover_every_algorithm_and_rounding():
  rng = np.random.default_rng(3)
  fm = float_deviation.Model(rounding.MATMUL_MODELS['float32'])
  worst = {name: 0.0 for name in ALGORITHMS}
  for w in _cases(rng):
    w = w.astype(np.float32).astype(np.float64)
    exact = [Fraction(float(x)) for x in w]
    mu = sum(exact) / len(exact)
    var = sum((x - mu) ** 2 for x in exact) / len(exact)
    a = np.abs(w)[None]
    d_mu, e_var = float_deviation.layer_norm_moments(
        fm, a, iv.Interval(w[None], w[None]), np.array([[float(var) * (1 + 1e-12)]]))
    for name, run in ALGORITHMS.items():
      for mode in ('up', 'down', 'edge', 'random', 'random'):
        for recip in (False, True):
          fl = _Rounder(rng, mode)
          mu_c, var_c = run(exact, fl, rng, recip)
          assert abs(mu_c - mu) <= Fraction(float(d_mu[0, 0])), (name, mode, list(w))
          assert abs(var_c - var) <= Fraction(float(e_var[0, 0])), (name, mode, list(w))
          worst[name] = max(worst[name], float(abs(var_c - var)) / float(e_var[0, 0]))
  # The bound is not vacuous: each algorithm comes within a factor of 40 of it somewhere.
  assert min(worst.values()) > 1 / 40, worst


@pytest.mark.parametrize('width', [4, 8])
def test_moments_tighter_than_the_magnitude_bound(width):
  """On a centred vector the variance bound is a few u var, not the 150 u max|w|^2 of a
  bound by magnitudes alone (the two-pass and Welford errors do not scale with max|w|^2
  at first order in the mean's error)."""
  fm = float_deviation.Model(rounding.MATMUL_MODELS['float32'])
  w = np.linspace(-1, 1, width)[None]
  var = float(np.var(w))
  _, e_var = float_deviation.layer_norm_moments(fm, np.abs(w), iv.Interval(w, w),
                                                np.array([[var]]))
  assert float(e_var[0, 0]) < 60 * fm.u * float(np.max(np.abs(w))) ** 2
