"""The numbers and the markdown of the Fang et al. 2022 Section 5 baselines record
(``reports.fang_baselines``): statistics over seeds, the per-model summary, Table 1 side
by side with the paper, the grids, the f1 gap study and provenance."""

from __future__ import annotations

import json
import math
import os

import numpy as np

from transformer_ua import provenance


MODEL_LABEL = {'attention': 'ATTENTION', 'nn_depth': 'NN_depth', 'nn_width': 'NN_width'}


NOTES = 'fang_baselines_notes.md'


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
