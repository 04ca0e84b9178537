"""Issue 71, hole 4: the softmax term rho and its kin round up. Each constant of
float_deviation's softmax deviation is compared with the exact formula (mpmath at 60
digits, Fractions), and the deviation bound with float32 / float64 softmax runs (NumPy, by
division and by reciprocal, sums in two orders) against the exact softmax."""

from fractions import Fraction

import mpmath
import numpy as np
import pytest

from transformer_ua import rounding
from transformer_ua.certify import float_deviation

mpmath.mp.dps = 60


def _mp(x):
  return mpmath.mpf(Fraction(float(x)).numerator) / Fraction(float(x)).denominator


def test_expm1_up_is_an_upper_bound_and_tight():
  xs = [0.0, 2.0 ** -1074, 2.0 ** -60, 2.0 ** -53, 2.0 ** -24, 1e-9, 1e-4, 0.01, 0.3, 0.4999,
        0.5, 0.75, 0.999, 1.0, 3.0, 20.0, 49.9, 50.0]
  got = float_deviation.expm1_up(np.array(xs))
  for x, g in zip(xs, got):
    exact = mpmath.expm1(_mp(x))
    assert _mp(g) >= exact, x
    assert _mp(g) <= exact * (1 + mpmath.mpf(2) ** -8) + mpmath.mpf(2) ** -1070, x
  assert np.isinf(float_deviation.expm1_up(np.array([51.0]))[0])


@pytest.mark.parametrize('name', ['float64', 'float32'])
@pytest.mark.parametrize('n', [1, 2, 3, 17, 1000])
def test_softmax_constants_round_up(name, n):
  model = rounding.MATMUL_MODELS[name]
  fm = float_deviation.Model(model)
  c_u, gam, cap = float_deviation.softmax_constants(fm, n)
  u = model.u
  assert Fraction(c_u) >= (1 + u) ** 2 - 1
  assert Fraction(gam) >= Fraction(n) * u / (1 - n * u)
  assert Fraction(cap) >= (1 + u) ** 2 / (1 - n * u / (1 - n * u)) + model.tiny
  assert Fraction(c_u) > 2 * u          # the old (1 + u)**2 - 1 was 0 at u = 2^-53


def _formula(model, ds, s_lo, s_hi, w_hi):
  """The module docstring's D_w, every operation in mpmath (exact for these purposes)."""
  n = len(ds)
  u = _mp(float(model.u))
  tau = _mp(float(model.tiny))
  gam = n * u / (1 - n * u)
  delta = max(_mp(v) for v in ds)
  top = max(_mp(h) + _mp(d) for h, d in zip(s_hi, ds))
  t = [top - (_mp(l) - _mp(d)) for l, d in zip(s_lo, ds)]
  r1 = [mpmath.exp(u * tk) * (1 + 2 * u * rounding.EXP_ULPS) - 1 for tk in t]
  r2 = [(1 + r) * (1 + gam) - 1 for r in r1]
  grow = mpmath.exp(2 * delta)
  wp = [min(mpmath.mpf(1), _mp(w) * grow) for w in w_hi]
  big_r = min(sum(w * r for w, r in zip(wp, r2)), max(r2))
  cap = (1 + u) ** 2 / (1 - gam) + tau
  out = []
  for k in range(n):
    rho = (1 + r1[k]) * (1 + u) ** 2 / (1 - big_r) - 1
    out.append(min(_mp(w_hi[k]) * (grow - 1) + rho * wp[k] + 4 * n * tau, cap))
  return out


@pytest.mark.parametrize('name', ['float64', 'float32', 'tf32', 'bfloat16'])
def test_softmax_deviation_is_never_below_its_formula(name):
  model = rounding.MATMUL_MODELS[name]
  fm = float_deviation.Model(model)
  rng = np.random.default_rng(7)
  cases = [(np.zeros(3), np.zeros(3), np.zeros(3), np.ones(3))]   # the (1 + u)^2 case
  for _ in range(40):
    n = int(rng.integers(1, 6))
    lo = rng.normal(0, 10.0 ** rng.uniform(-3, 6), n)
    hi = lo + np.abs(rng.normal(0, 10.0 ** rng.uniform(-6, 2), n))
    ds = np.abs(rng.normal(0, 10.0 ** rng.uniform(-12, -1), n))
    w_hi = rng.uniform(0, 1, n)
    cases.append((ds, lo, hi, w_hi))
  for ds, lo, hi, w_hi in cases:
    got = float_deviation.softmax(fm, ds[None], lo[None], hi[None], w_hi[None])[0]
    want = _formula(model, ds, lo, hi, w_hi)
    for g, w in zip(got, want):
      assert _mp(g) >= w
      assert _mp(g) <= w * (1 + mpmath.mpf(2) ** -20) + mpmath.mpf(2) ** -1000


def _softmax_runs(s, dtype):
  s = s.astype(dtype)
  a = s - s.max()
  e = np.exp(a)
  forward = np.add.reduce(e, dtype=dtype)
  backward = dtype(0)
  for v in e[::-1]:
    backward = dtype(backward + v)
  return [e / forward, e * (dtype(1) / forward), e / backward, e * (dtype(1) / backward)]


@pytest.mark.parametrize('name,dtype', [('float64', np.float64), ('float32', np.float32)])
def test_softmax_deviation_covers_float_runs(name, dtype):
  """Scores given exactly in the format (D_s = 0): every run's |w^ - softmax(s)| is below
  the bound, on scores that spread by up to 1e4 (large arguments, large t_k u)."""
  fm = float_deviation.Model(rounding.MATMUL_MODELS[name])
  rng = np.random.default_rng(3)
  for trial in range(200):
    n = int(rng.integers(2, 9))
    s = (rng.normal(0, 10.0 ** rng.uniform(-2, 4), n) + rng.normal(0, 1e4)).astype(dtype)
    s = s.astype(np.float64)
    exact = [mpmath.exp(_mp(v)) for v in s]
    tot = sum(exact)
    w = np.array([float(e / tot) for e in exact])
    bound = float_deviation.softmax(fm, np.zeros((1, n)), s[None], s[None],
                            np.minimum(1, w * (1 + 1e-12))[None])[0]
    for run in _softmax_runs(s, dtype):
      err = np.abs(run.astype(np.float64) - w)
      assert np.all(err <= bound), (trial, err, bound)
