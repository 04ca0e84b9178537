r"""All Appendix H runs of one config: Table 1 and Figure 1 analogues (Yun et al. 2020).

    python experiments/mixing_sweep.py --config=experiments/configs/mixing_tiny.py \
        --workdir=runs/mixing_tiny --seeds=3 [--hybrid_ks=1,2] [--hybrid_seeds=1] \
        [--first_seed=1] [--table_mixers=sepconv,attention] [--stages=pretrain,mnli,squad] \
        [--shard=0/2] [--report_only | --status] [--compare_to=WORKDIR,...] [--archive_to=DIR] \
        [--recorded=REPORT.json,...] [--own_seeds]
    python experiments/mixing_sweep.py --config=... --output_dir=results/mixing --rerender

Jobs: first Table 1, seed-major (every model's seed 0 first), then Figure 1:

* Table 1: mixing in (average, bilinear, sepconv, attention), pre-training (MLM +
  sentence pair) then MNLI-analogue fine-tuning (and SQuAD-analogue for sepconv and
  attention, which are Figure 1's k = L and k = 0).
* Figure 1: hybrids with the first k = 1 .. L-1 layers sepconv, the rest attention, at
  ``--hybrid_seeds`` seeds (default ``--seeds``); pre-training then both tasks.

``--first_seed=s`` leaves out every model's seeds below s (Table 1 mixers and hybrids;
runs recorded elsewhere): ``--seeds=3 --first_seed=1`` makes seeds 1 and 2.

``--stages`` runs only those stages of every job (``--stages=pretrain`` first, then
``--stages=mnli,squad``: every pre-training before any fine-tuning). ``--status`` runs
nothing: it lists every stage of the sweep as done / partial (step i of n, from the
newest checkpoint) / missing, with an ETA from the measured seconds per step of the
finished stages and of the partial ones past 10% of their steps (their checkpoints).

A finished stage (``result.json`` present) is skipped, an unfinished one resumes from
its checkpoint. ``--shard=i/m`` runs every m-th job (two single-threaded processes use
2 cores better than one). Two processes may also share a workdir without sharding: a run
(pre-training and its fine-tunings) being trained by another live process (its
``running.lock``, outputs.claim) is skipped, so two copies of the same sweep command
split its runs between them. After each job the report is rebuilt from every
``result.json`` under the workdir: ``mixing_layers.md`` (for ``cpu``, the recorded
budget; ``mixing_layers_<config>.md`` otherwise) with a JSON twin and PNG figures, in
``--output_dir`` (default ``<workdir>/report``; ``--output_dir=results/mixing`` updates the
checked-in record); transformer_ua/reports/mixing.py writes it.

``--compare_to=WORKDIR,...`` (sweeps of the same config under other step counts, e.g.
``cpu`` and ``cpu_long`` for a ``cpu_longer`` ``--workdir``) also writes
``mixing_layers_plateau.{md,json,png}``: each mixer's final accuracy per schedule, what
each tripling of the tokens buys, i.e. whether pre-training has plateaued, and whether
the mixers' order survives more tokens (transformer_ua/reports/mixing_plateau.py). An
entry may also be an earlier ``mixing_layers_plateau.json``: its schedules come in as
recorded there (for workdirs that are gone), and a mixer a workdir has more finished
seeds of replaces its row.
The sweep's own report then judges the claims of a mixer with one run as the plateau
report does: with its seeds' std under a shorter schedule as its seed noise.

``--recorded=REPORT.json,...`` (earlier reports of this config, e.g. the checked-in
``results/mixing/mixing_layers_cpu_long.json``) adds their per-seed rows to the report,
for runs whose workdirs are gone; a stage run under the workdir replaces the recorded row
of the same run and stage. The report names each row's source. ``--own_seeds`` judges
every claim on each side's own seeds only (>= 2 a side; no seed noise borrowed from the
other side or from ``--compare_to``), and names the runs of the full sweep (``--seeds``,
``--hybrid_ks``, ``--hybrid_seeds``; every mixer from seed 0) that each side still lacks:

    python experiments/mixing_sweep.py --config=experiments/configs/mixing_cpu_long.py \
        --workdir=results/mixing/runs/cpu_long --seeds=3 --hybrid_ks=1,2,3 --own_seeds \
        --recorded=results/mixing/mixing_layers_cpu_long.json --report_only \
        --output_dir=results/mixing

A workdir lives on one machine. ``--archive_to=results/mixing/runs/<config>`` copies
every finished stage's small records (no checkpoints) there, to be committed; every
report can be rebuilt from that copy (``--workdir=`` it, ``--report_only``, or
``--compare_to=`` it). Fine-tuning still needs the pre-training checkpoint, so a
machine should run a checkpoint's fine-tuning before it goes.
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import glob
import json
import os

from absl import flags, logging
import ml_collections
from ml_collections import config_flags
import numpy as np

from transformer_ua.models import mixing_train
from transformer_ua import outputs, provenance
from transformer_ua.data import wordnet
from transformer_ua.reports import mixing as mixing_report, mixing_plateau
from transformer_ua.reports.mixing import TABLE_MODELS

_CONFIG = cli.define_config_file('config', None, 'experiments/configs/mixing_*.py')
_WORKDIR = flags.DEFINE_string('workdir', None, 'Root of the sweep runs.')
_SEEDS = flags.DEFINE_integer('seeds', 3, 'Seeds per model.')
_SHARD = flags.DEFINE_string('shard', '0/1', 'i/m: run jobs j with j % m == i.')
cli.define_overwrite()
_RESULTS = cli.define_output_dir(None, 'Where the report goes (default <workdir>/report; '
                                 '--output_dir=results/mixing: the record).',
                                 old_names=('results_dir',))
_REPORT_ONLY = flags.DEFINE_bool('report_only', False, 'Only rebuild the report.')
_HYBRID_KS = flags.DEFINE_list('hybrid_ks', None, 'Figure 1 hybrids k (default 1..L-1; '
                                '"" = none).')
_HYBRID_SEEDS = flags.DEFINE_integer('hybrid_seeds', None, 'Seeds per hybrid (default --seeds).')
_FIRST_SEED = flags.DEFINE_integer('first_seed', 0, 'Leave out seeds below this one (every '
                                   'model; their runs are recorded elsewhere).')
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
                                  'checkpoint) here, e.g. results/mixing/runs/<config>, so the '
                                  'reports outlive the workdir.')
_RECORDED = flags.DEFINE_list('recorded', [], 'Earlier reports (.json) of this config whose '
                              'per-seed rows join the workdir\'s runs in the report.')
_OWN_SEEDS = flags.DEFINE_bool('own_seeds', False, 'Judge each claim on each side\'s own '
                               'seeds only (>= 2 a side), naming the runs still missing.')
_STATUS = flags.DEFINE_bool('status', False, 'List done / partial / missing stages with an '
                            'ETA; run nothing.')
_RERENDER = flags.DEFINE_bool('rerender', False, 'Only rewrite the report\'s .md in '
                              '--output_dir from its .json and the current notes (a report '
                              'whose workdir is gone); run nothing.')
STAGES = ('pretrain', 'mnli', 'squad')


def jobs(num_layers: int, seeds: int, hybrid_ks=None, hybrid_seeds=None,
         mixers=TABLE_MODELS, first_seed=0):
  """[(name, mixing, k, seed, tasks)]: Table 1 seed-major (the ``mixers`` only), then the
  hybrids seed-major; seeds ``first_seed`` .. ``seeds`` - 1 (``hybrid_seeds`` - 1)."""
  hybrid_ks = range(1, num_layers) if hybrid_ks is None else hybrid_ks
  hybrid_seeds = seeds if hybrid_seeds is None else hybrid_seeds
  out = []
  for seed in range(first_seed, seeds):
    for m in (m for m in TABLE_MODELS if m in mixers):
      both = m in ('sepconv', 'attention')
      out.append((f'{m}_s{seed}', m, 0, seed, ('mnli', 'squad') if both else ('mnli',)))
  for seed in range(first_seed, hybrid_seeds):
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


RATE_MIN_FRACTION = 0.1   # a partial stage's seconds per step count once it is 10% done


def status(config, root, job_list, stages=STAGES):
  """[{'run', 'stage', 'state' (done | partial | missing), 'step', 'num_steps',
  'seconds_per_step'}] of every stage of ``job_list``, and the ETA summary dict: the
  median seconds per step of the finished stages and of the partial ones past
  RATE_MIN_FRACTION of their steps, times the steps left."""
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
        if step:   # a rate only once the one-off jit compile (1-2 min) no longer dominates
          row.update(state='partial', step=step, seconds_per_step=(
              elapsed / step if elapsed and step >= RATE_MIN_FRACTION * sec.num_steps else None))
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


def not_done(config, root, job_list):
  """The status rows of ``job_list``'s stages under ``root`` that are not done."""
  return [r for r in status(config, root, job_list)[0] if r['state'] != 'done']


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
  try:
    return outputs.archive(root, dest, markers=('result.json',), files=ARCHIVE_FILES,
                           depth='*/*')
  except outputs.OutputExists as e:
    raise cli.BadInput(f'--archive_to: {e}') from None


def _config_name():
  """'cpu' for experiments/configs/mixing_cpu.py: the report's name (report_stem)."""
  name = os.path.basename(config_flags.get_config_filename(flags.FLAGS['config']))
  return name.removesuffix('.py').removeprefix('mixing_') or 'custom'


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments {argv[1:]}')
  if _RERENDER.value:
    if _CONFIG.value is None or not _RESULTS.value:
      raise cli.BadInput('--rerender needs --config and --output_dir (where the report is)')
    print('re-rendered', mixing_report.rerender(_RESULTS.value, _config_name(),
                                                provenance.record()))
    return
  if _CONFIG.value is None or not _WORKDIR.value:
    raise cli.BadInput('--config and --workdir are required')
  try:
    i, m = (int(x) for x in _SHARD.value.split('/'))
    if not 0 <= i < m:
      raise ValueError
  except ValueError:
    raise cli.BadInput(f'--shard must be i/m with 0 <= i < m, got {_SHARD.value!r}')
  if _SEEDS.value < 1:
    raise cli.BadInput(f'--seeds must be >= 1, got {_SEEDS.value}')
  cli.output_dir(_WORKDIR.value, '--workdir')  # before the work
  cli.resumable(_WORKDIR.value)   # finished stages are kept, unfinished ones checkpointed
  for d in _COMPARE_TO.value:
    if not (os.path.isdir(d) or d.endswith('.json') and os.path.isfile(d)):
      raise cli.BadInput(f'--compare_to: {d} is neither a directory nor a .json file (each '
                         'entry is the workdir of a sweep of this config under another '
                         'schedule, its --archive_to copy, or an earlier '
                         'mixing_layers_plateau.json)')
  for p in _RECORDED.value:
    if not (p.endswith('.json') and os.path.isfile(p)):
      raise cli.BadInput(f'--recorded: {p} is not a report .json file')
  archive_dir = _ARCHIVE_TO.value and cli.output_dir(_ARCHIVE_TO.value, '--archive_to')
  stem = mixing_report.report_stem(_config_name())
  results_dir = cli.output_dir(_RESULTS.value or os.path.join(_WORKDIR.value, 'report'),
                               writes=(stem + '.md', stem + '.json'),
                               rebuilds=True)
  logging.set_verbosity(logging.WARNING)
  config = _CONFIG.value
  name = _config_name()
  prov = provenance.record()
  ks = None
  if _HYBRID_KS.value is not None:
    try:
      ks = [int(k) for k in _HYBRID_KS.value if k.strip()]
    except ValueError:
      raise cli.BadInput(f'--hybrid_ks must be integers, got {_HYBRID_KS.value}')
    bad = [k for k in ks if not 1 <= k < config.model.num_layers]
    if bad:
      raise cli.BadInput(f'--hybrid_ks must lie in [1, {config.model.num_layers - 1}] '
                         f'(k = 0 and k = L are in Table 1), got {bad}')
  if _FIRST_SEED.value < 0:
    raise cli.BadInput(f'--first_seed must be >= 0, got {_FIRST_SEED.value}')
  if _HYBRID_SEEDS.value is not None and _HYBRID_SEEDS.value < 0:
    raise cli.BadInput(f'--hybrid_seeds must be >= 0, got {_HYBRID_SEEDS.value}')
  bad = [s for s in _STAGES.value if s not in STAGES]
  if bad or not _STAGES.value:
    raise cli.BadInput(f'--stages must be a non-empty subset of {",".join(STAGES)}, got {bad}')
  bad = [x for x in _TABLE_MIXERS.value if x not in TABLE_MODELS]
  if bad:
    raise cli.BadInput(f'--table_mixers must be a subset of {",".join(TABLE_MODELS)}, '
                       f'got {bad}')
  job_list = jobs(config.model.num_layers, _SEEDS.value, ks, _HYBRID_SEEDS.value,
                  _TABLE_MIXERS.value, _FIRST_SEED.value)
  if _STATUS.value:
    print(format_status(*status(config, _WORKDIR.value, job_list, _STAGES.value)))
    return
  noise = {}
  expected = [(name, (mixing, k), seed, stage)
              for name, mixing, k, seed, tasks in jobs(config.model.num_layers, _SEEDS.value, ks,
                                                       _HYBRID_SEEDS.value)
              for stage in ('pretrain', *tasks)] if _OWN_SEEDS.value else None
  combine = dict(recorded=_RECORDED.value, own_seeds=_OWN_SEEDS.value, expected=expected)
  for p in _RECORDED.value:   # read (and checked: cli.BadInput) before the work
    mixing_report.recorded_rows(p)
  if _COMPARE_TO.value:   # read (and checked) before the work
    steps = config.pretrain.num_steps
    try:
      same = [d for d in _COMPARE_TO.value
              if os.path.isdir(d) and mixing_plateau.schedule_steps(d) == steps]
      noise = {} if _OWN_SEEDS.value else mixing_plateau.seed_noise(_COMPARE_TO.value, steps)
    except mixing_plateau.ScheduleError as e:
      raise cli.BadInput(f'--compare_to: {e}')
    if same:
      raise cli.BadInput(f'--compare_to: {same[0]} holds runs of this config\'s own '
                         f'{steps}-step schedule (the --workdir\'s); give the sweeps of other '
                         'step counts, or an earlier mixing_layers_plateau.json')
  archived = 0
  if not _REPORT_ONLY.value:
    try:
      wordnet.check_corpus(config.data.wordnet_dir or None)
    except wordnet.CorpusMissingError as e:
      raise cli.BadInput(str(e)) from None
    for j, job in enumerate(job_list):
      if j % m != i:
        continue
      with outputs.claim(os.path.join(_WORKDIR.value, job[0])) as mine:
        if not mine:            # another process is training this run
          print(f'{job[0]}: trained by another process (running.lock); skipped')
          continue
        run_job(config, _WORKDIR.value, job, _STAGES.value)
        mixing_report.report(config, _WORKDIR.value, results_dir, name, prov,
                             not_done(config, _WORKDIR.value, job_list), noise, **combine)
        if archive_dir:
          archived += archive(_WORKDIR.value, archive_dir)
  left = not_done(config, _WORKDIR.value, job_list)
  have = {(r['run'], r['stage'])                           # a recorded stage is done
          for p in _RECORDED.value for r in mixing_report.recorded_rows(p)[0]}
  left = [r for r in left if (r['run'], r['stage']) not in have]
  mixing_report.report(config, _WORKDIR.value, results_dir, name, prov, left, noise, **combine)
  if archive_dir:
    archived += archive(_WORKDIR.value, archive_dir)
    print(f'archive {archive_dir}: {archived} newly finished stages copied')
  if _COMPARE_TO.value:
    try:
      why_not = mixing_plateau.plateau_report(
          [*_COMPARE_TO.value, _WORKDIR.value], results_dir, prov,
          config.pretrain.batch_size * config.model.max_len)
    except mixing_plateau.ScheduleError as e:
      raise cli.BadInput(f'--compare_to: {e}')
    print(f'plateau report not written: {why_not}' if why_not else
          f'plateau report: {os.path.join(results_dir, mixing_plateau.PLATEAU_STEM)}.md')
  if left:
    print(f'report in {results_dir}: {len(left)} stages not done: ' + ', '.join(
        f"{r['run']}/{r['stage']}" + (f" (step {r['step']} of {r['num_steps']})"
                                      if r['state'] == 'partial' else '')
        for r in left))


if __name__ == '__main__':
  cli.run(main)
