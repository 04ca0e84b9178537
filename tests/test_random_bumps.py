"""The built-in random_bumps target: its closed form, its proved Lipschitz constant against
sampled difference quotients (exact where it matters), and its arb forms."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from flint import arb, ctx

from transformer_ua.targets import bounds as target_bounds
from transformer_ua.targets import functions as targets
from transformer_ua.yun.bounds import f_term


def _loop(x):
  """The closed form written out with Python floats and loops (d = 1)."""
  rng = np.random.default_rng(20261128)
  a = rng.normal(size=64) / 8
  c = rng.random(64)
  e = rng.random(64)
  out = np.zeros_like(x)
  for b in range(x.shape[0]):
    m = sum(x[b, :, 0]) / x.shape[1]
    for j in range(x.shape[1]):
      out[b, j, 0] = sum(a[i] * math.exp(-((x[b, j, 0] - c[i]) ** 2 + (m - e[i]) ** 2)
                                         / (2 * 0.15 ** 2)) for i in range(64))
  return out


def test_closed_form_seed_and_equivariance():
  f = targets.get_target('random_bumps', d=1, n=3)
  x = np.random.default_rng(0).random((5, 3, 1))
  np.testing.assert_allclose(f(x), _loop(x), rtol=1e-12, atol=1e-14)
  perm = np.array([2, 0, 1])
  np.testing.assert_allclose(f(x[:, perm]), f(x)[:, perm], atol=1e-14)
  assert f.permutation_equivariant and targets.equivariance_error(f, 1, 3) is None
  # not a trivial function: values spread over an interval of width > 0.1 on the cube
  y = f(np.random.default_rng(1).random((2000, 3, 1)))
  assert np.ptp(y) > 0.1


def test_lipschitz_constant_closed_form():
  a = targets.random_bumps_params()[0]
  lip = target_bounds.builtin_lipschitz('random_bumps', 1, 3)
  want = math.sqrt(2 / math.e) / 0.15 * float(np.sum(np.abs(a)))
  assert isinstance(lip, Fraction)
  assert want <= float(lip) <= want * (1 + 1e-9)
  # the rational is above the real constant: checked in arb at 200 bits
  with ctx.workprec(200):
    real = (arb(2) / arb(1).exp()).sqrt() * 20 / 3 * sum(abs(arb(float(v))) for v in a)
    assert real < arb(lip.numerator) / lip.denominator


def _exact_quotient(f_arb, x, y) -> arb:
  """max_ji |f(X)_ji - f(Y)_ji| / max|X - Y| in arb (200 bits), X and Y taken exactly."""
  with ctx.workprec(200):
    fx = f_arb([[arb(float(v)) for v in tok] for tok in x])
    fy = f_arb([[arb(float(v)) for v in tok] for tok in y])
    diff = max(abs(Fraction(float(u)) - Fraction(float(v))) for u, v in
               zip(x.ravel(), y.ravel()))
    num = max((abs(a - b) for ra, rb in zip(fx, fy) for a, b in zip(ra, rb)),
              key=lambda v: float(v.mid()))
    return num / (arb(diff.numerator) / diff.denominator)


@pytest.mark.parametrize('d,n', [(1, 3), (1, 2), (2, 2)])
def test_lipschitz_constant_not_refuted_by_sampled_quotients(d, n):
  f = targets.get_target('random_bumps', d=d, n=n)
  lip = target_bounds.builtin_lipschitz('random_bumps', d, n)
  rng = np.random.default_rng(d * 10 + n)
  x = rng.random((20000, n, d))
  quotients = []
  for scale in (1e-1, 1e-2, 1e-4):     # near pairs approach the largest derivative
    y = np.clip(x + rng.normal(scale=scale, size=x.shape), 0, 1)
    q = np.max(np.abs(f(x) - f(y)), axis=(1, 2)) / np.max(np.abs(x - y), axis=(1, 2))
    quotients.append((q, y))
  # the largest float quotients, recomputed exactly: each is a proved lower bound on the
  # true constant, so each must stay below the proved L
  fn = target_bounds.arb_function(f, d, n)
  biggest = 0.0
  for q, y in quotients:
    for b in np.argsort(q)[-3:]:
      exact = _exact_quotient(fn, x[b], y[b])
      assert exact < arb(lip.numerator) / lip.denominator
      biggest = max(biggest, float(exact.mid()))
  # the sampling is not degenerate: the quotients reach half of the largest
  # |dF/dx| + |dF/dm| of F(x, m) = sum_b a_b exp(-((x - c_b)^2 + (m - e_b)^2) / (2 s^2))
  # on a fine grid (the derivative of f_ji along X -> X + t 1 or a single token), and the
  # proved L is above that grid maximum too (it is 12x above: the bumps partly cancel,
  # the closed form sums |a_b|)
  a, c, e, _ = targets.random_bumps_params()
  u = np.linspace(0, 1, 401)
  xx, mm = np.meshgrid(u, u)
  g = a * np.exp(-((xx[..., None] - c) ** 2 + (mm[..., None] - e) ** 2) / (2 * 0.15 ** 2))
  grid_max = float(np.max(np.abs(np.sum(g * (c - xx[..., None]), -1)) / 0.15 ** 2
                          + np.abs(np.sum(g * (e - mm[..., None]), -1)) / 0.15 ** 2))
  assert biggest > grid_max / 2
  assert float(lip) > grid_max


def test_arb_function_and_exact_values_enclose_the_float_target():
  f = targets.get_target('random_bumps', d=1, n=3)
  fn = target_bounds.arb_function(f, 1, 3)
  x = np.random.default_rng(3).random((4, 3, 1))
  want = f(x)
  for b in range(4):
    got = fn([[arb(float(v)) for v in tok] for tok in x[b]])
    for j in range(3):
      assert abs(float(got[j][0].mid()) - want[b, j, 0]) < 1e-13
      assert got[j][0].rad() < 1e-12
  k = np.asarray([[[0], [3], [1]], [[2], [2], [0]]])
  vals = target_bounds.exact_values(f, k, 4)
  table = targets.grid_values(f, k, 4)
  for c in range(2):
    for j in range(3):
      assert abs(float(vals[c][j][0].mid()) - table[c, j, 0]) < 1e-14


def test_f_term_is_sound_against_monte_carlo():
  f = targets.get_target('random_bumps', d=1, n=2)
  N = 8
  got = f_term.bound('random_bumps', d=1, n=2, resolution=N, p=2.0)
  x = np.random.default_rng(5).random((100000, 2, 1))
  e = np.sum((f(x) - f((np.floor(x * N) + 0.5) / N)) ** 2, axis=(1, 2))
  mc, se = math.sqrt(np.mean(e)), np.std(e) / math.sqrt(len(e))
  assert got.bound ** 2 >= mc ** 2 - 4 * se
  assert got.assumes.startswith('nothing')


def test_the_certifiers_interval_form_encloses_the_target():
  # certify.target_enclosures reads random_bumps_params: its boxes must hold f's values
  # (and its tangents f's partial derivatives), sampled inside each box
  from transformer_ua.certify import intervals, target_enclosures
  f = targets.get_target('random_bumps', d=1, n=3)
  form = target_enclosures.interval_form(f)
  rng = np.random.default_rng(6)
  lo = rng.random((50, 3, 1)) * 0.95
  hi = lo + 0.05
  enc = form(intervals.box(lo, hi))
  for t in rng.random((20, 1, 1, 1)):
    x = lo + t * (hi - lo)
    y = f(x)
    assert np.all(enc.lo <= y) and np.all(y <= enc.hi)
    # partial derivatives by central differences (step 1e-6; error ~1e-10 << widths)
    for q in range(3):
      e = np.zeros((1, 3, 1))
      e[0, q, 0] = 1e-6
      dfq = (f(x + e) - f(x - e)) / 2e-6
      assert np.all(enc.tlo[..., q] <= dfq + 1e-7) and np.all(dfq - 1e-7 <= enc.thi[..., q])
