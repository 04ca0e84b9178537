"""``FangRegression``: the training task of Fang et al. 2022, Section 5 (``train.loop.Task``).

One unit is one epoch of SGD updates over the training set in the order
permutation(seed, epoch); ``evaluate`` is the test (or validation) MSE. The driver is
``train.fang_regression.train_and_evaluate(config, workdir)``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from transformer_ua.fang import epoch as fang_epoch
from transformer_ua.fang.regression import (make_predict, make_train_step, mse, predict,
                                             shard_training_batch)


def epoch_program(config, mesh) -> str:
  """The epoch path a run uses: config.train_epoch, except 'per_step' on a
  multi-device mesh (the whole-epoch program is one device)."""
  return 'per_step' if mesh is not None else config.get('train_epoch', 'per_step')


class FangRegression:
  """Section 5's training unit (one epoch of SGD updates) and its evaluation."""

  def __init__(self, config, data, dtype, tx, lr_fn, mesh):
    self.config, self.data, self.dtype, self.lr_fn, self.mesh = config, data, dtype, lr_fn, mesh
    self.n_train = data['x_train'].shape[0]
    self.steps_per_epoch = -(-self.n_train // config.batch_size)
    self.train_step = make_train_step(config.model, tx, config.grad_chunk, mesh)
    self.predict_fn = make_predict(config.model)
    self.x_train = data['x_train'].astype(np.dtype(dtype))
    self.y_train = data['y_train'].astype(np.dtype(dtype))
    self.scan_epoch = None        # one jit per epoch (fang.epoch) when 'scan'
    if epoch_program(config, mesh) == 'scan':
      self.scan_epoch = fang_epoch.make_train_epoch(config, tx, self.x_train, self.y_train)

  def train_epoch(self, state, epoch):
    config = self.config
    epoch_rng = np.random.default_rng([config.seed, epoch])
    if self.scan_epoch is not None:
      state, m = self.scan_epoch(state, epoch_rng)
      return state, {'train_mse': m['train_mse'],
                     'lr': float(self.lr_fn(int(state['step']) - 1))}
    order = epoch_rng.permutation(self.n_train)
    total, count = 0.0, 0
    for s in range(self.steps_per_epoch):
      idx = order[s * config.batch_size:(s + 1) * config.batch_size]
      if self.mesh is None:
        batch = {'x': jnp.asarray(self.x_train[idx]), 'y': jnp.asarray(self.y_train[idx])}
      else:
        batch = shard_training_batch(self.x_train[idx], self.y_train[idx], self.mesh)
      state, loss = self.train_step(state, batch)
      total += float(loss) * idx.size
      count += idx.size
    return state, {'train_mse': total / count, 'lr': float(self.lr_fn(int(state['step']) - 1))}

  def evaluate(self, state):
    pred = predict(self.predict_fn, state['params'], self.data['x_test'], self.dtype)
    return {'test_mse': mse(pred, self.data['y_test'])}
