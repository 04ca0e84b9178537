"""The whole-epoch training path (fang.epoch) against the per-step path of the Fang
task on the training loop (train.fang_regression): same batches, same losses up to float summation order, resume of a
per-step checkpoint on the whole-epoch path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fang_tiny
from transformer_ua.fang import epoch, regression
from transformer_ua.train import fang_regression as fang_training


def tiny_config(**kw):
  return fang_tiny.tiny_config(**{'grad_chunk': 500, **kw})


def _rel(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-30)))


@pytest.mark.parametrize('model', ['attention', 'nn_width', 'nn_depth'])
def test_scan_epoch_matches_per_step_losses(tmp_path, model):
  """A few epochs of f1 (float32) on both paths: same batches, same losses to ~1e-6
  (the scan path also sums its gradient in chunks of 250 rows instead of 500)."""
  kw = dict(model=model, num_tokens=4 if model == 'attention' else 10, epochs=4)
  per_step = fang_training.train_and_evaluate(tiny_config(**kw), str(tmp_path / 'a'),
                                              progress=False)
  scan = fang_training.train_and_evaluate(
      tiny_config(train_epoch='scan', grad_chunk=250, **kw), str(tmp_path / 'b'),
      progress=False)
  assert scan['train_epoch'] == 'scan' and per_step['train_epoch'] == 'per_step'
  a = [h['train_mse'] for h in per_step['history']]
  b = [h['train_mse'] for h in scan['history']]
  assert len(a) == len(b) == 4
  assert _rel(b, a) < 2e-6, (a, b)
  assert _rel(scan['mse_test'], per_step['mse_test']) < 2e-6
  for u, v in zip(jax.tree_util.tree_leaves(scan['final_params']),
                  jax.tree_util.tree_leaves(per_step['final_params'])):
    np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6 * float(np.max(np.abs(v))))


def test_tokens_scan_epoch_uses_the_same_batches_as_the_loop():
  """One epoch of the scan path equals the per-step jitted steps on the host-drawn
  order (batch of 2000 + the last of 1000 from 9000 rows: 4 full + 1 short)."""
  c = tiny_config(train_epoch='scan', batch_size=2000)
  data = regression.make_data('f1', 0)
  x, y = data['x_train'].astype(np.float32), data['y_train'].astype(np.float32)
  tx, _ = regression.make_optimizer(c, 5)
  p = regression.init_params(jax.random.PRNGKey(0), model='attention', d=2, q=2,
                             num_tokens=4, depth_width=4)
  def new():   # fresh copies: both paths donate their state
    q = jax.tree_util.tree_map(lambda a: jnp.array(a, copy=True), p)
    return {'params': q, 'opt_state': tx.init(q), 'step': jnp.zeros((), jnp.int32)}
  state, m = epoch.make_train_epoch(c, tx, x, y)(new(), np.random.default_rng([0, 3]))
  step = regression.make_train_step('attention', tx, c.grad_chunk)
  order = np.random.default_rng([0, 3]).permutation(9000)
  ref, losses = new(), []
  for s in range(5):
    idx = order[s * 2000:(s + 1) * 2000]
    ref, loss = step(ref, {'x': jnp.asarray(x[idx]), 'y': jnp.asarray(y[idx])})
    losses.append(float(loss))
  assert list(m['sizes']) == [2000] * 4 + [1000]
  assert _rel(m['losses'], losses) < 1e-6
  assert int(state['step']) == 5
  for u, v in zip(jax.tree_util.tree_leaves(state['params']),
                  jax.tree_util.tree_leaves(ref['params'])):
    np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-7)


def test_per_step_checkpoint_resumes_on_the_scan_path(tmp_path):
  c = tiny_config()
  full = fang_training.train_and_evaluate(c, str(tmp_path / 'full'), progress=False)
  part = fang_training.train_and_evaluate(c, str(tmp_path / 'mixed'), stop_after_epochs=3,
                                          progress=False)
  assert not part['complete'] and part['epochs_done'] == 3
  resumed = fang_training.train_and_evaluate(
      tiny_config(train_epoch='scan', grad_chunk=250), str(tmp_path / 'mixed'),
      progress=False)
  assert resumed['complete'] and resumed['epochs_done'] == 6
  a = [h['train_mse'] for h in full['history']]
  b = [h['train_mse'] for h in resumed['history']]
  assert a[:3] == b[:3]                 # restored history, untouched
  assert _rel(b, a) < 2e-6
  assert _rel(resumed['mse_test'], full['mse_test']) < 2e-6


def test_bad_epoch_flags_one_line():
  with pytest.raises(ValueError, match=r"train_epoch='fast'; allowed: \('per_step', 'scan'\)"):
    regression.validate_config(tiny_config(train_epoch='fast'))


def test_adam_deviation_config_trains_and_rejects_unknown_optimizers(tmp_path):
  from experiments.configs import fang_f2_adam  # pylint: disable=g-import-not-at-top
  c = fang_f2_adam.get_config()
  assert c.optimizer == 'adam' and c.target == 'f2' and c.epochs == 2000
  r = fang_training.train_and_evaluate(tiny_config(optimizer='adam', train_epoch='scan'),
                                       str(tmp_path / 'adam'), progress=False)
  sgd = fang_training.train_and_evaluate(tiny_config(train_epoch='scan'),
                                         str(tmp_path / 'sgd'), progress=False)
  assert r['complete'] and r['history'][-1]['train_mse'] != sgd['history'][-1]['train_mse']
  with pytest.raises(ValueError, match=r"optimizer='rmsprop'; allowed: \('sgd', 'adam'\)"):
    regression.validate_config(tiny_config(optimizer='rmsprop'))
