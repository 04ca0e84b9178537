"""The certifier's float deviation D (network_enclosure.enclose) against emulated runs
(tests/low_precision_runs.py: operands reduced by round to nearest and by truncation, sums
forward and reverse, accumulation rounded to nearest or toward zero) on random untrained
networks, in every arithmetic: |fl(g)(X) - g(X)| <= D(X) pointwise, g the real network
whose weights are the reduced ones (float64 forward), and the certificate at least the
emulated runs' sampled d_2."""

import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import low_precision_runs  # noqa: E402

from transformer_ua import rounding  # noqa: E402
from transformer_ua.certify import certify_network  # noqa: E402
from transformer_ua.certify import intervals as iv  # noqa: E402
from transformer_ua.certify import float_deviation  # noqa: E402
from transformer_ua.certify import network_enclosure  # noqa: E402
from transformer_ua.certify.box_bound import reduced_networks  # noqa: E402
from transformer_ua.networks import network_apply, network_dict  # noqa: E402

ARITHMETICS = ('float32', 'tf32', 'bfloat16')


def random_net(seed, d=1, n=3, width=3, heads=1, m=2, r=6, blocks=2):
  rng = np.random.default_rng(seed)
  g = lambda *s: rng.normal(0, 0.8, s)          # noqa: E731
  blks = []
  for _ in range(blocks):
    blks.append({'W_Q': g(heads, m, width), 'b_Q': g(heads, m), 'W_K': g(heads, m, width),
                 'W_V': g(heads, m, width), 'W_O': g(heads, width, m),
                 'W_1': g(r, width), 'b_1': g(r), 'W_2': g(width, r), 'b_2': g(width)})
  net = {'embed': g(width, d), 'blocks': blks, 'readout': g(d, width)}
  return network_apply.cast(network_dict.check(net, d=d, n=n), np.float32)


def _variants(net, arithmetic):
  nearest_only = arithmetic.endswith(':nearest')       # the probe measured the mode
  model = rounding.MATMUL_MODELS[arithmetic.split(':')[0]]
  if model.operand_rel == 0:
    return model, {'nearest': net}
  nets = reduced_networks(net, model)
  if nearest_only:
    return model.with_nearest_operands().with_weights_reduced(), {'nearest': nets[0]}
  return model.with_weights_reduced(), {'nearest': nets[0], 'truncate': nets[1]}


@pytest.mark.parametrize('arithmetic', ARITHMETICS + ('tf32:nearest', 'bfloat16:nearest',
                                                      'tf32-a100', 'tf32-h100:nearest'))
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_deviation_bounds_every_emulated_run(arithmetic, seed):
  net = random_net(seed)
  x = np.random.default_rng(10 + seed).random((48, 3, 1))
  x[:8] = np.round(x[:8])                       # corners of the cube
  model, variants = _variants(net, arithmetic)
  worst = 0.0
  for mode, variant in variants.items():
    _, dev = network_enclosure.enclose(variant, iv.point(x), model)
    exact = network_apply.apply(variant, x, np.float64)
    for way in low_precision_runs.ways(arithmetic.split(':')[0]):
      if way[0] != mode:
        continue
      y = low_precision_runs.run(net, x, arithmetic.split(':')[0], mode=way[0], order=way[1],
                                 accumulate=way[2])
      err = np.abs(y - exact)
      assert np.all(err <= dev + 1e-12 * (1 + np.abs(exact))), (way, float(np.max(err - dev)))
      worst = max(worst, float(np.max(err / dev)))
  assert worst > 0                              # the runs do move: the test is not vacuous


def test_the_jacobian_form_keeps_the_cancellation_of_w2_w1():
  """z' = z + W_2 ReLU(W_1 z) with W_2 W_1 = 0 on the active units: an input deviation
  passes unchanged (|I + W_2 W_1| = I) where the absolute form multiplies it by 1 + 4."""
  w_1 = np.array([[1.0, 0.0], [1.0, 0.0]])
  w_2 = np.array([[2.0, -2.0], [0.0, 0.0]])
  net = network_dict.check({'blocks': [{'W_1': w_1, 'b_1': np.array([1.0, 1.0]),
                                        'W_2': w_2, 'b_2': np.zeros(2)}]}, d=2, n=1)
  x = np.full((1, 1, 2), 0.5)
  fm = float_deviation.Model(rounding.MATMUL_MODELS['float32'])
  z = iv.point(x)
  d_z = np.full((1, 1, 2), 1e-3)
  _, d_out = network_enclosure._feedforward(net.blocks[0].ff, z, d_z, fm, residual=(z, d_z))
  assert d_out[0, 0, 0] < 1.1e-3 and d_out[0, 0, 1] < 1.1e-3


@pytest.mark.parametrize('arithmetic', ARITHMETICS)
def test_the_certificate_is_above_every_emulated_run(arithmetic):
  net = random_net(5, width=2, r=4, blocks=1)
  cert = certify_network('token_times_mean', net, d=1, n=3, arithmetic=arithmetic,
                         epsilon=1.0, max_minutes=0.1)
  x = np.random.default_rng(1).random((2000, 3, 1))
  f = x * x.mean(axis=1, keepdims=True)
  for way in low_precision_runs.ways(arithmetic):
    y = low_precision_runs.run(net, x, arithmetic, mode=way[0], order=way[1],
                               accumulate=way[2])
    d2 = math.sqrt(float(np.mean(np.sum((y - f) ** 2, axis=(1, 2)))))
    assert d2 <= float(cert.total), way


@pytest.mark.parametrize('arithmetic', ['tf32', 'bfloat16', 'tf32-h100'])
def test_the_operand_reduction_passes_through_w2_w1_even_where_the_jacobian_cancels(arithmetic):
  """z' = z - ReLU(z + 1): I + W_2 W_1 = 0, yet TF32 reduces z before W_1 (not the residual
  z), so fl(g) - g carries W_2 W_1 rho = -rho: D must hold it."""
  net = network_apply.cast(network_dict.check(
      {'blocks': [{'W_1': np.array([[1.0]]), 'b_1': np.array([1.0]),
                   'W_2': np.array([[-1.0]]), 'b_2': np.array([0.0])}]}, d=1, n=1),
      np.float32)
  x = np.random.default_rng(8).random((256, 1, 1))
  model, variants = _variants(net, arithmetic)
  seen = 0.0
  for mode, variant in variants.items():
    _, dev = network_enclosure.enclose(variant, iv.point(x), model)
    exact = network_apply.apply(variant, x, np.float64)
    for way in low_precision_runs.ways(arithmetic):
      if way[0] == mode:
        y = low_precision_runs.run(net, x, arithmetic, mode=way[0], order=way[1],
                                   accumulate=way[2])
        assert np.all(np.abs(y - exact) <= dev)
        seen = max(seen, float(np.max(np.abs(y - exact))))
  assert seen > 2.0 ** -14                  # the reduction's error is there to be covered
