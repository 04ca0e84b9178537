"""The figures of the Fang et al. 2022 Section 5 baselines record
(``reports.fang_baselines``): Table 1, the f1 slices (Figure 2 analogue), the learning
curves (Figure 3 analogue), generalization and the f1 gap study."""

from __future__ import annotations

import os

import numpy as np

from transformer_ua import outputs
from transformer_ua.fang import regression
from transformer_ua.reports.fang_baselines_tables import MODEL_LABEL
from transformer_ua.train import fang_baselines as baselines


COLORS = {'attention': 'tab:blue', 'nn_depth': 'tab:orange', 'nn_width': 'tab:green'}


FIGURES = ('fang_baselines_table1.png', 'fang_baselines_f1_slices.png',
           'fang_baselines_curves.png', 'fang_baselines_generalization.png',
           'fang_baselines_f1_gap.png')


def _plt():
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  return plt


def _save(fig, path):
  outputs.atomic_savefig(fig, path, dpi=110, bbox_inches='tight')
  fig.clf()


def table1_figure(record, path):
  plt = _plt()
  targets = record['targets']
  fig, axes = plt.subplots(1, len(targets), figsize=(6.2 * len(targets), 4.4), squeeze=False)
  kinds = (('paper (reported)', 'white', 'paper_reported'),
           ('paper recipe (ours)', 'lightgray', 'paper'),
           ('tuned (ours)', 'dimgray', 'tuned'))
  for ax, target in zip(axes[0], targets):
    models = list(record[target]['models'])
    w = 0.26
    for k, (label, color, key) in enumerate(kinds):
      for i, m in enumerate(models):
        v = record[target]['models'][m]
        x = i + (k - 1) * w
        if key == 'paper_reported':
          val = record[target]['paper_reported'].get(m) if target == 'f1' else None
          if val is not None:
            ax.bar(x, val, w, color=color, edgecolor='black', hatch='//',
                   label=label if i == 0 or 'paper (reported)' not in
                   ax.get_legend_handles_labels()[1] else None)
          continue
        vals = [float(a) for a in v[key]['mse_test_vs_f']]
        b = v['tuned'].get('best_so_far')
        if not vals and key == 'tuned' and b:
          e = next(e for e in v['tuned']['grid'] if e['name'] == b['name'])
          lab = 'grid best so far (validation, seed 0)'
          ax.bar(x, e['val_mse_vs_f'], w, color='white', edgecolor='dimgray', hatch='xx',
                 label=lab if lab not in ax.get_legend_handles_labels()[1] else None)
          continue
        if not vals:
          ax.text(x, 0.02, 'not run yet', rotation=90, ha='center', va='bottom', fontsize=7,
                  transform=ax.get_xaxis_transform())
          continue
        ax.bar(x, np.mean(vals), w, color=color, edgecolor='black',
               label=label if label not in ax.get_legend_handles_labels()[1] else None)
        ax.scatter([x] * len(vals), vals, color=COLORS[m], edgecolor='black', zorder=3, s=18)
    if target == 'f2':
      ax.text(0.99, 0.97, "paper (Table 1 prose): ATTENTION fits f2\nto the noise level; "
              "MLP entries illegible", transform=ax.transAxes, ha='right', va='top', fontsize=8)
    ax.set_yscale('log')
    ax.set_ylim(top=ax.get_ylim()[1] * 10)
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels([MODEL_LABEL[m] for m in models])
    ax.set_ylabel('test MSE vs noiseless f (squared units of y), log')
    ax.set_title(f'{target}: test MSE against f (bars: seed mean; dots: seeds)')
    ax.legend(fontsize=8, loc='upper center', bbox_to_anchor=(0.5, -0.08), ncol=3)
  _save(fig, path)
  plt.close(fig)


def _unflatten(flat):
  if 'F' in flat:
    return {'F': flat['F'], 'beta': flat['beta'], 'b': flat['b']}
  n = len({k.split('/')[1] for k in flat if k.startswith('layers/')})
  return {'layers': [{'w': flat[f'layers/{i}/w'], 'b': flat[f'layers/{i}/b']}
                     for i in range(n)]}


def slices_figure(record, bconfig, workdir, path):
  """f1 and the seed-0 models of each recipe on x = (s, 0), s in [-30, 30]."""
  plt = _plt()
  if 'f1' not in record['targets']:
    return
  t = record['f1']
  s = np.linspace(-30, 30, 241)
  x = np.stack([s, np.zeros_like(s)], 1)
  truth = s ** 2
  models = list(t['models'])
  fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
  for ax, m in zip(axes[0], models):
    ax.plot(s, truth, color='black', lw=2.5, label='f1 = x1^2 + x2^2')
    v = t['models'][m]
    for phase, label, ls in (('paper', 'paper recipe', '--'), ('tuned', 'tuned', '-')):
      if phase == 'tuned':
        sel = v['tuned']['selected']
        if not sel or 0 not in v['tuned']['seeds']:
          continue
        wd = baselines.run_dir(workdir, 'f1', m, 'tuned', sel['name'], 0)
        mse_te = v['tuned']['mse_test'][v['tuned']['seeds'].index(0)]
      else:
        if 0 not in v['paper']['seeds']:
          continue
        wd = baselines.run_dir(workdir, 'f1', m, 'paper', 'paper', 0)
        mse_te = v['paper']['mse_test'][v['paper']['seeds'].index(0)]
      if not os.path.exists(os.path.join(wd, 'params.npz')):
        continue
      p = _unflatten(regression.load_params(wd))
      y = np.asarray(regression.apply_fn(m)(p, x.astype(np.float32)))
      ax.plot(s, y, ls=ls, lw=1.8, color=COLORS[m] if phase == 'tuned' else 'gray',
              label=f'{label} (seed 0, test MSE {mse_te:.4g})')
    ax.set_xlabel('x1 (x2 = 0)')
    ax.set_ylabel('f1(x) and model output (units of y)')
    ax.set_title(MODEL_LABEL[m])
    ax.legend(fontsize=8, loc='upper center')
  _save(fig, path)
  plt.close(fig)


def _grid_best_curve(record, bconfig, workdir, target, m):
  """The curve of the best finished grid run of a model whose tuned rows are not run."""
  b = record[target]['models'][m]['tuned'].get('best_so_far')
  if not b:
    return None
  r = baselines.read_json(os.path.join(
      baselines.run_dir(workdir, target, m, 'grid', b['name'], bconfig.grid_seed),
      'result.json'))
  return None if r is None else baselines.curve(r)


def curves_figure(record, bconfig, workdir, path):
  plt = _plt()
  targets = record['targets']
  fig, axes = plt.subplots(2, len(targets), figsize=(6.5 * len(targets), 8), squeeze=False)
  for j, target in enumerate(targets):
    for i, phase in enumerate(('paper', 'tuned')):
      ax = axes[i][j]
      drawn = False
      for m, v in record[target]['models'].items():
        blk = v[phase]
        tag = ''
        if blk['curves']:
          c = blk['curves'][0]
        elif phase == 'tuned':
          c = _grid_best_curve(record, bconfig, workdir, target, m)
          if c is None:
            continue
          tag = ' (grid)'
        else:
          continue
        ep = np.asarray(c['epoch'])
        tr = np.asarray([np.nan if a is None else a for a in c['train_mse']], float)
        te = np.asarray([np.nan if a is None else a for a in c['test_mse']], float)
        ax.plot(ep, tr, color=COLORS[m], lw=1.2, label=f'{MODEL_LABEL[m]} MSE_Tr{tag}')
        ok = np.isfinite(te)
        ax.plot(ep[ok], te[ok], color=COLORS[m], lw=1.2, ls='--',
                label=f'{MODEL_LABEL[m]} MSE_Te{tag}')
        drawn = True
      ax.axhline(1.0, color='red', ls=':', lw=1, label='noise variance (1)')
      ax.set_yscale('log')
      ax.set_xlabel('epoch')
      ax.set_ylabel('MSE (squared units of y), log scale')
      title = 'paper recipe' if phase == 'paper' else 'tuned setting'
      ax.set_title(f'{target}, {title}, seed 0' + ('' if drawn else ' (no finished runs)'),
                   fontsize=10)
      if phase == 'tuned' and any('(grid)' in l for l in ax.get_legend_handles_labels()[1]):
        ax.set_title(f'{target}: tuned rows pending; (grid) = best grid setting so far,\n'
                     'seed 0, trained without the validation rows, MSE_Te = validation MSE',
                     fontsize=9)
      ax.legend(fontsize=7, ncol=2)
  fig.tight_layout()
  _save(fig, path)
  plt.close(fig)


def generalization_figure(record, path):
  plt = _plt()
  targets = record['targets']
  fig, axes = plt.subplots(1, len(targets), figsize=(5.5 * len(targets), 4.8), squeeze=False)
  for ax, target in zip(axes[0], targets):
    lo, hi = np.inf, 0.0
    for m, v in record[target]['models'].items():
      for phase, marker in (('paper', 'o'), ('tuned', 's')):
        tr = [float(a) for a in v[phase]['mse_train']]
        te = [float(a) for a in v[phase]['mse_test']]
        if not tr:
          continue
        ax.scatter(tr, te, marker=marker, color=COLORS[m], edgecolor='black', s=40,
                   label=f"{MODEL_LABEL[m]}, {'paper recipe' if phase == 'paper' else 'tuned'}")
        lo, hi = min(lo, *tr, *te), max(hi, *tr, *te)
      b = v['tuned'].get('best_so_far')
      if not v['tuned']['mse_test'] and b:
        e = next(e for e in v['tuned']['grid'] if e['name'] == b['name'])
        ax.scatter([e['train_mse']], [e['val_mse']], marker='^', color=COLORS[m],
                   edgecolor='black', s=50,
                   label=f'{MODEL_LABEL[m]}, grid best so far (y: validation MSE)')
        lo, hi = min(lo, e['train_mse'], e['val_mse']), max(hi, e['train_mse'], e['val_mse'])
    if hi > 0:
      line = np.array([lo / 2, hi * 2])
      ax.plot(line, line, color='black', lw=0.8, ls=':', label='MSE_Te = MSE_Tr')
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xlabel('MSE_Tr (squared units of y), log scale')
    ax.set_ylabel('MSE_Te (squared units of y), log scale')
    ax.set_title(f'{target}: train vs test error (one marker per seed)')
    ax.legend(fontsize=7)
  _save(fig, path)
  plt.close(fig)


def clip_bound(train_config, num_train) -> float:
  """sum_t lr_t / (1 - m_t) over a run of ``train_config``'s SGD one-cycle schedule: the
  longest path clipped SGD with momentum (clip norm 1) can travel in parameter space."""
  steps = train_config.epochs * -(-num_train // train_config.batch_size)
  lr, mom = regression.one_cycle(
      total_steps=steps, lr_init=train_config.lr_init, lr_peak=train_config.lr_peak,
      pct_start=train_config.pct_start, final_div_factor=train_config.final_div_factor,
      momentum_max=train_config.momentum_max, momentum_min=train_config.momentum_min)
  import jax  # pylint: disable=import-outside-toplevel
  t = np.arange(steps)
  lrs = np.asarray(jax.vmap(lr)(t), np.float64)
  moms = np.asarray(jax.vmap(mom)(t), np.float64)
  return float(np.sum(lrs / (1.0 - moms)))


def gap_figure(record, path, bound=None):
  plt = _plt()
  if 'f1' not in record['targets']:
    return
  t = record['f1']
  models = [m for m in t['models'] if 'study' in t['models'][m]]
  if not models:
    return
  variants = ['paper recipe'] + list(t['models'][models[0]]['study'])
  fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
  w = 0.38
  for k, m in enumerate(models):
    for i, var in enumerate(variants):
      blk = (t['models'][m]['paper'] if var == 'paper recipe' else t['models'][m]['study'][var])
      te = [float(a) for a in blk['mse_test']]
      mv = [d['param_distance_moved'] for d in blk['diagnostics'] if d]
      x = i + (k - 0.5) * w
      lab = MODEL_LABEL[m] if i == 0 else None
      if blk.get('diverged_seeds') and not te:
        for ax in axes:
          ax.text(x, 0.03, f"diverged ({len(blk['diverged_seeds'])} seeds)", rotation=90,
                  ha='center', va='bottom', fontsize=7, color=COLORS[m],
                  transform=ax.get_xaxis_transform())
      if te:
        axes[0].bar(x, np.mean(te), w, color=COLORS[m], edgecolor='black', label=lab)
        axes[0].scatter([x] * len(te), te, color='black', s=8, zorder=3)
      if mv:
        axes[1].bar(x, np.mean(mv), w, color=COLORS[m], edgecolor='black', label=lab)
        axes[1].scatter([x] * len(mv), mv, color='black', s=8, zorder=3)
  reported = t['paper_reported']
  for m in models:
    if m in reported:
      axes[0].axhline(reported[m], color=COLORS[m], ls='--', lw=1,
                      label=f'{MODEL_LABEL[m]} in the paper ({reported[m]:g})')
  axes[0].axhline(4e4, color='gray', ls=':', lw=1, label='Var(f1) ~ 4e4 (constant predictor)')
  for ax in axes:
    ax.set_xticks(range(len(variants)))
    ax.set_xticklabels(variants, rotation=35, ha='right', fontsize=8)
    ax.set_yscale('log')
    ax.legend(fontsize=7)
  axes[0].set_ylabel('test MSE (squared units of y), log scale')
  axes[0].set_title('f1: test MSE per variant of the paper recipe (bars mean, dots seeds)')
  if bound is not None:
    axes[1].axhline(bound, color='black', ls='--', lw=1, label='clip-1 bound of the paper '
                    f'recipe: sum_t lr_t / (1 - m_t) = {bound:.3g}')
    axes[1].legend(fontsize=7)
  axes[1].set_ylabel('|theta_T - theta_0|_2 (parameter units), log scale')
  axes[1].set_title('f1: how far the parameters moved in training')
  fig.tight_layout()
  _save(fig, path)
  plt.close(fig)
