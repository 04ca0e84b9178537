"""Issue 71, hole 1: the rounding model assumes no overflow; a network whose float run can
overflow is refused in one line that names where, and one just below the limit is still
certified. The limits and the overflows are checked independently (ml_dtypes' finfo, NumPy
float32 runs, exact Fractions)."""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from transformer_ua import rounding
from transformer_ua.certify import certify_network
from transformer_ua.certify import hand_built
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import float_deviation
from transformer_ua.certify import network_enclosure
from network_ops_helpers import random_net

LOW = ('float32', 'tf32', 'bfloat16')


def _ff(w_1, b_1, w_2, b_2):
  return {'W_1': np.array(w_1, np.float64), 'b_1': np.array(b_1, np.float64),
          'W_2': np.array(w_2, np.float64), 'b_2': np.array(b_2, np.float64)}


def _refused(net, arithmetic, d, n, target='prefix_mean'):
  with pytest.raises(ValueError) as err:
    certify_network(target, net, d=d, n=n, arithmetic=arithmetic, max_minutes=0.5)
  text = str(err.value)
  assert '\n' not in text
  assert 'float64 intervals' not in text
  return text


def test_range_limits_are_the_formats_largest_finite_numbers():
  f32 = Fraction(float(np.finfo(np.float32).max))
  bf16 = Fraction(float(ml_dtypes.finfo(ml_dtypes.bfloat16).max))
  assert rounding.MATMUL_MODELS['float32'].range_limit == f32
  assert rounding.MATMUL_MODELS['float64'].range_limit == Fraction(np.finfo(np.float64).max)
  assert rounding.MATMUL_MODELS['bfloat16'].range_limit == bf16
  tf32 = rounding.MATMUL_MODELS['tf32']
  assert tf32.range_limit == (2 - Fraction(1, 2 ** 10)) * 2 ** 127
  # rounding to nearest in TF32 / bfloat16 carries the largest float32 up to inf, the limit
  # itself stays finite
  big = np.array([np.finfo(np.float32).max], np.float32)
  for name in ('tf32', 'bfloat16'):
    model = rounding.MATMUL_MODELS[name]
    assert np.isinf(model.reduce_operand(big, 'nearest')[0])
    at = np.array([float(model.range_limit)], np.float32)
    assert model.reduce_operand(at, 'nearest')[0] == at[0]


@pytest.mark.parametrize('arithmetic', LOW)
def test_one_unit_that_overflows_is_refused(arithmetic):
  """W_1 = b_1 = 3e38, W_2 = 1e-37: fl(W_1 x + b_1) = inf for x > 0.14 in float32 (checked
  here in NumPy), so fl(g) = inf on most of the cube; it used to be certified at 67.4."""
  x = np.float32(0.5)
  with np.errstate(over='ignore'):
    assert np.isinf(np.float32(3e38) * x + np.float32(3e38))
  net = {'blocks': [_ff([[3e38]], [3e38], [[1e-37]], [0.0])]}
  text = _refused(net, arithmetic, 1, 1)
  assert 'block 0 feed-forward' in text and 'W_1 z + b_1' in text
  assert 'overflow' in text


def _two_products_net():
  """d = 2, n = 1: one dot product 2e38 x_1 + 2e38 x_2 of two finite binary32 products that
  overflows in any order where x_1 + x_2 > 1.7."""
  return {'blocks': [_ff([[2e38, 2e38]], [0.0], [[1e-38], [0.0]], [0.0, 0.0])]}


def test_two_finite_products_that_overflow_in_any_order_are_refused():
  a = np.float32(2e38) * np.float32(0.9)
  assert np.isfinite(a)
  with np.errstate(over='ignore'):
    assert np.isinf(a + a)
  for arithmetic in LOW:
    text = _refused(_two_products_net(), arithmetic, 2, 1)
    assert 'block 0 feed-forward, W_1 z + b_1' in text


def test_the_hand_built_network_followed_by_an_overflowing_block_is_refused():
  """The audit's network: the hand-built product network, then FF blocks that add 2e38 to
  the second coordinate and a dot product of it with a bias 2e38 (finite terms, inf sum)."""
  hb = hand_built.hand_built_product_network(8, n=3).net.as_dict()
  hb['blocks'] += [_ff([[0.0, 0.0]], [1.0], [[0.0], [2e38]], [0.0, 0.0]),
                   _ff([[0.0, 1.0]], [2e38], [[0.0], [0.0]], [0.0, 0.0])]
  z2 = np.float32(0.5) + np.float32(2e38)
  with np.errstate(over='ignore'):
    assert np.isinf(z2 * np.float32(1) + np.float32(2e38))
  for arithmetic in LOW:
    text = _refused(hb, arithmetic, 1, 3, target='token_times_mean')
    assert 'block 2 feed-forward, W_1 z + b_1' in text


@pytest.mark.parametrize('arithmetic', LOW)
def test_a_network_just_below_the_limit_is_certified(arithmetic):
  """W_1 = b_1 = 1.6e38: the largest partial sum 3.2e38 (plus its deviation) stays below
  every limit; the certificate is finite and above a NumPy float32 run's error."""
  net = {'blocks': [_ff([[1.6e38]], [1.6e38], [[1e-37]], [0.0])]}
  cert = certify_network('prefix_mean', net, d=1, n=1, arithmetic=arithmetic,
                         epsilon=1e3, max_minutes=0.5)
  assert math.isfinite(float(cert.total))
  x = np.linspace(0, 1, 4097, dtype=np.float32)
  w = np.float32(1.6e38)
  y = x + np.maximum(w * x + w, 0) * np.float32(1e-37)
  assert np.all(np.isfinite(y))
  measured = math.sqrt(float(np.mean((y.astype(np.float64) - x.astype(np.float64)) ** 2)))
  assert measured <= float(cert.total)


def test_a_weight_that_overflows_when_stored_is_named():
  net = {'blocks': [_ff([[4e38]], [0.0], [[1.0]], [0.0])]}
  text = _refused(net, 'float32', 1, 1)
  assert 'blocks.0.W_1' in text and 'inf when stored in binary32' in text
  # finite in binary32, but above the largest TF32 / bfloat16 operand
  top = float(np.finfo(np.float32).max)
  net = {'blocks': [_ff([[top]], [0.0], [[1e-38]], [0.0])]}
  for arithmetic in ('tf32', 'bfloat16'):
    text = _refused(net, arithmetic, 1, 1)
    assert 'blocks.0.W_1' in text and f'largest finite {arithmetic} operand' in text


def test_check_range_refuses_nan_and_the_limit_itself():
  fm = float_deviation.Model(rounding.MATMUL_MODELS['float32'])
  limit = float(np.finfo(np.float32).max)
  fm.check_range(np.array([np.nextafter(limit, 0)]), 'ok')
  for bad in (limit, np.inf, np.nan):
    with pytest.raises(ValueError, match='at the input, here'):
      fm.check_range(np.array([1.0, bad]), 'here')


def test_a_box_whose_bound_reaches_the_limit_is_split_not_refused():
  """Only a box's bound reaches the float32 range: LayerNorm over the whole cube (a variance
  near 0 in the box) gives an unbounded D there, though no point overflows. The box is
  marked (D = inf), the certifier splits it, and the network is certified; a refusal needs
  an overflow at a box's centre point."""
  net = random_net(0, scale=0.2, width=3, causal=False, activation='relu', final_ln=False,
                   positional=False)
  model = rounding.MATMUL_MODELS['float32']
  root = iv.box(np.zeros((1, 3, 1)), np.ones((1, 3, 1)))
  marks = []
  _, dev = network_enclosure.enclose(net, root, model, marks=marks)
  assert len(marks) == 1 and '\n' not in marks[0] and np.isinf(dev).all()
  with pytest.raises(ValueError, match='can overflow'):
    network_enclosure.enclose(net, root, model)            # unmarked: refused
  _, dev_c = network_enclosure.enclose(net, iv.point(np.full((1, 3, 1), 0.5)), model)
  assert np.isfinite(dev_c).all()                          # the centre is fine
  cert = certify_network('token_times_mean', net.as_dict(), d=1, n=3, arithmetic='float32',
                         epsilon=1e3, max_minutes=0.5)
  assert cert.reached
  assert math.isfinite(float(cert.total))


def test_a_jacobian_that_overflows_the_certifier_is_named_as_such():
  """W_Q = W_K = 1e154: scores up to 1e308 stay finite in the float64 run (no overflow to
  refuse), but the interval softmax's derivative does not: the line says so instead of
  'the network's values overflow float64 intervals'."""
  big = np.array([[[1e154]]])
  net = {'blocks': [{'W_Q': big, 'W_K': big, 'W_V': np.ones((1, 1, 1)),
                     'W_O': np.ones((1, 1, 1))}]}
  with pytest.raises(ValueError, match='interval Jacobian of g overflows') as err:
    certify_network('prefix_mean', net, d=1, n=2, arithmetic='float64', max_minutes=0.05)
  assert '\n' not in str(err.value) and 'values overflow' not in str(err.value)
