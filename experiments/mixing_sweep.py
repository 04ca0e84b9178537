r"""All Appendix H runs of one config: Table 1 and Figure 1 analogues (Yun et al. 2020).

    python experiments/mixing_sweep.py --config=experiments/configs/mixing_tiny.py \
        --workdir=runs/mixing_tiny --seeds=3 [--hybrid_ks=1,2] [--hybrid_seeds=1] \
        [--table_mixers=sepconv,attention] [--stages=pretrain,mnli,squad] [--shard=0/2] \
        [--report_only | --status] [--compare_to=WORKDIR,...] [--archive_to=DIR]
    python experiments/mixing_sweep.py --config=... --results_dir=results --rerender

Jobs: first Table 1, seed-major (every model's seed 0 first), then Figure 1:

* Table 1: mixing in (average, bilinear, sepconv, attention), pre-training (MLM +
  sentence pair) then MNLI-analogue fine-tuning (and SQuAD-analogue for sepconv and
  attention, which are Figure 1's k = L and k = 0).
* Figure 1: hybrids with the first k = 1 .. L-1 layers sepconv, the rest attention, at
  ``--hybrid_seeds`` seeds (default ``--seeds``); pre-training then both tasks.

``--stages`` runs only those stages of every job (``--stages=pretrain`` first, then
``--stages=mnli,squad``: every pre-training before any fine-tuning). ``--status`` runs
nothing: it lists every stage of the sweep as done / partial (step i of n, from the
newest checkpoint) / missing, with an ETA from the measured seconds per step of the
finished stages (or of the partial ones' checkpoints).

A finished stage (``result.json`` present) is skipped, an unfinished one resumes from
its checkpoint. ``--shard=i/m`` runs every m-th job (two single-threaded processes use
2 cores better than one). After each job the report is rebuilt from every
``result.json`` under the workdir: ``mixing_layers.md`` (for ``cpu``, the recorded
budget; ``mixing_layers_<config>.md`` otherwise) with a JSON twin and PNG figures, in
``--results_dir`` (default ``<workdir>/report``; ``--results_dir=results`` updates the
checked-in record).

``--compare_to=WORKDIR,...`` (sweeps of the same config under other step counts, e.g.
``cpu`` and ``cpu_long`` for a ``cpu_longer`` ``--workdir``) also writes
``mixing_layers_plateau.{md,json,png}``: each mixer's final accuracy per schedule, what
each tripling of the tokens buys, i.e. whether pre-training has plateaued, and whether
the mixers' order survives more tokens. An entry may also be an earlier
``mixing_layers_plateau.json``: its schedules come in as recorded there (for workdirs
that are gone), and a mixer a workdir has more finished seeds of replaces its row.

A workdir lives on one machine. ``--archive_to=results/mixing_runs/<config>`` copies
every finished stage's small records (no checkpoints) there, to be committed; every
report can be rebuilt from that copy (``--workdir=`` it, ``--report_only``, or
``--compare_to=`` it). Fine-tuning still needs the pre-training checkpoint, so a
machine should run a checkpoint's fine-tuning before it goes.
"""

import filecmp
import glob
import json
import os
import shutil
import sys

from absl import app, flags, logging
import ml_collections
from ml_collections import config_flags
import numpy as np

from transformer_ua.models import mixing_train
from transformer_ua import cli, provenance
from transformer_ua.data import wordnet

TABLE_MODELS = ('average', 'bilinear', 'sepconv', 'attention')

_CONFIG = cli.define_config_file('config', None, 'experiments/configs/mixing_*.py')
_WORKDIR = flags.DEFINE_string('workdir', None, 'Root of the sweep runs.')
_SEEDS = flags.DEFINE_integer('seeds', 3, 'Seeds per model.')
_SHARD = flags.DEFINE_string('shard', '0/1', 'i/m: run jobs j with j % m == i.')
_RESULTS = flags.DEFINE_string('results_dir', None, 'Where the report goes (default '
                                '<workdir>/report; --results_dir=results updates the record).')
_REPORT_ONLY = flags.DEFINE_bool('report_only', False, 'Only rebuild the report.')
_HYBRID_KS = flags.DEFINE_list('hybrid_ks', None, 'Figure 1 hybrids k (default 1..L-1; '
                                '"" = none).')
_HYBRID_SEEDS = flags.DEFINE_integer('hybrid_seeds', None, 'Seeds per hybrid (default --seeds).')
_STAGES = flags.DEFINE_list('stages', ['pretrain', 'mnli', 'squad'],
                            'Stages run for every job (pretrain, mnli, squad).')
_TABLE_MIXERS = flags.DEFINE_list('table_mixers', list(TABLE_MODELS),
                            'Table 1 mixers whose runs this call makes (default all).')
_COMPARE_TO = flags.DEFINE_list('compare_to', [], 'Workdirs (or their --archive_to copies) '
                                'of the same sweep under other pre-training schedules (e.g. '
                                '`cpu` for a `cpu_long` --workdir), or an earlier '
                                'mixing_layers_plateau.json: also report whether pre-training '
                                'has plateaued (mixing_layers_plateau.md).')
_ARCHIVE_TO = flags.DEFINE_string('archive_to', None, 'Also copy every finished stage\'s '
                                  'records (config.json, result.json, metrics.jsonl; no '
                                  'checkpoint) here, e.g. results/mixing_runs/<config>, so the '
                                  'reports outlive the workdir.')
_STATUS = flags.DEFINE_bool('status', False, 'List done / partial / missing stages with an '
                            'ETA; run nothing.')
_RERENDER = flags.DEFINE_bool('rerender', False, 'Only rewrite the report\'s .md in '
                              '--results_dir from its .json and the current notes (a report '
                              'whose workdir is gone); run nothing.')
STAGES = ('pretrain', 'mnli', 'squad')
RECORD_CONFIG = 'cpu'   # its report is results/mixing_layers.md; others get a suffix
NAMES = {'average': 'Average attention', 'bilinear': 'BProj', 'sepconv': 'SepConv',
         'attention': 'Transformer'}


def jobs(num_layers: int, seeds: int, hybrid_ks=None, hybrid_seeds=None,
         mixers=TABLE_MODELS):
  """[(name, mixing, k, seed, tasks)]: Table 1 seed-major (the ``mixers`` only), then the
  hybrids seed-major."""
  hybrid_ks = range(1, num_layers) if hybrid_ks is None else hybrid_ks
  hybrid_seeds = seeds if hybrid_seeds is None else hybrid_seeds
  out = []
  for seed in range(seeds):
    for m in (m for m in TABLE_MODELS if m in mixers):
      both = m in ('sepconv', 'attention')
      out.append((f'{m}_s{seed}', m, 0, seed, ('mnli', 'squad') if both else ('mnli',)))
  for seed in range(hybrid_seeds):
    for k in hybrid_ks:
      out.append((f'hybrid_k{k}_s{seed}', 'attention', k, seed, ('mnli', 'squad')))
  return out


def _checkpoint_progress(stage_dir):
  """(newest finished checkpoint step, its elapsed seconds or None), or (0, None)."""
  ck = os.path.join(stage_dir, 'checkpoints')
  steps = sorted(int(d) for d in (os.listdir(ck) if os.path.isdir(ck) else []) if d.isdigit())
  if not steps:
    return 0, None
  elapsed = None
  for meta in glob.glob(os.path.join(ck, str(steps[-1]), 'meta', '*')):
    try:
      with open(meta) as f:
        elapsed = float(json.load(f)['elapsed'])
      break
    except (OSError, ValueError, KeyError, TypeError):
      continue
  return steps[-1], elapsed


def status(config, root, job_list, stages=STAGES):
  """[{'run', 'stage', 'state' (done | partial | missing), 'step', 'num_steps',
  'seconds_per_step'}] of every stage of ``job_list``, and the ETA summary dict."""
  rows = []
  for name, _, _, _, tasks in job_list:
    for stage in ('pretrain', *tasks):
      if stage not in stages:
        continue
      sec = config.pretrain if stage == 'pretrain' else config.finetune
      d = os.path.join(root, name, stage)
      row = {'run': name, 'stage': stage, 'num_steps': sec.num_steps, 'step': 0,
             'state': 'missing', 'seconds_per_step': None}
      res = os.path.join(d, 'result.json')
      if os.path.exists(res):
        with open(res) as f:
          r = json.load(f)
        row.update(state='done', step=r['step'], seconds_per_step=r['wall_s'] / max(1, r['step']))
      else:
        step, elapsed = _checkpoint_progress(d)
        if step:
          row.update(state='partial', step=step,
                     seconds_per_step=elapsed / step if elapsed else None)
      rows.append(row)
  rate = {}
  for kind in ('pretrain', 'finetune'):
    rs = [r['seconds_per_step'] for r in rows if r['seconds_per_step']
          and (r['stage'] == 'pretrain') == (kind == 'pretrain')]
    rate[kind] = float(np.median(rs)) if rs else None
  remaining, unknown = 0.0, 0
  for r in rows:
    sps = rate['pretrain' if r['stage'] == 'pretrain' else 'finetune']
    left = r['num_steps'] - r['step'] if r['state'] != 'done' else 0
    if left and sps is None:
      unknown += 1
    elif left:
      remaining += left * sps
  counts = {s: sum(r['state'] == s for r in rows) for s in ('done', 'partial', 'missing')}
  return rows, {**counts, 'seconds_per_step': rate, 'eta_seconds': remaining,
                'stages_without_rate': unknown}


def format_status(rows, summary):
  lines = []
  for r in rows:
    what = {'done': 'done', 'missing': 'missing',
            'partial': f"partial (step {r['step']} of {r['num_steps']})"}[r['state']]
    lines.append(f"{r['run'] + '/' + r['stage']:<28} {what}")
  sps = summary['seconds_per_step']
  fmt = lambda v: f'{v:.3f} s/step' if v else 'no rate yet'
  eta, unknown = summary['eta_seconds'], summary['stages_without_rate']
  if unknown and not eta:      # nothing left has a rate yet: no number to give
    eta_text = f'ETA unknown ({unknown} stages left with no measured rate yet)'
  else:
    eta_text = (f'ETA {eta / 3600:.1f} h at these rates'
                + (f' (+ {unknown} stages with no measured rate)' if unknown else ''))
  lines.append(f"{summary['done']} done, {summary['partial']} partial, {summary['missing']} "
               f"missing; pre-training {fmt(sps['pretrain'])}, fine-tuning "
               f"{fmt(sps['finetune'])}; {eta_text}")
  return '\n'.join(lines)


def run_job(config, root, job, stages=STAGES):
  name, mixing, k, seed, tasks = job
  c = ml_collections.ConfigDict(config.to_dict())
  c.model.mixing, c.model.num_conv_layers, c.seed = mixing, k, seed
  run = os.path.join(root, name)
  if 'pretrain' in stages and not os.path.exists(os.path.join(run, 'pretrain', 'result.json')):
    mixing_train.pretrain(c, os.path.join(run, 'pretrain'))
  for task in tasks:
    if task not in stages:
      continue
    if os.path.exists(os.path.join(run, task, 'result.json')):
      continue
    c.finetune.task = task
    c.finetune.pretrain_workdir = os.path.join(run, 'pretrain')
    mixing_train.finetune(c, os.path.join(run, task))


ARCHIVE_FILES = ('config.json', 'result.json', 'metrics.jsonl')  # all that the reports read


def archive(root, dest):
  """Copies every finished stage's records (ARCHIVE_FILES: no checkpoint, no tokenizer)
  from the workdir ``root`` to ``dest/<run>/<stage>/``; returns how many stages it copied.

  A workdir dies with its machine; its archive is ~0.1 MB a stage and can be committed,
  and every report reads it like the workdir (``--workdir=DEST --report_only``,
  ``--compare_to=DEST``). A stage already archived with the same bytes is skipped; one
  archived with other bytes (a rerun) raises cli.BadInput before anything is copied.
  """
  todo = []
  for res in sorted(glob.glob(os.path.join(root, '*', '*', 'result.json'))):
    src = os.path.dirname(res)
    out = os.path.join(dest, os.path.relpath(src, root))
    files = [f for f in ARCHIVE_FILES if os.path.exists(os.path.join(src, f))]
    new = []
    for f in files:
      a, b = os.path.join(src, f), os.path.join(out, f)
      if not os.path.exists(b):
        new.append(f)
      elif not filecmp.cmp(a, b, shallow=False):
        raise cli.BadInput(f'--archive_to: {b} already holds a different record of this stage '
                           f'than {a}; move it away to archive the new run')
    if new:
      todo.append((src, out, new))
  for src, out, new in todo:
    os.makedirs(out, exist_ok=True)
    for f in sorted(new, key=lambda f: f == 'result.json'):  # result.json last: done marker
      tmp = os.path.join(out, f + f'.tmp{os.getpid()}')
      shutil.copyfile(os.path.join(src, f), tmp)
      os.replace(tmp, os.path.join(out, f))
  return len(todo)


def _ms(xs):
  xs = [x for x in xs if x is not None]
  if not xs:
    return None
  return {'mean': float(np.mean(xs)), 'std': float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0,
          'n': len(xs), 'values': xs}


def _fmt(s, digits=1):
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


def compare(a, b):
  """(mean_a - mean_b, its standard error or None) of two ``_ms`` summaries.

  SE = sqrt(s_a^2 / n_a + s_b^2 / n_b) with sample variances. One run has no spread of its
  own: it uses its ``seed_std`` when the summary carries one (a seed-noise estimate made
  elsewhere, e.g. from the same model's seeds under a shorter schedule), else it borrows
  the other side's sample variance; SE is None when neither side has any.
  """
  def var(x):
    if x['n'] > 1:
      return float(np.var(x['values'], ddof=1))
    return float(x['seed_std']) ** 2 if x.get('seed_std') is not None else None
  va, vb = var(a), var(b)
  if va is None and vb is None:
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


def claims(table, figure, L, baselines):
  """[(claim, measured, verdict)] of the paper's Appendix H claims, from finished runs
  (``figure=None``: Table 1's claims only)."""
  out = []

  def check(claim, a, b, sign, unit='points'):
    if a and b:
      d, se = compare(a, b)
      pm = f' ± {se:.1f}' if se is not None else ''
      out.append((claim, f'{d:+.1f}{pm} {unit} (n = {a["n"]} vs {b["n"]})', verdict(d, se, sign)))

  for key, what in (('mlm_accuracy', 'MLM'), ('mnli_accuracy', 'MNLI analogue')):
    paper = PAPER_TABLE1[key]
    for m in ('bilinear', 'sepconv', 'attention'):
      check(f'{what}: {NAMES[m]} above average attention (paper {paper[m]} vs '
            f'{paper["average"]})', table[m][key], table['average'][key], +1)
    check(f'{what}: SepConv above BProj (paper {paper["sepconv"]} vs {paper["bilinear"]})',
          table['sepconv'][key], table['bilinear'][key], +1)
    check(f'{what}: Transformer above SepConv (paper {paper["attention"]} vs '
          f'{paper["sepconv"]})', table['attention'][key], table['sepconv'][key], +1)
  if 'mnli' in (baselines or {}):
    base = baselines['mnli']['majority_baseline_accuracy']
    for m in TABLE_MODELS:
      a = table[m]['mnli_accuracy']
      if a:
        se = a['std'] / np.sqrt(a['n']) if a['n'] > 1 else a.get('seed_std')
        d = a['mean'] - base
        pm = f' ± {se:.1f}' if se is not None else ''
        out.append((f'MNLI analogue: {NAMES[m]} above the majority class ({base:.1f}%)',
                    f'{d:+.1f}{pm} points (n = {a["n"]})',
                    verdict(d, se, +1) if se is not None else 'not judged (one run, no spread)'))
  for key, what in (('mlm_accuracy', 'MLM'), ('mnli_accuracy', 'MNLI analogue'),
                    ('squad_f1', 'SQuAD-analogue F1')) if figure else ():
    for k in range(1, L + 1):      # k = L: every layer SepConv (the table's SepConv)
      sign, how = (+1, 'better') if k <= 2 else (-1, 'worse')
      check(f'Figure 1, {what}: k = {k} SepConv layers {how} than the Transformer',
            figure[k][key], figure[0][key], sign)
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


def report(config, root, results_dir, config_name, prov, job_list=None):
  """Rebuilds the report from every ``result.json`` under ``root``; returns the status
  rows of ``job_list`` that are not done (they are listed in the report)."""
  runs = collect(root)
  curves = learning_curves(root)
  L = config.model.num_layers
  get = lambda key, stage, f: _ms([f(r) for r in runs.get(key, {}).get(stage, [])])
  gain = lambda key: _ms(last_quarter_gain(curves.get(key, {}), config.pretrain.num_steps))
  table = {}
  for m in TABLE_MODELS:
    key = (m, 0)
    pre = runs.get(key, {}).get('pretrain', [])
    table[m] = {
        'params_encoder_pooler': pre[0]['params_encoder_pooler'] if pre else None,
        'mlm_accuracy': get(key, 'pretrain', lambda r: r['eval']['mlm_accuracy']),
        'mlm_gain_last_quarter': gain(key),
        'nsp_accuracy': get(key, 'pretrain', lambda r: r['eval']['nsp_accuracy']),
        'mnli_accuracy': get(key, 'mnli', lambda r: r['eval']['accuracy']),
        'squad_em': get(key, 'squad', lambda r: r['eval']['em']),
        'squad_f1': get(key, 'squad', lambda r: r['eval']['f1']),
        'pretrain_tokens_per_s': get(key, 'pretrain', lambda r: r['train_tokens_per_s']),
    }
  figure = {}
  for k in range(L + 1):
    key = ('sepconv', 0) if k == L else ('attention', k)
    figure[k] = {
        'params_encoder_pooler': (runs[key]['pretrain'][0]['params_encoder_pooler']
                                  if runs.get(key, {}).get('pretrain') else None),
        'mlm_accuracy': get(key, 'pretrain', lambda r: r['eval']['mlm_accuracy']),
        'mlm_gain_last_quarter': gain(key),
        'mnli_accuracy': get(key, 'mnli', lambda r: r['eval']['accuracy']),
        'squad_em': get(key, 'squad', lambda r: r['eval']['em']),
        'squad_f1': get(key, 'squad', lambda r: r['eval']['f1']),
    }
  any_run = next((rs[0] for d in runs.values() for rs in d.values()), None)
  baselines = task_baselines(runs)
  pre_data = next((rs[0]['data'] for d in runs.values() for s, rs in d.items()
                   if s == 'pretrain'), None)
  out = {'runs_summary': runs_summary(runs)}
  out.update({'config': config_name, 'table1': table, 'figure1': {str(k): v for k, v in figure.items()},
         'task_data': baselines, 'pretrain_data': pre_data, 'sweep_provenance': prov,
         'run_provenance_example': any_run['provenance'] if any_run else None,
         'config_values': config.to_dict()})
  out['claims'] = [{'claim': c, 'measured': m, 'verdict': v}
                   for c, m, v in claims(table, figure, L, baselines)]
  out['learning_curves'] = {f'{m}_k{k}': {str(s): pts for s, pts in v.items()}
                            for (m, k), v in curves.items()}
  not_done = []
  if job_list is not None:
    not_done = [r for r in status(config, root, job_list)[0] if r['state'] != 'done']
  out['not_done'] = not_done
  os.makedirs(results_dir, exist_ok=True)
  stem = report_stem(config_name)
  _atomic_write(os.path.join(results_dir, stem + '.json'),
                json.dumps(out, indent=1, sort_keys=True, default=str))
  _plots(table, figure, L, os.path.join(results_dir, stem), baselines)
  if curves:
    _plot_curves(curves, config.pretrain.batch_size * config.model.max_len,
                 os.path.join(results_dir, stem) + '_curves.png', L, config.pretrain.num_steps)
  _atomic_write(os.path.join(results_dir, stem + '.md'),
                _markdown(out, table, figure, L, config, stem, prov,
                          os.path.join(results_dir, stem), bool(curves)))
  return not_done


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
  _atomic_write(stem + '.md', md)
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
  """Commands, revisions, machines, load and time range of every run in ``collect()``."""
  provs = [r['provenance'] for d in runs.values() for rs in d.values() for r in rs]
  span = lambda key: [min(p[key] for p in provs), max(p[key] for p in provs)] if provs else None
  return {'result_files': len(provs),
          'git_revisions': sorted({p['git_revision'] for p in provs}),
          'machines': sorted({p['machine'] for p in provs}),
          'load_average_1min_range': span('load_average_1min_at_start'),
          'utc_range': span('utc_time'),
          'sweep_commands': sorted({p['command'] for p in provs})}


def report_stem(config_name):
  """File stem of a config's report: ``mixing_layers`` for the recorded budget."""
  return 'mixing_layers' if config_name == RECORD_CONFIG else f'mixing_layers_{config_name}'


def _atomic_write(path, s):
  tmp = path + f'.tmp{os.getpid()}'
  with open(tmp, 'w') as f:
    f.write(s)
  os.replace(tmp, path)


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


def _markdown(out, table, figure, L, config, stem, prov, stem_path='', curves=False,
              rerendered=''):
  m = config.model
  lines = [f'# Yun et al. 2020, Appendix H at our scale (`{out["config"]}` config)', '',
           provenance.markdown_header(prov, 'report command') + rerendered,
           *_runs_lines(out['runs_summary']),
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
  row('Masked LM accuracy (%)', lambda t: _fmt(t['mlm_accuracy']))
  row('MLM gain over the last quarter of steps (points)',
      lambda t: _fmt(t['mlm_gain_last_quarter']))
  row('Sentence-pair accuracy (%)', lambda t: _fmt(t['nsp_accuracy']))
  row('MNLI-analogue accuracy (%)', lambda t: _fmt(t['mnli_accuracy']))
  row('SQuAD-analogue EM / F1 (%)', lambda t: (_fmt(t['squad_em']) + ' / ' +
                                               _fmt(t['squad_f1'])) if t['squad_em'] else '—')
  row('pre-training tokens/s', lambda t: _fmt(t['pretrain_tokens_per_s'], 0))
  lines += ['', 'Paper (BERT-base, Wikipedia + books): params 88.3M / 90M / 102.5M / 110M; '
            'MLM 28 / 59 / 60 / 63; MNLI 66 / 72.3 / 73 / 78.2.', '',
            '## Figure 1 analogue', '',
            f'k lower layers SepConv, {L} - k upper layers self-attention (k = 0 is the '
            f'Transformer, k = {L} is the all-SepConv model of the table).', '',
            '| k | # params | MLM acc (%) | MLM gain, last quarter | MNLI-analogue acc (%) | '
            'SQuAD-analogue EM (%) | SQuAD-analogue F1 (%) |', '|---|---|---|---|---|---|---|']
  for k in range(L + 1):
    f = figure[k]
    lines.append(f"| {k} | {f['params_encoder_pooler'] or '—':,} | {_fmt(f['mlm_accuracy'])} | "
                 f"{_fmt(f['mlm_gain_last_quarter'])} | {_fmt(f['mnli_accuracy'])} | "
                 f"{_fmt(f['squad_em'])} | {_fmt(f['squad_f1'])} |"
                 if f['params_encoder_pooler'] else f'| {k} | — | — | — | — | — | — |')
  lines += ['', f'![Table 1]({os.path.basename(stem)}_table1.png)',
            f'![Figure 1]({os.path.basename(stem)}_figure1.png)', '']
  if out['claims']:
    lines += ["## The paper's claims, checked automatically", '',
              'Differences are mean over seeds minus mean over seeds, ± their standard error '
              'sqrt(s_a^2/n_a + s_b^2/n_b) (a single run borrows the other side\'s sample '
              f'variance). A claim holds or fails only when |difference| >= {SE_MULTIPLE} SE; '
              'finished runs only.', '',
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


def _runs_lines(rs):
  if not rs['result_files']:
    return []
  return [f"- runs: {rs['result_files']} stages, {rs['utc_range'][0]} to {rs['utc_range'][1]} "
          f"UTC, 1-min load {rs['load_average_1min_range'][0]}-"
          f"{rs['load_average_1min_range'][1]} at stage starts",
          '- run commands: ' + '; '.join(f'`{c}`' for c in rs['sweep_commands']),
          '- run revisions: ' + ', '.join(f'`{r}`' for r in rs['git_revisions']),
          '- run machines: ' + '; '.join(rs['machines']), '']


# --- Has pre-training plateaued? (--compare_to) -----------------------------------------
#
# Sweeps of one model, data, batch order and peak learning rate under schedules of
# different lengths (`cpu` 2000 steps, `cpu_long` 6000, `cpu_longer` 18000: the
# --compare_to workdirs and this call's --workdir). Only the step count differs, and
# with it the linear decay of the learning rate to 0. With acc_S(m, s) the held-out
# masked-LM accuracy (%) of Table 1 mixer m, seed s, at the end of the S-step schedule,
# and S' the next shorter schedule:
#
#     gain(m, S)    = acc_S(m, 0) - acc_S'(m, 0)             what S / S' x the tokens buy
#     gain_lq(m, S) = acc_S(m, s; step S) - acc_S(m, s; 3S/4) the last quarter, per seed
#
# m has plateaued at S when gain(m, S) < PLATEAU_POINTS. Every schedule but the shortest
# (whose claims are in its own report) is checked against the paper's Table 1 claims by
# claims(), on the means over its finished seeds; a mixer with one finished seed takes
# as its seed noise the sample std of its nearest shorter schedule with >= 2 seeds (an
# assumption, stated in the report).

PLATEAU_STEM = 'mixing_layers_plateau'
PLATEAU_SEED = 0        # every schedule has it; its batches are the same across schedules
PLATEAU_POINTS = 1.0    # plateaued: the last tripling of the tokens bought < 1 point
CURVE_METRICS = {'mlm': ('eval_mlm_accuracy', 'held-out masked-LM accuracy (%)'),
                 'nsp': ('eval_nsp_accuracy', 'held-out sentence-pair accuracy (%)')}


class ScheduleError(ValueError):
  """A --compare_to / --workdir set that cannot be compared (one line for the user)."""


def schedule_steps(root):
  """The pre-training step count of the sweep under ``root``, from its runs' config.json."""
  steps = set()
  for path in glob.glob(os.path.join(root, '*', 'pretrain', 'config.json')):
    with open(path) as f:
      n = json.load(f).get('pretrain', {}).get('num_steps')
    if n is None:
      raise ScheduleError(f'{path} has no pretrain.num_steps')
    steps.add(int(n))
  if len(steps) != 1:
    raise ScheduleError(f'{root} holds ' + (f'runs of several schedules ({sorted(steps)} steps)'
                                            if steps else 'no pre-training run'))
  return steps.pop()


def _finals(runs, m, stage, field):
  """{seed: value} of the finished ``stage`` runs of Table 1 mixer m."""
  return {r['seed']: r['eval'][field] for r in runs.get((m, 0), {}).get(stage, [])}


def _schedule_of_workdir(root):
  """One schedule from the runs under ``root`` (a workdir or its --archive_to copy):
  {'steps', 'baselines', 'sources': [{'root', 'via': None, 'runs_summary'}],
   'rows': {mixer: row without 'gain_seed0'}, 'curves': {'mlm' | 'nsp': {mixer: seed-0
   points or None}}}; a row's 'source' is ``root``."""
  steps = schedule_steps(root)
  runs = collect(root)
  train_metric = 'mlm_accuracy'   # training rows, a fraction
  c = learning_curves_of(root, [m for m, _ in CURVE_METRICS.values()] + [train_metric])
  mlm_curves = c[CURVE_METRICS['mlm'][0]]
  seed = PLATEAU_SEED
  rows = {}
  for m in TABLE_MODELS:
    mlm, mnli = _finals(runs, m, 'pretrain', 'mlm_accuracy'), _finals(runs, m, 'mnli', 'accuracy')
    train = dict(c[train_metric].get((m, 0), {}).get(seed, []))
    rows[m] = {
        'steps': steps, 'source': root, 'mlm': _ms(list(mlm.values())),
        'mlm_seed0': mlm.get(seed),
        'gain_last_quarter': _ms(last_quarter_gain(mlm_curves.get((m, 0), {}), steps)),
        'nsp': _ms(list(_finals(runs, m, 'pretrain', 'nsp_accuracy').values())),
        'mnli': _ms(list(mnli.values())), 'mnli_seed0': mnli.get(seed),
        'train_mlm_seed0': (100 * train[steps] if seed in mlm and steps in train else None)}
  curves = {key: {m: c[metric].get((m, 0), {}).get(seed) for m in TABLE_MODELS}
            for key, (metric, _) in CURVE_METRICS.items()}
  return {'steps': steps, 'baselines': task_baselines(runs), 'rows': rows, 'curves': curves,
          'sources': [{'root': root, 'via': None, 'runs_summary': runs_summary(runs)}]}


def _schedules_of_report(path):
  """The schedules of an earlier plateau report (its ``.json``), shaped as
  _schedule_of_workdir's: the record of sweeps whose workdirs are gone. Every source
  and row gets 'via': ``path`` and the report's revision (an earlier 'via' is kept)."""
  try:
    with open(path) as f:
      d = json.load(f)
    scheds, rev = d['schedules'], d['report_provenance']['git_revision'][:7]
    rows, curves = d['rows'], d['learning_curves_seed0']
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ScheduleError(f'{path} is not a plateau report written by --compare_to '
                        f'({type(e).__name__}: {e})') from None
  via = f'{path} (report at {rev})'
  out = []
  for x in scheds:
    steps = int(x['steps'])
    if any(sum(r['steps'] == steps for r in rows.get(m, [])) != 1 for m in TABLE_MODELS):
      raise ScheduleError(f'{path} is not a plateau report written by --compare_to (its '
                          f'rows do not hold one row per mixer for {steps} steps)')
    srcs = x.get('sources') or [{'root': x['root'], 'runs_summary': x['runs_summary']}]
    out.append({
        'steps': steps, 'baselines': x.get('baselines') or {},
        'sources': [dict(s, via=s.get('via') or via) for s in srcs],
        'rows': {m: dict(r, source=r.get('source') or srcs[0]['root'],
                         via=r.get('via') or via)
                 for m in TABLE_MODELS for r in rows.get(m, []) if r['steps'] == steps},
        'curves': {key: {m: [tuple(p) for p in pts] if pts else None
                         for m, pts in curves.get(key, {}).get(str(steps), {}).items()}
                   for key in CURVE_METRICS},
        'claims': d.get('claims', {}).get(str(steps))})
  return out


def _merge_schedules(parts):
  """One schedule per step count, shortest first, from _schedule_of_workdir() and
  _schedules_of_report() parts. Per mixer, the part with the most finished seeds gives the
  row and the curves (ties: one with a learning curve, then a workdir over a report), so a
  rerun in a workdir replaces what an earlier report recorded. Two workdirs of one
  schedule raise ScheduleError."""
  by_steps = {}
  for p in parts:
    by_steps.setdefault(p['steps'], []).append(p)
  out = []
  for steps, ps in sorted(by_steps.items()):
    if sum(p['sources'][0]['via'] is None for p in ps) > 1:
      raise ScheduleError(f'two workdirs hold the same {steps}-step schedule')
    rank = lambda p, m: ((p['rows'][m]['mlm'] or {}).get('n', 0),
                         p['curves']['mlm'].get(m) is not None, p['sources'][0]['via'] is None)
    pick = {m: max(ps, key=lambda p: rank(p, m)) for m in TABLE_MODELS}
    used = [p for p in ps if any(pick[m] is p for m in TABLE_MODELS)]
    x = {'steps': steps,
         'baselines': next((p['baselines'] for p in ps if p['baselines']), {}),
         'sources': [dict(s, mixers=ms) for p in used for s in p['sources'] if (ms := [
             m for m in TABLE_MODELS if pick[m] is p and pick[m]['rows'][m]['source'] == s['root']
             and rank(p, m)[:2] != (0, False)])],
         'rows': {m: pick[m]['rows'][m] for m in TABLE_MODELS},
         'curves': {key: {m: pick[m]['curves'][key].get(m) for m in TABLE_MODELS}
                    for key in CURVE_METRICS}}
    if len(used) == 1 and used[0].get('claims') is not None:
      x['report_claims'] = used[0]['claims']
    out.append(x)
  return out


def compare_schedules(roots):
  """(schedules, rows, plateau, checks) for the sweeps of one model under schedules of
  different lengths, shortest first. Each of ``roots`` is a workdir (or its archive) or
  the ``.json`` of an earlier plateau report (for sweeps whose workdirs are gone).

  schedules: [{'steps', 'baselines', 'sources': [{'root', 'via', 'runs_summary',
        'mixers'}], 'curves': {'mlm' | 'nsp': {mixer: seed-0 learning curve}}}];
  rows: {mixer: [one dict per schedule: mlm, gain_last_quarter, nsp, mnli (mean ± std over
        finished seeds), mlm_seed0, mnli_seed0, gain_seed0 (over the previous schedule),
        train_mlm_seed0 (% on the training batches of the last log window, with dropout:
        far above the held-out mlm means memorisation), source (its workdir), via (the
        report it was read from, if any)]};
  plateau: {mixer: None or {'steps', 'from_steps', 'gain', 'plateaued'}} at its longest
        schedule with a gain; checks: {steps: claims()} from the second schedule on.
  """
  parts = []
  for r in roots:
    parts += _schedules_of_report(r) if r.endswith('.json') else [_schedule_of_workdir(r)]
  scheds = _merge_schedules(parts)
  seed = PLATEAU_SEED
  rows, plateau = {}, {}
  for m in TABLE_MODELS:
    rows[m] = []
    for i, x in enumerate(scheds):
      r = dict(x['rows'][m])
      prev = rows[m][-1]['mlm_seed0'] if i else None
      r['gain_seed0'] = (r['mlm_seed0'] - prev if r['mlm_seed0'] is not None
                         and prev is not None else None)
      rows[m].append(r)
    last = next((i for i in reversed(range(len(scheds))) if rows[m][i]['gain_seed0'] is not None),
                None)
    plateau[m] = None if last is None else {
        'steps': scheds[last]['steps'], 'from_steps': scheds[last - 1]['steps'],
        'gain': rows[m][last]['gain_seed0'],
        'plateaued': rows[m][last]['gain_seed0'] < PLATEAU_POINTS}
  for x in scheds:
    del x['rows']

  def with_noise(m, i, key):
    """Schedule i's summary of m's ``key``; one run borrows a shorter schedule's std."""
    s = rows[m][i][key]
    if s is None or s['n'] > 1:
      return s
    donor = next((rows[m][j][key] for j in reversed(range(i)) if (rows[m][j][key] or {}).get(
        'n', 0) > 1), None)
    return dict(s, seed_std=donor['std'] if donor else None)

  # The task data do not depend on the step count (the configs differ only in it), so
  # any schedule's fine-tuning runs give the baselines. Without any (reports before
  # 2026-11-24 did not store them), a schedule recorded whole by one report keeps that
  # report's judgement of the claims, which had them.
  baselines = next((x['baselines'] for x in scheds if x['baselines']), {})
  checks = {}
  for i in range(1, len(scheds)):
    kept = scheds[i].pop('report_claims', None)
    if kept is not None and not baselines:
      scheds[i]['claims_via'] = scheds[i]['sources'][0]['via']
      checks[scheds[i]['steps']] = kept
      continue
    table = {m: {'mlm_accuracy': with_noise(m, i, 'mlm'),
                 'mnli_accuracy': with_noise(m, i, 'mnli')} for m in TABLE_MODELS}
    checks[scheds[i]['steps']] = [{'claim': c, 'measured': v, 'verdict': w}
                                  for c, v, w in claims(table, None, 0, baselines)]
  scheds[0].pop('report_claims', None)
  return scheds, rows, plateau, checks


SCHEDULE_STYLES = (':', '--', '-', '-.')


def _plot_schedules(scheds, rows, tokens_per_step, path):
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 3, figsize=(19, 4.8))
  colors = {m: f'C{i}' for i, m in enumerate(TABLE_MODELS)}
  mpos = lambda steps: np.asarray(steps) * tokens_per_step / 1e6
  for ax, (key, (_, ylabel)) in zip(axes, CURVE_METRICS.items()):
    for i, x in enumerate(scheds):
      for m in TABLE_MODELS:
        pts = x['curves'][key].get(m)
        if pts:
          steps, acc = zip(*pts)
          ax.plot(mpos(steps), acc, ls=SCHEDULE_STYLES[i % len(SCHEDULE_STYLES)],
                  color=colors[m], label=f"{NAMES[m]}, {x['steps']} steps")
    ax.set_xscale('log')
    ax.set_xlabel('training token positions (M) = step x batch x max_len')
    ax.set_ylabel(ylabel)
    ax.set_title(f'seed {PLATEAU_SEED}, one line style per schedule')
    ax.grid(alpha=0.3, which='both')
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=6, ncol=2)
  bx = axes[-1]
  for m in TABLE_MODELS:
    pts = [(x['steps'], r['mlm']) for x, r in zip(scheds, rows[m]) if r['mlm']]
    if not pts:
      continue
    steps, summ = zip(*pts)
    bx.errorbar(mpos(steps), [s['mean'] for s in summ], yerr=[s['std'] for s in summ],
                color=colors[m], marker='o', capsize=3, label=NAMES[m])
    for st, s in pts:
      bx.scatter(mpos([st] * s['n']), s['values'], color=colors[m], s=8, alpha=0.5)
  bx.set_xscale('log')
  bx.set_xticks(mpos([x['steps'] for x in scheds]))
  bx.set_xticklabels([f"{p:.1f}M\n{x['steps']} steps"
                      for p, x in zip(mpos([x['steps'] for x in scheds]), scheds)])
  bx.minorticks_off()
  bx.set_xlabel('schedule length (token positions)')
  bx.set_ylabel('final held-out masked-LM accuracy (%)')
  bx.set_title('end of each schedule: mean ± std over seeds (dots: seeds)')
  bx.grid(alpha=0.3, which='both')
  bx.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _num(v, fmt='{:.1f}'):
  return '—' if v is None else fmt.format(v)


def _fmt_n(s):
  """_fmt(), without a spread for one run."""
  return f"{s['mean']:.1f} (n=1)" if s and s['n'] == 1 else _fmt(s)


def _schedules_markdown(scheds, rows, plateau, checks, prov, tokens_per_step):
  ms = TABLE_MODELS
  cols = ' | '.join(NAMES[m] for m in ms)
  lines = [
      '# Appendix H pre-training: has held-out masked-LM accuracy plateaued?', '',
      provenance.markdown_header(prov, 'report command')]
  for x in scheds:
    lines += [f"**{x['steps']} steps**:", '']
    for src in x['sources']:
      whose = ', '.join(NAMES[m] for m in src['mixers'])
      lines += [f"- {whose}: runs in `{src['root']}`" + (
          f", as recorded in `{src['via']}`" if src['via'] else '')]
      lines += ['  ' + l if l else l for l in _runs_lines(src['runs_summary'])] or ['']
  lines += [
      'Same model, data, batch order and peak learning rate under every schedule; only '
      'the step count differs, and with it the linear decay of the learning rate to 0. '
      'Held-out masked-LM accuracy (%) on 640 sequences; MNLI analogue on its 1000 held-out '
      f'pairs. "gain" is seed {PLATEAU_SEED}\'s final accuracy minus its final accuracy under '
      'the next shorter schedule; a mixer counts as plateaued when that gain is below '
      f'{PLATEAU_POINTS:.1f} point.', '',
      f'The learning curves and the "gain over" rows are seed {PLATEAU_SEED}\'s; the rows '
      'marked (n) are mean ± std over the schedule\'s finished seeds.', '',
      f'![plateau]({PLATEAU_STEM}.png)', '',
      f'| | {cols} |', '|---|' + '---|' * len(ms)]
  row = lambda name, f, i: f'| {name} | ' + ' | '.join(f(rows[m][i]) for m in ms) + ' |'
  for i, x in enumerate(scheds):
    S = f"{x['steps']} ({x['steps'] * tokens_per_step / 1e6:.1f}M positions)"
    lines += [
        row(f'**{S}**: MLM, seed {PLATEAU_SEED}', lambda r: _num(r['mlm_seed0']), i),
        row('MLM, mean ± std (n)', lambda r: _fmt_n(r['mlm']), i),
        *([row(f'gain over {scheds[i - 1]["steps"]} steps (seed {PLATEAU_SEED})',
               lambda r: _num(r['gain_seed0'], '{:+.1f}'), i)] if i else []),
        row(f'train MLM at the end (seed {PLATEAU_SEED}; training batches, dropout on)',
            lambda r: _num(r['train_mlm_seed0']), i),
        row('last-quarter gain, mean ± std (n)', lambda r: _fmt_n(r['gain_last_quarter']), i),
        row('sentence pair, mean ± std (n)', lambda r: _fmt_n(r['nsp']), i),
        row('MNLI analogue, mean ± std (n)', lambda r: _fmt_n(r['mnli']), i)]
  verdict_of = lambda p: '—' if p is None else (
      f"{'plateaued' if p['plateaued'] else 'still rising'} ({p['gain']:+.1f}, "
      f"{p['from_steps']} -> {p['steps']})")
  lines += ['| **plateau?** | ' + ' | '.join(verdict_of(plateau[m]) for m in ms) + ' |', '']
  via = {x['steps']: x.get('claims_via') for x in scheds}
  for steps, cs in checks.items():
    lines += [
        f"## The paper's Table 1 claims at {steps} steps", '',
        'Means over the finished seeds. A mixer with one finished seed takes as its seed '
        'noise the sample std of its nearest shorter schedule with >= 2 seeds (an '
        f'assumption). A difference counts at >= {SE_MULTIPLE} SE.' + (
            f' As judged in `{via[steps]}` (the same runs; it had their task baselines).'
            if via[steps] else ''), '',
        *(['| claim | measured | verdict |', '|---|---|---|',
           *[f"| {c['claim']} | {c['measured']} | {c['verdict']} |" for c in cs]] if cs else
          ['No two mixers have finished this schedule yet.']), '']
  return '\n'.join(lines)


def plateau_report(roots, results_dir, prov, tokens_per_step):
  """Writes ``mixing_layers_plateau.{md,json,png}`` for ``roots`` (see compare_schedules)
  to ``results_dir``; None, or why not. ``tokens_per_step`` (batch x max_len) puts the
  curves on a token axis. Raises ScheduleError for roots that cannot be compared."""
  scheds, rows, plateau, checks = compare_schedules(roots)
  if not any(pts for x in scheds for pts in x['curves']['mlm'].values()):
    return 'no pre-training learning curve yet'
  out = {'schedules': [{k: v for k, v in x.items() if k != 'curves'} for x in scheds],
         'rows': rows, 'plateau': plateau, 'plateau_points': PLATEAU_POINTS,
         'claims': checks, 'report_provenance': prov, 'tokens_per_step': tokens_per_step,
         'learning_curves_seed0': {key: {x['steps']: x['curves'][key] for x in scheds}
                                   for key in CURVE_METRICS}}
  os.makedirs(results_dir, exist_ok=True)
  stem = os.path.join(results_dir, PLATEAU_STEM)
  # read every root before writing: the report may be rebuilt over its own .json
  _atomic_write(stem + '.json', json.dumps(out, indent=1, sort_keys=True, default=str))
  _plot_schedules(scheds, rows, tokens_per_step, stem + '.png')
  _atomic_write(stem + '.md', _schedules_markdown(scheds, rows, plateau, checks, prov,
                                                  tokens_per_step))
  return None


def _config_name():
  """'cpu' for experiments/configs/mixing_cpu.py: the report's name (report_stem)."""
  name = os.path.basename(config_flags.get_config_filename(flags.FLAGS['config']))
  return name.removesuffix('.py').removeprefix('mixing_') or 'custom'


def main(argv):
  if len(argv) > 1:
    sys.exit(f'error: unexpected arguments {argv[1:]}')
  if _RERENDER.value:
    if _CONFIG.value is None or not _RESULTS.value:
      sys.exit('error: --rerender needs --config and --results_dir (where the report is)')
    print('re-rendered', rerender(_RESULTS.value, _config_name(), provenance.record()))
    return
  if _CONFIG.value is None or not _WORKDIR.value:
    sys.exit('error: --config and --workdir are required')
  try:
    i, m = (int(x) for x in _SHARD.value.split('/'))
    if not 0 <= i < m:
      raise ValueError
  except ValueError:
    sys.exit(f'error: --shard must be i/m with 0 <= i < m, got {_SHARD.value!r}')
  if _SEEDS.value < 1:
    sys.exit(f'error: --seeds must be >= 1, got {_SEEDS.value}')
  cli.output_dir(_WORKDIR.value, '--workdir')  # before the work
  for d in _COMPARE_TO.value:
    if not (os.path.isdir(d) or d.endswith('.json') and os.path.isfile(d)):
      sys.exit(f'error: --compare_to: {d} is neither a directory nor a .json file (each '
               'entry is the workdir of a sweep of this config under another schedule, its '
               '--archive_to copy, or an earlier mixing_layers_plateau.json)')
  archive_dir = _ARCHIVE_TO.value and cli.output_dir(_ARCHIVE_TO.value, '--archive_to')
  results_dir = cli.output_dir(_RESULTS.value or os.path.join(_WORKDIR.value, 'report'),
                               '--results_dir')
  logging.set_verbosity(logging.WARNING)
  config = _CONFIG.value
  name = _config_name()
  prov = provenance.record()
  ks = None
  if _HYBRID_KS.value is not None:
    try:
      ks = [int(k) for k in _HYBRID_KS.value if k.strip()]
    except ValueError:
      sys.exit(f'error: --hybrid_ks must be integers, got {_HYBRID_KS.value}')
    bad = [k for k in ks if not 1 <= k < config.model.num_layers]
    if bad:
      sys.exit(f'error: --hybrid_ks must lie in [1, {config.model.num_layers - 1}] '
               f'(k = 0 and k = L are in Table 1), got {bad}')
  if _HYBRID_SEEDS.value is not None and _HYBRID_SEEDS.value < 0:
    sys.exit(f'error: --hybrid_seeds must be >= 0, got {_HYBRID_SEEDS.value}')
  bad = [s for s in _STAGES.value if s not in STAGES]
  if bad or not _STAGES.value:
    sys.exit(f'error: --stages must be a non-empty subset of {",".join(STAGES)}, got {bad}')
  bad = [x for x in _TABLE_MIXERS.value if x not in TABLE_MODELS]
  if bad:
    sys.exit(f'error: --table_mixers must be a subset of {",".join(TABLE_MODELS)}, got {bad}')
  job_list = jobs(config.model.num_layers, _SEEDS.value, ks, _HYBRID_SEEDS.value,
                  _TABLE_MIXERS.value)
  if _STATUS.value:
    print(format_status(*status(config, _WORKDIR.value, job_list, _STAGES.value)))
    return
  archived = 0
  if not _REPORT_ONLY.value:
    try:
      wordnet.check_corpus(config.data.wordnet_dir or None)
    except wordnet.CorpusMissingError as e:
      sys.exit(f'error: {e}')
    for j, job in enumerate(job_list):
      if j % m == i:
        run_job(config, _WORKDIR.value, job, _STAGES.value)
        report(config, _WORKDIR.value, results_dir, name, prov, job_list)
        if archive_dir:
          archived += archive(_WORKDIR.value, archive_dir)
  not_done = report(config, _WORKDIR.value, results_dir, name, prov, job_list)
  if archive_dir:
    archived += archive(_WORKDIR.value, archive_dir)
    print(f'archive {archive_dir}: {archived} newly finished stages copied')
  if _COMPARE_TO.value:
    try:
      why_not = plateau_report([*_COMPARE_TO.value, _WORKDIR.value], results_dir, prov,
                               config.pretrain.batch_size * config.model.max_len)
    except ScheduleError as e:
      sys.exit(f'error: --compare_to: {e}')
    print(f'plateau report not written: {why_not}' if why_not else
          f'plateau report: {os.path.join(results_dir, PLATEAU_STEM)}.md')
  if not_done:
    print(f'report in {results_dir}: {len(not_done)} stages not done: ' + ', '.join(
        f"{r['run']}/{r['stage']}" + (f" (step {r['step']} of {r['num_steps']})"
                                      if r['state'] == 'partial' else '')
        for r in not_done))


if __name__ == '__main__':
  cli.run(main)
