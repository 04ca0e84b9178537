r"""Fang et al. 2022, Section 5 against tuned baselines: one tuning budget for every model.

Section 5 compares ATTENTION with two ReLU MLPs (NN_depth, NN_width) trained with the
paper's recipe (SGD, one-cycle lr 1e-4 -> 1e-3, gradient clipping). This module plans,
runs (through ``train.fang_regression.train_and_evaluate``) and collects, for each target
f in {f1, f2} and model m in {attention, nn_depth, nn_width}:

    paper   the paper's recipe, seeds s = 0, 1, 2; trained on all N_tr rows, MSE on test
    grid    every setting g = (optimizer, lr_peak, clip_norm) of
                optimizer in {sgd (momentum cycle), adam},  lr_peak in LRS,  clip in CLIPS
            (one-cycle lr lr_peak / lr_div -> lr_peak, clip 0 = none), seed grid_seed,
            trained on the first N_tr - V training rows, MSE on the last V ("validation")
    tuned   g* = argmin_g val_mse(g) over the settings that did not diverge, seeds
            0, 1, 2, trained on all N_tr rows, MSE on test; it starts only once every
            setting of the model's grid is finished (a partial grid selects nothing)
    study   (the "100x gap") controlled variants of the paper's recipe, one change each
            (clip norm, no clipping, init, constant schedule, ...), seeds 0, 1, 2, with
            diagnostics: |theta_T - theta_0|_2 (how far the parameters moved) and the
            full-batch gradient norm at theta_0 (how hard clip_norm cuts the first steps)

Every run has the paper's epochs (600 / 2000) and batch (5000 / 25000). A run that
diverges (non-finite training MSE) is recorded with ``diverged.json`` and counts as
val_mse = inf. Runs are directories under one workdir; a finished one is skipped, an
unfinished one resumes from its orbax checkpoint (``train.loop``), so the sweep resumes
wherever it stopped. ``stages(bconfig)`` lists the work in priority order; ``sweep`` runs
it (skipping runs another process has claimed) and rebuilds the record after every run.

Paper-recipe rows may instead be imported from an earlier record of the same recipe
(``bconfig.<target>.paper_record``: a ``fang_regression_<target>.json`` written by
experiments/fang_regression.py, same code path and data), so that they are not re-run.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np

import sys
from typing import Callable

from transformer_ua import outputs, provenance
from transformer_ua.fang import regression

PHASES = ('paper', 'grid', 'tuned', 'study')


# ---------------------------------------------------------------------------
# Settings and run plan.
# ---------------------------------------------------------------------------


def setting_name(s: dict) -> str:
  """'sgd_lr0.001_clip1' / 'adam_lr0.01_noclip'."""
  clip = f"clip{s['clip_norm']:g}" if s['clip_norm'] else 'noclip'
  return f"{s['optimizer']}_lr{s['lr_peak']:g}_{clip}"


def grid_settings(tconfig) -> list[dict]:
  """The target's grid in run order: ``tconfig.grid_order`` (setting names first, then
  the rest of optimizers x lrs x clips in product order)."""
  out = [{'optimizer': o, 'lr_peak': float(lr), 'clip_norm': float(c)}
         for o in tconfig.optimizers for lr in tconfig.lrs for c in tconfig.clips]
  first = list(tconfig.get('grid_order', ()))
  names = [setting_name(s) for s in out]
  bad = [n for n in first if n not in names]
  if bad:
    raise ValueError(f'grid_order names {bad} not in the grid; allowed: {names}.')
  rank = {n: i for i, n in enumerate(first)}
  return sorted(out, key=lambda s: rank.get(setting_name(s), len(first)))


def apply_setting(config, s: dict, lr_div: float):
  """A copy of ``config`` with optimizer, one-cycle lr (lr_peak / lr_div -> lr_peak) and
  clip_norm of setting ``s``."""
  c = copy.deepcopy(config)
  c.optimizer, c.lr_peak, c.clip_norm = s['optimizer'], s['lr_peak'], s['clip_norm']
  c.lr_init = s['lr_peak'] / lr_div
  return c


def model_config(tconfig, model: str, seed: int):
  """The paper-recipe config of one (target, model, seed)."""
  c = copy.deepcopy(tconfig.train)
  c.unlock()
  for key, default in (('validation_rows', 0), ('schedule', 'one_cycle'), ('init', 'pytorch')):
    if key not in c:
      c[key] = default
  entry = tconfig.entries[model]
  c.model, c.num_tokens = regression.parse_entry(entry)
  c.seed = int(seed)
  return c


class Run:
  """One planned training run: where it lives and its full config."""

  def __init__(self, target, model, phase, label, seed, config, workdir):
    self.target, self.model, self.phase, self.label = target, model, phase, label
    self.seed, self.config, self.workdir = seed, config, workdir

  @property
  def key(self) -> str:
    return f'{self.target}/{self.model}/{self.phase}/{self.label}/seed{self.seed}'

  def __repr__(self):
    return f'Run({self.key})'


def run_dir(root, target, model, phase, label, seed) -> str:
  return os.path.join(root, target, model, phase, label, f'seed{seed}')


def paper_runs(bconfig, root, target) -> list[Run]:
  t = bconfig[target]
  return [Run(target, m, 'paper', 'paper', s, model_config(t, m, s),
              run_dir(root, target, m, 'paper', 'paper', s))
          for m in t.models for s in bconfig.seeds]


def grid_runs(bconfig, root, target, models=None) -> list[Run]:
  """Grid runs, setting-major (every model's setting k before setting k + 1)."""
  t = bconfig[target]
  out = []
  for s in grid_settings(t):
    for m in (models or t.models):
      c = apply_setting(model_config(t, m, bconfig.grid_seed), s, t.lr_div)
      c.validation_rows = int(t.validation_rows)
      name = setting_name(s)
      out.append(Run(target, m, 'grid', name, bconfig.grid_seed, c,
                     run_dir(root, target, m, 'grid', name, bconfig.grid_seed)))
  return out


def tuned_runs(bconfig, root, target, models=None) -> list[Run]:
  """Seeds of the selected setting of each model whose grid is complete (else none)."""
  t = bconfig[target]
  out = []
  for m in (models or t.models):
    sel = select(grid_entries(bconfig, root, target, m))
    if sel is None:
      continue
    s = {'optimizer': sel['optimizer'], 'lr_peak': sel['lr_peak'],
         'clip_norm': sel['clip'] or 0.0}
    for seed in bconfig.seeds:
      c = apply_setting(model_config(t, m, seed), s, t.lr_div)
      out.append(Run(target, m, 'tuned', sel['name'], seed, c,
                     run_dir(root, target, m, 'tuned', sel['name'], seed)))
  return out


def study_runs(bconfig, root, target) -> list[Run]:
  """The controlled variants of the paper's recipe (``tconfig.study``: name -> overrides)."""
  t = bconfig[target]
  out = []
  for name, overrides in t.get('study', {}).items():
    for m in t.study_models:
      for seed in bconfig.seeds:
        c = model_config(t, m, seed)
        c.update(**dict(overrides))
        out.append(Run(target, m, 'study', name, seed, c,
                       run_dir(root, target, m, 'study', name, seed)))
  return out


def stages(bconfig, root) -> list:
  """[(stage name, () -> [Run])] in priority order (``bconfig.stages``). A stage is a
  function so that 'tuned' selects from the grid runs finished before it starts.

  Stage names: '<target>:<phase>' or '<target>:<phase>:<model>[+<model>...]'.
  """
  out = []
  for spec in bconfig.stages:
    parts = spec.split(':')
    if len(parts) not in (2, 3) or parts[0] not in regression.TARGETS or \
        parts[1] not in PHASES:
      raise ValueError(f'stage {spec!r}: expected <target>:<phase>[:<models>] with target '
                       f'in {regression.TARGETS}, phase in {PHASES}.')
    target, phase = parts[0], parts[1]
    models = parts[2].split('+') if len(parts) == 3 else None
    bad = [m for m in (models or []) if m not in bconfig[target].models]
    if bad:
      raise ValueError(f'stage {spec!r}: models {bad} not in {bconfig[target].models}.')
    if phase == 'paper':
      fn = (lambda t=target, ms=models:
            [r for r in paper_runs(bconfig, root, t) if ms is None or r.model in ms])
    elif phase == 'grid':
      fn = lambda t=target, ms=models: grid_runs(bconfig, root, t, ms)
    elif phase == 'tuned':
      fn = lambda t=target, ms=models: tuned_runs(bconfig, root, t, ms)
    else:
      fn = (lambda t=target, ms=models:
            [r for r in study_runs(bconfig, root, t) if ms is None or r.model in ms])
    out.append((spec, fn))
  return out


# ---------------------------------------------------------------------------
# Status of a run directory, selection.
# ---------------------------------------------------------------------------


def read_json(path):
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def run_status(workdir) -> str:
  """'finished' (result.json), 'diverged' (diverged.json), 'started' (a checkpoint),
  or 'not started'."""
  if os.path.exists(os.path.join(workdir, 'result.json')):
    return 'finished'
  if os.path.exists(os.path.join(workdir, 'diverged.json')):
    return 'diverged'
  if os.path.isdir(os.path.join(workdir, 'checkpoints')):
    return 'started'
  return 'not started'


def grid_entries(bconfig, root, target, model) -> list[dict]:
  """One entry per grid setting (run order): optimizer, lr, clip, status, val_mse (inf
  when diverged, None when not finished)."""
  t = bconfig[target]
  out = []
  for s in grid_settings(t):
    name = setting_name(s)
    wd = run_dir(root, target, model, 'grid', name, bconfig.grid_seed)
    st = run_status(wd)
    e = {'name': name, 'optimizer': s['optimizer'], 'lr_peak': s['lr_peak'],
         'lr_init': s['lr_peak'] / t.lr_div, 'clip': s['clip_norm'] or None,
         'status': st, 'val_mse': None}
    if st == 'finished':
      r = read_json(os.path.join(wd, 'result.json'))
      e.update(val_mse=r['mse_test'], train_mse=r['mse_train'],
               val_mse_vs_f=r['mse_test_vs_f'],
               epochs_to_convergence=r['epochs_to_convergence'],
               run_time_s=r['run_time_s'], provenance=r['provenance'],
               segments=r.get('segments', []))
    elif st == 'diverged':
      d = read_json(os.path.join(wd, 'diverged.json'))
      e.update(val_mse=math.inf, diverged_at_epoch=d.get('epoch'),
               provenance=d.get('provenance'))
    out.append(e)
  return out


def select(entries: list[dict]) -> dict | None:
  """The setting with the smallest finite val_mse (first in run order on ties), or None
  while any setting is unfinished or every one diverged."""
  if any(e['val_mse'] is None for e in entries):
    return None
  finite = [e for e in entries if math.isfinite(e['val_mse'])]
  if not finite:
    return None
  return min(finite, key=lambda e: e['val_mse'])


def best_so_far(entries: list[dict]) -> dict | None:
  finite = [e for e in entries if e['val_mse'] is not None and math.isfinite(e['val_mse'])]
  return min(finite, key=lambda e: e['val_mse']) if finite else None


# ---------------------------------------------------------------------------
# Running one run.
# ---------------------------------------------------------------------------


def _flat(params) -> dict:
  return {'/'.join(str(getattr(k, 'key', getattr(k, 'idx', k))) for k in path): np.asarray(v)
          for path, v in jax.tree_util.tree_flatten_with_path(params)[0]}


def diagnostics(config, workdir) -> dict:
  """|theta_T - theta_0|_2, |theta_0|_2 and the full-batch gradient norm of the MSE at
  theta_0 on the run's training rows (float64), for a finished run."""
  sizes = regression.resolved_sizes(config)
  with jax.enable_x64(True):
    p0 = regression.init_params(
        jax.random.PRNGKey(config.seed), model=config.model, d=sizes['d'], q=sizes['q'],
        num_tokens=sizes['num_tokens'], depth_width=sizes['depth_width'],
        dtype=jnp.float64 if config.dtype == 'float64' else jnp.float32,
        init=config.get('init', 'pytorch'))
    p0 = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), p0)
    final = regression.load_params(workdir)
    init = _flat(p0)
    moved = math.sqrt(sum(float(np.sum((final[k].astype(np.float64) - init[k]) ** 2))
                          for k in init))
    norm0 = math.sqrt(sum(float(np.sum(v ** 2)) for v in init.values()))
    data = regression.validation_split(regression.make_data(config.target, config.data_seed),
                                       config.get('validation_rows', 0))
    lg = regression.batch_loss_and_grad(config.model, 1000)
    _, g = jax.jit(lg)(p0, jnp.asarray(data['x_train']), jnp.asarray(data['y_train']))
    gnorm = math.sqrt(sum(float(jnp.sum(a ** 2)) for a in jax.tree_util.tree_leaves(g)))
  return {'param_distance_moved': moved, 'param_norm_init': norm0,
          'grad_norm_init_full_batch': gnorm,
          'clip_factor_init': (min(1.0, config.clip_norm / gnorm)
                               if config.clip_norm else 1.0)}


def train_run(run: Run, command: str, progress: bool = False) -> dict:
  """Trains (or resumes) one run; writes result.json (with ``phase``, ``label`` and this
  call's provenance) or diverged.json. Returns what it wrote."""
  from transformer_ua.train import fang_regression as fang_training  # heavy import
  os.makedirs(run.workdir, exist_ok=True)
  prov = provenance.record(command)
  try:
    result = fang_training.train_and_evaluate(run.config, run.workdir, progress=progress)
  except FloatingPointError as e:
    m = re.search(r'diverged at epoch (\d+)', str(e))
    epoch = int(m.group(1)) if m else None
    out = {'diverged': True, 'message': str(e), 'epoch': epoch, 'key': run.key,
           'config': run.config.to_dict(), 'provenance': prov}
    outputs.atomic_json(os.path.join(run.workdir, 'diverged.json'), out, indent=1)
    return out
  result.pop('final_params', None)
  result.update({'phase': run.phase, 'label': run.label, 'key': run.key,
                 'config': run.config.to_dict(), 'provenance': prov})
  if run.phase in ('paper', 'study', 'tuned'):
    t0 = time.perf_counter()
    result['diagnostics'] = diagnostics(run.config, run.workdir)
    result['diagnostics']['seconds'] = round(time.perf_counter() - t0, 2)
  outputs.atomic_json(os.path.join(run.workdir, 'result.json'), result, indent=1)
  return result


#: A finished run's record: what the report reads (result.json holds the history too).
RECORDS = ('result.json', 'diverged.json')


def archive(workdir: str, dest: str | None) -> int:
  """Copies the finished runs' records under ``workdir`` to ``dest`` at the same paths
  (``outputs.archive``); a record already there with other bytes is refused
  (``outputs.OutputExists``, its message starting '--archive_to: ')."""
  if not dest:
    return 0
  try:
    return outputs.archive(workdir, dest, markers=RECORDS, files=RECORDS)
  except outputs.OutputExists as e:
    raise outputs.OutputExists(f'--archive_to: {e}') from None


def sweep(stage_list: list, workdir: str, *, report_only: bool = False, max_runs: int = 0,
          progress: bool = True, archive_to: str | None = None, command: str,
          report: Callable[[dict], object]) -> int:
  """Trains the runs of ``stage_list`` (``stages(bconfig, workdir)``) in order, at most
  ``max_runs`` (0: all), skipping finished / diverged runs and runs another process has
  claimed (``outputs.claim``). Archives to ``archive_to`` first (a rerun is refused
  before training) and after every run; ``report(provenance)`` rebuilds the record after
  every run and once at the end. ``report_only``: no training. Returns the runs trained."""
  trained = 0
  archive(workdir, archive_to)
  if not report_only:
    for name, fn in stage_list:
      for run in fn():
        if max_runs and trained >= max_runs:
          break
        if run_status(run.workdir) in ('finished', 'diverged'):
          continue
        with outputs.claim(run.workdir) as mine:
          if not mine:
            continue            # another process is training it
          print(f'[{name}] {run.key}', file=sys.stderr, flush=True)
          train_run(run, command, progress=progress)
          trained += 1
        archive(workdir, archive_to)
        report(provenance.record(command))
  report(provenance.record(command))
  return trained


# ---------------------------------------------------------------------------
# Collecting the record.
# ---------------------------------------------------------------------------


def curve(result) -> dict:
  """A run record's learning curves: epoch, train and test MSE lists (from its history)."""
  h = result.get('history', [])
  return {'epoch': [r['epoch'] for r in h],
          'train_mse': [r.get('train_mse') for r in h],
          'test_mse': [r.get('test_mse') for r in h]}


def read_run(workdir):
  """A run's result.json, else its diverged.json, else None."""
  r = read_json(os.path.join(workdir, 'result.json'))
  return r if r is not None else read_json(os.path.join(workdir, 'diverged.json'))


def _seed_block(bconfig, runs_results) -> dict:
  """Lists over seeds (seed order) of the finished runs' numbers; seeds whose run
  diverged are listed under 'diverged_seeds' (with their provenance)."""
  fin = [(s, r) for s, r in runs_results if r is not None and 'mse_test' in r]
  div = [(s, r) for s, r in runs_results if r is not None and r.get('diverged')]
  return {
      'seeds': [s for s, _ in fin],
      'diverged_seeds': [s for s, _ in div],
      'diverged_provenance': [r.get('provenance') for _, r in div],
      'seeds_planned': list(bconfig.seeds),
      'mse_train': [r['mse_train'] for _, r in fin],
      'mse_test': [r['mse_test'] for _, r in fin],
      'mse_test_vs_f': [r['mse_test_vs_f'] for _, r in fin],
      'epochs_to_convergence': [r['epochs_to_convergence'] for _, r in fin],
      'epochs_to_stable_convergence': [r.get('epochs_to_stable_convergence') for _, r in fin],
      'run_time_s': [r['run_time_s'] for _, r in fin],
      'run_time_to_convergence_s': [r.get('run_time_to_convergence_s') for _, r in fin],
      'num_params': fin[0][1]['num_params'] if fin else None,
      'provenance': [r['provenance'] for _, r in fin],
      'segments': [r.get('segments', []) for _, r in fin],
      'diagnostics': [r.get('diagnostics') for _, r in fin],
      'curves': [curve(r) for _, r in fin],
  }


def scrub(command: str, runs_dir: str | None) -> str:
  """A recorded command with an absolute run directory written as ``<runs>``."""
  if runs_dir:
    command = command.replace(runs_dir.rstrip('/'), '<runs>')
  return command


def imported_paper(record_path: str, target: str, entry: str) -> dict | None:
  """Paper-recipe rows of ``entry`` from an experiments/fang_regression.py record."""
  rec = read_json(record_path)
  if rec is None:
    return None
  rows = sorted([r for r in rec.get('runs', []) if r.get('entry') == entry
                 and r.get('target') == target and r.get('complete')],
                key=lambda r: r['seed'])
  if not rows:
    return None
  curves = rec.get('curves_epoch_train_test', {})
  out = []
  for r in rows:
    r = dict(r)
    p = dict(r.get('provenance', {}))
    cmd = p.get('command', '')
    wd = next((a.split('=', 1)[1] for a in cmd.split() if a.startswith('--workdir=')), None)
    p['command'] = scrub(cmd, wd)
    r['provenance'] = p
    c = curves.get(r['name'])
    r['history'] = ([{'epoch': e, 'train_mse': tr, 'test_mse': te} for e, tr, te in c]
                    if c else [])
    out.append((r['seed'], r))
  return out


def collect(bconfig, root) -> dict:
  """The fang_baselines record (see experiments/fang_baselines.py) from the run tree."""
  out = {}
  for target in bconfig.targets:
    t = bconfig[target]
    tout = {'data': {k: v for k, v in regression.DATA[target].items() if k != 'poly'},
            'validation_rows': int(t.validation_rows),
            'epochs': int(t.train.epochs), 'batch_size': int(t.train.batch_size),
            'lr_div': float(t.lr_div), 'paper_reported': dict(t.paper_reported),
            'models': {}}
    for m in t.models:
      entry = t.entries[m]
      # paper recipe: own runs, else the imported record
      own = [(s, read_run(run_dir(root, target, m, 'paper', 'paper', s)))
             for s in bconfig.seeds]
      source = 'runs of experiments/fang_baselines.py'
      if not any(r for _, r in own) and t.get('paper_record'):
        imp = imported_paper(t.paper_record, target, entry)
        if imp:
          own = imp
          source = (f'imported from {os.path.basename(t.paper_record)} '
                    '(experiments/fang_regression.py, same recipe, code path and data)')
      paper = _seed_block(bconfig, own)
      paper['source'] = source
      paper['recipe'] = {'optimizer': t.train.optimizer, 'lr_init': t.train.lr_init,
                         'lr_peak': t.train.lr_peak, 'clip': t.train.clip_norm,
                         'momentum_cycle': [t.train.momentum_max, t.train.momentum_min,
                                            t.train.momentum_max]}
      entries = grid_entries(bconfig, root, target, m)
      sel = select(entries)
      tuned = {'grid': entries, 'grid_finished': sum(e['val_mse'] is not None
                                                      for e in entries),
               'grid_size': len(entries),
               'selected': None if sel is None else {
                   k: sel[k] for k in ('name', 'optimizer', 'lr_init', 'lr_peak', 'clip',
                                       'val_mse')},
               'best_so_far': None}
      if sel is None:
        b = best_so_far(entries)
        tuned['best_so_far'] = None if b is None else {
            k: b[k] for k in ('name', 'optimizer', 'lr_peak', 'clip', 'val_mse')}
        tuned.update(_seed_block(bconfig, []))
      else:
        tuned.update(_seed_block(bconfig, [
            (s, read_run(run_dir(root, target, m, 'tuned', sel['name'], s)))
            for s in bconfig.seeds]))
      study = {}
      if m in t.get('study_models', ()):
        for name in t.get('study', {}):
          blk = _seed_block(bconfig, [
              (s, read_run(run_dir(root, target, m, 'study', name, s)))
              for s in bconfig.seeds])
          blk['overrides'] = dict(t.study[name])
          blk.pop('curves')
          study[name] = blk
      tout['models'][m] = {'entry': entry, 'paper': paper, 'tuned': tuned}
      if study:
        tout['models'][m]['study'] = study
    out[target] = tout
  return out
