"""The one-signed reduction of ReLU outputs (rounding.py (****), signed_reduction.bound
with nonneg=True) against exact emulation: |sum_i W_i (fl_op(a_i) - a_i)| stays within
max(P, N, S) for every row reduced in one mode, on random float32 rows in random boxes;
the bound is never above the magnitude bound sum |W| rho and well below it somewhere; rows
whose entries mix the modes can break it (the assumption the line prints is needed); and
the hand-built network's D over random boxes covers every emulated run at points inside."""

import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import emulated_within_d  # noqa: E402

from transformer_ua import rounding  # noqa: E402
from transformer_ua.certify import float_deviation, hand_built  # noqa: E402
from transformer_ua.certify import signed_reduction  # noqa: E402
from transformer_ua.networks import network_apply  # noqa: E402

MODELS = [rounding.MATMUL_MODELS[n] for n in ('tf32', 'bfloat16', 'tf32-h100')]
ALL = MODELS + [m.with_nearest_operands() for m in MODELS]


def _rows(model, rng, count=400, r=12):
  """(lo, hi [count, r] float64 ranges >= 0, a [count, r] float32 in them, W [3, r] exact
  numbers of the operand format, both signs)."""
  scale = 2.0 ** rng.integers(-6, 3, size=(count, 1))
  lo = rng.random((count, r)) * scale
  width = rng.choice([0.0, 1e-6, 1e-3, 0.1], size=(count, r)) * scale
  lo = lo.astype(np.float32).astype(np.float64)
  hi = (lo + width).astype(np.float32).astype(np.float64)
  hi = np.maximum(hi, lo)
  a = (lo + rng.random((count, r)) * (hi - lo)).astype(np.float32)
  a = np.clip(a.astype(np.float64), lo, hi).astype(np.float32)
  a[:, 0] = lo[:, 0]
  a[:, 1] = hi[:, 1]
  a[:8] = 0.0
  w = model.reduce_operand(rng.standard_normal((3, r)).astype(np.float32), 'nearest')
  return lo, hi, a, w.astype(np.float64)


def _exact_sums(w, r):
  """sum_i W_ri r_i exactly (products exact in float64: 11 x 24 bits), [count, 3]."""
  return np.array([[math.fsum(w[o] * row) for o in range(w.shape[0])] for row in r])


@pytest.mark.parametrize('model', ALL, ids=lambda m: f'{m.name}:{m.operand_mode or "both"}')
def test_the_one_mode_sum_stays_within_the_bound(model):
  rng = np.random.default_rng(11)
  lo, hi, a, w = _rows(model, rng)
  bound = signed_reduction.bound(model, lo, hi, w, w, float_deviation.up, np, nonneg=True)
  modes = ('nearest',) if model.operand_mode == 'nearest' else ('nearest', 'truncate')
  worst = 0.0
  for mode in modes:
    r = model.reduce_operand(a, mode).astype(np.float64) - a.astype(np.float64)   # exact
    err = np.abs(_exact_sums(w, r))
    assert np.all(err <= bound), (mode, float(np.max(err - bound)))
    worst = max(worst, float(np.max(err / np.where(bound > 0, bound, 1.0))))
  assert worst > 0.3                       # near the sums, not vacuous
  # never above the magnitude bound sum |W| rho of rounding.py (***), and below it somewhere
  old = float_deviation.up(model.operand_error(lo, hi) @ np.abs(w).T)
  assert np.all(bound <= old)
  if model.operand_mode != 'nearest':
    assert np.min(bound / old) < 0.75


@pytest.mark.parametrize('name', ['tf32', 'bfloat16'])
def test_rows_that_mix_the_modes_can_break_it(name):
  """Each entry rounded or truncated, whichever errs toward W's sign: the sum can pass
  max(P, N, S) (so the line states one mode per row)."""
  model = rounding.MATMUL_MODELS[name]
  rng = np.random.default_rng(12)
  lo, hi, a, w = _rows(model, rng)
  bound = signed_reduction.bound(model, lo, hi, w, w, float_deviation.up, np, nonneg=True)
  a64 = a.astype(np.float64)
  r_n = model.reduce_operand(a, 'nearest').astype(np.float64) - a64
  r_t = model.reduce_operand(a, 'truncate').astype(np.float64) - a64
  worst = 0.0
  for o in range(w.shape[0]):
    pick = np.where(w[o] * r_n > w[o] * r_t, r_n, r_t)     # the larger signed term each
    sums = np.array([math.fsum(w[o] * row) for row in pick])
    worst = max(worst, float(np.max(sums / bound[:, o])))
  assert worst > 1.0


@pytest.mark.parametrize('arithmetic', ['tf32', 'bfloat16', 'tf32-a100'])
def test_the_hand_built_box_deviation_bounds_every_emulated_run(arithmetic):
  """D over random dyadic boxes (the feed-forward's Jacobian form and plain form with the
  one-signed reduction) against every emulated run at points inside each box."""
  net = network_apply.cast(hand_built.hand_built_product_network(20).net, np.float32)
  lo, hi, x = emulated_within_d.dyadic_boxes(np.random.default_rng(13), 48, (3, 1), (3, 9), 4)
  worst = emulated_within_d.check_runs(net, arithmetic, lo, hi, x)[3]
  assert worst > 0.05
