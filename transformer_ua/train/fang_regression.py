r"""Fang et al. 2022, Section 5 on the one training loop: ``train_and_evaluate``.

The task (``train.tasks.fang_task.FangRegression``, on ``fang.regression``'s
pieces) supplies its unit and its evaluation; ``train.loop.run``
does resume, logging, evaluation, checkpoints and the data-parallel mesh:

    unit      one epoch: the training set in the order permutation(seed, epoch), per
              batch one SGD update; config.train_epoch picks how it is compiled:
                'per_step'  one ``jax.jit(train_step, donate_argnums=0)`` call per batch
                'scan'      one jitted call per epoch (``fang.epoch.make_train_epoch``,
                            lax.scan over the batches, data resident on the device;
                            one device -- with a multi-device mesh the epoch is per-step)
              same batches, same order, losses equal up to float summation order
    evaluate  test MSE of the current params

A finished run writes ``result.json`` (MSE_Tr / MSE_Te against the noisy targets and
the noiseless f, epochs to convergence, run times, history, provenance), ``params.npz``
(read back by ``fang.regression.load_params``) and ``curves.png``.

    from transformer_ua.train import fang_regression
    from experiments.configs import fang_f1
    result = fang_regression.train_and_evaluate(fang_f1.get_config(), '/tmp/fang/f1')

``sweep`` runs every entry of a config's sweep for every seed (a finished run is skipped,
an unfinished one resumes), adds to each trained ATTENTION run ``literal_check``: the
literal network (``fang.from_params``: the trained F, beta, b with the fixed Lemma 3.1
blocks) in float64 on test inputs,

    max_x |C_literal(x) - C_compact(x)| / max(1, |C_compact(x)|),

and rebuilds the report after each run; ``sweep_plans`` lists the full sweeps of the
checked-in configs for the report's status line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import layers, outputs, provenance
from transformer_ua.fang.polynomial import from_params
from transformer_ua.fang.regression import (attention_apply,
                                             epochs_to_convergence, init_params, load_params,
                                             make_data, make_optimizer, mse, predict,
                                             resolved_sizes, run_configs, run_name,
                                             validate_config, validation_split)
from transformer_ua.train import loop
from transformer_ua.train.tasks.fang_task import FangRegression, epoch_program
from transformer_ua.train.metrics import MetricsWriter


def train_and_evaluate(config, workdir: str, *, stop_after_epochs: int | None = None,
                       progress: bool = True) -> dict:
  """Trains one (target, model, seed) run in ``workdir``; resumes from its checkpoint.

  Args:
    config: ``ml_collections.ConfigDict`` (see experiments/configs/fang_f1.py).
    workdir: run directory (checkpoints/, metrics.jsonl, result.json, params.npz).
    stop_after_epochs: stop (after checkpointing) once this many epochs are done in
      total -- simulates an interruption; the result then has 'complete': False.
    progress: show a tqdm bar.
  Returns:
    dict with MSE_Tr/MSE_Te (noisy targets and noiseless f), epochs to convergence,
    run times, parameter count, per-epoch history and provenance.
  """
  validate_config(config)
  sizes = resolved_sizes(config)
  dtype = jnp.float64 if config.dtype == 'float64' else jnp.float32
  with jax.enable_x64(config.dtype == 'float64'):
    return _train(config, workdir, sizes, dtype, stop_after_epochs, progress)


def _train(config, workdir, sizes, dtype, stop_after_epochs, progress):
  os.makedirs(workdir, exist_ok=True)
  data = validation_split(make_data(config.target, config.data_seed),
                          config.get('validation_rows', 0))
  n_tr = data['x_train'].shape[0]
  steps_per_epoch = -(-n_tr // config.batch_size)
  tx, lr_fn = make_optimizer(config, steps_per_epoch)
  params = init_params(jax.random.PRNGKey(config.seed), model=config.model, d=sizes['d'],
                       q=sizes['q'], num_tokens=sizes['num_tokens'],
                       depth_width=sizes['depth_width'], dtype=dtype,
                       init=config.get('init', 'pytorch'))
  state = {'params': params, 'opt_state': tx.init(params), 'step': jnp.zeros((), jnp.int32)}
  mesh = loop.training_mesh(config)
  task = FangRegression(config, data, dtype, tx, lr_fn, mesh)
  schedule = loop.Schedule(
      num_units=config.epochs, eval_every=config.eval_every,
      checkpoint_every=config.checkpoint_every, unit='epoch', stop_after=stop_after_epochs,
      checkpoint_seconds=config.get('checkpoint_seconds', loop.CHECKPOINT_SECONDS),
      finite_key='train_mse', max_to_keep=2, tensorboard=config.tensorboard,
      desc=run_name(config), progress=progress)
  out = loop.run(task, state, workdir=workdir, schedule=schedule, mesh=mesh)
  state, history, elapsed = out.state, out.history, out.elapsed
  predict_fn = task.predict_fn
  complete = len(history) >= config.epochs
  result = {'name': run_name(config), 'target': config.target, 'model': config.model,
            'seed': config.seed, 'data_seed': config.data_seed, **sizes,
            'num_params': layers.count_params(state['params']), 'epochs_done': len(history),
            'complete': complete, 'run_time_s': elapsed,
            'train_epoch': epoch_program(config, mesh),
            # 'validation': mse_test / mse_test_vs_f / test_mse are on the held-out
            # training rows (config.validation_rows), not on the test set.
            'evaluated_on': 'validation' if config.get('validation_rows', 0) else 'test'}
  if complete:
    p = state['params']
    pred_tr = predict(predict_fn, p, data['x_train'], dtype)
    pred_te = predict(predict_fn, p, data['x_test'], dtype)
    train_curve = [r['train_mse'] for r in history]
    first, stable = epochs_to_convergence(train_curve)
    per_epoch = elapsed / max(1, len(history))
    result.update({
        'mse_train': mse(pred_tr, data['y_train']), 'mse_test': mse(pred_te, data['y_test']),
        'mse_train_vs_f': mse(pred_tr, data['f_train']),
        'mse_test_vs_f': mse(pred_te, data['f_test']),
        'epochs_to_convergence': first, 'epochs_to_stable_convergence': stable,
        'run_time_to_convergence_s': None if first is None else per_epoch * first,
        'history': history, 'provenance': provenance.record(), 'segments': out.segments,
    })
    np.savez(os.path.join(workdir, 'params.npz'),
             **{'/'.join(str(getattr(k, 'key', getattr(k, 'idx', k))) for k in path):
                np.asarray(v) for path, v in jax.tree_util.tree_flatten_with_path(p)[0]})
    with open(os.path.join(workdir, 'result.json'), 'w') as f:
      json.dump(result, f, indent=1)
    MetricsWriter(workdir, tensorboard=False).plot('curves.png', keys=['train_mse', 'test_mse'],
                                                   logy=True)
  result['final_params'] = jax.device_get(state['params'])
  return result


def sweep_plans(config_paths: dict) -> dict:
  """target -> {run name: epochs} of the full sweeps of the config files
  ``config_paths`` (target -> path): the report lists the runs not started yet, whatever
  subset or overrides one call runs."""
  plans = {}
  for target, path in config_paths.items():
    spec = importlib.util.spec_from_file_location(f'fang_{target}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    plans[target] = {run_name(c): c.epochs for _, c in run_configs(module.get_config())}
  return plans


def literal_check(config, workdir, num_points):
  """Max |literal - compact| / max(1, |compact|) of the trained ATTENTION model."""
  data = make_data(config.target, config.data_seed)
  p = load_params(workdir)
  all_x = np.concatenate([data['x_train'], data['x_test']])
  bound = float(np.max(np.linalg.norm(all_x, axis=1)))
  model = from_params(F=p['F'], beta_slots=p['beta'], b=float(p['b']), bound=bound)
  x = data['x_test'][:num_points]
  t0 = time.perf_counter()
  lit = model.apply(x)
  t_lit = time.perf_counter() - t0
  comp = model.apply_compact(x)
  with jax.enable_x64(True):
    train_path = np.asarray(attention_apply(
        {k: np.asarray(v, np.float64) for k, v in p.items()}, x))
  scale = np.maximum(1.0, np.abs(comp))
  return {'points': int(num_points), 'bound_B': bound,
          'max_rel_literal_vs_compact': float(np.max(np.abs(lit - comp) / scale)),
          'max_rel_compact_vs_training_fn': float(np.max(np.abs(train_path - comp) / scale)),
          'literal_seconds': t_lit, 'm_squared': list(model.m_squared)}


def sweep(config, runs, workdir: str, *, only=(), report_only: bool = False,
          progress: bool = True, command: str, report: Callable[[dict], object]) -> None:
  """Trains the ``runs`` (``run_configs(config)``) seed-major under
  ``workdir/<target>/<run name>``, those named in ``only`` if it is not empty.

  A run with a ``result.json`` is skipped. Each new result.json gets ``entry``, the
  ``provenance`` of ``command`` and, for ATTENTION runs with ``literal_check_points``
  (config.seeds[0], or every seed of f1), ``literal_check`` (or the error that stopped
  it); ``report(provenance)`` rebuilds the report after every run and once at the end.
  ``report_only``: no training, only the final report.
  """
  if not report_only:
    for name, c in runs:
      if only and name not in only:
        continue
      run_dir = os.path.join(workdir, c.target, run_name(c))
      if os.path.exists(os.path.join(run_dir, 'result.json')):
        continue
      result = train_and_evaluate(c, run_dir, progress=progress)
      result.pop('final_params', None)
      result['entry'] = name
      result['provenance'] = provenance.record(command)
      if c.model == 'attention' and c.literal_check_points and (c.seed == config.seeds[0]
                                                                 or c.target == 'f1'):
        try:
          result['literal_check'] = literal_check(c, run_dir, c.literal_check_points)
        except (MemoryError, RuntimeError) as e:  # XLA reports OOM as RuntimeError
          result['literal_check_error'] = f'{type(e).__name__}: {str(e)[:300]}'
      outputs.atomic_json(os.path.join(run_dir, 'result.json'), result, indent=1)
      report(provenance.record(command))
  report(provenance.record())
