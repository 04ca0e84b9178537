"""Checkpointer round trip and resume; metrics writer; provenance record."""

import json
import os

import jax.numpy as jnp
import numpy as np

from transformer_ua import provenance
from transformer_ua.train import checkpointing, metrics


def test_checkpointer_round_trip_and_latest(tmp_path):
  ckpt = checkpointing.Checkpointer(tmp_path / 'ckpt', max_to_keep=2)
  assert ckpt.restore_latest({'w': jnp.zeros(3)}) is None
  for step in (1, 2, 3):
    ckpt.save(step, {'w': jnp.full(3, float(step)), 'rng': np.asarray([step, 7], np.uint32)},
              meta={'history': list(range(step))})
  ckpt.close()
  # A new process (new manager) sees the newest checkpoint; only 2 are kept.
  again = checkpointing.Checkpointer(tmp_path / 'ckpt', max_to_keep=2)
  step, state, meta = again.restore_latest({'w': jnp.zeros(3), 'rng': np.zeros(2, np.uint32)})
  assert step == 3 and meta == {'history': [0, 1, 2]}
  np.testing.assert_array_equal(state['w'], [3.0, 3.0, 3.0])
  np.testing.assert_array_equal(state['rng'], [3, 7])
  assert sorted(os.listdir(tmp_path / 'ckpt')) == ['2', '3']


def test_metrics_writer_jsonl_truncate_and_plot(tmp_path):
  w = metrics.MetricsWriter(tmp_path, tensorboard=False)
  for s in range(5):
    w.write(s, {'loss': 1.0 / (s + 1)})
  w.truncate_after(2)
  assert [r['step'] for r in w.read()] == [0, 1, 2]
  path = w.plot('c.png')
  assert os.path.getsize(path) > 1000
  with open(tmp_path / 'metrics.jsonl') as f:
    assert json.loads(f.readline()) == {'step': 0, 'loss': 1.0}


def test_provenance_record_names_command_revision_machine():
  rec = provenance.record('python x.py --flag')
  assert rec['command'] == 'python x.py --flag'
  assert len(rec['git_revision'].split('-')[0]) in (40, 7) or rec['git_revision'] == 'unknown'
  assert 'cores' in rec['machine']
  assert '`python x.py --flag`' in provenance.markdown_header(rec)


def test_provenance_commands_name_no_machine_directories():
  root = '/home/someone/transformer_ua'
  cmd = ('python /home/someone/transformer_ua/experiments/x.py --workdir=/scratch/runs_long '
         "--output_dir=results/fang '--config.stages=(\"f2:grid\",)' --out /tmp/q/v.json")
  assert provenance.portable(cmd, root=root) == (
      'python experiments/x.py --workdir=<outside_checkout>/runs_long '
      "--output_dir=results/fang '--config.stages=(\"f2:grid\",)' "
      '--out <outside_checkout>/v.json')
  # relative paths, ratios and flags without paths are left alone
  assert provenance.portable('python x.py a/b 1/2 --lr=0.1', root=root) == \
      'python x.py a/b 1/2 --lr=0.1'
  # the checkout itself is '.'; record() applies it
  assert provenance.portable(root, root=root) == '.'
  rec = provenance.record(f'python x.py --workdir={provenance.ROOT}/runs/a --w=/elsewhere/b')
  assert rec['command'] == 'python x.py --workdir=runs/a --w=<outside_checkout>/b'
