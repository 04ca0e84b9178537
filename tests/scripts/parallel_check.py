"""Run with XLA_FLAGS=--xla_force_host_platform_device_count=8 (see test_parallel.py).

Prints a JSON line: sharded vs single-device results of a data-parallel training run.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax

from transformer_ua import parallel


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
  out = {'devices': len(jax.devices())}
  out['loss_sharded'] = train(parallel.make_mesh())
  out['loss_single'] = train(parallel.make_mesh(1))
  try:
    parallel.shard_batch(np.zeros((9, 2)), parallel.make_mesh())
    out['indivisible_error'] = ''
  except ValueError as e:
    out['indivisible_error'] = str(e)
  print(json.dumps(out))
