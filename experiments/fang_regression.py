r"""Fang et al. 2022, Section 5: Table 1, Figure 2 (f1 surfaces), Figure 3 (f2 curves).

    python experiments/fang_regression.py --config=experiments/configs/fang_f1.py \
        --workdir=/tmp/fang_runs
    python experiments/fang_regression.py --config=experiments/configs/fang_f2.py \
        --workdir=/tmp/fang_runs [--only=attention:4368,nn_depth] [--report_only] \
        [--deviations=Adam=/tmp/fang_adam_runs]

Runs every sweep entry of the config for every seed (seed-major: all models' seed 0
first). A finished run (``result.json``) is skipped; an unfinished one resumes from
its orbax checkpoint. After each run the report is rebuilt from every
``result.json`` of both targets under ``--workdir``: ``fang_regression.md`` with
``fang_regression_<target>.json`` and the PNG figures in ``--output_dir`` (default
``<workdir>/report``; ``--output_dir=results/fang --overwrite`` replaces the record).

For every trained ATTENTION model the binary also runs the *literal* network
(``fang.from_params``: the trained F, beta, b with the fixed Lemma 3.1 blocks) on
``config.literal_check_points`` test inputs in float64 and records its largest
deviation from the compact path that was trained (``train.fang_regression.sweep``;
the report: ``reports.fang_regression.write_report``).
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly
from transformer_ua import binary_interrupts

import os
import sys

from absl import app, flags, logging

from transformer_ua.fang import regression
from transformer_ua.train import fang_regression as fang_training

_CONFIG = cli.define_config_file('config', None, 'experiments/configs/fang_f*.py')
_WORKDIR = flags.DEFINE_string('workdir', None, 'Root directory of the runs.')
_RESULTS = cli.define_output_dir(None, 'Where the report is written (default: '
                                 '<workdir>/report; results/fang with --overwrite: the record).')
_ONLY = flags.DEFINE_list('only', [], 'Run only these sweep entries (default: all).')
_REPORT_ONLY = flags.DEFINE_bool('report_only', False, 'Only rebuild the report.')
_PROGRESS = flags.DEFINE_bool('progress', True, 'Show a tqdm progress bar.')
cli.define_overwrite()
_DEVIATIONS = flags.DEFINE_list(
    'deviations', [], 'LABEL=WORKDIR pairs: finished runs of a config that deviates from the '
    'paper (e.g. Adam=/tmp/fang_adam for experiments/configs/fang_f2_adam.py), added to '
    'Table 1 and Figure 3 as rows labelled [DEVIATION: LABEL].')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The checked-in full sweeps, whose not-yet-started runs the report lists.
TARGET_CONFIGS = {t: os.path.join(ROOT, 'experiments', 'configs', f'fang_{t}.py')
                  for t in ('f1', 'f2')}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if _CONFIG.value is None:
    raise app.UsageError('--config is required (experiments/configs/fang_f1.py or fang_f2.py).')
  if not _WORKDIR.value:
    raise app.UsageError('--workdir is required.')
  cli.output_dir(_WORKDIR.value, '--workdir')  # before the work
  # finished runs are kept, unfinished ones checkpointed
  binary_interrupts.resumable(_WORKDIR.value)
  report = ['fang_regression.md', 'fang_f1_surfaces.png'] + [
      f'fang_regression_{t}.json' for t in ('f1', 'f2')] + [
          f'fang_{t}_convergence.png' for t in ('f1', 'f2')]
  results_dir = cli.output_dir(_RESULTS.value or os.path.join(_WORKDIR.value, 'report'),
                               writes=report, rebuilds=True)
  logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  config = _CONFIG.value
  try:
    regression.validate_config(config)
    runs = regression.run_configs(config)
  except ValueError as e:
    raise app.UsageError(str(e))
  known = {name for name, _ in runs}
  bad = [o for o in _ONLY.value if o not in known]
  if bad:
    raise app.UsageError(f'--only {bad} not in the sweep; allowed: {sorted(known)}.')
  deviations = {}
  for pair in _DEVIATIONS.value:
    label, _, path = pair.partition('=')
    if not label or not path or not os.path.isdir(path):
      raise app.UsageError(f'--deviations entry {pair!r}: expected LABEL=WORKDIR with an '
                           'existing run directory.')
    deviations[label] = path
  from transformer_ua.reports import fang_regression as fang_report
  fang_training.sweep(
      config, runs, _WORKDIR.value, only=_ONLY.value, report_only=_REPORT_ONLY.value,
      progress=_PROGRESS.value, command='python ' + ' '.join(sys.argv),
      report=lambda prov: fang_report.write_report(
          _WORKDIR.value, results_dir, fang_training.sweep_plans(TARGET_CONFIGS), deviations,
          prov))


if __name__ == '__main__':
  cli.run(main)
