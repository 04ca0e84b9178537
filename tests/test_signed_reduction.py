"""certify/signed_reduction.py against exact emulation: for rows of operands of every sign
(ranges >= 0, <= 0, straddling 0, widened as D widens them) and coefficients exact or in
intervals, |sum_i c_i (fl_op(a_i) - a_i)| stays within max(L, H, S) for a row reduced in one
mode, and two groups' sum within their added signed sides in each of the four mode pairs; both reach
more than half of their bound (a halved bound fails), never exceed the magnitude bound and
fall well below it for one-signed rows under coefficients of both signs; and a two-input
feed-forward network with weights of both signs on inputs in [0, 1] keeps every emulated
run (tests/low_precision_runs.py) within its D over random boxes, a D below the magnitude
one there."""

import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import emulated_within_d  # noqa: E402

from transformer_ua import rounding  # noqa: E402
from transformer_ua.certify import float_deviation, network_enclosure  # noqa: E402
from transformer_ua.certify import intervals as iv  # noqa: E402
from transformer_ua.certify import signed_reduction  # noqa: E402
from transformer_ua.networks import network_apply, network_dict  # noqa: E402

MODELS = [rounding.MATMUL_MODELS[n] for n in ('tf32', 'bfloat16', 'tf32-h100')]
ALL = MODELS + [m.with_nearest_operands() for m in MODELS]
UP = float_deviation.up


def _rows(model, rng, count=300, r=10, kind=None):
  """(lo, hi [count, r] ranges: per row >= 0, <= 0 or straddling 0 (``kind`` or random), a
  [count, r] float32 in them, c_lo, c_hi [3, r] (half the cases exact numbers of the operand
  format, else intervals), c [4, 3, r] coefficients in them: both ends and two inside)."""
  scale = 2.0 ** rng.integers(-6, 3, size=(count, 1))
  mag = rng.random((count, r)) * scale
  width = rng.choice([0.0, 1e-6, 1e-3, 0.1], size=(count, r)) * scale
  kinds = rng.integers(0, 3, size=(count, 1)) if kind is None else np.full((count, 1), kind)
  lo = np.where(kinds == 0, mag, np.where(kinds == 1, -mag - width, -mag))
  lo = lo.astype(np.float32).astype(np.float64)
  hi = np.where(kinds == 2, lo + 2 * mag + width, lo + width)
  hi = hi.astype(np.float32).astype(np.float64)
  hi = np.where(kinds == 1, np.minimum(hi, 0.0), np.maximum(hi, lo))
  lo = np.where(kinds == 0, np.maximum(lo, 0.0), lo)
  a = (lo + rng.random((count, r)) * (hi - lo)).astype(np.float32)
  a = np.clip(a.astype(np.float64), lo, hi).astype(np.float32)
  a[:, 0], a[:, 1] = lo[:, 0], hi[:, 1]
  c = model.reduce_operand(rng.standard_normal((3, r)).astype(np.float32),
                           'nearest').astype(np.float64)
  spread = np.abs(rng.standard_normal((3, r))) * 0.2 * (rng.random() < 0.5)
  c_lo, c_hi = c - spread, c + spread
  t = np.concatenate([[0.0, 1.0], rng.random(2)])[:, None, None]
  return lo, hi, a, c_lo, c_hi, c_lo + t * (c_hi - c_lo)


def _sums(c, r):
  """sum_i c_oi r_i exactly (math.fsum; products exact or within 2^-53: far below the
  bounds' 2^-40 widening), [count, rows]."""
  return np.array([[math.fsum(c[o] * row) for o in range(c.shape[0])] for row in r])


def _modes(model):
  return ('nearest',) if model.operand_mode == 'nearest' else ('nearest', 'truncate')


def _red(model, a, mode):
  return model.reduce_operand(a, mode).astype(np.float64) - a.astype(np.float64)


@pytest.mark.parametrize('model', ALL, ids=lambda m: f'{m.name}:{m.operand_mode or "both"}')
def test_a_row_in_one_mode_stays_within_the_bound(model):
  rng = np.random.default_rng(21)
  worst = 0.0
  for _ in range(2):
    lo, hi, a, c_lo, c_hi, cs = _rows(model, rng)
    bound = signed_reduction.bound(model, lo, hi, c_lo, c_hi, UP, np)
    for mode in _modes(model):
      for c in cs:
        err = np.abs(_sums(c, _red(model, a, mode)))
        assert np.all(err <= bound), (mode, float(np.max(err - bound)))
        worst = max(worst, float(np.max(err / np.where(bound > 0, bound, 1.0))))
    old = UP(model.operand_error(lo, hi) @ np.maximum(np.abs(c_lo), np.abs(c_hi)).T)
    assert np.all(bound <= old * (1 + 2.0 ** -40))     # up to the sums' order
  assert worst > 0.5                     # a halved bound would fail


@pytest.mark.parametrize('model', MODELS, ids=lambda m: m.name)
@pytest.mark.parametrize('kind', [0, 1, 2])
def test_one_signed_rows_gain_and_straddling_rows_keep_the_magnitude_bound(model, kind):
  rng = np.random.default_rng(22 + kind)
  lo, hi, a, c_lo, c_hi, _ = _rows(model, rng, kind=kind)
  low, high, s = signed_reduction.parts(model, lo, hi, c_lo, c_hi, UP, np)
  bound = np.maximum(np.maximum(low, high), s)
  rho_t = model.with_truncated_operands().operand_error(lo, hi)
  mag = UP(rho_t @ np.maximum(np.abs(c_lo), np.abs(c_hi)).T)
  if kind == 2:                          # the sign unknown: L = H = sum |c| rho^t
    assert np.all(low == high)
    assert np.all(np.abs(bound - np.maximum(mag, s)) <= 2.0 ** -40 * bound)
  else:
    assert np.min(bound / UP(model.operand_error(lo, hi) @ np.abs(c_hi).T)) < 0.75


@pytest.mark.parametrize('model', ALL, ids=lambda m: f'{m.name}:{m.operand_mode or "both"}')
def test_two_groups_each_in_its_own_mode_stay_within_their_added_sides(model):
  """E_1 + E_2 in [-(lo_1 + lo_2), hi_1 + hi_2] (``sides``) for each of the four mode
  pairs, and each group's sum inside its own sides: the signed intervals, not only their
  magnitude; max(lo, hi) is ``bound``."""
  rng = np.random.default_rng(23)
  lo1, hi1, a1, cl1, ch1, c1 = _rows(model, rng)
  lo2, hi2, a2, cl2, ch2, c2 = _rows(model, rng, kind=0)
  s1 = signed_reduction.sides(signed_reduction.parts(model, lo1, hi1, cl1, ch1, UP, np), np)
  s2 = signed_reduction.sides(signed_reduction.parts(model, lo2, hi2, cl2, ch2, UP, np,
                                                     nonneg=True), np)
  assert np.all(np.maximum(*s1) == signed_reduction.bound(model, lo1, hi1, cl1, ch1, UP, np))
  low, high = UP(s1[0] + s2[0]), UP(s1[1] + s2[1])
  worst = 0.0
  for m1 in _modes(model):
    e1 = _sums(c1[1], _red(model, a1, m1))
    assert np.all(-s1[0] <= e1) and np.all(e1 <= s1[1])
    for m2 in _modes(model):
      e2 = _sums(c2[0], _red(model, a2, m2))
      assert np.all(-s2[0] <= e2) and np.all(e2 <= s2[1])
      e = e1 + e2
      assert np.all(-low <= e) and np.all(e <= high), (m1, m2)
      worst = max(worst, float(np.max(np.maximum(e / high, -e / low))))
  assert worst > 0.5


def _mixed_sign_ff():
  """z' = z + W_2 ReLU(W_1 z + b_1) + b_2, d = D = 2, n = 1, weights of both signs (numbers
  of every operand format) on inputs in [0, 1]."""
  return network_apply.cast(network_dict.check({'blocks': [{
      'W_1': np.array([[0.75, -0.5], [-0.25, 1.0], [0.5, 0.5]]),
      'b_1': np.array([0.125, 0.25, -0.375]),
      'W_2': np.array([[1.0, -0.5, 0.75], [-0.25, 0.5, 1.0]]),
      'b_2': np.array([0.0, 0.125])}]}, d=2, n=1), np.float32)


@pytest.mark.parametrize('arithmetic', ['tf32', 'bfloat16'])
def test_a_mixed_sign_network_keeps_every_emulated_run_within_its_d(arithmetic, monkeypatch):
  net = _mixed_sign_ff()
  lo, hi, x = emulated_within_d.dyadic_boxes(np.random.default_rng(24), 64, (1, 2), (1, 7), 4)
  model, nets, devs, worst = emulated_within_d.check_runs(net, arithmetic, lo, hi, x)
  assert worst > 0.05
  signed = signed_reduction.parts

  def no_signs(model, lo, hi, c_lo, c_hi, up_fn, xp, *, cap=None, nonneg=False):
    wide = np.maximum(np.abs(lo), np.abs(hi))
    return signed(model, -wide, wide, c_lo, c_hi, up_fn, xp, cap=cap)
  monkeypatch.setattr(signed_reduction, 'parts', no_signs)
  mags = [network_enclosure.enclose(v, iv.box(lo, hi), model)[1] for v in nets]
  assert all(np.all(d <= m) for d, m in zip(devs, mags))
  assert min(float(np.min(d / m)) for d, m in zip(devs, mags)) < 0.97


def _attention_net(seed):
  """One block, one head (m = 2, D = 3, r = 4, n = 3), weights of both signs and biases,
  float32: the mix sees v of both signs, W_O and the FF's Jacobian form signed sides."""
  rng = np.random.default_rng(seed)
  return network_apply.cast(network_dict.check({'blocks': [{
      'W_Q': rng.normal(size=(1, 2, 3)), 'b_Q': rng.normal(size=(1, 2)),
      'W_K': rng.normal(size=(1, 2, 3)), 'W_V': rng.normal(size=(1, 2, 3)),
      'W_O': rng.normal(size=(1, 3, 2)) / 2, 'W_1': rng.normal(size=(4, 3)),
      'b_1': rng.normal(size=4), 'W_2': rng.normal(size=(3, 4)) / 2,
      'b_2': rng.normal(size=3)}]}, d=1, n=3), np.float32)


@pytest.mark.parametrize('arithmetic,seed', [('bfloat16', 31), ('tf32', 32), ('bfloat16', 33)])
def test_an_attention_network_keeps_every_emulated_run_within_its_d(arithmetic, seed,
                                                                    monkeypatch):
  net = _attention_net(seed)
  lo, hi, x = emulated_within_d.dyadic_boxes(np.random.default_rng(seed), 48, (3, 1), (1, 6), 6)
  model, nets, devs, worst = emulated_within_d.check_runs(net, arithmetic, lo, hi, x)
  assert worst > 0.05
  monkeypatch.setattr(float_deviation.Model, 'signs_of', lambda self, d: None)
  unsigned = [network_enclosure.enclose(v, iv.box(lo, hi), model)[1] for v in nets]
  assert all(np.all(d <= u) for d, u in zip(devs, unsigned))


@pytest.mark.parametrize('name', ['tf32', 'bfloat16'])
def test_the_mix_stays_within_its_sides(name):
  """o^ - o for fl_op(w) fl_op(v) summed exactly (the sum's own rounding is in the rest),
  w rows of softmax weights and v of both signs as float32 points, each row of w and each
  column of v in either mode: inside ``mix_sides``' [-lo, hi], and above half of a side."""
  model = rounding.MATMUL_MODELS[name].with_weights_reduced()
  fm = float_deviation.Model(model)
  rng = np.random.default_rng(41)
  e = np.exp(rng.normal(size=(200, 3, 3)))
  w = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32).astype(np.float64)
  v = (rng.normal(size=(200, 3, 2)) * 2.0 ** rng.integers(-4, 3, size=(200, 1, 1)))
  v = v.astype(np.float32).astype(np.float64)
  zero_w, zero_v = np.zeros_like(w), np.zeros_like(v)
  r_w, r_v = fm.rho(w, w, zero_w), fm.rho(v, v, zero_v)
  d_mix = float_deviation.mix(fm, zero_w, w, zero_v, np.abs(v), r_w, r_v)
  lo, hi = signed_reduction.mix_sides(model, (w, w), zero_w, r_w, (v, v), np.abs(v), zero_v,
                                      r_v, (zero_v, zero_v), d_mix, UP, iv.down, np)
  assert np.all(lo <= d_mix) and np.all(hi <= d_mix) and np.min((lo + hi) / d_mix) < 1.8
  worst = 0.0
  for mode_w in ('nearest', 'truncate'):
    for mode_v in ('nearest', 'truncate'):
      fw = model.reduce_operand(w.astype(np.float32), mode_w).astype(np.float64)
      fv = model.reduce_operand(v.astype(np.float32), mode_v).astype(np.float64)
      err = np.array([[[math.fsum(np.concatenate([fw[b, j] * fv[b, :, m],
                                                  -w[b, j] * v[b, :, m]]))
                        for m in range(2)] for j in range(3)] for b in range(200)])
      assert np.all(-lo <= err) and np.all(err <= hi), (mode_w, mode_v)
      worst = max(worst, float(np.max(np.maximum(err / hi, -err / lo))))
  assert worst > 0.5
