r"""All Appendix H runs of one config: Table 1 and Figure 1 analogues (Yun et al. 2020).

Callable from notebooks and from ``experiments/mixing_sweep.py`` (which parses its flags
into a ``Sweep`` and calls ``run``):

    from transformer_ua import provenance
    from transformer_ua.studies import mixing_sweep
    from experiments.configs import mixing_tiny
    s = mixing_sweep.Sweep(mixing_tiny.get_config(), 'tiny', 'runs/mixing_tiny',
                           'runs/mixing_tiny/report', seeds=3)
    mixing_sweep.run(s, provenance.record())

Jobs (``jobs``): first Table 1, seed-major (every model's seed 0 first), then Figure 1:

* Table 1: mixing in (average, bilinear, sepconv, attention), pre-training (MLM +
  sentence pair) then MNLI-analogue fine-tuning (and SQuAD-analogue for sepconv and
  attention, which are Figure 1's k = L and k = 0).
* Figure 1: hybrids with the first k = 1 .. L-1 layers sepconv, the rest attention, at
  ``hybrid_seeds`` seeds (default ``seeds``); pre-training then both tasks.

``first_seed=s`` leaves out every model's seeds below s (Table 1 mixers and hybrids;
runs recorded elsewhere): ``seeds=3, first_seed=1`` makes seeds 1 and 2.

``stages`` runs only those stages of every job (``('pretrain',)`` first, then
``('mnli', 'squad')``: every pre-training before any fine-tuning). ``status_only`` runs
nothing: it lists every stage of the sweep as done / partial (step i of n, from the
newest checkpoint) / missing, with an ETA from the measured seconds per step of the
finished stages and of the partial ones past RATE_MIN_FRACTION of their steps (their
checkpoints; ``status``).

A finished stage (``result.json`` present) is skipped, an unfinished one resumes from
its checkpoint. ``shard=(i, m)`` runs every m-th job (two single-threaded processes use
2 cores better than one). Two processes may also share a workdir without sharding: a run
(pre-training and its fine-tunings) being trained by another live process (its
``running.lock``, outputs.claim) is skipped, so two copies of the same sweep split its
runs between them. After each job the report is rebuilt from every ``result.json`` under
the workdir: ``mixing_layers.md`` (for ``cpu``, the recorded budget;
``mixing_layers_<config>.md`` otherwise) with a JSON twin and PNG figures, in
``results_dir`` (``results/mixing`` updates the checked-in record);
``transformer_ua.reports.mixing_sweep`` writes it.

``compare_to`` (workdirs of sweeps of the same config under other step counts, e.g.
``cpu`` and ``cpu_long`` for a ``cpu_longer`` workdir) also writes
``mixing_layers_plateau.{md,json,png}``: each mixer's final accuracy per schedule, what
each tripling of the tokens buys, i.e. whether pre-training has plateaued, and whether
the mixers' order survives more tokens (``transformer_ua.reports.mixing_plateau``). An
entry may also be an earlier ``mixing_layers_plateau.json``: its schedules come in as
recorded there (for workdirs that are gone), and a mixer a workdir has more finished
seeds of replaces its row. The sweep's own report then judges the claims of a mixer
with one run as the plateau report does: with its seeds' std under a shorter schedule
as its seed noise.

``recorded`` (earlier reports of this config, e.g. the checked-in
``results/mixing/mixing_layers_cpu_long.json``) adds their per-seed rows to the report,
for runs whose workdirs are gone; a stage run under the workdir replaces the recorded
row of the same run and stage. The report names each row's source. ``own_seeds`` judges
every claim on each side's own seeds only (>= 2 a side; no seed noise borrowed from the
other side or from ``compare_to``), and names the runs of the full sweep (``seeds``,
``hybrid_ks``, ``hybrid_seeds``; every mixer from seed 0) that each side still lacks.

A workdir lives on one machine. ``archive_to`` (e.g. ``results/mixing/runs/<config>``)
copies every finished stage's small records (no checkpoints) there, to be committed;
every report can be rebuilt from that copy (as the workdir with ``report_only``, or in
``compare_to``). Fine-tuning still needs the pre-training checkpoint, so a machine
should run a checkpoint's fine-tuning before it goes.

Bad input the sweep finds (a value out of range, a file that is not what it should be)
raises ``SweepError`` before the work, its message naming the flag of
``experiments/mixing_sweep.py`` that gave it.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os

import ml_collections
import numpy as np

from transformer_ua import outputs
from transformer_ua.data import wordnet
from transformer_ua.reports import mixing_sweep as mixing_report, mixing_plateau
from transformer_ua.reports.mixing_rows import TABLE_MODELS, RecordError, recorded_rows
from transformer_ua.train import mixing

STAGES = ('pretrain', 'mnli', 'squad')


class SweepError(ValueError):
  """Bad input found before the work; the message names the flag that gave it."""


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
  """``status``'s rows, one line each, and the summary line (counts, rates, ETA)."""
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
  """Trains the stages ``stages`` of ``job`` (jobs()) under ``root/<name>`` that have no
  ``result.json`` yet (an unfinished one resumes from its checkpoint)."""
  name, mixer, k, seed, tasks = job
  c = ml_collections.ConfigDict(config.to_dict())
  c.model.mixing, c.model.num_conv_layers, c.seed = mixer, k, seed
  run = os.path.join(root, name)
  if 'pretrain' in stages and not os.path.exists(os.path.join(run, 'pretrain', 'result.json')):
    mixing.pretrain(c, os.path.join(run, 'pretrain'))
  for task in tasks:
    if task not in stages:
      continue
    if os.path.exists(os.path.join(run, task, 'result.json')):
      continue
    c.finetune.task = task
    c.finetune.pretrain_workdir = os.path.join(run, 'pretrain')
    mixing.finetune(c, os.path.join(run, task))


ARCHIVE_FILES = ('config.json', 'result.json', 'metrics.jsonl')  # all that the reports read


def archive(root, dest):
  """Copies every finished stage's records (ARCHIVE_FILES: no checkpoint, no tokenizer)
  from the workdir ``root`` to ``dest/<run>/<stage>/``; returns how many stages it copied.

  A workdir dies with its machine; its archive is ~0.1 MB a stage and can be committed,
  and every report reads it like the workdir (``--workdir=DEST --report_only``,
  ``--compare_to=DEST``). A stage already archived with the same bytes is skipped; one
  archived with other bytes (a rerun) raises SweepError before anything is copied.
  """
  try:
    return outputs.archive(root, dest, markers=('result.json',), files=ARCHIVE_FILES,
                           depth='*/*')
  except outputs.OutputExists as e:
    raise SweepError(f'--archive_to: {e}') from None


@dataclasses.dataclass(frozen=True)
class Sweep:
  """One call of the sweep (see the module doc; the names are mixing_sweep.py's flags).

  Attributes:
    config: the sweep's config (experiments/configs/mixing_*.py).
    config_name: its name, e.g. 'cpu' (the report's name, ``report_stem``).
    workdir: root of the runs, one directory per job.
    results_dir: where the report goes (checked by the caller before the work).
    seeds, hybrid_ks, hybrid_seeds, first_seed, table_mixers: the jobs (``jobs``);
      hybrid_ks None = 1 .. L-1.
    stages: the stages run for every job (a subset of STAGES).
    shard: (i, m): run the jobs j with j % m == i.
    compare_to, recorded, own_seeds: what the report combines (module doc).
    archive_to: copy the finished stages' records there ('' = no archive).
    report_only: train nothing, only rebuild the reports.
    status_only: train and write nothing, print ``status``.
  """

  config: ml_collections.ConfigDict
  config_name: str
  workdir: str
  results_dir: str
  seeds: int = 3
  hybrid_ks: tuple | None = None
  hybrid_seeds: int | None = None
  first_seed: int = 0
  table_mixers: tuple = TABLE_MODELS
  stages: tuple = STAGES
  shard: tuple = (0, 1)
  compare_to: tuple = ()
  recorded: tuple = ()
  own_seeds: bool = False
  archive_to: str = ''
  report_only: bool = False
  status_only: bool = False

  def check(self):
    """SweepError for a value out of range (before the work)."""
    L = self.config.model.num_layers
    bad = [k for k in self.hybrid_ks or () if not 1 <= k < L]
    if bad:
      raise SweepError(f'--hybrid_ks must lie in [1, {L - 1}] (k = 0 and k = L are in '
                       f'Table 1), got {bad}')
    if self.first_seed < 0:
      raise SweepError(f'--first_seed must be >= 0, got {self.first_seed}')
    if self.hybrid_seeds is not None and self.hybrid_seeds < 0:
      raise SweepError(f'--hybrid_seeds must be >= 0, got {self.hybrid_seeds}')
    bad = [s for s in self.stages if s not in STAGES]
    if bad or not self.stages:
      raise SweepError(f'--stages must be a non-empty subset of {",".join(STAGES)}, '
                       f'got {bad}')
    bad = [x for x in self.table_mixers if x not in TABLE_MODELS]
    if bad:
      raise SweepError(f'--table_mixers must be a subset of {",".join(TABLE_MODELS)}, '
                       f'got {bad}')


def rerender(results_dir, config_name, prov):
  """``reports.mixing_sweep.rerender`` (the report's .md from its .json and the current notes);
  SweepError when the .json is not a report."""
  try:
    return mixing_report.rerender(results_dir, config_name, prov)
  except RecordError as e:
    raise SweepError(str(e)) from None


def _seed_noise(s: Sweep):
  """The seed noise of ``s.compare_to`` under other schedules (mixing_plateau.seed_noise);
  SweepError when an entry cannot be compared or holds this config's own schedule."""
  steps = s.config.pretrain.num_steps
  try:
    same = [d for d in s.compare_to
            if os.path.isdir(d) and mixing_plateau.schedule_steps(d) == steps]
    noise = {} if s.own_seeds else mixing_plateau.seed_noise(list(s.compare_to), steps)
  except mixing_plateau.ScheduleError as e:
    raise SweepError(f'--compare_to: {e}') from None
  if same:
    raise SweepError(f'--compare_to: {same[0]} holds runs of this config\'s own '
                     f'{steps}-step schedule (the --workdir\'s); give the sweeps of other '
                     'step counts, or an earlier mixing_layers_plateau.json')
  return noise


def run(s: Sweep, prov) -> None:
  """Trains the sweep's jobs (those of shard ``s.shard`` that no other live process is
  training), rebuilding the report after each, then the report, the archive and the
  plateau report; ``s.status_only``: prints ``status`` only. ``prov``: the provenance of
  this call (provenance.record()). SweepError for bad input, before the work."""
  s.check()
  config, root, i, m = s.config, s.workdir, *s.shard
  job_list = jobs(config.model.num_layers, s.seeds, s.hybrid_ks, s.hybrid_seeds,
                  s.table_mixers, s.first_seed)
  if s.status_only:
    print(format_status(*status(config, root, job_list, s.stages)))
    return
  expected = [(name, (mixing_, k), seed, stage)
              for name, mixing_, k, seed, tasks in jobs(config.model.num_layers, s.seeds,
                                                        s.hybrid_ks, s.hybrid_seeds)
              for stage in ('pretrain', *tasks)] if s.own_seeds else None
  combine = dict(recorded=list(s.recorded), own_seeds=s.own_seeds, expected=expected)

  def recorded_stages():
    try:
      return {(r['run'], r['stage']) for p in s.recorded for r in recorded_rows(p)[0]}
    except RecordError as e:
      raise SweepError(str(e)) from None

  def report(left):
    try:
      mixing_report.report(config, root, s.results_dir, s.config_name, prov, left, noise,
                           **combine)
    except RecordError as e:
      raise SweepError(str(e)) from None

  recorded_stages()                                  # read (and checked) before the work
  noise = _seed_noise(s) if s.compare_to else {}     # read (and checked) before the work

  archived = 0
  if not s.report_only:
    try:
      wordnet.check_corpus(config.data.wordnet_dir or None)
    except wordnet.CorpusMissingError as e:
      raise SweepError(str(e)) from None
    for j, job in enumerate(job_list):
      if j % m != i:
        continue
      with outputs.claim(os.path.join(root, job[0])) as mine:
        if not mine:            # another process is training this run
          print(f'{job[0]}: trained by another process (running.lock); skipped')
          continue
        run_job(config, root, job, s.stages)
        report(not_done(config, root, job_list))
        if s.archive_to:
          archived += archive(root, s.archive_to)
  have = recorded_stages()                           # a recorded stage is done
  left = [r for r in not_done(config, root, job_list) if (r['run'], r['stage']) not in have]
  report(left)
  if s.archive_to:
    archived += archive(root, s.archive_to)
    print(f'archive {s.archive_to}: {archived} newly finished stages copied')
  if s.compare_to:
    try:
      why_not = mixing_plateau.plateau_report(
          [*s.compare_to, root], s.results_dir, prov,
          config.pretrain.batch_size * config.model.max_len)
    except mixing_plateau.ScheduleError as e:
      raise SweepError(f'--compare_to: {e}') from None
    print(f'plateau report not written: {why_not}' if why_not else
          f'plateau report: {os.path.join(s.results_dir, mixing_plateau.PLATEAU_STEM)}.md')
  if left:
    print(f'report in {s.results_dir}: {len(left)} stages not done: ' + ', '.join(
        f"{r['run']}/{r['stage']}" + (f" (step {r['step']} of {r['num_steps']})"
                                      if r['state'] == 'partial' else '')
        for r in left))
