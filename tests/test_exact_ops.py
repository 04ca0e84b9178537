"""exact.ops: ExactOps across int32, int64 and limb arithmetics."""

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua.exact import planner


def test_exact_ops_elementwise_and_reductions_agree_across_arithmetics():
  """ExactOps' sweep operations (the former yun.stages.sweep.Ops): int32, int64 and limbs give
  the same integers, and ``convert`` moves values between them exactly."""
  from transformer_ua.exact.ops import ExactOps  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  a = rng.integers(-10 ** 6, 10 ** 6, size=(4, 5)).astype(object)
  b = rng.integers(-10 ** 6, 10 ** 6, size=(4, 5)).astype(object)
  spec = planner.plan(2 ** 80, 'limbs').spec
  with jax.enable_x64(True):
    i64, i32, lim = ExactOps(None), ExactOps(None, jnp.int32), ExactOps(spec)
    for ops in (i64, i32, lim):
      x, y = ops.const(a), ops.const(b)
      got = {'max': ops.maximum(x, y), 'min': ops.minimum(x, y), 'gt': ops.gt(x, y),
             'lt': ops.lt(x, y), 'rmax': ops.reduce_max(x), 'rmin': ops.reduce_min(x),
             'rsum': ops.reduce_sum(x), 'mul': ops.mul(x, 3), 'sub': ops.sub(x, y)}
      want = {'max': np.maximum(a, b), 'min': np.minimum(a, b), 'gt': a > b, 'lt': a < b,
              'rmax': a.max(axis=0), 'rmin': a.min(axis=0), 'rsum': a.sum(axis=0),
              'mul': a * 3, 'sub': a - b}
      for key, val in got.items():
        val = np.asarray(val) if key in ('gt', 'lt') else ops.to_python(val)
        np.testing.assert_array_equal(val, want[key], err_msg=f'{ops} {key}')
    np.testing.assert_array_equal(lim.to_python(lim.convert(i32.const(a), i32)), a)
    np.testing.assert_array_equal(np.asarray(i32.convert(lim.const(a), lim)), a.astype(int))
