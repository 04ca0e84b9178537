"""The rows of the Appendix H sweep report (``reports.mixing_sweep``): what it reads.

Every finished stage's ``result.json`` and every pre-training run's learning curve under
a workdir (``collect``, ``learning_curves``), one row per (run, stage) with its values
and source (``per_run_rows``), the rows of an earlier report's ``.json``
(``recorded_rows``, ``merge_rows``), the runs a side still lacks (``missing_runs``), and
the summaries of the runs' provenance (``runs_summary``). Record formats are those of
the reports in results/mixing/.
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np



TABLE_MODELS = ('average', 'bilinear', 'sepconv', 'attention')
NAMES = {'average': 'Average attention', 'bilinear': 'BProj', 'sepconv': 'SepConv',
         'attention': 'Transformer'}


def mean_std(xs):
  xs = [x for x in xs if x is not None]
  if not xs:
    return None
  return {'mean': float(np.mean(xs)), 'std': float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0,
          'n': len(xs), 'values': xs}


def fmt_mean_std(s, digits=1):
  if s is None:
    return '—'
  return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f} (n={s['n']})"


def collect(root):
  """{(mixing, k): {'pretrain': [...], 'mnli': [...], 'squad': [...]}} of result dicts."""
  runs = {}
  for path in sorted(glob.glob(os.path.join(root, '*', '*', 'result.json'))):
    with open(path) as f:
      r = json.load(f)
    stage = r['stage'] if r['stage'] == 'pretrain' else r['task']
    runs.setdefault((r['mixing'], r['num_conv_layers']), {}).setdefault(stage, []).append(r)
  return runs


def learning_curves(root, metric='eval_mlm_accuracy'):
  """{(mixing, k): {seed: [(step, held-out MLM accuracy %)]}} from every pre-training
  run's ``metrics.jsonl`` (finished or not); ``metric='eval_nsp_accuracy'``: held-out
  sentence-pair accuracy instead."""
  return learning_curves_of(root, (metric,))[metric]


def learning_curves_of(root, metrics):
  """{metric: learning_curves(root, metric)} for several metrics, each file read once."""
  curves = {metric: {} for metric in metrics}
  for path in sorted(glob.glob(os.path.join(root, '*', 'pretrain', 'metrics.jsonl'))):
    cfg_path = os.path.join(os.path.dirname(path), 'config.json')
    if not os.path.exists(cfg_path):
      continue
    with open(cfg_path) as f:
      c = json.load(f)
    with open(path) as f:
      rows = [json.loads(l) for l in f if l.strip()]
    key = (c['model']['mixing'], c['model']['num_conv_layers'])
    for metric in metrics:
      pts = [(r['step'], r[metric]) for r in rows if metric in r]
      if pts:
        curves[metric].setdefault(key, {})[c['seed']] = pts
  return curves


def last_quarter_gain(per_seed, num_steps):
  """Held-out MLM accuracy gained over the last quarter of the schedule, per seed that
  finished it: acc(num_steps) - acc(newest eval at or before 3/4 num_steps). Near 0 on a
  plateau; with a learning rate decaying to 0 a positive gain means the schedule ended
  before the curve flattened."""
  gains = []
  for pts in per_seed.values():
    d = dict(pts)
    before = [s for s in d if s <= 0.75 * num_steps]
    if num_steps in d and before:
      gains.append(d[num_steps] - d[max(before)])
  return gains


# stage -> {summary field: its value in the stage's result.json}
STAGE_FIELDS = {
    'pretrain': {'mlm_accuracy': lambda r: r['eval']['mlm_accuracy'],
                 'nsp_accuracy': lambda r: r['eval']['nsp_accuracy'],
                 'pretrain_tokens_per_s': lambda r: r['train_tokens_per_s']},
    'mnli': {'mnli_accuracy': lambda r: r['eval']['accuracy']},
    'squad': {'squad_em': lambda r: r['eval']['em'], 'squad_f1': lambda r: r['eval']['f1']}}
FIELD_STAGE = {f: stage for stage, fs in STAGE_FIELDS.items() for f in fs}


def run_name(key, seed):
  """The sweep's name of the run of model ``key`` = (mixing, k) with ``seed``
  (mixing_sweep.jobs): 'sepconv_s1', 'hybrid_k2_s0'."""
  m, k = key
  return f'{m}_s{seed}' if k == 0 else f'hybrid_k{k}_s{seed}'


def per_run_rows(runs, source):
  """One row per finished stage of ``collect()`` runs: {'run', 'mixing', 'k', 'seed',
  'stage', 'values': {field: value}, 'params_encoder_pooler' (pre-training), 'source'}."""
  rows = []
  for (m, k), stages in sorted(runs.items()):
    for stage, rs in sorted(stages.items()):
      for r in sorted(rs, key=lambda r: r['seed']):
        rows.append({'run': run_name((m, k), r['seed']), 'mixing': m, 'k': k,
                     'seed': r['seed'], 'stage': stage, 'source': source,
                     'values': {f: get(r) for f, get in STAGE_FIELDS[stage].items()},
                     **({'params_encoder_pooler': r['params_encoder_pooler']}
                        if stage == 'pretrain' else {})})
  return rows


class RecordError(ValueError):
  """An earlier report's ``.json`` that cannot be read back (missing, not a report, or
  values whose seeds cannot be told); the message names the flag that gave it."""


def _curves_of_json(d):
  return {(key.rsplit('_k', 1)[0], int(key.rsplit('_k', 1)[1])):
          {int(seed): [tuple(p) for p in pts] for seed, pts in per_seed.items()}
          for key, per_seed in d.get('learning_curves', {}).items()}


def recorded_rows(path):
  """The per-seed rows of an earlier report's ``.json`` at ``path``: (rows as
  per_run_rows() with 'via' = where they were read, learning curves as
  learning_curves(), {'sources': [{'path', 'report_revision', 'runs_summary', 'rows'}]
  (the reports the rows were first recorded in: this one, or for a report that itself
  combined recorded rows, its sources), 'task_data', 'pretrain_data'}). Raises
  RecordError when it is not a report or a value's seed cannot be told (see the module
  docstring)."""
  try:
    with open(path) as f:
      d = json.load(f)
    rev = d['sweep_provenance']['git_revision'][:7]
    curves = _curves_of_json(d)
    via = f'{os.path.basename(path)} (report at {rev})'
    info = {'task_data': d.get('task_data') or {}, 'pretrain_data': d.get('pretrain_data'),
            'sources': [{'path': path, 'report_revision': d['sweep_provenance']['git_revision'],
                         'runs_summary': d.get('runs_summary')}]}
    if 'per_run' in d:
      rows = [dict(r, via=r.get('via') or via) for r in d['per_run']]
      info['sources'] = d.get('recorded') or []
      return rows, curves, info
    steps = d['config_values']['pretrain']['num_steps']
    not_done = {(r['run'], r['stage']) for r in d.get('not_done', ())}
    rows = []
    for key, per_seed in sorted(curves.items()):
      m, k = key
      summ = d['table1'][m] if k == 0 else d['figure1'][str(k)]
      pre = sorted(s for s, pts in per_seed.items() if pts and pts[-1][0] == steps
                   and (run_name(key, s), 'pretrain') not in not_done)
      for stage, fields in STAGE_FIELDS.items():
        seeds = [s for s in pre if (run_name(key, s), stage) not in not_done]
        got = {f: summ.get(f) for f in fields if f in summ}
        ns = {f: (v or {}).get('n', 0) for f, v in got.items()}
        if not any(ns.values()):
          continue
        if any(n != len(seeds) for n in ns.values()):
          raise ValueError(f'{run_name(key, "*")}/{stage}: {ns} values but finished seeds '
                           f'{seeds} (finished learning curves less not_done)')
        for i, seed in enumerate(seeds):
          rows.append({'run': run_name(key, seed), 'mixing': m, 'k': k, 'seed': seed,
                       'stage': stage, 'source': None, 'via': via,
                       'values': {f: got[f]['values'][i] for f in got if got[f]},
                       **({'params_encoder_pooler': summ.get('params_encoder_pooler')}
                          if stage == 'pretrain' else {})})
    info['sources'][0]['rows'] = sorted({f"{r['run']}/{r['stage']}" for r in rows})
    return rows, curves, info
  except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
    raise RecordError(f'--recorded: {path} is not a report whose per-seed rows can be read '
                      f'({type(e).__name__}: {e})') from None


def merge_rows(own, recorded):
  """``own`` rows (the workdir's) and the ``recorded`` ones, one row per (run, stage):
  an own row replaces a recorded one (kept in its 'replaces': values, source, via);
  among recorded rows the first given wins."""
  out = {(r['run'], r['stage']): dict(r) for r in own}
  mine = set(out)
  for r in recorded:
    k = (r['run'], r['stage'])
    if k not in out:
      out[k] = dict(r)
    elif k in mine and 'replaces' not in out[k]:
      if out[k]['values'] != r['values']:
        out[k]['replaces'] = {x: r.get(x) for x in ('values', 'source', 'via')}
      elif r.get('replaces'):    # a report rebuilt over its own .json: the same row
        out[k]['replaces'] = r['replaces']
  return [out[k] for k in sorted(out)]


def missing_runs(rows, expected, L):
  """{(side, field): [run/stage, ...]}, side = ('table', mixer) or ('figure', k), of the
  ``expected`` stages [(run, (mixing, k), seed, stage)] that ``rows`` lack; a fine-tuning
  whose pre-training is missing too is named 'run/pretrain+stage'."""
  have = {(r['run'], r['stage']) for r in rows}
  out = {}
  for run, (m, k), _, stage in expected:
    if (run, stage) in have:
      continue
    name = f'{run}/{stage}' if stage == 'pretrain' or (run, 'pretrain') in have else (
        f'{run}/pretrain+{stage}')
    sides = [('table', m)] if k == 0 else []
    sides += [('figure', k)] if m == 'attention' else [('figure', L)] if m == 'sepconv' else []
    for side in sides:
      for field in (f for f, st in FIELD_STAGE.items() if st == stage):
        out.setdefault((*side, field), []).append(name)
  return out


def task_baselines(runs):
  """{'mnli' | 'squad': the task's data record (sizes, baselines)} of ``collect()`` runs,
  from the first finished fine-tuning run of each task."""
  baselines = {}
  for stage in ('mnli', 'squad'):
    r = next((rs[0] for d in runs.values() for s, rs in d.items() if s == stage), None)
    if r:
      baselines[stage] = dict(r['data'])
  return baselines


def runs_summary(runs):
  """Commands, revisions, machines, load and time range of every run in ``collect()``,
  over every attempt (process) of a run resumed from its checkpoints (its 'segments';
  results before 2026-11-24 record only their last attempt)."""
  results = [r for d in runs.values() for rs in d.values() for r in rs]
  provs = [g for r in results for g in (r.get('segments') or [r['provenance']])]
  span = lambda key: [min(p[key] for p in provs), max(p[key] for p in provs)] if provs else None
  return {'result_files': len(results),
          'resumed': sum(len(r.get('segments') or ()) > 1 for r in results),
          # results written before attempts were kept: whether they resumed is unknown
          'attempts_untracked': sum('segments' not in r for r in results),
          'attempts': len(provs),
          'git_revisions': sorted({p['git_revision'] for p in provs}),
          'machines': sorted({p['machine'] for p in provs}),
          'load_average_1min_range': span('load_average_1min_at_start'),
          'utc_range': span('utc_time'),
          'sweep_commands': sorted({p['command'] for p in provs})}
