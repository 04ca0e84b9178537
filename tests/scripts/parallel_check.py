"""Run with XLA_FLAGS=--xla_force_host_platform_device_count=8 (see test_parallel.py).

Prints a JSON line: sharded vs single-device results of a grid reduction and of a
data-parallel training run.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax

from transformer_ua import parallel


def grid_counts(mesh, total, n, d, base):
  """Counts grid points (mixed-radix decoded) whose n tokens are pairwise distinct."""

  @jax.jit
  def count(idx, valid):
    radix = base ** jnp.arange(n * d - 1, -1, -1)
    digits = ((idx[:, None] // radix[None, :]) % base).reshape(-1, n, d)
    same = jnp.all(digits[:, :, None, :] == digits[:, None, :, :], axis=-1)
    distinct = jnp.sum(same, axis=(1, 2)) == n
    return jnp.sum(distinct & valid), jnp.sum(valid)

  good = seen = 0
  for _, idx, valid in parallel.index_chunks(total, 1000, mesh):
    g, s = count(idx, valid)
    good, seen = good + int(g), seen + int(s)
  return good, seen


def train(mesh, steps=20):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 5)).astype(np.float32)
  y = x @ rng.normal(size=(5,)).astype(np.float32) + 0.1
  opt = optax.sgd(0.1)
  state = {'w': jnp.zeros(5), 'b': jnp.zeros(())}
  state = {'params': state, 'opt': opt.init(state)}
  state = parallel.replicate(state, mesh)

  @jax.jit
  def step(state, batch):
    def loss_fn(p):
      return jnp.mean((batch['x'] @ p['w'] + p['b'] - batch['y'])**2)
    loss, g = jax.value_and_grad(loss_fn)(state['params'])
    upd, opt_state = opt.update(g, state['opt'])
    return {'params': optax.apply_updates(state['params'], upd), 'opt': opt_state}, loss

  losses = []
  for _ in range(steps):
    state, loss = step(state, parallel.shard_batch({'x': x, 'y': y}, mesh))
    losses.append(float(loss))
  return losses


if __name__ == '__main__':
  with jax.enable_x64(True):
    full, one = parallel.make_mesh(), parallel.make_mesh(1)
    out = {'devices': len(jax.devices()),
           'grid_sharded': grid_counts(full, 4**6, 3, 2, 4),
           'grid_single': grid_counts(one, 4**6, 3, 2, 4)}
  out['loss_sharded'] = train(parallel.make_mesh())
  out['loss_single'] = train(parallel.make_mesh(1))
  try:
    parallel.shard_batch(np.zeros((9, 2)), parallel.make_mesh())
    out['indivisible_error'] = ''
  except ValueError as e:
    out['indivisible_error'] = str(e)
  print(json.dumps(out))
