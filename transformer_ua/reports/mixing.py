r"""Report of the Appendix H sweep (Yun et al. 2020): Table 1 and Figure 1 analogues.

experiments/mixing_sweep.py writes it from the ``result.json`` and ``metrics.jsonl`` of
every finished stage under a workdir (or its --archive_to copy), into --output_dir:

    <stem>.md, <stem>.json                    stem = mixing_layers for the `cpu` record,
    <stem>_table1.png, <stem>_figure1.png,           mixing_layers_<config> otherwise
    <stem>_curves.png

Table 1: mixer m in (average, bilinear, sepconv, attention); Figure 1: k lower layers
SepConv, L - k upper layers self-attention (k = 0: the Transformer, k = L: SepConv).
Values are mean ± sample std over seeds. A claim of the paper that a is above b is
judged on the difference of the means over finished seeds,

    d = mean_a - mean_b,   SE = sqrt(s_a^2 / n_a + s_b^2 / n_b),

as holds (d > 0 and |d| >= SE_MULTIPLE SE), fails (d < 0 and |d| >= SE_MULTIPLE SE) or
not resolved. A side with one run takes its ``seed_std`` (seed noise measured elsewhere)
or else the other side's sample variance; with ``own_seeds`` (mixing_sweep.py
--own_seeds) it takes neither: a claim is judged only when each side has >= OWN_SEEDS_MIN
finished seeds of its own, and otherwise says which runs it lacks.

A report can also combine the runs under the workdir with the per-seed rows of earlier
reports of the same config (``recorded``: their ``.json``, for runs whose workdirs are
gone; mixing_sweep.py --recorded). A report with a ``per_run`` list gives its rows as
listed there (each with its source); an older one is read from its ``table1`` /
``figure1`` values, whose seeds are those of its finished learning curves less the
stages its ``not_done`` lists. A stage run under the workdir replaces a recorded row of
the same run and stage (the recorded value is kept in the row's ``replaces``).
"""

from __future__ import annotations

import glob
import json
import os

import ml_collections
import numpy as np

from transformer_ua import cli, provenance
from transformer_ua.outputs import atomic_write  # the one atomic write (re-exported)

TABLE_MODELS = ('average', 'bilinear', 'sepconv', 'attention')
NAMES = {'average': 'Average attention', 'bilinear': 'BProj', 'sepconv': 'SepConv',
         'attention': 'Transformer'}
RECORD_CONFIG = 'cpu'   # its report is results/mixing/mixing_layers.md; others get a suffix


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


# Paper, Table 1 (BERT-base; MLM and MNLI accuracy %) and Figure 1's reading.
PAPER_TABLE1 = {'mlm_accuracy': {'average': 28, 'bilinear': 59, 'sepconv': 60, 'attention': 63},
                'mnli_accuracy': {'average': 66, 'bilinear': 72.3, 'sepconv': 73,
                                  'attention': 78.2}}
SE_MULTIPLE = 2   # a difference counts when |d| >= 2 standard errors
OWN_SEEDS_MIN = 2  # own_seeds: a side needs this many finished seeds to have a spread


def compare(a, b, own_seeds=False):
  """(mean_a - mean_b, its standard error or None) of two mean_std() summaries.

  SE = sqrt(s_a^2 / n_a + s_b^2 / n_b) with sample variances. One run has no spread of its
  own: it uses its ``seed_std`` when the summary carries one (a seed-noise estimate made
  elsewhere, e.g. from the same model's seeds under a shorter schedule), else it borrows
  the other side's variance (sample, or its ``seed_std``); SE is None when neither side
  has any. ``own_seeds``: only sample variances; SE is None unless both sides have
  >= OWN_SEEDS_MIN runs.
  """
  def var(x):
    if x['n'] > 1 and x['n'] >= (OWN_SEEDS_MIN if own_seeds else 2):
      return float(np.var(x['values'], ddof=1))
    if own_seeds:
      return None
    return float(x['seed_std']) ** 2 if x.get('seed_std') is not None else None
  va, vb = var(a), var(b)
  if own_seeds and (va is None or vb is None) or va is None and vb is None:
    return a['mean'] - b['mean'], None
  va, vb = (vb if va is None else va), (va if vb is None else vb)
  return a['mean'] - b['mean'], float(np.sqrt(va / a['n'] + vb / b['n']))


def verdict(d, se, sign):
  """'holds' / 'fails' / 'not resolved' for a claim that d has the sign ``sign``."""
  if se is None:
    return 'not judged (one run on each side, no spread)'
  if abs(d) < SE_MULTIPLE * se:
    return f'not resolved (|difference| < {SE_MULTIPLE} SE)'
  return 'holds' if d * sign > 0 else 'fails (the opposite, by >= 2 SE)'


def _lacking(missing, *sides):
  """'; missing: run/stage, ...' for the ``missing`` lists of ``sides`` (or '')."""
  runs = [x for side in sides for x in (missing or {}).get(side, ())]
  return f'; missing: {", ".join(runs)}' if runs else ''


def own_verdict(d, se, sign, n, missing_text):
  """claims()' verdict with ``own_seeds``: verdict(), or 'not judged' naming the runs
  that each side lacks; a judged claim with runs still missing names them too."""
  if se is None:
    return (f'not judged (n = {n}: needs >= {OWN_SEEDS_MIN} finished seeds a side, each side '
            f'its own{missing_text})')
  return verdict(d, se, sign) + (f' (at n = {n}{missing_text})' if missing_text else '')


def claims(table, figure, L, baselines, own_seeds=False, missing=None):
  """[(claim, measured, verdict)] of the paper's Appendix H claims, from finished runs
  (``figure=None``: Table 1's claims only).

  ``own_seeds``: every side is judged on its own seeds only (compare()), and every claim
  is listed, also one with no run on a side; ``missing`` ({('table', mixer, field) |
  ('figure', k, field): [run/stage, ...]}) names the runs a side lacks, in the verdict.
  """
  out = []
  empty = {'n': 0}

  def check(claim, a, b, sign, unit='points', sides=()):
    if own_seeds:
      a, b = a or empty, b or empty
      lack = _lacking(missing, *sides)
      if not (a['n'] and b['n']):
        out.append((claim, f'— (n = {a["n"]} vs {b["n"]})',
                    own_verdict(0, None, sign, f'{a["n"]} vs {b["n"]}', lack)))
        return
    if a and b:
      d, se = compare(a, b, own_seeds)
      pm = f' ± {se:.1f}' if se is not None else ''
      n = f'{a["n"]} vs {b["n"]}'
      out.append((claim, f'{d:+.1f}{pm} {unit} (n = {n})',
                  own_verdict(d, se, sign, n, lack) if own_seeds else verdict(d, se, sign)))

  for key, what in (('mlm_accuracy', 'MLM'), ('mnli_accuracy', 'MNLI analogue')):
    paper = PAPER_TABLE1[key]
    t = lambda m: ('table', m, key)
    for m in ('bilinear', 'sepconv', 'attention'):
      check(f'{what}: {NAMES[m]} above average attention (paper {paper[m]} vs '
            f'{paper["average"]})', table[m][key], table['average'][key], +1,
            sides=(t(m), t('average')))
    check(f'{what}: SepConv above BProj (paper {paper["sepconv"]} vs {paper["bilinear"]})',
          table['sepconv'][key], table['bilinear'][key], +1, sides=(t('sepconv'), t('bilinear')))
    check(f'{what}: Transformer above SepConv (paper {paper["attention"]} vs '
          f'{paper["sepconv"]})', table['attention'][key], table['sepconv'][key], +1,
          sides=(t('attention'), t('sepconv')))
  if 'mnli' in (baselines or {}):
    base = baselines['mnli']['majority_baseline_accuracy']
    for m in TABLE_MODELS:
      a = table[m]['mnli_accuracy']
      claim = f'MNLI analogue: {NAMES[m]} above the majority class ({base:.1f}%)'
      if own_seeds:
        lack = _lacking(missing, ('table', m, 'mnli_accuracy'))
        if not a:
          out.append((claim, '— (n = 0)', own_verdict(0, None, +1, '0', lack)))
          continue
        se = a['std'] / np.sqrt(a['n']) if a['n'] >= OWN_SEEDS_MIN and a['n'] > 1 else None
        d = a['mean'] - base
        pm = f' ± {se:.1f}' if se is not None else ''
        out.append((claim, f'{d:+.1f}{pm} points (n = {a["n"]})',
                    own_verdict(d, se, +1, str(a['n']), lack)))
      elif a:
        se = a['std'] / np.sqrt(a['n']) if a['n'] > 1 else a.get('seed_std')
        d = a['mean'] - base
        pm = f' ± {se:.1f}' if se is not None else ''
        out.append((claim, f'{d:+.1f}{pm} points (n = {a["n"]})',
                    verdict(d, se, +1) if se is not None else 'not judged (one run, no spread)'))
  for key, what in (('mlm_accuracy', 'MLM'), ('mnli_accuracy', 'MNLI analogue'),
                    ('squad_f1', 'SQuAD-analogue F1')) if figure else ():
    for k in range(1, L + 1):      # k = L: every layer SepConv (the table's SepConv)
      sign, how = (+1, 'better') if k <= 2 else (-1, 'worse')
      check(f'Figure 1, {what}: k = {k} SepConv layers {how} than the Transformer',
            figure[k][key], figure[0][key], sign, sides=(('figure', k, key), ('figure', 0, key)))
  return out


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
  cli.BadInput when a value's seed cannot be told (see the module docstring)."""
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
    raise cli.BadInput(f'--recorded: {path} is not a report whose per-seed rows can be read '
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


def _curve_band(per_seed):
  """Every evaluated step; mean and sample std of the accuracy over the seeds that reached
  it (std 0 where only one did), so an unfinished seed does not cut the others short."""
  steps = sorted(set().union(*(set(s for s, _ in pts) for pts in per_seed.values())))
  at = [[dict(pts)[s] for pts in per_seed.values() if s in dict(pts)] for s in steps]
  mean = np.array([np.mean(v) for v in at])
  std = np.array([np.std(v, ddof=1) if len(v) > 1 else 0.0 for v in at])
  return np.array(steps), mean, std


def _plot_curves(curves, tokens_per_step, path, L, num_steps):
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(7.5, 4.2))
  for key in [(m, 0) for m in TABLE_MODELS] + [('attention', k) for k in range(1, L)]:
    if key not in curves:
      continue
    steps, mean, std = _curve_band(curves[key])
    if not len(steps):
      continue
    x = steps * tokens_per_step / 1e6
    n = len(curves[key])
    running = sum(max(s for s, _ in pts) < num_steps for pts in curves[key].values())
    label = ((NAMES[key[0]] if key[1] == 0 else f'hybrid k={key[1]}') + f' (n={n}'
             + (f', {running} unfinished' if running else '') + ')')
    line, = ax.plot(x, mean, ls='-' if key[1] == 0 else '--', label=label)
    ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2)
  ax.set_xlabel('training token positions (M) = step x batch x max_len')
  ax.set_ylabel('held-out masked-LM accuracy (%)')
  ax.set_title('Pre-training learning curves (mean ± std over seeds)')
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def report(config, root, results_dir, config_name, prov, not_done=(), seed_noise=None,
           recorded=(), own_seeds=False, expected=None):
  """Rebuilds the report from every ``result.json`` under ``root``. ``not_done``: the
  sweep's status rows of the stages not done (mixing_sweep.status), listed in the report.
  ``seed_noise``: {mixer: {'mlm_accuracy' | 'mnli_accuracy': {'std', 'steps'}}}, Table 1
  mixers' seed noise under a shorter schedule (mixing_plateau.seed_noise); a mixer with
  one finished run here takes it as that run's ``seed_std`` in the claims (compare()).
  ``recorded``: paths of earlier reports' ``.json`` of this config whose per-seed rows
  join the runs under ``root`` (recorded_rows, merge_rows; read before anything is
  written, so the report may be rebuilt over its own ``.json``). ``own_seeds``: judge the
  claims on each side's own seeds only (claims()), naming the runs missing from
  ``expected`` [(run, (mixing, k), seed, stage)] (missing_runs)."""
  runs = collect(root)
  curves = learning_curves(root)
  L = config.model.num_layers
  got = [recorded_rows(p) for p in recorded]
  rows = merge_rows(per_run_rows(runs, root), [r for rs, _, _ in got for r in rs])
  for _, cs, _ in got:   # the workdir's curves first, then the first report's
    for key, per_seed in cs.items():
      for seed, pts in per_seed.items():
        curves.setdefault(key, {}).setdefault(seed, pts)
  values = {}          # {(mixing, k): {field: [(seed, value)]}}
  params = {}
  for r in rows:
    key = (r['mixing'], r['k'])
    for f, v in r['values'].items():
      values.setdefault(key, {}).setdefault(f, []).append((r['seed'], v))
    if r.get('params_encoder_pooler'):
      params.setdefault(key, r['params_encoder_pooler'])

  def get(key, field):
    sv = sorted(values.get(key, {}).get(field, []))
    s = mean_std([v for _, v in sv])
    return s and dict(s, seeds=[seed for seed, _ in sv]) if recorded or own_seeds else s
  gain = lambda key: mean_std(last_quarter_gain(curves.get(key, {}), config.pretrain.num_steps))
  table = {}
  for m in TABLE_MODELS:
    key = (m, 0)
    table[m] = {'params_encoder_pooler': params.get(key), 'mlm_gain_last_quarter': gain(key),
                **{f: get(key, f) for f in ('mlm_accuracy', 'nsp_accuracy', 'mnli_accuracy',
                                            'squad_em', 'squad_f1', 'pretrain_tokens_per_s')}}
  figure = {}
  for k in range(L + 1):
    key = ('sepconv', 0) if k == L else ('attention', k)
    figure[k] = {'params_encoder_pooler': params.get(key), 'mlm_gain_last_quarter': gain(key),
                 **{f: get(key, f) for f in ('mlm_accuracy', 'mnli_accuracy', 'squad_em',
                                             'squad_f1')}}
  used_noise = {}      # the seed noise that a single run here took (the rest is unused)
  for m, fields in (seed_noise or {}).items():   # the Table 1 mixer and its Figure 1 column
    same = {'attention': [figure[0]], 'sepconv': [figure[L]]}.get(m, [])
    for field, noise in fields.items():
      for summary in [table[m][field]] + [f[field] for f in same]:
        if summary and summary['n'] == 1:
          summary['seed_std'] = noise['std']
          used_noise.setdefault(m, {})[field] = noise
  any_run = next((rs[0] for d in runs.values() for rs in d.values()), None)
  baselines = task_baselines(runs)
  pre_data = next((rs[0]['data'] for d in runs.values() for s, rs in d.items()
                   if s == 'pretrain'), None)
  for _, _, info in got:    # the task data do not depend on the runs' seeds
    baselines = {**info['task_data'], **baselines}
    pre_data = pre_data or info['pretrain_data']
  missing = missing_runs(rows, expected, L) if expected is not None else {}
  if recorded:    # a stage a recorded report holds is done
    have = {(r['run'], r['stage']) for r in rows}
    not_done = [r for r in not_done if (r['run'], r['stage']) not in have]
  out = {'runs_summary': runs_summary(runs)}
  if recorded or own_seeds:
    sources = []
    for _, _, info in got:
      sources += [x for x in info['sources'] if x not in sources]
    out.update(per_run=rows, own_seeds=own_seeds, recorded=sources,
        missing={f'{side}_{x}_{field}': names for (side, x, field), names in missing.items()})
  out.update({'config': config_name, 'table1': table, 'figure1': {str(k): v for k, v in figure.items()},
         'task_data': baselines, 'pretrain_data': pre_data, 'sweep_provenance': prov,
         'run_provenance_example': any_run['provenance'] if any_run else None,
         'config_values': config.to_dict(), 'seed_noise': used_noise})
  out['claims'] = [{'claim': c, 'measured': m, 'verdict': v}
                   for c, m, v in claims(table, figure, L, baselines, own_seeds, missing)]
  out['learning_curves'] = {f'{m}_k{k}': {str(s): pts for s, pts in v.items()}
                            for (m, k), v in curves.items()}
  out['not_done'] = list(not_done)
  os.makedirs(results_dir, exist_ok=True)
  stem = report_stem(config_name)
  atomic_write(os.path.join(results_dir, stem + '.json'),
                json.dumps(out, indent=1, sort_keys=True, default=str))
  _plots(table, figure, L, os.path.join(results_dir, stem), baselines)
  if curves:
    _plot_curves(curves, config.pretrain.batch_size * config.model.max_len,
                 os.path.join(results_dir, stem) + '_curves.png', L, config.pretrain.num_steps)
  atomic_write(os.path.join(results_dir, stem + '.md'),
                _markdown(out, table, figure, L, config, stem, prov,
                          os.path.join(results_dir, stem), bool(curves)))


def rerender(results_dir, config_name, prov):
  """Rewrites ``<stem>.md`` in ``results_dir`` from its ``.json`` and the current
  ``<stem>_notes.md``, for a report whose workdir is gone when only the hand-written
  discussion changed: tables, claims and figures stay those of the JSON, whose report
  provenance stays in the header, with a line naming this re-render. Returns the path.
  Raises cli.BadInput when the JSON is missing or not a report."""
  stem = os.path.join(results_dir, report_stem(config_name))
  try:
    with open(stem + '.json') as f:
      out = json.load(f)
    config = ml_collections.ConfigDict(out['config_values'])
    figure = {int(k): v for k, v in out['figure1'].items()}
    md = _markdown(out, out['table1'], figure, config.model.num_layers, config, stem,
                   out['sweep_provenance'], stem, bool(out['learning_curves']), rerendered=(
                       f"- discussion re-rendered from `{os.path.basename(stem)}.json` and "
                       f"the notes by `{prov['command']}` at git revision "
                       f"`{prov['git_revision']}`, {prov['utc_time']}\n"))
  except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
    raise cli.BadInput(f'--rerender: {stem}.json is not a report of the {config_name} config '
                       f'({type(e).__name__}: {e})') from None
  atomic_write(stem + '.md', md)
  return stem + '.md'


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


def report_stem(config_name):
  """File stem of a config's report: ``mixing_layers`` for the recorded budget."""
  return 'mixing_layers' if config_name == RECORD_CONFIG else f'mixing_layers_{config_name}'


def _plots(table, figure, L, stem, baselines=None):
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
  for ax, (key, label) in zip(axes, [('mlm_accuracy', 'held-out masked-LM accuracy (%)'),
                                     ('mnli_accuracy', 'MNLI-analogue accuracy (%)'),
                                     ('squad_em', 'SQuAD-analogue EM (%)'),
                                     ('squad_f1', 'SQuAD-analogue F1 (%)')]):
    ks = [k for k in range(L + 1) if figure[k][key]]
    if ks:
      ax.errorbar(ks, [figure[k][key]['mean'] for k in ks],
                  yerr=[figure[k][key]['std'] for k in ks], marker='o', capsize=3)
    base = None
    if baselines and key == 'mnli_accuracy' and 'mnli' in baselines:
      base = ('majority class', baselines['mnli']['majority_baseline_accuracy'])
    elif baselines and key.startswith('squad') and 'squad' in baselines:
      name, b = max(baselines['squad']['baselines'].items(), key=lambda kv: kv[1]['em'])
      base = (name.replace('_', ' '), b[key.split('_')[1]])
    if base:
      ax.axhline(base[1], color='gray', ls='--', label=f'baseline: {base[0]}')
      ax.legend(fontsize=8)
    ax.set_xlabel('k = lower layers replaced by SepConv')
    ax.set_ylabel(label)
    ax.set_xticks(range(L + 1))
    ax.grid(alpha=0.3)
  fig.suptitle('Figure 1 analogue (mean ± std over seeds)')
  fig.tight_layout()
  fig.savefig(stem + '_figure1.png', dpi=110)
  plt.close(fig)
  fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
  for ax, (key, label) in zip(axes, [('mlm_accuracy', 'masked-LM accuracy (%)'),
                                     ('mnli_accuracy', 'MNLI-analogue accuracy (%)')]):
    ms = [m for m in TABLE_MODELS if table[m][key]]
    ax.bar(range(len(ms)), [table[m][key]['mean'] for m in ms],
           yerr=[table[m][key]['std'] for m in ms], capsize=3)
    ax.set_xticks(range(len(ms)))
    ax.set_xticklabels([NAMES[m] for m in ms], rotation=15)
    ax.set_ylabel(label)
    if key == 'mnli_accuracy' and baselines and 'mnli' in baselines:
      ax.axhline(baselines['mnli']['majority_baseline_accuracy'], color='gray', ls='--',
                 label='majority class')
      ax.legend(fontsize=8, loc='lower right')
  fig.suptitle('Table 1 analogue (mean ± std over seeds)')
  fig.tight_layout()
  fig.savefig(stem + '_table1.png', dpi=110)
  plt.close(fig)


def _seed_noise_sentence(seed_noise):
  """What the claims took as the seed noise of single runs (report's ``seed_noise``)."""
  if not seed_noise:
    return ''
  fields = {'mlm_accuracy': 'MLM', 'mnli_accuracy': 'MNLI'}
  used = '; '.join(f"{NAMES[m]} {fields[f]} {v['std']:.1f} ({v['steps']} steps)"
                   for m in TABLE_MODELS for f, v in seed_noise.get(m, {}).items())
  return (' Here a Table 1 mixer (and its Figure 1 column) with one finished run takes as '
          'its seed noise the sample std of its seeds under the longest shorter schedule '
          f'with >= 2 seeds (--compare_to; an assumption): {used}. A hybrid with one run '
          'borrows the other side\'s.')


def _markdown(out, table, figure, L, config, stem, prov, stem_path='', curves=False,
              rerendered=''):
  m = config.model
  lines = [f'# Yun et al. 2020, Appendix H at our scale (`{out["config"]}` config)', '',
           provenance.markdown_header(prov, 'report command') + rerendered,
           *_sources_lines(out),
           f'Model: {L} layers, d = {m.hidden}, {m.num_heads} heads, FF {m.mlp_dim}, '
           f'max_len {m.max_len}, SepConv {m.conv_filters} filters of width {m.conv_width}; '
           f'pre-training {config.pretrain.num_steps} steps x batch '
           f'{config.pretrain.batch_size}, fine-tuning {config.finetune.num_steps} steps x '
           f'batch {config.finetune.batch_size}. Values are mean ± sample std over seeds '
           '(n = number of seeds finished). Every run directory holds its own '
           '`result.json` with command, revision and machine.', '',
           '## Table 1 analogue', '',
           '| | ' + ' | '.join(NAMES[x] for x in TABLE_MODELS) + ' |',
           '|---|' + '---|' * len(TABLE_MODELS)]
  row = lambda label, f: lines.append(f'| {label} | ' + ' | '.join(
      f(table[x]) for x in TABLE_MODELS) + ' |')
  row('# params (encoder + pooler)', lambda t: f"{t['params_encoder_pooler']:,}"
      if t['params_encoder_pooler'] else '—')
  row('Masked LM accuracy (%)', lambda t: fmt_mean_std(t['mlm_accuracy']))
  row('MLM gain over the last quarter of steps (points)',
      lambda t: fmt_mean_std(t['mlm_gain_last_quarter']))
  row('Sentence-pair accuracy (%)', lambda t: fmt_mean_std(t['nsp_accuracy']))
  row('MNLI-analogue accuracy (%)', lambda t: fmt_mean_std(t['mnli_accuracy']))
  row('SQuAD-analogue EM / F1 (%)', lambda t: (fmt_mean_std(t['squad_em']) + ' / ' +
                                               fmt_mean_std(t['squad_f1'])) if t['squad_em'] else '—')
  row('pre-training tokens/s', lambda t: fmt_mean_std(t['pretrain_tokens_per_s'], 0))
  lines += ['', 'Paper (BERT-base, Wikipedia + books): params 88.3M / 90M / 102.5M / 110M; '
            'MLM 28 / 59 / 60 / 63; MNLI 66 / 72.3 / 73 / 78.2.', '',
            '## Figure 1 analogue', '',
            f'k lower layers SepConv, {L} - k upper layers self-attention (k = 0 is the '
            f'Transformer, k = {L} is the all-SepConv model of the table).', '',
            '| k | # params | MLM acc (%) | MLM gain, last quarter | MNLI-analogue acc (%) | '
            'SQuAD-analogue EM (%) | SQuAD-analogue F1 (%) |', '|---|---|---|---|---|---|---|']
  for k in range(L + 1):
    f = figure[k]
    lines.append(f"| {k} | {f['params_encoder_pooler'] or '—':,} | {fmt_mean_std(f['mlm_accuracy'])} | "
                 f"{fmt_mean_std(f['mlm_gain_last_quarter'])} | {fmt_mean_std(f['mnli_accuracy'])} | "
                 f"{fmt_mean_std(f['squad_em'])} | {fmt_mean_std(f['squad_f1'])} |"
                 if f['params_encoder_pooler'] else f'| {k} | — | — | — | — | — | — |')
  lines += ['', f'![Table 1]({os.path.basename(stem)}_table1.png)',
            f'![Figure 1]({os.path.basename(stem)}_figure1.png)', '']
  if out['claims'] and out.get('own_seeds'):
    lines += ["## The paper's claims, checked automatically", '',
              'Differences are mean over seeds minus mean over seeds, ± their standard error '
              'sqrt(s_a^2/n_a + s_b^2/n_b), each side with the sample variance of its own '
              f'seeds: a side needs >= {OWN_SEEDS_MIN} finished seeds, no seed noise is '
              'borrowed from the other side or from another schedule. A claim holds or fails '
              f'only when |difference| >= {SE_MULTIPLE} SE (with 2 seeds a side the SE itself '
              'is rough); finished runs only. "missing" names the runs that a side still '
              'lacks towards 3 seeds (run/stage; pretrain+mnli: both are missing).', '',
              '| claim | measured difference | verdict |', '|---|---|---|']
    lines += [f"| {c['claim']} | {c['measured']} | {c['verdict']} |" for c in out['claims']]
    lines.append('')
  elif out['claims']:
    lines += ["## The paper's claims, checked automatically", '',
              'Differences are mean over seeds minus mean over seeds, ± their standard error '
              'sqrt(s_a^2/n_a + s_b^2/n_b) (a single run borrows the other side\'s '
              f'variance). A claim holds or fails only when |difference| >= {SE_MULTIPLE} SE; '
              'finished runs only.' + _seed_noise_sentence(out.get('seed_noise')), '',
              '| claim | measured difference | verdict |', '|---|---|---|']
    lines += [f"| {c['claim']} | {c['measured']} | {c['verdict']} |" for c in out['claims']]
    lines.append('')
  if curves:
    lines += ['## Learning curves', '', 'Held-out masked-LM accuracy during pre-training '
              f'(every {config.pretrain.eval_every} steps; mean ± std band over the seeds '
              'that reached each step). The learning rate warms up linearly over '
              f'{config.pretrain.warmup_steps} steps, then decays linearly to 0 at step '
              f'{config.pretrain.num_steps}: a curve that still rises over the last quarter '
              '(the "MLM gain" row above) was stopped by the end of its schedule, not by a '
              'plateau.', '',
              f'![Learning curves]({os.path.basename(stem)}_curves.png)', '']
  if out['not_done']:
    lines += ['## Not finished', '', f"{len(out['not_done'])} stages of the sweep are not "
              'done; the tables above cover only the finished ones:', '']
    lines += [f"- {r['run']}/{r['stage']}: " + (f"partial, step {r['step']} of "
              f"{r['num_steps']}" if r['state'] == 'partial' else 'missing')
              for r in out['not_done']]
    lines.append('')
  lines += _per_run_lines(out)
  td = out['task_data']
  lines += ['## Tasks, sizes and baselines', '']
  if out['pretrain_data']:
    p = out['pretrain_data']
    lines.append(f"- Pre-training: WordNet 3.0 (Debian `wordnet-base`), {p['train_synsets']:,} "
                 f"training synsets ({p['train_pair_synsets']:,} with example sentences for "
                 f"the sentence-pair objective), {p['heldout_synsets']:,} held-out synsets "
                 f"for evaluation ({p['eval_sequences']} sequences); WordPiece vocabulary "
                 f"{p['vocab_size']}. Sentence-pair chance: 50%.")
  if 'mnli' in td:
    t = td['mnli']
    lines.append(f"- MNLI analogue (hypernym / co-hyponym / unrelated gloss pairs): "
                 f"{t['train_examples']:,} training pairs, {t['test_examples']:,} test pairs "
                 f"with held-out premise synsets; majority class '{t['majority_label']}' = "
                 f"{t['majority_baseline_accuracy']:.1f}%.")
  if 'squad' in td:
    t = td['squad']
    b = '; '.join(f"{k}: EM {v['em']:.1f} / F1 {v['f1']:.1f}" for k, v in t['baselines'].items())
    lines.append(f"- SQuAD analogue (find the defined word in its example sentence): "
                 f"{t['train_examples']:,} training, {t['test_examples']:,} test questions "
                 f"(held-out synsets); baselines {b}.")
  lines.append('')
  notes = stem_path + '_notes.md'
  if os.path.exists(notes):
    with open(notes) as f:
      lines += ['## Discussion', '', f.read().strip(), '']
  return '\n'.join(lines)


def _source_text(r):
  """Where a per-run row was read: its workdir (or archive), or the report it was
  recorded in."""
  if r.get('via'):
    return f"recorded in `{r['via']}`" + (f" (runs in `{r['source']}`)" if r.get('source')
                                          else '')
  return f"`{r['source']}`"


def _sources_lines(out):
  """The header's run provenance: the workdir's runs, then each recorded report's."""
  if not out.get('recorded'):
    return runs_lines(out['runs_summary'])
  lines = []
  if out['runs_summary']['result_files']:
    lines += ['Runs read from the workdir or its archive (result.json files):', '',
              *runs_lines(out['runs_summary'])]
  for x in out['recorded']:
    lines += [f"Rows recorded in `{os.path.basename(x['path'])}` (the report of this config "
              f"at git revision `{x['report_revision'][:7]}`; their workdirs are gone): "
              f"{len(x['rows'])} stages. Its runs:", '']
    lines += runs_lines(x['runs_summary']) if x.get('runs_summary') else ['']
  return lines


def _per_run_lines(out):
  """'Where each number comes from': every run's stage, value and source."""
  rows = out.get('per_run')
  if not rows:
    return []
  show = {'pretrain': ('mlm_accuracy', 'nsp_accuracy'), 'mnli': ('mnli_accuracy',),
          'squad': ('squad_em', 'squad_f1')}
  fmt = lambda vals, stage: ', '.join(f'{f.split("_")[0] if stage != "squad" else f} '
                                      f'{vals[f]:.2f}' for f in show[stage] if f in vals)
  lines = ['## Where each number comes from', '',
           'Every finished stage in the tables and claims above, with its source: the '
           'archived runs (each with its `result.json`: every attempt\'s command, revision, '
           'machine and load), or a row recorded in an earlier report of this config whose '
           'workdir is gone (its commands, revisions and machines are in the header). A row '
           'run again here replaces the recorded one, which is shown beside it.', '',
           '| run | stage | values (%) | source | replaces |', '|---|---|---|---|---|']
  for r in sorted(rows, key=lambda r: (r['k'], TABLE_MODELS.index(r['mixing']), r['seed'],
                                       STAGE_ORDER.index(r['stage']))):
    rep_ = r.get('replaces')
    lines.append(f"| {r['run']} | {r['stage']} | {fmt(r['values'], r['stage'])} | "
                 f"{_source_text(r)} | " + (f"{fmt(rep_['values'], r['stage'])}, "
                                            f"{_source_text(rep_)}" if rep_ else '') + ' |')
  return lines + ['']


STAGE_ORDER = ('pretrain', 'mnli', 'squad')


def runs_lines(rs):
  if not rs['result_files']:
    return []
  resumed = (f" ({rs['resumed']} resumed from checkpoints: {rs['attempts']} attempts in all)"
             if rs.get('resumed') else '')
  if rs.get('attempts_untracked'):
    resumed += (f" ({rs['attempts_untracked']} written before attempts were kept: their "
                'resumes, if any, are not in the record)')
  return [f"- runs: {rs['result_files']} stages{resumed}, {rs['utc_range'][0]} to "
          f"{rs['utc_range'][1]} UTC, 1-min load {rs['load_average_1min_range'][0]}-"
          f"{rs['load_average_1min_range'][1]} at stage starts" + (
              ' and resumes' if rs.get('resumed') else ''),
          '- run commands: ' + '; '.join(f'`{c}`' for c in rs['sweep_commands']),
          '- run revisions: ' + ', '.join(f'`{r}`' for r in rs['git_revisions']),
          '- run machines: ' + '; '.join(rs['machines']), '']
