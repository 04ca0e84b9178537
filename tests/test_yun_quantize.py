"""yun.stages.quantize (Lemma 7): counts, exact rational quantization, float behaviour."""

from fractions import Fraction
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua.verify import quantization as vq
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import quantize


def _reference_index(x: Fraction, N: int) -> int:
  """Independent g_q^ent: the bin k with k/N <= x < (k+1)/N, -1 outside [0, 1)."""
  if x < 0 or x >= 1:
    return -1
  return math.floor(x * N)


@pytest.mark.parametrize('N,d,n', [(2, 1, 2), (3, 2, 2), (5, 1, 3), (4, 3, 2)])
def test_counts_and_params_structure(N, d, n):
  g = quantize.Quantization.build(Grid(d, n, N))
  assert g.depth() == d * N + d                      # d/delta + d
  assert g.num_params() == (d * N + d) * (3 * d + 1)      # W_1, b_1, W_2, b_2 per r=1 layer
  with jax.enable_x64(True):  # a float64 network: its init shapes are taken under x64
    shapes = jax.eval_shape(g.network().init, jax.random.PRNGKey(0), jnp.zeros((1, n, d)))
  assert jax.tree_util.tree_map(lambda a: a.shape, shapes['params']) == \
      jax.tree_util.tree_map(lambda a: a.shape, g.params)


@pytest.mark.parametrize('N,d,n', [(2, 1, 2), (3, 2, 2), (7, 1, 2)])
def test_exact_rational_inputs_including_every_bin_edge(N, d, n):
  g = quantize.Quantization.build(Grid(d, n, N))
  s_q = 2 * N * 3
  a = np.arange(-2 * s_q, 3 * s_q)  # x = a / s_q covers [-2, 3), every edge k/N exactly
  x = np.stack([np.roll(a, t) for t in range(n * d)], -1).reshape(len(a), n, d)
  y = g.quantize_exact(x, s_q)
  omega = N ** (n * d)
  for xi, yi in zip(x.reshape(-1), y.reshape(-1)):
    k = _reference_index(Fraction(int(xi), s_q), N)
    assert yi == (-omega * s_q if k < 0 else k * s_q // N)


def test_float_network_misquantizes_when_tolerance_is_ignored():
  """The tolerance is needed: just below an edge, float rounding can land either way."""
  g = quantize.Quantization.build(Grid(1, 2, 3))
  x = np.asarray([[[np.nextafter(1 / 3, 0)], [-5e-324]]])
  idx = g.to_indices(g.apply(x))[0, :, 0]
  exact = [_reference_index(Fraction(float(v)), 3) for v in x.reshape(-1)]
  assert exact == [0, -1]
  # -5e-324 (subnormal) is flushed to 0 by XLA on CPU: bin 0, not out of range.
  assert idx[1] == 0
  assert all(abs(vq.EDGE_TOL) >= abs(float(v) - round(float(v) * 3) / 3) for v in x.reshape(-1))


def test_exact_quantization_refuses_unscaled_input():
  g = quantize.Quantization.build(Grid(1, 2, 2))
  with pytest.raises(ValueError, match='integer'):
    g.quantize_exact(np.zeros((1, 2, 1)), 4)
  with pytest.raises(ValueError, match='multiple of N'):
    quantize.quantization_params(Grid(1, 2, 2), scale=3, dtype='int64')
