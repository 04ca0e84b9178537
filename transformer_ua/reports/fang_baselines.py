"""Fang et al. 2022, Section 5 against tuned baselines: the record, its tables and figures.

``write(bconfig, workdir, output_dir, prov)`` collects the runs under ``workdir``
(``train.fang_baselines.collect``) and writes, each file atomically, in ``output_dir``:

    fang_baselines.json               the record (per target and model: paper.*, tuned.*)
    fang_baselines.md                 Table 1 side by side with the paper, the grids,
                                      the f1 gap study, provenance; then
                                      fang_baselines_notes.md verbatim if present
    fang_baselines_table1.png         test MSE per model: paper / paper recipe / tuned
    fang_baselines_f1_slices.png      Figure 2 analogue: f1 and the trained models on
                                      the line x2 = 0
    fang_baselines_curves.png         Figure 3 analogue: MSE_Tr and MSE_Te vs epoch
    fang_baselines_generalization.png MSE_Tr vs MSE_Te per model and recipe
    fang_baselines_f1_gap.png         the gap study: test MSE and |theta_T - theta_0|

Statistics over seeds: mean, sample std (ddof 1), min and max; ratios of a model's
mean test MSE to ATTENTION's come with the range [min / max, max / min] over seeds.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np

from transformer_ua import outputs, provenance
from transformer_ua.fang import regression
from transformer_ua.train import fang_baselines as baselines

MODEL_LABEL = {'attention': 'ATTENTION', 'nn_depth': 'NN_depth', 'nn_width': 'NN_width'}
COLORS = {'attention': 'tab:blue', 'nn_depth': 'tab:orange', 'nn_width': 'tab:green'}
NOTES = 'fang_baselines_notes.md'
FIGURES = ('fang_baselines_table1.png', 'fang_baselines_f1_slices.png',
           'fang_baselines_curves.png', 'fang_baselines_generalization.png',
           'fang_baselines_f1_gap.png')


# ---------------------------------------------------------------------------
# Formatting.
# ---------------------------------------------------------------------------


def _finite(obj):
  """inf -> 'inf' (standard JSON has no infinities)."""
  if isinstance(obj, float) and not math.isfinite(obj):
    return 'inf' if obj > 0 else ('-inf' if obj < 0 else 'nan')
  if isinstance(obj, dict):
    return {k: _finite(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_finite(v) for v in obj]
  if isinstance(obj, np.generic):
    return obj.item()
  return obj


def stats(vals) -> dict | None:
  """mean, sample std (ddof 1; 0 for one value), min, max, n of a list of numbers."""
  v = [float(x) for x in vals if x is not None]
  if not v:
    return None
  a = np.asarray(v)
  return {'mean': float(a.mean()), 'std': float(a.std(ddof=1)) if a.size > 1 else 0.0,
          'min': float(a.min()), 'max': float(a.max()), 'n': int(a.size)}


def fmt(x, digits=4) -> str:
  if x is None:
    return '—'
  if isinstance(x, str):
    return x
  if not math.isfinite(x):
    return 'diverged' if x > 0 else str(x)
  return f'{x:.{digits}g}'


def fmt_stats(s, digits=4) -> str:
  if s is None:
    return '—'
  if s['n'] == 1:
    return f"{fmt(s['mean'], digits)} (1 seed)"
  return f"{fmt(s['mean'], digits)} ± {fmt(s['std'], 2)} [{fmt(s['min'], 3)}, {fmt(s['max'], 3)}]"


def ratio(num, den) -> dict | None:
  """mean(num) / mean(den) with the seed range [min(num) / max(den), max(num) / min(den)]."""
  a, b = stats(num), stats(den)
  if a is None or b is None or b['mean'] <= 0 or b['min'] <= 0:
    return None
  return {'ratio': a['mean'] / b['mean'], 'low': a['min'] / b['max'],
          'high': a['max'] / b['min']}


def fmt_ratio(r) -> str:
  if r is None:
    return '—'
  return f"{r['ratio']:.3g}x [{r['low']:.3g}, {r['high']:.3g}]"


def _loads(provs):
  loads = [p.get('load_average_1min_at_start') for p in provs if p]
  loads = [l for l in loads if l is not None]
  return (min(loads), max(loads)) if loads else (None, None)


def _all_provenance(record):
  """Every run's provenance in the record (paper, grid, tuned, study)."""
  out = []
  for target in record['targets']:
    for m in record[target]['models'].values():
      out += m['paper']['provenance'] + m['tuned']['provenance']
      out += m['paper'].get('diverged_provenance', []) + m['tuned'].get(
          'diverged_provenance', [])
      out += [e['provenance'] for e in m['tuned']['grid'] if e.get('provenance')]
      for blk in m.get('study', {}).values():
        out += blk['provenance'] + blk.get('diverged_provenance', [])
  return [p for p in out if p]


# ---------------------------------------------------------------------------
# Summary numbers used by the tables, the figures and the notes.
# ---------------------------------------------------------------------------


def summarize(record) -> dict:
  """target -> model -> {'paper': stats, 'tuned': stats, train stats, ratios vs ATTENTION}."""
  out = {}
  for target in record['targets']:
    t = record[target]
    att = t['models'].get('attention')
    out[target] = {}
    for m, v in t['models'].items():
      s = {'paper_test': stats(v['paper']['mse_test']),
           'paper_train': stats(v['paper']['mse_train']),
           'tuned_test': stats(v['tuned']['mse_test']),
           'tuned_train': stats(v['tuned']['mse_train']),
           'paper_test_vs_f': stats(v['paper']['mse_test_vs_f']),
           'tuned_test_vs_f': stats(v['tuned']['mse_test_vs_f']),
           'paper_reported': t['paper_reported'].get(m)}
      if att is not None and m != 'attention':
        s['ratio_paper_recipe'] = ratio(v['paper']['mse_test'], att['paper']['mse_test'])
        best_att = (att['tuned']['mse_test'] if att['tuned']['mse_test']
                    else att['paper']['mse_test'])
        s['ratio_tuned'] = ratio(v['tuned']['mse_test'], best_att)
        s['ratio_tuned_vs'] = ('tuned ATTENTION' if att['tuned']['mse_test']
                               else 'paper-recipe ATTENTION')
      out[target][m] = s
  return out


# ---------------------------------------------------------------------------
# Markdown.
# ---------------------------------------------------------------------------


def _setting(sel) -> str:
  if not sel:
    return '—'
  clip = f"clip {sel['clip']:g}" if sel.get('clip') else 'no clip'
  return f"{sel['optimizer']}, lr {sel['lr_peak'] / 10:g} -> {sel['lr_peak']:g}, {clip}"


def table1(record, summary, target) -> str:
  t = record[target]
  rows = ['| model | params | paper (reported) MSE_Te | paper recipe, ours: MSE_Tr | '
          'paper recipe, ours: MSE_Te | paper recipe, ours: MSE_Te vs f (noiseless) | '
          'tuned setting (validation) | tuned: MSE_Tr | tuned: MSE_Te | tuned: MSE_Te vs f '
          '(noiseless) | MSE_Te / ATTENTION (paper recipe) | MSE_Te / ATTENTION '
          '(tuned) | # epochs to conv. (paper rule), tuned | run time (s), tuned |',
          '|' + '---|' * 14]
  for m, v in t['models'].items():
    s = summary[target][m]
    tuned = v['tuned']
    sel = tuned['selected']
    setting = _setting(sel)
    if sel is None:
      b = tuned.get('best_so_far')
      setting = (f"grid {tuned['grid_finished']} of {tuned['grid_size']} finished; "
                 f"nothing selected yet" + (f" (best so far {b['name']}, val "
                                            f"{fmt(b['val_mse'])})" if b else ''))
    conv = stats([e for e in tuned['epochs_to_convergence'] if e is not None])
    never = sum(e is None for e in tuned['epochs_to_convergence'])
    conv_txt = fmt_stats(conv, 4) if conv else '—'
    if never:
      conv_txt += f' (never: {never})'
    reported = fmt(s['paper_reported'])
    if target == 'f2' and s['paper_reported'] is not None:
      reported = f"~{reported} (noise level; Table 1 prose)"
    rows.append(
        f"| {MODEL_LABEL[m]} ({v['entry']}) | {v['paper']['num_params'] or tuned['num_params']}"
        f" | {reported} | {fmt_stats(s['paper_train'])} | "
        f"{fmt_stats(s['paper_test'])} | {fmt_stats(s['paper_test_vs_f'])} | {setting} | "
        f"{fmt_stats(s['tuned_train'])} | {fmt_stats(s['tuned_test'])} | "
        f"{fmt_stats(s['tuned_test_vs_f'])} | {fmt_ratio(s.get('ratio_paper_recipe'))} | "
        f"{fmt_ratio(s.get('ratio_tuned'))} | {conv_txt} | "
        f"{fmt_stats(stats(tuned['run_time_s']), 3)} |")
  return '\n'.join(rows)


def grid_table(record, target) -> str:
  t = record[target]
  models = list(t['models'])
  names = [e['name'] for e in t['models'][models[0]]['tuned']['grid']]
  head = ('| setting (optimizer, peak lr, clip) | ' +
          ' | '.join(f'{MODEL_LABEL[m]} val MSE' for m in models) + ' |')
  rows = [head, '|' + '---|' * (len(models) + 1)]
  for i, name in enumerate(names):
    cells = []
    for m in models:
      e = t['models'][m]['tuned']['grid'][i]
      sel = t['models'][m]['tuned']['selected']
      if e['status'] == 'diverged':
        c = f"diverged (epoch {e.get('diverged_at_epoch')})"
      elif e['val_mse'] is None:
        c = e['status']
      else:
        c = fmt(e['val_mse'])
      if sel and sel['name'] == name:
        c = f'**{c}** (selected)'
      cells.append(c)
    rows.append(f'| {name} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(rows)


def study_table(record, target) -> str:
  t = record[target]
  models = [m for m in t['models'] if 'study' in t['models'][m]]
  if not models:
    return ''
  variants = ['paper recipe'] + list(t['models'][models[0]]['study'])
  rows = ['| variant (one change to the paper recipe) | ' + ' | '.join(
      f'{MODEL_LABEL[m]} MSE_Te | {MODEL_LABEL[m]} |theta_T - theta_0| | '
      f'{MODEL_LABEL[m]} first-step clip factor' for m in models) + ' |',
          '|' + '---|' * (3 * len(models) + 1)]
  for var in variants:
    cells = []
    for m in models:
      blk = (t['models'][m]['paper'] if var == 'paper recipe'
             else t['models'][m]['study'][var])
      diag = [d for d in blk['diagnostics'] if d]
      te = fmt_stats(stats(blk['mse_test']))
      if blk.get('diverged_seeds'):
        te = (te if blk['mse_test'] else '') + (
            f" diverged: {len(blk['diverged_seeds'])} of "
            f"{len(blk['diverged_seeds']) + len(blk['seeds'])} seeds")
      cells += [te,
                fmt_stats(stats([d['param_distance_moved'] for d in diag]), 3),
                fmt_stats(stats([d['clip_factor_init'] for d in diag]), 2)]
    over = ('' if var == 'paper recipe' else ' `' + json.dumps(
        t['models'][models[0]]['study'][var]['overrides']) + '`')
    rows.append(f'| {var}{over} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(rows)


def _commands(record, target) -> list[str]:
  """Distinct (command, revision) pairs of a target's runs, with their count."""
  seen = {}
  t = record[target]
  for m in t['models'].values():
    provs = list(m['paper']['provenance']) + list(m['tuned']['provenance'])
    provs += [e['provenance'] for e in m['tuned']['grid'] if e.get('provenance')]
    for blk in m.get('study', {}).values():
      provs += blk['provenance'] + blk.get('diverged_provenance', [])
    provs += m['paper'].get('diverged_provenance', []) + m['tuned'].get(
        'diverged_provenance', [])
    for p in [p for p in provs if p]:
      k = (p.get('command'), p.get('git_revision'))
      seen[k] = seen.get(k, 0) + 1
  return [f'- `{c}` at revision `{r}` ({n} runs)' for (c, r), n in seen.items()]


def render(record, summary, output_dir) -> str:
  prov = record['report_provenance']
  lo, hi = _loads(_all_provenance(record))
  machines = sorted({p.get('machine') for p in _all_provenance(record) if p})
  parts = [
      '# Fang et al. 2022, Section 5: ATTENTION against tuned ReLU MLPs',
      '',
      'Generated by `experiments/fang_baselines.py` (`transformer_ua/train/fang_baselines.py`, '
      '`transformer_ua/reports/fang_baselines.py`) from the runs\' `result.json` files; '
      'the numbers are in `fang_baselines.json`. Every model gets the same tuning budget: a '
      'grid of optimizer {SGD with the one-cycle momentum cycle, Adam} x one-cycle peak '
      'learning rate x global-norm clipping {1, none} (lr_init = peak / 10, as the paper\'s '
      '1e-4 -> 1e-3), each setting trained once (seed 0) with the paper\'s epochs and batch '
      'on the training rows minus a validation split (the last 1000 / 5000 training rows for '
      'f1 / f2) and scored by its validation MSE; the best setting is then trained with 3 '
      'seeds on all training rows and scored on the test set. The paper\'s recipe (SGD, '
      'one-cycle 1e-4 -> 1e-3, clip 1) has rows of its own, 3 seeds. MSE is against the '
      'noisy targets (noise variance 1 is the floor). Seeds change initialization and batch '
      'order; the data set is the same (data_seed 0). Mean ± sample std [min, max] over '
      'seeds. A tuned row is filled only once its model\'s whole grid has finished.',
      '',
      provenance.markdown_header(prov, 'report command'),
      f"- runs: {len(_all_provenance(record))} with provenance; machine(s): "
      f"{'; '.join(machines)}; 1-min load at the start of a run {fmt(lo, 3)}..{fmt(hi, 3)} "
      '(shared machine: run times include contention)',
      '',
  ]
  for target in record['targets']:
    t = record[target]
    d = t['data']
    parts += [
        f"## {target} (d = {d['d']}, q = {d['q']}; {d['num_train']} train / "
        f"{d['num_samples'] - d['num_train']} test; {t['epochs']} epochs, batch "
        f"{t['batch_size']})",
        '',
        '### Table 1, side by side with the paper',
        '',
        table1(record, summary, target),
        '',
    ]
    if target == 'f1':
      parts += ['The paper\'s f1 numbers are the MSEs in the caption of its Figure 2 (ATTENTION '
                '0.02, NN_depth 134.23, NN_width 10237.27). 0.02 is below the noise variance '
                '1, so they are most likely errors against the noiseless f1; our "vs f" '
                'columns are the comparable ones (for the MLPs the two differ by ~1).', '']
    if target == 'f2':
      parts += ['The paper\'s f2 entry is the prose of its Table 1 (ATTENTION fits f2 to the '
                'noise level, MSE ~ 1); its MLP numbers are illegible in our copy.', '']
    srcs = {m: v['paper']['source'] for m, v in t['models'].items()}
    parts += ['Paper-recipe rows: ' + '; '.join(f'{MODEL_LABEL[m]}: {s}'
                                                 for m, s in srcs.items()) + '.', '']
    parts += ['### The grid (validation MSE, seed 0)', '', grid_table(record, target), '']
    st = study_table(record, target)
    if st:
      parts += ['### Where the paper recipe\'s MLP gap comes from (controlled study, '
                '3 seeds)', '',
                '|theta_T - theta_0|: Euclidean distance the parameters moved in training; '
                'first-step clip factor: min(1, clip / |grad at theta_0|) with the full-batch '
                'gradient of the training MSE. Each variant changes one thing of the paper '
                'recipe.', '', st, '']
    parts += ['### Commands', ''] + _commands(record, target) + ['']
  parts += ['## Figures', '',
            'Table 1 (test MSE per model and recipe): ![table 1](fang_baselines_table1.png)',
            '',
            'Figure 2 analogue (f1 on the line x2 = 0): '
            '![f1 slices](fang_baselines_f1_slices.png)', '',
            'Figure 3 analogue (MSE_Tr and MSE_Te vs epoch, seed 0): '
            '![curves](fang_baselines_curves.png)', '',
            'Generalization (MSE_Tr vs MSE_Te): '
            '![generalization](fang_baselines_generalization.png)', '',
            'The f1 gap study: ![gap](fang_baselines_f1_gap.png)', '']
  notes = os.path.join(output_dir, NOTES)
  if os.path.exists(notes):
    with open(notes) as f:
      parts += [f.read()]
  return '\n'.join(parts) + '\n'


# ---------------------------------------------------------------------------
# Figures.
# ---------------------------------------------------------------------------


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
  return None if r is None else baselines._curve(r)  # pylint: disable=protected-access


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


# ---------------------------------------------------------------------------
# Entry point.
# ---------------------------------------------------------------------------


def write(bconfig, workdir, output_dir, prov) -> dict:
  """Collects the runs and writes the record, the Markdown and the figures."""
  record = {'report_provenance': prov, 'targets': list(bconfig.targets),
            **baselines.collect(bconfig, workdir)}
  summary = summarize(record)
  record['summary'] = summary
  for target in record['targets']:          # the brief's names: tuned.grid / selected / ...
    for v in record[target]['models'].values():
      v['epochs'] = record[target]['epochs']
  for target in record['targets']:   # the longest path clipped SGD can travel (section 1)
    record[target]['clip1_path_bound_paper_recipe'] = clip_bound(
        bconfig[target].train, regression.DATA[target]['num_train'])
  outputs.atomic_write(os.path.join(output_dir, 'fang_baselines.json'),
                       json.dumps(_finite(record), indent=1))
  table1_figure(record, os.path.join(output_dir, FIGURES[0]))
  slices_figure(record, bconfig, workdir, os.path.join(output_dir, FIGURES[1]))
  curves_figure(record, bconfig, workdir, os.path.join(output_dir, FIGURES[2]))
  generalization_figure(record, os.path.join(output_dir, FIGURES[3]))
  if 'f1' in record['targets']:
    gap_figure(record, os.path.join(output_dir, FIGURES[4]),
               record['f1']['clip1_path_bound_paper_recipe'])
  outputs.atomic_write(os.path.join(output_dir, 'fang_baselines.md'),
                       render(record, summary, output_dir))
  return record
