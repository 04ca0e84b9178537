"""A minimal binary under transformer_ua.cli, driven by tests/test_cli.py."""

import os
import signal
import time

from absl import flags
import ml_collections

from transformer_ua import cli

_CONFIG = cli.define_config_dict('config', ml_collections.ConfigDict({'resolution': 4}))
_COUNT = flags.DEFINE_integer('count', 1, 'A positive integer.')
_MODE = flags.DEFINE_string('mode', 'ok', "'ok', 'usage', 'value', 'sigterm' or 'sigint'.")
_OUT = flags.DEFINE_string('output_dir', '', 'Checked output directory.')


def main(argv):
  del argv
  if _OUT.value:
    cli.output_dir(_OUT.value)
  if _COUNT.value < 1:
    raise cli.BadInput(f'--count={_COUNT.value} must be >= 1.')
  if _MODE.value in ('sigterm', 'sigint'):
    sig = signal.SIGTERM if _MODE.value == 'sigterm' else signal.SIGINT
    os.kill(os.getpid(), sig)
    time.sleep(5)
  print(f'ok resolution={_CONFIG.value.resolution}')


if __name__ == '__main__':
  cli.run(main)
