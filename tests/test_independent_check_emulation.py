"""independent_check's emulated low-precision JAX run against the tests' own NumPy emulation
(tests/low_precision_runs.py, bit-level operand reduction, float32 sums term by term): the
two reduce the same operands, so they differ by float32 summation only, while the plain
float32 run differs from both by the operand reduction."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import low_precision_runs  # noqa: E402

from transformer_ua import rounding  # noqa: E402
from transformer_ua.certify import hand_built, independent_check  # noqa: E402
from transformer_ua.networks import network_apply  # noqa: E402


@pytest.mark.parametrize('arithmetic', ['tf32', 'bfloat16'])
@pytest.mark.parametrize('mode', ['nearest', 'truncate'])
def test_emulated_run_matches_the_numpy_emulation(arithmetic, mode):
  net = network_apply.cast(hand_built.hand_built_product_network(20).net, np.float32)
  x = np.random.default_rng(5).random((512, 3, 1))
  bits = rounding.MATMUL_MODELS[arithmetic].operand_bits
  emulated = independent_check.jax_apply(net, x, 'float32', operand=(bits, mode))
  reference = low_precision_runs.run(net, x, arithmetic, mode=mode)
  plain = independent_check.jax_apply(net, x, 'float32')
  gap = np.max(np.abs(emulated - reference))
  assert gap <= 4e-6, gap
  assert np.max(np.abs(plain - reference)) > 20 * max(gap, 1e-7)


def test_check_of_a_tf32_certificate_adds_the_emulated_runs():
  from transformer_ua.certify import certify_network  # noqa: PLC0415
  net = network_apply.cast(hand_built.hand_built_product_network(20).net, np.float32)
  cert = certify_network('token_times_mean', net, d=1, n=3, p=2, arithmetic='tf32',
                         epsilon=1.0, max_rounds=2, progress=False)
  out = independent_check.check('token_times_mean', net, cert, points=2000, seed=1)
  names = {'jax', 'onnxruntime', 'jax tf32 emulated (nearest)', 'jax tf32 emulated (truncate)'}
  assert set(out) == names
  for name in names:
    assert out[name]['contradicted'] is False and out[name]['d_p'] < float(cert.total)
  assert out['jax tf32 emulated (truncate)']['d_p'] != out['jax']['d_p']
