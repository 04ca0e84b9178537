"""Fang et al. 2022, Section 5: one compiled program per training epoch.

    train_epoch = make_train_epoch(config, tx, x_train, y_train)
    state, metrics = train_epoch(state, epoch_rng)

``epoch_rng`` is the epoch's host generator, ``np.random.default_rng([seed, epoch])``
-- the one the per-step epoch of the training task draws its order from
(``train.fang_regression``, which takes this path when config.train_epoch == 'scan')
-- so both paths visit the same minibatches in the same order and a run can switch
path at any checkpoint. The host work of an epoch is that one permutation (N ints, one transfer);
then ONE jitted call, with x_train / y_train resident on the device:

    order = epoch_rng.permutation(N)                                  (host, once)
    for s in 0 .. S-1  (lax.scan; S = N // B full batches):
        idx = order[s B : (s+1) B];  state = step(state, x[idx], y[idx])
    if N % B:  state = step(state, x[rest], y[rest])   (the last, smaller batch)
    metrics = {'losses': [per-step batch MSE], 'sizes': [batch sizes],
               'train_mse': sum_s loss_s size_s / N}

``step`` is ``regression.train_step_fn`` (clip, SGD with the one-cycle schedule) with
``regression.batch_loss_and_grad``: the per-step path's own step, so the losses are the
per-step path's up to float summation order (tests/test_fang_epoch.py).

Data parallelism is the per-step path's (``regression.make_train_step`` with a mesh);
this epoch is one device.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua.fang import regression


def make_train_epoch(config, tx, x_train: np.ndarray, y_train: np.ndarray):
  """``train_epoch(state, epoch_rng) -> (state, metrics)`` (module doc); state donated.

  x_train [N, d], y_train [N]: numpy arrays in the run's dtype, put on the device once.
  ``train_epoch.program`` is the jitted (state, x [N, d], y [N], order [N] int32) ->
  (state, losses) program (for cost analysis: benchmarks/fang_epoch_cost.py).
  """
  step = regression.train_step_fn(
      tx, regression.batch_loss_and_grad(config.model, config.grad_chunk))
  x_dev, y_dev = jnp.asarray(x_train), jnp.asarray(y_train)
  n, bsz = x_train.shape[0], int(config.batch_size)
  full, rest = divmod(n, bsz)
  sizes_list = [bsz] * full + ([rest] if rest else [])

  def epoch(state, x, y, order):
    losses = []
    if full:
      def body(st, idx):
        st, loss = step(st, {'x': x[idx], 'y': y[idx]})
        return st, loss
      state, losses = jax.lax.scan(body, state, order[:full * bsz].reshape(full, bsz))
      losses = [losses]
    if rest:
      idx = order[full * bsz:]
      state, loss = step(state, {'x': x[idx], 'y': y[idx]})
      losses.append(loss[None])
    return state, jnp.concatenate(losses)

  compiled = jax.jit(epoch, donate_argnums=0)

  def train_epoch(state, epoch_rng):
    order = jnp.asarray(epoch_rng.permutation(n).astype(np.int32))
    state, losses = compiled(state, x_dev, y_dev, order)
    losses = np.asarray(losses, np.float64)
    total = 0.0
    for loss, size in zip(losses, sizes_list):     # the per-step loop's sum, same order
      total += float(loss) * size
    return state, {'losses': losses, 'sizes': np.asarray(sizes_list), 'train_mse': total / n}

  train_epoch.program = compiled
  return train_epoch
