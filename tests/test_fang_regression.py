"""Fang et al. Section 5: data, model sizes (Tables 2-3), compact == literal for the
trained parametrization, chunked gradients, schedule, checkpoint resume, binary flags."""

import copy
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.configs import fang_f1, fang_f2
from transformer_ua import fang, layers
from transformer_ua.fang import regression
from transformer_ua.train import fang_regression as fang_training
from fang_tiny import tiny_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_data_as_section_5():
  d1 = regression.make_data('f1', 0)
  assert d1['x_train'].shape == (9000, 2) and d1['x_test'].shape == (1000, 2)
  x = np.concatenate([d1['x_train'], d1['x_test']])
  assert abs(np.std(x) - 10.0) < 0.3                 # Sigma_1 = diag(100, 100)
  np.testing.assert_allclose(d1['f_train'], np.sum(d1['x_train'] ** 2, axis=1))
  d2 = regression.make_data('f2', 0)
  assert d2['x_train'].shape == (45000, 10) and d2['x_test'].shape == (5000, 10)
  x = d2['x_test']
  f2 = (x[:, 0] ** 5 + 3 * x[:, 1] ** 4 + 2 * x[:, 2] ** 3 + 5 * x[:, 2] * x[:, 3]
        + 3 * x[:, 4] ** 2 + 2 * x[:, 5] * x[:, 6] * x[:, 7] + 2 * x[:, 8])
  np.testing.assert_allclose(d2['f_test'], f2, rtol=1e-12, atol=1e-12)
  noise = np.concatenate([d2['y_train'] - d2['f_train'], d2['y_test'] - d2['f_test']])
  assert abs(np.mean(noise)) < 0.02 and abs(np.var(noise) - 1.0) < 0.03   # N(0, 1)
  again = regression.make_data('f2', 0)
  np.testing.assert_array_equal(again['y_train'], d2['y_train'])
  with pytest.raises(ValueError, match="allowed: \\('f1', 'f2'\\)"):
    regression.make_data('f3', 0)


@pytest.mark.parametrize('target,model,tokens,expected', [
    # ATTENTION: F [n, d] + beta [n, q] + b. Section 5 quotes 41 for f1.
    ('f1', 'attention', 10, 10 * 2 + 10 * 2 + 1),
    ('f1', 'attention', 0, 3 * 2 + 3 * 2 + 1),
    ('f2', 'attention', 4368, 4368 * 10 + 4368 * 5 + 1),
    ('f2', 'attention', 0, 2002 * 10 + 2002 * 5 + 1),
    # Table 2/3 NN_width: Linear(d, n) ReLU Linear(n, 1).
    ('f1', 'nn_width', 10, (2 * 10 + 10) + (10 + 1)),
    ('f2', 'nn_width', 4368, (10 * 4368 + 4368) + (4368 + 1)),
    # NN_depth: Linear(d, w), q x Linear(w, w), Linear(w, 1) (Table 2: w = 4, x2;
    # Table 3: w = 120, layers 1..13 -> x5).
    ('f1', 'nn_depth', 0, (2 * 4 + 4) + 2 * (4 * 4 + 4) + (4 + 1)),
    ('f2', 'nn_depth', 0, (10 * 120 + 120) + 5 * (120 * 120 + 120) + (120 + 1)),
])
def test_model_sizes_match_tables_2_3(target, model, tokens, expected):
  c = (fang_f1 if target == 'f1' else fang_f2).get_config()
  c.model, c.num_tokens = model, tokens
  s = regression.resolved_sizes(c)
  p = jax.eval_shape(lambda: regression.init_params(
      jax.random.PRNGKey(0), model=model, d=s['d'], q=s['q'], num_tokens=s['num_tokens'],
      depth_width=s['depth_width']))
  assert layers.count_params(p) == expected
  if model == 'nn_depth':
    assert len(p['layers']) == s['q'] + 2  # q + 1 hidden layers, then the output


def test_training_model_equals_compact_and_literal_networks():
  rng = np.random.default_rng(0)
  n, d, q = 6, 3, 4
  params = {'F': rng.normal(size=(n, d)), 'beta': rng.normal(size=(n, q)),
            'b': np.float64(rng.normal())}
  bound = 2.5
  x = rng.normal(size=(40, d))
  x *= bound * rng.uniform(0, 1, size=(40, 1)) / np.linalg.norm(x, axis=1, keepdims=True)
  x[0] *= bound / np.linalg.norm(x[0])  # a boundary point
  with jax.enable_x64(True):
    train_fn = np.asarray(regression.attention_apply(params, jnp.asarray(x)))
  model = fang.from_params(F=params['F'], beta_slots=params['beta'], b=float(params['b']),
                           bound=bound)
  t = x @ params['F'].T  # independent: sum_k beta_k (-t)^k + b
  want = params['b'] + sum(((-t) ** k) @ params['beta'][:, k - 1] for k in range(1, q + 1))
  np.testing.assert_allclose(train_fn, want, rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(model.apply_compact(x), want, rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(model.apply(x), want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('model', regression.MODELS)
def test_chunked_gradient_equals_full_batch_gradient(model):
  with jax.enable_x64(True):
    key = jax.random.PRNGKey(1)
    p = regression.init_params(key, model=model, d=3, q=3, num_tokens=7, depth_width=5,
                               dtype=jnp.float64)
    x = jax.random.normal(key, (103, 3), jnp.float64)
    y = jnp.sum(x ** 2, axis=1)
    f = regression.apply_fn(model)
    full = jax.value_and_grad(lambda p: jnp.mean((f(p, x) - y) ** 2))(p)
    chunked = regression.batch_loss_and_grad(model, 20)(p, x, y)  # 5 chunks + 3 rest
    np.testing.assert_allclose(chunked[0], full[0], rtol=1e-12)
    for a, b in zip(jax.tree_util.tree_leaves(chunked[1]), jax.tree_util.tree_leaves(full[1])):
      np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_one_cycle_schedule_matches_pytorch_defaults():
  lr, mom = regression.one_cycle(total_steps=1000, lr_init=1e-4, lr_peak=1e-3,
                                 pct_start=0.3, final_div_factor=1e4, momentum_max=0.95,
                                 momentum_min=0.85)
  rel = lambda a, b: abs(float(a) - b) / b   # the schedule runs in float32
  assert rel(lr(0), 1e-4) < 1e-6
  assert rel(lr(300), 1e-3) < 1e-6
  assert rel(lr(1000), 1e-8) < 1e-5   # initial / final_div_factor
  assert rel(lr(650), 0.5 * (1e-3 + 1e-8)) < 1e-5   # cosine half-way down
  assert max(float(lr(s)) for s in range(0, 1001, 10)) <= 1e-3 * (1 + 1e-6)
  assert abs(float(mom(0)) - 0.95) < 1e-6 and abs(float(mom(300)) - 0.85) < 1e-6
  assert abs(float(mom(1000)) - 0.95) < 1e-6


def test_epochs_to_convergence_rule():
  assert regression.epochs_to_convergence([10.0, 5.0, 4.995, 3.0, 2.995, 2.99]) == (3, 5)
  assert regression.epochs_to_convergence([10.0, 5.0, 1.0]) == (None, None)


@pytest.mark.parametrize('model', ['attention',
                                   pytest.param('nn_depth', marks=pytest.mark.slow)])
def test_interrupted_and_resumed_run_equals_uninterrupted(tmp_path, model):
  c = tiny_config(model=model)
  full = fang_training.train_and_evaluate(c, str(tmp_path / 'full'), progress=False)
  part = fang_training.train_and_evaluate(c, str(tmp_path / 'resumed'), stop_after_epochs=2,
                                          progress=False)
  assert not part['complete'] and part['epochs_done'] == 2
  resumed = fang_training.train_and_evaluate(c, str(tmp_path / 'resumed'), progress=True)
  assert resumed['complete'] and resumed['epochs_done'] == 6
  for a, b in zip(jax.tree_util.tree_leaves(full['final_params']),
                  jax.tree_util.tree_leaves(resumed['final_params'])):
    np.testing.assert_array_equal(a, b)
  assert [h['train_mse'] for h in full['history']] == [h['train_mse'] for h in resumed['history']]
  assert full['mse_test'] == resumed['mse_test']
  rows = [l for l in open(tmp_path / 'resumed' / 'metrics.jsonl')]
  assert len(rows) == 6   # metrics rewritten, not duplicated
  assert os.path.exists(tmp_path / 'resumed' / 'result.json')


@pytest.mark.parametrize('field,value,match', [
    ('target', 'f3', "allowed: \\('f1', 'f2'\\)"),
    ('model', 'cnn', "allowed: \\('attention'"),
    ('epochs', 0, 'positive integer'),
    ('batch_size', -5, 'positive integer'),
    ('num_tokens', -1, '>= 0'),
    ('lr_peak', float('nan'), 'finite number > 0'),
    ('lr_init', 1.0, 'exceeds lr_peak'),
    ('pct_start', 1.5, 'in \\(0, 1\\)'),
    ('momentum_max', 1.0, 'in \\[0, 1\\)'),
    ('dtype', 'bfloat16', "allowed: \\('float32'"),
])
def test_bad_config_values(field, value, match):
  c = tiny_config()
  c[field] = value
  with pytest.raises(ValueError, match=match):
    regression.validate_config(c)


def _binary(*args, timeout=600):
  return subprocess.run([sys.executable, os.path.join(ROOT, 'experiments', 'fang_regression.py'),
                         *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_binary_validates_flags(tmp_path):
  cfg = os.path.join(ROOT, 'experiments', 'configs', 'fang_f1.py')
  r = _binary(f'--config={cfg}')
  assert r.returncode != 0 and '--workdir is required' in r.stderr
  r = _binary(f'--config={cfg}', f'--workdir={tmp_path}', '--only=attention:7')
  assert r.returncode != 0 and 'not in the sweep; allowed' in r.stderr
  r = _binary(f'--config={cfg}', f'--workdir={tmp_path}', "--config.sweep=('mlp:3',)")
  assert r.returncode != 0 and 'model must be one of' in r.stderr
  r = _binary(f'--config={cfg}', f'--workdir={tmp_path}', '--config.epochs=0')
  assert r.returncode != 0 and 'config.epochs must be a positive integer' in r.stderr


@pytest.mark.slow
def test_binary_end_to_end_f1_short(tmp_path):
  cfg = os.path.join(ROOT, 'experiments', 'configs', 'fang_f1.py')
  r = _binary(f'--config={cfg}', f'--workdir={tmp_path / "runs"}',
              f'--output_dir={tmp_path / "res"}', '--config.epochs=30', "--config.seeds=(0,)",
              '--progress=false', timeout=600)  # ~40 s of CPU; 145 s wall at load 7
  assert r.returncode == 0, r.stderr[-2000:]
  md = open(tmp_path / 'res' / 'fang_regression.md').read()
  assert 'attention (n = 10)' in md and 'nn_depth (width 4)' in md
  assert 'Sweep status: 4 of 12 planned runs finished, 0 unfinished, 8 not started.' in md
  assert os.path.getsize(tmp_path / 'res' / 'fang_f1_surfaces.png') > 10000
