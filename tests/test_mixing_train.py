"""transformer_ua.train.mixing: the Appendix H training loops and binaries
(experiments/mixing_*.py) on the WordNet fixture: results, metrics, resume after
interruption, flag errors."""

import json
import os
import subprocess
import sys

import jax
import ml_collections
import numpy as np
import pytest

from experiments.configs import mixing_tiny
from transformer_ua.train import mixing
from transformer_ua.train.checkpointing import Checkpointer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, 'tests', 'fixtures', 'wordnet')


def small_config(tmp_path, **model):
  c = mixing_tiny.get_config()
  c.model.update(dict(max_len=32, hidden=16, num_layers=2, num_heads=2, mlp_dim=32,
                      conv_filters=4, conv_width=5), **model)
  c.data.update(wordnet_dir=FIXTURE, cache_dir=str(tmp_path / 'cache'), vocab_size=300,
                max_predictions=5)
  c.pretrain.update(num_steps=4, batch_size=4, warmup_steps=1, eval_every=4,
                    eval_batches=1, checkpoint_every=2, log_every=1)
  c.finetune.update(num_steps=3, batch_size=4, warmup_steps=1, eval_every=3,
                    checkpoint_every=3, num_eval_examples=12, num_train_examples=40)
  return c


@pytest.fixture(scope='module')
def pre_run(tmp_path_factory):
  """One uninterrupted 4-step pre-training run (a hybrid: sepconv then attention)."""
  tmp = tmp_path_factory.mktemp('pre')
  c = small_config(tmp, mixing='attention', num_conv_layers=1)
  return c, tmp, mixing.pretrain(c, str(tmp / 'full'))


def _params(workdir, step):
  import orbax.checkpoint as ocp
  return ocp.StandardCheckpointer().restore(
      os.path.join(workdir, 'checkpoints', str(step), 'state'))['params']


def test_pretrain_outputs(pre_run):
  _, tmp, pre = pre_run
  assert pre['step'] == 4 and pre['layer_kinds'] == ['sepconv', 'attention']
  assert 0 <= pre['eval']['mlm_accuracy'] <= 100 and pre['train_tokens_per_s'] > 0
  assert pre['provenance']['command'] and pre['provenance']['machine']
  rows = [json.loads(l) for l in open(tmp / 'full' / 'metrics.jsonl')]
  assert [r['step'] for r in rows if 'loss' in r] == [1, 2, 3, 4]
  assert any('eval_mlm_accuracy' in r for r in rows)
  assert (tmp / 'full' / 'curves.png').stat().st_size > 0
  assert os.listdir(tmp / 'full' / 'tensorboard')


def test_interrupted_and_resumed_equals_uninterrupted(pre_run):
  c, tmp, full = pre_run
  c = ml_collections.ConfigDict(c.to_dict())
  c.halt_after = 2                                   # "preempted" after step 2
  mixing.pretrain(c, str(tmp / 'resumed'))
  assert Checkpointer(tmp / 'resumed' / 'checkpoints').latest_step() == 2
  c.halt_after = -1
  resumed = mixing.pretrain(c, str(tmp / 'resumed'))
  assert resumed['step'] == full['step'] == 4
  assert resumed['eval'] == full['eval']
  jax.tree_util.tree_map(np.testing.assert_array_equal, _params(tmp / 'full', 4),
                         _params(tmp / 'resumed', 4))
  rows = lambda d: [json.loads(l) for l in open(tmp / d / 'metrics.jsonl')]
  losses = lambda d: [(r['step'], r['loss']) for r in rows(d) if 'loss' in r]
  assert losses('full') == losses('resumed')
  # every attempt that trained the run is on record, with the steps it ran
  spans = lambda r: [(g['from_step'], g['to_step']) for g in r['segments']]
  assert spans(full) == [(0, 4)] and spans(resumed) == [(0, 2), (2, 4)]
  for g in resumed['segments']:
    assert {'command', 'git_revision', 'machine', 'utc_time',
            'load_average_1min_at_start'} <= set(g) and g['seconds'] > 0
  assert resumed['provenance'] == {k: v for k, v in resumed['segments'][-1].items()
                                   if k not in ('from_step', 'to_step', 'seconds')}
  assert resumed['train_elapsed_s'] >= resumed['segments'][-1]['seconds']


def test_several_steps_per_call_is_the_same_training(pre_run):
  """lax.scan over 2 stacked batches per jit call, metrics logged every 2 steps from the
  on-device accumulator: the same parameters as one step per call, and the logged loss
  is the mean of the two per-step losses."""
  c, tmp, full = pre_run
  c = ml_collections.ConfigDict(c.to_dict())
  c.pretrain.update(steps_per_call=2, log_every=2)
  two = mixing.pretrain(c, str(tmp / 'two'))
  assert two['step'] == 4
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
                         _params(tmp / 'full', 4), _params(tmp / 'two', 4))
  rows = lambda d: [json.loads(l) for l in open(tmp / d / 'metrics.jsonl')]
  one = {r['step']: r['loss'] for r in rows('full') if 'loss' in r}
  got = {r['step']: r['loss'] for r in rows('two') if 'loss' in r}
  assert sorted(got) == [2, 4]
  for s in (2, 4):
    assert got[s] == pytest.approx((one[s - 1] + one[s]) / 2, rel=1e-4)
  assert two['train_tokens_per_s'] > 0


def test_steps_per_call_must_divide_the_periods(tmp_path):
  c = small_config(tmp_path)
  c.pretrain.update(steps_per_call=3)
  with pytest.raises(ValueError, match='num_steps=4 is not a multiple of '
                                       r'config.pretrain.steps_per_call=3'):
    mixing.pretrain(c, str(tmp_path / 'x'))


def test_finetune_mnli_starts_from_pretrained_encoder(pre_run, tmp_path):
  c, tmp, _ = pre_run
  c = ml_collections.ConfigDict(c.to_dict())
  c.finetune.update(task='mnli', pretrain_workdir=str(tmp / 'full'), num_steps=1,
                    learning_rate=0.0, checkpoint_every=1, eval_every=1)
  r = mixing.finetune(c, str(tmp_path / 'mnli'))
  assert r['step'] == 1 and 0 <= r['eval']['accuracy'] <= 100
  assert r['data']['test_examples'] > 0 and 0 < r['data']['majority_baseline_accuracy'] <= 100
  # With a zero learning rate the fine-tuned encoder is the pre-trained one.
  jax.tree_util.tree_map(np.testing.assert_array_equal, _params(tmp / 'full', 4)['encoder'],
                         _params(tmp_path / 'mnli', 1)['encoder'])


@pytest.mark.slow
def test_finetune_squad(pre_run, tmp_path):
  c, tmp, _ = pre_run
  c = ml_collections.ConfigDict(c.to_dict())
  c.finetune.update(task='squad', pretrain_workdir=str(tmp / 'full'))
  r = mixing.finetune(c, str(tmp_path / 'squad'))
  assert r['step'] == 3 and 0 <= r['eval']['f1'] <= 100 and 0 <= r['eval']['em'] <= 100
  assert r['data']['baselines']['first_word']['em'] >= 0


@pytest.mark.parametrize('overrides, message', [
    ({'model.mixing': 'conv'}, "unknown mixing layer 'conv'"),
    ({'model.num_conv_layers': 9}, r'num_conv_layers \(k\) must be in \[0, 2\]'),
    ({'finetune.task': 'glue'}, "unknown fine-tuning task 'glue'"),
    ({'pretrain.num_steps': 0}, 'config.pretrain.num_steps must be a positive integer'),
])
def test_bad_config_is_one_clear_error(tmp_path, overrides, message):
  c = small_config(tmp_path)
  for k, v in overrides.items():
    sec, name = k.split('.')
    c[sec][name] = v
  with pytest.raises(ValueError, match=message):
    mixing.pretrain(c, str(tmp_path / 'x'))


def _binary(args, env_extra=None):
  env = dict(os.environ, JAX_PLATFORMS='cpu', **(env_extra or {}))
  return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                        timeout=300, env=env)


def test_binary_missing_corpus_and_bad_flags(tmp_path):
  p = _binary(['experiments/mixing_pretrain.py', '--config=experiments/configs/mixing_tiny.py',
               f'--workdir={tmp_path}/w', f'--config.data.wordnet_dir={tmp_path}/none'])
  assert p.returncode == 2   # bad input: the corpus named by the config is missing
  assert p.stderr.strip().splitlines()[-2].startswith('error: WordNet corpus not found')
  assert 'apt-get install wordnet-base' in p.stderr and 'Traceback' not in p.stderr
  p = _binary(['experiments/mixing_pretrain.py', '--config=experiments/configs/mixing_tiny.py',
               f'--workdir={tmp_path}/w', '--config.model.mixing=conv',
               f'--config.data.wordnet_dir={FIXTURE}'])
  assert p.returncode != 0 and "unknown mixing layer 'conv'" in p.stderr
  assert 'Traceback' not in p.stderr
