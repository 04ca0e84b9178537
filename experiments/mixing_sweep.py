r"""All Appendix H runs of one config: Table 1 and Figure 1 analogues (Yun et al. 2020).

    python experiments/mixing_sweep.py --config=experiments/configs/mixing_tiny.py \
        --workdir=runs/mixing_tiny --seeds=3 [--hybrid_ks=1,2] [--hybrid_seeds=1] \
        [--first_seed=1] [--table_mixers=sepconv,attention] [--stages=pretrain,mnli,squad] \
        [--shard=0/2] [--report_only | --status] [--compare_to=WORKDIR,...] [--archive_to=DIR] \
        [--recorded=REPORT.json,...] [--own_seeds]
    python experiments/mixing_sweep.py --config=... --output_dir=results/mixing --rerender

Parses flags only; the sweep (jobs, per-seed runs, status, archive, reports) is
``transformer_ua.studies.mixing_sweep.run``, whose docstring says what each flag does.
A finished stage is skipped, an unfinished one resumes from its checkpoint; the report
goes to --output_dir (default ``<workdir>/report``; ``results/mixing``: the record).
Rebuilding the checked-in record from the recorded rows:

    python experiments/mixing_sweep.py --config=experiments/configs/mixing_cpu_long.py \
        --workdir=results/mixing/runs/cpu_long --seeds=3 --hybrid_ks=1,2,3 --own_seeds \
        --recorded=results/mixing/mixing_layers_cpu_long.json --report_only \
        --output_dir=results/mixing
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly
from transformer_ua import binary_interrupts

import os

from absl import flags, logging
from ml_collections import config_flags

from transformer_ua import provenance
from transformer_ua.reports import mixing_sweep as mixing_report
from transformer_ua.reports.mixing_rows import TABLE_MODELS
from transformer_ua.studies import mixing_sweep

_CONFIG = cli.define_config_file('config', None, 'experiments/configs/mixing_*.py')
_WORKDIR = flags.DEFINE_string('workdir', None, 'Root of the sweep runs.')
_SEEDS = flags.DEFINE_integer('seeds', 3, 'Seeds per model.')
_SHARD = flags.DEFINE_string('shard', '0/1', 'i/m: run jobs j with j % m == i.')
cli.define_overwrite()
_RESULTS = cli.define_output_dir(None, 'Where the report goes (default <workdir>/report; '
                                 '--output_dir=results/mixing: the record).')
_REPORT_ONLY = flags.DEFINE_bool('report_only', False, 'Only rebuild the report.')
_HYBRID_KS = flags.DEFINE_list('hybrid_ks', None, 'Figure 1 hybrids k (default 1..L-1; '
                                '"" = none).')
_HYBRID_SEEDS = flags.DEFINE_integer('hybrid_seeds', None, 'Seeds per hybrid (default --seeds).')
_FIRST_SEED = flags.DEFINE_integer('first_seed', 0, 'Leave out seeds below this one (every '
                                   'model; their runs are recorded elsewhere).')
_STAGES = flags.DEFINE_list('stages', list(mixing_sweep.STAGES),
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


def _config_name():
  """'cpu' for experiments/configs/mixing_cpu.py: the report's name (report_stem)."""
  name = os.path.basename(config_flags.get_config_filename(flags.FLAGS['config']))
  return name.removesuffix('.py').removeprefix('mixing_') or 'custom'


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments {argv[1:]}')
  try:
    if _RERENDER.value:
      if _CONFIG.value is None or not _RESULTS.value:
        raise cli.BadInput('--rerender needs --config and --output_dir (where the report is)')
      print('re-rendered', mixing_sweep.rerender(_RESULTS.value, _config_name(),
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
    # finished stages are kept, unfinished ones checkpointed
    binary_interrupts.resumable(_WORKDIR.value)
    for d in _COMPARE_TO.value:
      if not (os.path.isdir(d) or d.endswith('.json') and os.path.isfile(d)):
        raise cli.BadInput(f'--compare_to: {d} is neither a directory nor a .json file '
                           '(each entry is the workdir of a sweep of this config under '
                           'another schedule, its --archive_to copy, or an earlier '
                           'mixing_layers_plateau.json)')
    for p in _RECORDED.value:
      if not (p.endswith('.json') and os.path.isfile(p)):
        raise cli.BadInput(f'--recorded: {p} is not a report .json file')
    archive_dir = _ARCHIVE_TO.value and cli.output_dir(_ARCHIVE_TO.value, '--archive_to')
    stem = mixing_report.report_stem(_config_name())
    results_dir = cli.output_dir(_RESULTS.value or os.path.join(_WORKDIR.value, 'report'),
                                 writes=(stem + '.md', stem + '.json'), rebuilds=True)
    logging.set_verbosity(logging.WARNING)
    try:
      ks = None if _HYBRID_KS.value is None else tuple(
          int(k) for k in _HYBRID_KS.value if k.strip())
    except ValueError:
      raise cli.BadInput(f'--hybrid_ks must be integers, got {_HYBRID_KS.value}')
    mixing_sweep.run(mixing_sweep.Sweep(
        _CONFIG.value, _config_name(), _WORKDIR.value, results_dir, seeds=_SEEDS.value,
        hybrid_ks=ks, hybrid_seeds=_HYBRID_SEEDS.value, first_seed=_FIRST_SEED.value,
        table_mixers=tuple(_TABLE_MIXERS.value), stages=tuple(_STAGES.value), shard=(i, m),
        compare_to=tuple(_COMPARE_TO.value), recorded=tuple(_RECORDED.value),
        own_seeds=_OWN_SEEDS.value, archive_to=archive_dir or '',
        report_only=_REPORT_ONLY.value, status_only=_STATUS.value), provenance.record())
  except mixing_sweep.SweepError as e:
    raise cli.BadInput(str(e)) from None


if __name__ == '__main__':
  cli.run(main)
