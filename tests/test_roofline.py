"""benchmarks/roofline.py on programs whose cost is known by hand, and
benchmarks/fang_epoch_cost.py end to end on the tiny Fang config."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fang_tiny
from transformer_ua.fang import epoch, regression

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
import roofline  # pylint: disable=wrong-import-position

M, K, N = 64, 32, 16
A, B = jnp.ones((M, K), jnp.float32), jnp.ones((K, N), jnp.float32)


def test_matmul_costs_2mnk_flops_and_its_operands_bytes():
  cost = roofline.program_cost(lambda a, b: a @ b, A, B)
  assert cost == {'flops': 2 * M * N * K, 'bytes': 4 * (M * K + K * N + M * N)}


def _nested(a, b, outer=3, inner=10):
  """outer x inner iterations of c <- c + a @ b."""
  def body(c, _):
    return c + a @ b, None

  def outer_body(c, _):
    return jax.lax.scan(body, c, None, length=inner)[0], None

  return jax.lax.scan(outer_body, jnp.zeros((M, N), jnp.float32), None, length=outer)[0]


def test_scan_loops_are_counted_per_iteration():
  per_iteration = 2 * M * N * K + M * N              # the matmul and the carry's add
  cost = roofline.program_cost(_nested, A, B)
  # + at most 2 FLOPs per iteration for the loop counters.
  assert 0 <= cost['flops'] - 30 * per_iteration <= 2 * 33, cost
  # What XLA's cost analysis alone says: one iteration of each loop (why the jaxpr is
  # walked). If XLA starts counting trip counts, this fails: drop the correction then.
  once = roofline.xla_cost(jax.make_jaxpr(_nested)(A, B))
  assert 0 <= once['flops'] - per_iteration <= 2 * 2, once


def test_loops_without_a_countable_trip_count_are_refused():
  def while_loop(a):
    return jax.lax.while_loop(lambda c: c[0, 0] < 5.0, lambda c: c + 1.0, a)

  with pytest.raises(ValueError, match='while loop'):
    roofline.program_cost(while_loop, A)

  def scan_in_cond(a, b):
    return jax.lax.cond(a[0, 0] > 0, _nested, lambda a, b: a @ b, a, b)

  with pytest.raises(ValueError, match='cond'):
    roofline.program_cost(scan_in_cond, A, B)


def test_bound_is_the_larger_of_compute_and_memory_time():
  # 4e9 FLOPs at 2 GFLOP/s = 2 s; 3e9 bytes at 1 GB/s = 3 s (memory-bound) ...
  assert roofline.bound_seconds(4e9, 3e9, 2.0, 1.0) == pytest.approx(3.0)
  # ... and at 10 GB/s = 0.3 s (compute-bound).
  assert roofline.bound_seconds(4e9, 3e9, 2.0, 10.0) == pytest.approx(2.0)


def _tiny_step_and_state(grad_chunk):
  c = fang_tiny.tiny_config(grad_chunk=grad_chunk)
  tx, _ = regression.make_optimizer(c, 5)
  p = regression.init_params(jax.random.PRNGKey(0), model='attention', d=2, q=2,
                             num_tokens=4, depth_width=4)
  state = {'params': p, 'opt_state': tx.init(p), 'step': jnp.zeros((), jnp.int32)}
  return c, tx, regression.make_train_step('attention', tx, grad_chunk), state


def _spec(tree):
  return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)


def test_fang_chunked_gradient_costs_its_unrolled_chunks():
  """The batch gradient of 2000 rows summed by a scan over 8 chunks of 250 (which XLA
  alone counts once) costs what XLA counts for the same 8 chunks unrolled in Python
  (straight-line code, every chunk counted): FLOPs to 0.1%, bytes (fused differently)
  to 10%."""
  _, _, _, state = _tiny_step_and_state(250)
  params = state['params']
  x, y = jnp.linspace(0, 1, 4000).reshape(2000, 2), jnp.linspace(-1, 1, 2000)
  f = regression.apply_fn('attention')
  value_and_grad = jax.value_and_grad(lambda p, x, y: jnp.sum((f(p, x) - y) ** 2))

  def unrolled(p, x, y):
    total, grads = 0.0, jax.tree_util.tree_map(jnp.zeros_like, p)
    for i in range(0, 2000, 250):
      l, g = value_and_grad(p, x[i:i + 250], y[i:i + 250])
      total, grads = total + l, jax.tree_util.tree_map(jnp.add, grads, g)
    return total / 2000, jax.tree_util.tree_map(lambda a: a / 2000, grads)

  for u, v in zip(jax.tree_util.tree_leaves(unrolled(params, x, y)),   # the same function
                  jax.tree_util.tree_leaves(
                      regression.batch_loss_and_grad('attention', 250)(params, x, y))):
    np.testing.assert_allclose(u, v, rtol=1e-5)
  scanned = roofline.program_cost(regression.batch_loss_and_grad('attention', 250),
                                  params, x, y)
  known = roofline.xla_cost(jax.make_jaxpr(unrolled)(params, x, y))
  assert scanned['flops'] == pytest.approx(known['flops'], rel=1e-3)
  assert scanned['bytes'] == pytest.approx(known['bytes'], rel=0.1)
  once = roofline.xla_cost(jax.make_jaxpr(
      regression.batch_loss_and_grad('attention', 250))(params, x, y))
  assert once['flops'] < 0.2 * known['flops']          # XLA alone: ~1 chunk of 8


def test_fang_epoch_program_costs_the_sum_of_its_steps():
  """The whole-epoch program on 9000 rows (4 batches of 2000, one of 1000) costs the
  FLOPs of its 5 steps plus the gathers' index arithmetic: x[idx] and y[idx] wrap
  negative indices, where(idx < 0, idx + N, idx), 3 elementwise ops each, 6 per row."""
  c, tx, step, state = _tiny_step_and_state(500)
  data = regression.make_data('f1', 0)
  x, y = data['x_train'].astype(np.float32), data['y_train'].astype(np.float32)
  assert x.shape == (9000, 2)
  program = epoch.make_train_epoch(c, tx, x, y).program
  whole = roofline.program_cost(program, _spec(state), _spec(x), _spec(y),
                                jax.ShapeDtypeStruct((9000,), jnp.int32))
  steps = [roofline.program_cost(step, _spec(state),
                                 _spec({'x': x[:b], 'y': y[:b]}))['flops']
           for b in (2000, 1000)]
  assert whole['flops'] == pytest.approx(4 * steps[0] + steps[1] + 6 * 9000, rel=1e-3)


@pytest.mark.slow
def test_fang_epoch_cost_runs_end_to_end(tmp_path):
  """One tiny model: every path timed, with its FLOPs, bytes and bounds consistent."""
  out = tmp_path / 'fang_epoch_cost.json'   # its fixed name in --output_dir
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'benchmarks', 'fang_epoch_cost.py'),
       '--config=experiments/configs/fang_f1.py', '--config.batch_size=2000',
       '--only_entries=nn_depth', '--rounds=1', '--grad_chunk=250',
       f'--output_dir={tmp_path}'],
      capture_output=True, text=True, timeout=600, cwd=ROOT, env=env, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  r = json.loads(out.read_text())
  assert r['machine_peak_matmul_gflops'] > 0 and r['machine_stream_gbps'] > 0
  assert r['machine_nominal_fma_gflops'], 'this machine reports avx2, fma and a clock'
  (row,) = r['rows']
  assert row['entry'] == 'nn_depth' and set(row['paths']) == {'per_step', 'per_step_chunk',
                                                               'scan'}
  for v in row['paths'].values():
    t = v['seconds_per_epoch']
    assert v['bound_seconds'] == pytest.approx(max(
        v['flops_per_epoch'] / (r['machine_peak_matmul_gflops'] * 1e9),
        v['bytes_per_epoch'] / (r['machine_stream_gbps'] * 1e9)))
    assert v['time_over_bound'] == pytest.approx(t / v['bound_seconds'])
    assert v['achieved_gflops'] == pytest.approx(v['flops_per_epoch'] / t / 1e9)
    assert v['bound_seconds_optimistic'] == pytest.approx(max(
        v['flops_per_epoch'] / (r['machine_nominal_fma_gflops'] * 1e9),
        v['bytes_per_epoch'] / (r['machine_cache_stream_gbps'] * 1e9)))
  flops = [v['flops_per_epoch'] for v in row['paths'].values()]
  assert max(flops) < 1.05 * min(flops)                 # the same work on every path
  assert 'roofline: per_step' in proc.stdout
