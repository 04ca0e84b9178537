"""Flags and validation shared by the Appendix H binaries: bad input -> one-line error."""

import json

from absl import flags

from transformer_ua import cli
from transformer_ua.data import wordnet


def run_main(argv, config_flag, workdir_flag, fn):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments {argv[1:]}; use --config=... --workdir=...')
  if config_flag.value is None:
    raise cli.BadInput('--config is required, e.g. --config=experiments/configs/mixing_tiny.py')
  if not workdir_flag.value:
    raise cli.BadInput('--workdir is required (a run directory, e.g. runs/tiny/attention)')
  cli.output_dir(workdir_flag.value, '--workdir')  # before the work
  try:
    result = fn(config_flag.value, workdir_flag.value)
  except (ValueError, wordnet.CorpusMissingError, FileNotFoundError) as e:
    raise cli.BadInput(str(e)) from None
  print(json.dumps({k: result[k] for k in ('stage', 'mixing', 'num_conv_layers', 'eval',
                                           'params', 'train_tokens_per_s') if k in result}))


def binary_main(fn):
  """Defines ``--config`` and ``--workdir``; returns ``main(argv)`` that runs ``fn(config,
  workdir)`` (``mixing_train.pretrain`` or ``mixing_train.finetune``) through ``run_main``."""
  config_flag = cli.define_config_file(
      'config', None, 'Path to an experiments/configs/mixing_*.py file.', lock_config=True)
  workdir_flag = flags.DEFINE_string('workdir', None, 'Run directory (checkpoints, metrics).')

  def main(argv):
    run_main(argv, config_flag, workdir_flag, fn)

  return main
