r"""Fang et al. 2022, Section 5 against baselines with the same tuning budget.

    setsid nohup nice -n 19 python experiments/fang_baselines.py \
        --config=experiments/configs/fang_baselines.py --workdir=runs/fang_baselines \
        --output_dir=results/fang --overwrite --progress=false \
        > runs/fang_baselines.log 2>&1 &

Runs the stages of the config in order (``train.fang_baselines.sweep``): for each
target and model, the paper's recipe (3 seeds), a grid of optimizer x peak lr x clip
chosen on a validation split, the selected setting (3 seeds), and for f1 a controlled
study of the paper's recipe. A finished run is skipped and an unfinished one resumes
from its checkpoint, so the same command resumes the sweep; a run being trained by
another process (its ``running.lock``) is skipped too, so two processes can share a
workdir (e.g. ``--config.stages='("f2:grid:nn_width+nn_depth",)'`` beside the rest).
After every run the record is rebuilt from all finished runs under ``--workdir``:
``fang_baselines.json``, ``fang_baselines.md`` and the ``fang_baselines_*.png``
figures in ``--output_dir``, which must not hold a record yet unless ``--overwrite``.
``--report_only`` only rebuilds the record. SIGINT / SIGTERM: the run in progress
checkpoints and the binary exits 130 / 143; rerun the command to resume.

A workdir lives on one machine. ``--archive_to=results/fang/runs`` copies every finished
run's record (``result.json``, or ``diverged.json``: no checkpoints) there after each run
and at the end, at its path under ``--workdir``; a record already there with other bytes
(a rerun) is refused before training starts. A new machine resumes from the archive:
``cp -r results/fang/runs/f2 <workdir>/``.
"""

import os
import sys

from absl import app, flags, logging

from transformer_ua import cli, outputs
from transformer_ua.train import fang_baselines as baselines

_CONFIG = cli.define_config_file('config', None, 'experiments/configs/fang_baselines.py')
_WORKDIR = flags.DEFINE_string('workdir', None, 'Root directory of the runs (resumable).')
_OUTPUT = flags.DEFINE_string('output_dir', None, 'Where fang_baselines.{json,md} and the '
                              'figures are written (results/fang for the record).')
_OVERWRITE = flags.DEFINE_bool('overwrite', False, 'Replace an existing record in '
                               '--output_dir (needed to rebuild it after new runs).')
_REPORT_ONLY = flags.DEFINE_bool('report_only', False, 'Only rebuild the record.')
_MAX_RUNS = flags.DEFINE_integer('max_runs', 0, 'Stop after training this many runs '
                                 '(0 = all); the record is rebuilt first.')
_PROGRESS = flags.DEFINE_bool('progress', True, 'Show a tqdm progress bar per run.')
_ARCHIVE_TO = flags.DEFINE_string('archive_to', None, 'Also copy every finished run\'s '
                                  'record (result.json or diverged.json) to this folder, '
                                  'at its path under --workdir (results/fang/runs).')

OUTPUTS = ('fang_baselines.json', 'fang_baselines.md')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if _CONFIG.value is None:
    raise app.UsageError('--config is required (experiments/configs/fang_baselines.py).')
  if not _WORKDIR.value:
    raise app.UsageError('--workdir is required.')
  if not _OUTPUT.value:
    raise app.UsageError('--output_dir is required.')
  if _MAX_RUNS.value < 0:
    raise app.UsageError(f'--max_runs={_MAX_RUNS.value}; it must be >= 0.')
  bconfig = _CONFIG.value
  try:
    stages = baselines.stages(bconfig, _WORKDIR.value)
    for target in bconfig.targets:
      baselines.grid_settings(bconfig[target])
      baselines.paper_runs(bconfig, _WORKDIR.value, target)   # validates the entries
  except (ValueError, KeyError, AttributeError) as e:
    raise app.UsageError(str(e).strip('"\''))
  cli.output_dir(_WORKDIR.value, '--workdir')
  cli.output_dir(_OUTPUT.value, '--output_dir')
  if _ARCHIVE_TO.value:
    cli.output_dir(_ARCHIVE_TO.value, '--archive_to')
  existing = [n for n in OUTPUTS if os.path.exists(os.path.join(_OUTPUT.value, n))]
  if existing and not _OVERWRITE.value:
    raise app.UsageError(f'--output_dir={_OUTPUT.value} already holds {existing}; pass '
                         '--overwrite to replace them.')
  logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  from transformer_ua.reports import fang_baselines as report  # matplotlib
  try:
    baselines.sweep(stages, _WORKDIR.value, report_only=_REPORT_ONLY.value,
                    max_runs=_MAX_RUNS.value, progress=_PROGRESS.value,
                    archive_to=_ARCHIVE_TO.value, command='python ' + ' '.join(sys.argv),
                    report=lambda prov: report.write(bconfig, _WORKDIR.value, _OUTPUT.value,
                                                     prov))
  except outputs.OutputExists as e:   # --archive_to holds another record of a run
    raise cli.BadInput(str(e)) from None


if __name__ == '__main__':
  cli.run(main)
