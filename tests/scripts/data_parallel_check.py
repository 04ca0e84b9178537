"""Run from the repository root with XLA_FLAGS=--xla_force_host_platform_device_count=8
and PYTHONPATH=. (it imports experiments.configs; see test_parallel.py).

    python tests/scripts/data_parallel_check.py fang|mixing WORKDIR

Prints one JSON line: the real training loops run on 8 devices (data parallel) and on
1 device (``num_devices=1``: the unchanged one-device step), same config and seed:

* ``fang``:   ``train.fang_regression.train_and_evaluate`` (f1, ATTENTION n = 10, 2 epochs,
  batch 2004: not a multiple of 8, and the epoch's last batch of 984 rows, so padding
  with weight-0 rows is exercised), per-epoch train MSE and the final params;
* ``mixing``: ``transformer_ua.train.mixing.pretrain`` of a tiny hybrid encoder (dropout
  on) on the WordNet fixture, 4 steps of batch 8, the per-step losses from
  metrics.jsonl, and the final eval metrics.
"""

import json
import os
import sys

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fang(workdir):
  from experiments.configs import fang_f1  # pylint: disable=import-outside-toplevel
  from transformer_ua.train import fang_regression  # pylint: disable=import-outside-toplevel
  out = {}
  for devices in (8, 1):
    c = fang_f1.get_config()
    c.update(model='attention', num_tokens=10, seed=0, epochs=2, batch_size=2004,
             grad_chunk=500, eval_every=1, checkpoint_every=2, tensorboard=False)
    c.num_devices = devices
    r = fang_regression.train_and_evaluate(c, os.path.join(workdir, f'fang{devices}'),
                                           progress=False)
    out[devices] = {'train_mse': [h['train_mse'] for h in r['history']],
                    'test_mse': [h['test_mse'] for h in r['history']],
                    'params': {k: np.asarray(v).tolist() for k, v in r['final_params'].items()}}
  return out


def mixing(workdir):
  from transformer_ua.train import mixing as mixing_train  # pylint: disable=import-outside-toplevel
  from experiments.configs import mixing_tiny  # pylint: disable=import-outside-toplevel
  out = {}
  for devices in (8, 1):
    c = mixing_tiny.get_config()
    c.model.update(dict(max_len=16, hidden=8, num_layers=1, num_heads=2, mlp_dim=16,
                        conv_filters=4, conv_width=5, mixing='attention', num_conv_layers=0,
                        dropout=float(os.environ.get('DP_DROPOUT', 0.1))))
    c.data.update(wordnet_dir=os.path.join(ROOT, 'tests', 'fixtures', 'wordnet'),
                  cache_dir=os.path.join(workdir, 'cache'), vocab_size=300, max_predictions=5)
    c.pretrain.update(num_steps=3, batch_size=8, warmup_steps=1, eval_every=3,
                      eval_batches=1, checkpoint_every=3, log_every=1)
    c.num_devices = devices
    run = os.path.join(workdir, f'mixing{devices}')
    r = mixing_train.pretrain(c, run)
    with open(os.path.join(run, 'metrics.jsonl')) as f:
      rows = [json.loads(l) for l in f]
    out[devices] = {'loss': [row['loss'] for row in rows if 'loss' in row],
                    'grad_norm': [row['grad_norm'] for row in rows if 'grad_norm' in row],
                    'eval': r['eval'], 'dropout': c.model.dropout}
  return out


if __name__ == '__main__':
  case, workdir = sys.argv[1], sys.argv[2]
  result = {'fang': fang, 'mixing': mixing}[case](workdir)
  print(json.dumps({'devices': len(jax.devices()), 'sharded': result[8],
                    'single': result[1]}))
