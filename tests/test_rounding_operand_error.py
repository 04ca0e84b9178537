"""The per-entry operand reduction of rounding.py (***) against exact emulation: the frexp
reduction is the bit reduction, the binade bound holds on every storage number and half of
it does not, the interval bound holds on every float32 of small intervals (enumerated), the
jnp version is the NumPy one, and the certifier's D with it covers every emulated run of
the hand-built network (tests/low_precision_runs.py: every order and rounding)."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import low_precision_runs  # noqa: E402

from transformer_ua import rounding  # noqa: E402
from transformer_ua.certify import float_deviation, hand_built, network_enclosure  # noqa: E402
from transformer_ua.certify import intervals as iv  # noqa: E402
from transformer_ua.certify.box_bound import reduced_networks  # noqa: E402
from transformer_ua.networks import network_apply, network_dict  # noqa: E402

MODELS = [rounding.MATMUL_MODELS[n] for n in ('tf32', 'bfloat16')]
ALL = MODELS + [m.with_nearest_operands() for m in MODELS]


def _errors(model, y32):
  """max over the allowed modes of |fl_op(y) - y|, y float32 (the bit emulation)."""
  modes = ('nearest',) if model.operand_mode == 'nearest' else ('nearest', 'truncate')
  y = y32.astype(np.float64)
  return np.max([np.abs(model.reduce_operand(y32, m).astype(np.float64) - y) for m in modes],
                axis=0)


def _samples(rng, count=100_000):
  x = rng.standard_normal(count) * np.exp(rng.uniform(-30, 30, count))
  return np.concatenate([x, [1.0, 0.5, 1 / 3, -0.75, 2.0 ** -126, 0.0]]).astype(np.float32)


@pytest.mark.parametrize('model', MODELS, ids=lambda m: m.name)
def test_the_frexp_reduction_is_the_bit_reduction(model):
  y = _samples(np.random.default_rng(0))
  for mode in ('nearest', 'truncate'):
    assert np.array_equal(model._reduce_f(y.astype(np.float64), mode),
                          model.reduce_operand(y, mode).astype(np.float64))


@pytest.mark.parametrize('model', ALL, ids=lambda m: f'{m.name}:{m.operand_mode or "both"}')
def test_the_binade_bound_holds_and_half_of_it_does_not(model):
  y = _samples(np.random.default_rng(1))
  err = _errors(model, y)
  bound = model.operand_ulp_error(np.abs(y.astype(np.float64)))
  assert np.all(err <= bound)
  assert np.any(err > bound / 2)               # one bit fewer in the model breaks it
  # never above the relative model v |y| + tau, and up to 2x below it
  rel = float(model.operand_rel) * np.abs(y.astype(np.float64)) + float(model.tiny)
  assert np.all(bound <= rel) and np.min(bound / rel) < 0.51


def _float32_between(lo, hi):
  """Every float32 in [lo, hi] (lo <= hi floats of one sign or zero), enumerated."""
  a, b = np.float32(lo), np.float32(hi)
  if a < 0 < b or (a < 0 and b == 0):
    return np.concatenate([-_float32_between(0.0, -lo)[::-1], _float32_between(0.0, hi)])
  sign = -1 if a < 0 else 1
  lo_, hi_ = sorted((abs(a), abs(b)))
  i = np.arange(np.array(lo_, np.float32).view(np.int32), np.array(hi_, np.float32).view(
      np.int32) + 1, dtype=np.int32)
  return sign * i.view(np.float32)


INTERVALS = [(1 / 3, 1 / 3), (0.5, 0.5), (0.0, 0.0), (0.333, 0.3334), (0.999, 1.0),
             (1.0, 1.0001), (0.49999, 0.50001), (-0.25, -0.2499), (-1e-40, 1e-40),
             (2.0 ** -126, 2.0 ** -126 * 1.001), (1e-39, 1.1e-39), (0.75, 0.75 + 2.0 ** -12),
             (0.7, 0.70001), (123.4, 123.5)]


@pytest.mark.parametrize('model', ALL, ids=lambda m: f'{m.name}:{m.operand_mode or "both"}')
def test_the_interval_bound_holds_on_every_float32_of_the_interval(model):
  rng = np.random.default_rng(2)
  cases = list(INTERVALS)
  for _ in range(40):                           # random narrow intervals, some exact-path
    c = rng.uniform(-2, 2) * 2.0 ** rng.integers(-8, 8)
    w = abs(c) * 2.0 ** rng.integers(-24, -8)
    cases.append((c - w, c + w))
  exact_used = 0
  for lo, hi in cases:
    ys = _float32_between(lo, hi)
    ys = ys[(ys.astype(np.float64) >= lo) & (ys.astype(np.float64) <= hi)]
    bound = float(model.operand_error(np.array([lo]), np.array([hi]))[0])
    if len(ys):
      assert float(np.max(_errors(model, ys))) <= bound, (lo, hi)
    a = max(abs(lo), abs(hi))
    exact_used += bound < float(model.operand_ulp_error(np.array([a]))[0])
  assert exact_used >= 5                        # the exact path is exercised
  # a number of the operand format costs tau, 1/3 its own distance
  assert float(model.operand_error(np.array([0.5]), np.array([0.5]))[0]) <= 2 * float(
      model.tiny)
  third = np.array([np.float32(1 / 3)])
  gap = float(_errors(model, third)[0])
  t64 = third.astype(np.float64)
  assert gap <= float(model.operand_error(t64, t64)[0]) <= gap + 2 * float(model.tiny) + \
      1e-12 * gap


def test_the_jnp_version_is_the_numpy_one():
  import jax
  import jax.numpy as jnp
  rng = np.random.default_rng(3)
  x = rng.standard_normal(20_000) * np.exp(rng.uniform(-10, 10, 20_000))
  lo, hi = np.sort([x, x * (1 + 1e-4 * rng.random(x.shape))], axis=0)
  with jax.enable_x64(True):
    for model in ALL:
      got = jax.jit(lambda a, b, m=model: m.operand_error(a, b, jnp))(lo, hi)
      assert np.array_equal(np.asarray(got), model.operand_error(lo, hi))


def test_operand_rows():
  w = np.array([[1.0, 0.0], [0.0, -0.25], [3.0, 0.0], [1.0, 1.0], [0.0, 0.0], [0.5, 0.0]])
  b = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.1])
  assert float_deviation.operand_rows(w, None).tolist() == [True, True, False, False, False,
                                                            True]
  assert float_deviation.operand_rows(w, b).tolist()[-1] is False


def _adversarial_points(rng, count):
  x = rng.random((count, 3, 1))
  near = np.array([1.0, 0.5, 0.25, 0.75, 1 / 3, 0.125])
  k = count // 3
  x[:k] = rng.choice(near, (k, 3, 1)) - rng.choice([0.0, 1e-7, 3e-4], (k, 3, 1))
  x[k:k + 4] = [[[1.0]] * 3, [[0.0]] * 3, [[1 - 2 ** -24]] * 3, [[0.5]] * 3]
  return np.clip(x, 0.0, 1.0)


@pytest.mark.parametrize('arithmetic', ['tf32', 'bfloat16', 'tf32:nearest', 'bfloat16:nearest',
                                        'tf32-a100', 'tf32-h100:nearest'])
def test_the_hand_built_deviation_bounds_every_emulated_run(arithmetic):
  """D (per-entry reductions, the representable v^ and z_1^ of the uniform head) against
  every emulated run of the hand-built network, pointwise, adversarial points included."""
  name, nearest = arithmetic.split(':')[0], arithmetic.endswith(':nearest')
  net = network_apply.cast(hand_built.hand_built_product_network(20).net, np.float32)
  model = rounding.MATMUL_MODELS[name]
  nets = reduced_networks(net, model)
  if nearest:
    model, nets = model.with_nearest_operands(), nets[:1]
  model = model.with_weights_reduced()
  x = _adversarial_points(np.random.default_rng(4), 90)
  worst = 0.0
  for mode, variant in zip(('nearest', 'truncate'), nets):
    _, dev = network_enclosure.enclose(variant, iv.point(x), model)
    exact = network_apply.apply(variant, x, np.float64)
    for way in low_precision_runs.ways(name):
      if way[0] != mode:
        continue
      y = low_precision_runs.run(net, x, name, mode=way[0], order=way[1], accumulate=way[2])
      err = np.abs(y - exact)
      assert np.all(err <= dev), (way, float(np.max(err - dev)))
      worst = max(worst, float(np.max(err / dev)))
  assert worst > 0.1                            # the bound is near the runs, not vacuous


@pytest.mark.slow
def test_the_kernel_contains_the_reference_with_exact_weights():
  """The box kernel's D with the per-entry reductions (split model) contains the NumPy
  reference's and is within 1e-8 of it, on dyadic boxes of the hand-built network (the
  feed-forward's Jacobian form included). Slow: one kernel compile."""
  from transformer_ua.certify import box_kernel
  net = network_apply.cast(hand_built.hand_built_product_network(20).net, np.float32)
  model = rounding.MATMUL_MODELS['bfloat16']
  variant = reduced_networks(net, model)[1]
  model = model.with_weights_reduced()
  rng = np.random.default_rng(5)
  k = 2 ** rng.integers(0, 7, size=(128, 3, 1))
  i = np.floor(rng.random((128, 3, 1)) * k)
  lo, hi = i / k, (i + 1) / k
  _, _, dev = box_kernel.kernel_for(variant, model, batch=128).enclose(lo, hi)
  _, ref = network_enclosure.enclose(variant, iv.box(lo, hi), model)
  assert np.all(dev >= ref) and np.all(dev <= ref * (1 + 1e-8) + 1e-300)
  # z' = z - ReLU(z + 1): I + W_2 W_1 = 0, the reduction of z still passes (|W_2 W_1| = 1)
  cancel = network_apply.cast(network_dict.check(
      {'blocks': [{'W_1': np.array([[1.0]]), 'b_1': np.array([1.0]),
                   'W_2': np.array([[-1.0]]), 'b_2': np.array([0.0])}]}, d=1, n=1),
      np.float32)
  lo1, hi1 = lo[:, :1], hi[:, :1]
  _, _, dev = box_kernel.kernel_for(cancel, model, batch=128).enclose(lo1, hi1)
  _, ref = network_enclosure.enclose(cancel, iv.box(lo1, hi1), model)
  assert np.all(dev >= ref) and np.all(ref >= 2.0 ** -8 * 2.0 ** np.floor(np.log2(hi1)))


def test_a_kernel_is_cached_per_model_not_per_name():
  """kernel_for keys on the whole model: the conservative tf32 model and the probed nearest
  one (same name, half the operand bound) never share a compiled kernel (jit is lazy: no
  compile here)."""
  from transformer_ua.certify import box_kernel
  net = network_apply.cast(hand_built.hand_built_product_network(20).net, np.float32)
  both = rounding.MATMUL_MODELS['tf32'].with_weights_reduced()
  nearest = rounding.MATMUL_MODELS['tf32'].with_nearest_operands().with_weights_reduced()
  a = box_kernel.kernel_for(net, nearest, batch=64)
  b = box_kernel.kernel_for(net, both, batch=64)
  assert a is not b and b.model == both and box_kernel.kernel_for(net, both, batch=64) is b


def test_one_network_where_both_reductions_agree_keeps_both_activation_modes():
  """The hand-built weights are TF32 numbers: the evaluator keeps one network, but its model
  still allows truncated activations (v = 2^-10), unlike a probed nearest runtime."""
  from transformer_ua.certify import box_bound
  net = network_apply.cast(hand_built.hand_built_product_network(20).net, np.float32)
  fside = box_bound.FSide(None, None)
  ev = box_bound.Evaluator(net, fside, 'tf32')
  assert len(ev.nets) == 1 and ev.model.operand_rel == rounding.MATMUL_MODELS['tf32'].operand_rel
  assert ev.model.operand_mode == '' and ev.model.weights_exact
  probed = box_bound.Evaluator(net, fside, 'tf32', 'nearest')
  assert probed.model.operand_rel == ev.model.operand_rel / 2
  assert len(box_bound.Evaluator(net, fside, 'bfloat16').nets) == 2
