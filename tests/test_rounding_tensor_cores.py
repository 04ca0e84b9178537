"""rounding.py's hardware models (**) 'tf32-a100' and 'tf32-h100' against the exact
emulation of tests/tensor_core_models.py (checked itself against a Fraction version): on
random and adversarial dot products up to m = 4096 the error stays below the model's bound,
and an accumulator with one alignment bit fewer than the model breaks it."""

import math
import os
import sys
from fractions import Fraction

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import tensor_core_models as tcm  # noqa: E402

from transformer_ua import rounding  # noqa: E402

HARDWARE = ('tf32-a100', 'tf32-h100')


def _tf32(x, mode='nearest'):
  return rounding.MATMUL_MODELS['tf32'].reduce_operand(np.asarray(x, np.float32),
                                                       mode).astype(np.float64)


def _random(rows, m, seed):
  rng = np.random.default_rng(seed)
  a = rng.choice([-1.0, 1.0], (rows, m)) * 2.0 ** rng.uniform(-8, 8, (rows, m))
  b = rng.choice([-1.0, 1.0], (rows, m)) * 2.0 ** rng.uniform(-8, 8, (rows, m))
  return _tf32(a), _tf32(b)


def _adversarial(m, model, e=None):
  """Rows built to lose the most: a leading 1 then terms just below the alignment cut
  (2^(-23-e) (1 - 2^-10), e the alignment bits, the model's by default), all positive
  (truncation never compensates); the same after a large accumulator; equal terms; and
  one-sided terms that grow the accumulator."""
  e = model.align_bits if e is None else e
  t = 2.0 ** (-23 - e) * (1 - 2.0 ** -10)
  rows = []
  r = np.full(m, t)
  r[::model.block] = 1.0                         # a 1 leads each block
  rows.append(r)
  r = np.full(m, t)
  r[0] = 1.0                                     # then only the accumulator is large
  rows.append(r)
  rows.append(np.full(m, 1.0 + 2.0 ** -10))
  rows.append(1.0 + np.arange(m) % 1024 * 2.0 ** -10)
  a = _tf32(np.array(rows))
  return a, np.ones_like(a)


def _errors(a, b, block, align_bits):
  got = tcm.block_dot(a, b, block, align_bits)
  prods = a * b
  exact = np.array([float(sum(map(Fraction, row))) for row in prods.tolist()])
  err = np.abs(got - exact) + 2.0 ** -52 * np.abs(exact)       # the reference's rounding
  s = np.abs(prods).sum(axis=1)
  return err, s, a, b


def _bound(model, m, s, a, b):
  tau = float(model.tiny)
  big = np.abs(a).max(axis=1) + np.abs(b).max(axis=1)
  return float(model.kappa(m, 0)) * s + (m + 1) * tau * (big + 2)


def test_the_block_emulation_matches_its_fraction_version():
  a, b = _random(12, 45, 3)
  for block, bits in ((4, 1), (8, 2)):
    got = tcm.block_dot(a, b, block, bits)
    want = [float(tcm.fraction_block_dot(a[i], b[i], block, bits)) for i in range(len(a))]
    assert np.array_equal(got, np.array(want))


@pytest.mark.parametrize('name', HARDWARE)
@pytest.mark.parametrize('m', [1, 4, 8, 9, 100, 1024, 4096])
def test_the_hardware_bound_holds(name, m):
  model = rounding.MATMUL_MODELS[name]
  rows = 64 if m <= 1024 else 8
  for a, b in (_random(rows, m, m), _adversarial(m, model),
               _adversarial(m, model, model.align_bits - 1)):
    err, s, a, b = _errors(a, b, model.block, model.align_bits)
    assert np.all(err <= _bound(model, m, s, a, b))


@pytest.mark.parametrize('name', HARDWARE)
@pytest.mark.parametrize('m', [64, 512, 4096])
def test_one_alignment_bit_fewer_breaks_the_bound(name, m):
  model = rounding.MATMUL_MODELS[name]
  a, b = _adversarial(m, model, model.align_bits - 1)
  err, s, a, b = _errors(a, b, model.block, model.align_bits - 1)
  assert np.any(err > _bound(model, m, s, a, b))


def test_the_hardware_models_are_tighter_than_the_conservative_one():
  for name in HARDWARE:
    for m in (8, 256, 4096):
      assert rounding.MATMUL_MODELS[name].kappa(m) < rounding.MATMUL_MODELS['tf32'].kappa(m)
  h100 = rounding.MATMUL_MODELS['tf32-h100']
  assert math.isclose(float(h100.kappa(4096, 0)) * 2 ** 23 / 4096, 0.4377, rel_tol=1e-3)
