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

Parts: ``mixing_rows`` (what the report reads: rows, curves, records), ``mixing_claims``
(judging the paper's claims), ``mixing_figures`` (the PNGs), ``mixing_markdown`` (the
``.md``); this module builds the report from them.
"""

from __future__ import annotations

import json
import os

import ml_collections

from transformer_ua.outputs import atomic_write
from transformer_ua.reports.mixing_claims import claims
from transformer_ua.reports.mixing_figures import _plot_curves, _plots
from transformer_ua.reports.mixing_markdown import _markdown
from transformer_ua.reports.mixing_rows import (TABLE_MODELS, RecordError, collect,
                                                last_quarter_gain, learning_curves,
                                                mean_std, merge_rows, missing_runs,
                                                per_run_rows, recorded_rows, runs_summary,
                                                task_baselines)


RECORD_CONFIG = 'cpu'   # its report is results/mixing/mixing_layers.md; others get a suffix


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
  Raises mixing_rows.RecordError when the JSON is missing or not a report."""
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
    raise RecordError(f'--rerender: {stem}.json is not a report of the {config_name} config '
                      f'({type(e).__name__}: {e})') from None
  atomic_write(stem + '.md', md)
  return stem + '.md'


def report_stem(config_name):
  """File stem of a config's report: ``mixing_layers`` for the recorded budget."""
  return 'mixing_layers' if config_name == RECORD_CONFIG else f'mixing_layers_{config_name}'
