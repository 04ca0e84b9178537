"""Fang Section 5 baselines: grid, selection, validation split, optimizer variants, binary."""

import glob
import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments.configs import fang_baselines as bcfg
from tests.fang_tiny import tiny_config
from transformer_ua.fang import regression
from transformer_ua.train import fang_baselines as baselines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_grid_is_the_product_with_the_priority_order_first():
  t = bcfg.get_config().f2
  s = baselines.grid_settings(t)
  names = [baselines.setting_name(x) for x in s]
  assert len(s) == 16 and len(set(names)) == 16
  assert names[:3] == ['adam_lr0.001_noclip', 'adam_lr0.01_noclip', 'adam_lr0.03_clip1']
  assert {(x['optimizer'], x['lr_peak'], x['clip_norm']) for x in s} == {
      (o, lr, c) for o in ('sgd', 'adam') for lr in (1e-3, 3e-3, 1e-2, 3e-2)
      for c in (1.0, 0.0)}
  t.grid_order = ('adam_lr5_noclip',)
  with pytest.raises(ValueError, match='not in the grid'):
    baselines.grid_settings(t)


def test_apply_setting_keeps_the_paper_lr_ratio():
  c = baselines.apply_setting(tiny_config(), {'optimizer': 'adam', 'lr_peak': 0.03,
                                              'clip_norm': 0.0}, 10.0)
  assert (c.optimizer, c.lr_peak, c.clip_norm) == ('adam', 0.03, 0.0)
  assert c.lr_init == pytest.approx(0.003)


def _e(name, val):
  return {'name': name, 'val_mse': val}


def test_select_waits_for_the_whole_grid_and_skips_diverged():
  assert baselines.select([_e('a', 3.0), _e('b', None)]) is None
  assert baselines.select([_e('a', math.inf), _e('b', math.inf)]) is None
  assert baselines.select([_e('a', 3.0), _e('b', math.inf), _e('c', 2.0)])['name'] == 'c'
  assert baselines.select([_e('a', 2.0), _e('b', 2.0)])['name'] == 'a'   # first on ties
  assert baselines.best_so_far([_e('a', 3.0), _e('b', None), _e('c', 5.0)])['name'] == 'a'


def test_validation_split_carves_the_last_training_rows():
  data = regression.make_data('f1', 0)
  v = regression.validation_split(data, 1000)
  assert v['x_train'].shape == (8000, 2) and v['x_test'].shape == (1000, 2)
  np.testing.assert_array_equal(v['x_train'], data['x_train'][:8000])
  np.testing.assert_array_equal(v['x_test'], data['x_train'][8000:])
  np.testing.assert_array_equal(v['y_test'], data['y_train'][8000:])
  assert regression.validation_split(data, 0) is data
  c = tiny_config(validation_rows=9000)
  with pytest.raises(ValueError, match='validation_rows'):
    regression.validate_config(c)


def _first_update(config, grads):
  tx, _ = regression.make_optimizer(config, steps_per_epoch=2)
  params = {'w': jnp.zeros(2)}
  updates, _ = tx.update({'w': grads}, tx.init(params), params)
  return np.asarray(updates['w'])


def test_clip_zero_means_no_clipping():
  g = jnp.asarray([300.0, 400.0])                 # global norm 500
  lr0 = 1e-4                                      # the one-cycle start (lr_peak / 10)
  # SGD's first step is -lr0 * g (momentum trace starts at g).
  np.testing.assert_allclose(_first_update(tiny_config(clip_norm=0.0), g),
                             [-0.03, -0.04], rtol=1e-5)
  # clip 1: g scaled to norm 1 first -> -lr0 * g / 500.
  np.testing.assert_allclose(_first_update(tiny_config(clip_norm=1.0), g),
                             [-lr0 * 0.6, -lr0 * 0.8], rtol=1e-5)


def test_constant_schedule_and_bad_values():
  c = tiny_config(schedule='constant')
  _, lr = regression.make_optimizer(c, steps_per_epoch=2)
  assert [float(lr(s)) for s in (0, 5, 11)] == pytest.approx([1e-3] * 3)
  for field, value, match in (('schedule', 'cosine', 'allowed'), ('init', 'xavier', 'allowed'),
                              ('clip_norm', -1.0, '>= 0')):
    with pytest.raises(ValueError, match=match):
      regression.validate_config(tiny_config(**{field: value}))


def test_kaiming_normal_init():
  p = regression.init_params(jax.random.PRNGKey(0), model='nn_width', d=400, q=2,
                             num_tokens=300, depth_width=4, init='kaiming_normal')
  w = np.asarray(p['layers'][0]['w'])
  assert abs(w.std() - math.sqrt(2 / 400)) < 0.02 * math.sqrt(2 / 400)
  assert not np.any(np.asarray(p['layers'][0]['b']))
  with pytest.raises(ValueError, match='allowed'):
    regression.init_params(jax.random.PRNGKey(0), model='nn_width', d=2, q=2, num_tokens=3,
                           depth_width=4, init='xavier')


def test_stage_names_are_checked():
  c = bcfg.get_config()
  c.stages = ('f3:grid',)
  with pytest.raises(ValueError, match='expected <target>:<phase>'):
    baselines.stages(c, '/nonexistent')
  c.stages = ('f1:grid:mlp',)
  with pytest.raises(ValueError, match='not in'):
    baselines.stages(c, '/nonexistent')


def _binary(*args, timeout=600):
  return subprocess.run([sys.executable, os.path.join(ROOT, 'experiments', 'fang_baselines.py'),
                         *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


CFG = os.path.join(ROOT, 'experiments', 'configs', 'fang_baselines.py')
# A tiny sweep: f1, NN_width only, 3 epochs, grid Adam x {1e-3, 1e-2} without clipping.
TINY = ['--config.targets=("f1",)', '--config.f1.train.epochs=3',
        '--config.f1.optimizers=("adam",)', '--config.f1.lrs=(0.001,0.01)',
        '--config.f1.clips=(0.0,)', '--config.stages=("f1:grid:nn_width","f1:tuned:nn_width")',
        '--config.seeds=(0,1)', '--progress=false']


def test_binary_validates_flags(tmp_path):
  r = _binary(f'--config={CFG}', f'--workdir={tmp_path}/runs')
  assert r.returncode == 2 and '--output_dir is required' in r.stderr
  r = _binary(f'--config={CFG}', f'--workdir={tmp_path}/runs', f'--output_dir={tmp_path}/o',
              '--config.stages=("f1:fit",)')
  assert r.returncode == 2 and 'expected <target>:<phase>' in r.stderr
  assert 'Traceback' not in r.stderr
  os.makedirs(tmp_path / 'o')
  (tmp_path / 'o' / 'fang_baselines.json').write_text('{}')
  r = _binary(f'--config={CFG}', f'--workdir={tmp_path}/runs', f'--output_dir={tmp_path}/o')
  assert r.returncode == 2 and '--overwrite' in r.stderr
  assert (tmp_path / 'o' / 'fang_baselines.json').read_text() == '{}'
  (tmp_path / 'afile').write_text('')
  r = _binary(f'--config={CFG}', f'--workdir={tmp_path}/runs', f'--output_dir={tmp_path}/o',
              '--overwrite', f'--archive_to={tmp_path}/afile')
  assert r.returncode == 2 and '--archive_to' in r.stderr and 'Traceback' not in r.stderr


@pytest.mark.slow
def test_tiny_sweep_selects_on_validation_and_resumes(tmp_path):
  out = tmp_path / 'out'
  args = [f'--config={CFG}', f'--workdir={tmp_path}/runs', f'--output_dir={out}', *TINY,
          f'--archive_to={tmp_path}/archive']
  r = _binary(*args)
  assert r.returncode == 0, r.stderr[-2000:]
  records = sorted(os.path.relpath(p, tmp_path / 'runs') for p in
                   glob.glob(str(tmp_path / 'runs' / '**' / 'result.json'), recursive=True))
  assert len(records) == 4                             # 2 grid settings + 2 tuned seeds
  assert records == sorted(os.path.relpath(p, tmp_path / 'archive') for p in glob.glob(
      str(tmp_path / 'archive' / '**' / '*'), recursive=True) if os.path.isfile(p))
  for rel in records:
    assert (tmp_path / 'archive' / rel).read_bytes() == (tmp_path / 'runs' / rel).read_bytes()
  rec = json.loads((out / 'fang_baselines.json').read_text())
  m = rec['f1']['models']['nn_width']
  grid = m['tuned']['grid']
  assert [e['name'] for e in grid] == ['adam_lr0.001_noclip', 'adam_lr0.01_noclip']
  vals = [e['val_mse'] for e in grid]
  assert all(isinstance(v, float) and v > 0 for v in vals)
  assert m['tuned']['selected']['name'] == grid[int(np.argmin(vals))]['name']
  assert m['tuned']['seeds'] == [0, 1] and len(m['tuned']['mse_test']) == 2
  r0 = json.loads((tmp_path / 'runs' / 'f1' / 'nn_width' / 'grid' / 'adam_lr0.001_noclip' /
                   'seed0' / 'result.json').read_text())
  assert r0['evaluated_on'] == 'validation' and r0['epochs_done'] == 3
  assert r0['provenance']['command'].startswith('python ')
  assert (out / 'fang_baselines.md').exists() and (out / 'fang_baselines_curves.png').exists()
  # Second call: every run is finished, nothing is trained again; the record needs
  # --overwrite.
  r = _binary(*args)
  assert r.returncode == 2 and '--overwrite' in r.stderr
  mtime = os.path.getmtime(tmp_path / 'runs' / 'f1' / 'nn_width' / 'tuned' /
                           m['tuned']['selected']['name'] / 'seed1' / 'result.json')
  r = _binary(*args, '--overwrite')
  assert r.returncode == 0, r.stderr[-2000:]
  assert '[f1:' not in r.stderr                       # no run started
  assert os.path.getmtime(tmp_path / 'runs' / 'f1' / 'nn_width' / 'tuned' /
                          m['tuned']['selected']['name'] / 'seed1' / 'result.json') == mtime


@pytest.mark.slow
def test_a_diverging_run_is_recorded_and_not_selected(tmp_path):
  c = bcfg.get_config()
  c.f1.train.epochs = 3
  run = baselines.grid_runs(c, str(tmp_path), 'f1', ['nn_depth'])[0]
  run.config.update(optimizer='sgd', clip_norm=0.0, lr_init=10.0, lr_peak=100.0)
  out = baselines.train_run(run, 'test')
  assert out['diverged'] and out['epoch'] in (1, 2, 3)   # the epoch whose MSE_Tr is inf
  assert baselines.run_status(run.workdir) == 'diverged'
  e = baselines.grid_entries(c, str(tmp_path), 'f1', 'nn_depth')[0]
  assert e['val_mse'] == math.inf and e['status'] == 'diverged'


def test_paper_rows_imported_from_a_record_with_run_dirs_hidden(tmp_path):
  rec = {'runs': [
      {'name': 'f2_nn_depth_120_seed1', 'target': 'f2', 'entry': 'nn_depth', 'seed': 1,
       'complete': True, 'mse_test': 310.0, 'mse_train': 400.0,
       'provenance': {'command': 'python x.py --workdir=/data/me/runs_fang --only=nn_depth'}},
      {'name': 'f2_nn_depth_120_seed0', 'target': 'f2', 'entry': 'nn_depth', 'seed': 0,
       'complete': True, 'mse_test': 313.0, 'mse_train': 408.0,
       'provenance': {'command': 'python x.py --workdir=/data/me/runs_fang --only=nn_depth'}},
      {'name': 'f2_nn_width_4368_seed0', 'target': 'f2', 'entry': 'nn_width:4368', 'seed': 0,
       'complete': True, 'mse_test': 1049.0, 'mse_train': 919.0, 'provenance': {}}],
      'curves_epoch_train_test': {'f2_nn_depth_120_seed0': [[1, 2000.0, 2100.0]]}}
  path = tmp_path / 'fang_regression_f2.json'
  path.write_text(json.dumps(rec))
  rows = baselines.imported_paper(str(path), 'f2', 'nn_depth')
  assert [s for s, _ in rows] == [0, 1]
  assert [r['mse_test'] for _, r in rows] == [313.0, 310.0]
  assert rows[0][1]['provenance']['command'] == 'python x.py --workdir=<runs> --only=nn_depth'
  assert rows[0][1]['history'] == [{'epoch': 1, 'train_mse': 2000.0, 'test_mse': 2100.0}]
  assert baselines.imported_paper(str(path), 'f2', 'attention:n_q') is None
