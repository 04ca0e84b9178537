"""transformer_ua.train.tasks: the task objects beside each other, chosen once by name."""

import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua.train import loop
from transformer_ua.train.tasks import fang_task, mixing_finetune, mixing_pretrain, steps


def test_finetune_tasks_by_name():
  assert tuple(mixing_finetune.TASKS) == ('mnli', 'squad')
  assert isinstance(mixing_finetune.task('mnli'), mixing_finetune.Relations)
  assert isinstance(mixing_finetune.task('squad'), mixing_finetune.Spans)
  with pytest.raises(ValueError, match="unknown fine-tuning task 'glue'; choose one of "
                                       r"\('mnli', 'squad'\)"):
    mixing_finetune.task('glue')


def test_every_finetune_task_supplies_the_whole_protocol():
  for cls in mixing_finetune.TASKS.values():
    for name in ('data', 'model', 'loss', 'scores'):
      assert getattr(cls, name) is not getattr(mixing_finetune.Finetune, name), (cls, name)


def test_the_loop_tasks_answer_its_one_protocol():
  """Fang's epoch and the BERT runs' step: both are what train.loop.run trains."""
  for task in (fang_task.FangRegression, steps.Steps):
    for name in ('train_epoch', 'evaluate'):
      assert callable(getattr(task, name)) and hasattr(loop.Task, name)


def test_relations_loss_is_the_mean_cross_entropy():
  logits = jnp.array([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
  labels = jnp.array([0, 2])
  loss, m = mixing_finetune.Relations().loss(logits, {'labels': labels})
  ll = -np.log(np.exp(np.asarray(logits))[np.arange(2), [0, 2]]
               / np.exp(np.asarray(logits)).sum(-1))
  np.testing.assert_allclose(loss, ll.mean(), rtol=1e-6)
  assert float(m['accuracy']) == 0.5 and m['loss'] is loss


def test_spans_loss_ignores_positions_outside_the_context():
  s = jnp.array([[0.0, 5.0, 0.0]])
  e = jnp.array([[0.0, 0.0, 5.0]])
  batch = {'context_mask': jnp.array([[True, False, True]]), 'starts': jnp.array([0]),
           'ends': jnp.array([2])}
  loss, m = mixing_finetune.Spans().loss((s, e), batch)
  # start: two allowed positions, equal logits -> log 2; end: softmax over {0, 5}.
  want = 0.5 * (np.log(2.0) + np.log1p(np.exp(-5.0)))
  np.testing.assert_allclose(loss, want, rtol=1e-5)
  assert float(m['start_accuracy']) == 1.0


def test_weighted_losses_skip_zero_weights():
  logits = jnp.array([[0.0, 3.0], [3.0, 0.0]])
  labels = jnp.array([1, 1])
  w = jnp.array([1.0, 0.0])
  assert float(mixing_pretrain.accuracy(logits, labels, w)) == 1.0
  np.testing.assert_allclose(mixing_pretrain.xent(logits, labels, w), np.log1p(np.exp(-3.0)),
                             rtol=1e-5)


def test_subsample_is_sorted_and_seeded():
  a = mixing_finetune.subsample(100, 10, 1)
  assert len(a) == 10 and list(a) == sorted(a)
  np.testing.assert_array_equal(a, mixing_finetune.subsample(100, 10, 1))
  np.testing.assert_array_equal(mixing_finetune.subsample(5, 0, 1), np.arange(5))
  np.testing.assert_array_equal(mixing_finetune.subsample(5, 9, 1), np.arange(5))
