"""certify.runtime_probe sees the accumulator (issue 71): planted NumPy runtimes whose
matmuls accumulate wrongly are refused, each for the models it breaks, and the hardware
models are accepted only for their own exact emulation (tests/tensor_core_models.py, an
emulation independent of rounding.MatmulModel.emulate_matmul).

Planted: accumulation toward zero (float32 claims nearest), 20- and 22-bit accumulators,
a 20-bit accumulator that rounds only when both addends are non-zero (the crafted
1 + 2^-k operands meet only zeros, so the operand-bit test cannot see it), a blocked
accumulator with too few alignment bits (23 bits: e = -1), the H100 model with one
alignment bit fewer, and the A100 and H100 models themselves."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import tensor_core_models as tcm  # noqa: E402

from transformer_ua import rounding  # noqa: E402
from transformer_ua.certify.runtime_probe import check_runtime  # noqa: E402
from transformer_ua.certify.runtimes import NumpyRuntime  # noqa: E402

SAMPLES = 2000


def _products(a, b):
  return a.astype(np.float64)[:, None, :] * b.astype(np.float64).T[None, :, :]   # [M, N, K]


class Sequential(NumpyRuntime):
  """Products exact, added left to right to a p-bit accumulator rounded by ``mode``."""

  def __init__(self, p, mode, nonzero_only=False):
    self.p, self.mode, self.nonzero_only = p, mode, nonzero_only
    self.name = f'{p}-bit {mode} accumulator' + (' (non-zero addends)' if nonzero_only else '')

  def matmul(self, a, b):
    prods = _products(a, b)
    m, n, k = prods.shape
    flat = tcm.sequential_dot(prods.reshape(m * n, k), np.ones(k), self.p, self.mode,
                              self.nonzero_only)
    return flat.reshape(m, n).astype(a.dtype)


class Blocked(NumpyRuntime):
  """TF32 operands (rounded to nearest), the block accumulator of tensor_core_models."""

  def __init__(self, block, align_bits):
    self.block, self.align_bits = block, align_bits
    self.name = f'blocks of {block}, {align_bits} alignment bits'

  def matmul(self, a, b):
    tf32 = rounding.MATMUL_MODELS['tf32']
    ra = tf32.reduce_operand(a.astype(np.float32), 'nearest')
    rb = tf32.reduce_operand(b.astype(np.float32), 'nearest')
    prods = _products(ra, rb)
    m, n, k = prods.shape
    flat = tcm.block_dot(prods.reshape(m * n, k), np.ones(k), self.block, self.align_bits)
    return flat.reshape(m, n).astype(a.dtype)


def _verdicts(runtime):
  report = check_runtime(runtime, arithmetic='float32', samples=SAMPLES)
  names = ('float32', 'tf32', 'bfloat16', 'tf32-a100', 'tf32-h100')
  return report, {name: bool(report.ok_for(name)) for name in names}


ACCUMULATOR_FAULT = 'accumulator sums at'


SLOW = pytest.mark.slow        # each probe takes 10-20 s on a loaded 2-core machine


@pytest.mark.parametrize('runtime, accepted', [
    (Sequential(24, 'truncate'), {'tf32', 'bfloat16'}),      # faithful: only TF32's model
    pytest.param(Sequential(22, 'nearest'), set(), marks=SLOW),
    pytest.param(Sequential(20, 'nearest'), set(), marks=SLOW),
    (Sequential(20, 'nearest', nonzero_only=True), set()),
    pytest.param(Blocked(8, -1), set(), marks=SLOW),
])
def test_a_wrong_accumulator_is_refused(runtime, accepted):
  report, ok = _verdicts(runtime)
  assert {k for k, v in ok.items() if v} == accepted, report.line()
  for name in set(ok) - accepted - {'tf32-a100', 'tf32-h100'}:
    assert ACCUMULATOR_FAULT in report.ok_for(name).reason
  if isinstance(runtime, Sequential) and runtime.nonzero_only:
    assert report.operand_bits == 23            # the crafted operands do not see it


@SLOW
def test_the_hardware_models_accept_only_their_own_accumulator():
  report, ok = _verdicts(Blocked(8, 2))
  assert ok['tf32-h100'] and ok['tf32'] and not ok['tf32-a100'] and not ok['float32']
  assert report.hardware_match['tf32-h100'] == 1.0 and report.operand_rounding == 'nearest'
  report, ok = _verdicts(Blocked(4, 1))
  assert ok['tf32-a100'] and not ok['tf32-h100']
  report, ok = _verdicts(Blocked(8, 1))                     # one alignment bit fewer
  assert not ok['tf32-h100'] and 'differ from the NVIDIA H100' in report.ok_for(
      'tf32-h100').reason
  report, ok = _verdicts(NumpyRuntime())                    # IEEE: no hardware model
  assert ok['float32'] and not ok['tf32-h100'] and not ok['tf32-a100']
  assert report.operand_rounding == 'none'


def test_the_probe_tells_the_operand_rounding():
  class Truncating(Blocked):
    def matmul(self, a, b):
      tf32 = rounding.MATMUL_MODELS['tf32']
      return np.matmul(tf32.reduce_operand(a.astype(np.float32), 'truncate'),
                       tf32.reduce_operand(b.astype(np.float32), 'truncate'))
  report = check_runtime(Truncating(8, 2), arithmetic='float32', samples=SAMPLES)
  assert report.operand_rounding == 'truncate' and report.operand_bits == 10
  assert 'operand rounding truncate' in report.line()
