"""A minimal binary under transformer_ua.cli, driven by tests/test_cli.py."""

import os
import signal
import time
import weakref

from absl import flags
from transformer_ua import cli
from transformer_ua import binary_interrupts

_CONFIG = cli.define_config_file(
    'config', os.path.join(os.path.dirname(os.path.abspath(__file__)), 'cli_probe_config.py'))
_COUNT = flags.DEFINE_integer('count', 1, 'A positive integer.')
_MODE = flags.DEFINE_string('mode', 'ok', "'ok', 'usage', 'value', 'sigterm', 'sigint', "
                            "'weakref' (SIGINT lands inside a weakref callback) or 'wait' "
                            "(print 'waiting' and sleep).")
_OUT = flags.DEFINE_string('output_dir', '', 'Checked output directory.')
_STATE = flags.DEFINE_string('state', '', 'Declared resumable state (written if --write).')
_WRITE = flags.DEFINE_bool('write', False, 'Write --state before the interrupt.')
_FILE = flags.DEFINE_string('output_file', '', 'Checked output file (--overwrite replaces).')
cli.define_overwrite()


class _Thing:
  pass


def _signal_inside_a_callback():
  """Python runs the SIGINT handler at the next bytecode, here inside the weakref
  callback: its KeyboardInterrupt is 'ignored' by Python (as in a WeakKeyDictionary's)."""
  def callback(ref):  # pylint: disable=unused-argument
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(10000):
      pass
  thing = _Thing()
  ref = weakref.ref(thing, callback)  # pylint: disable=unused-variable
  del thing


def main(argv):
  del argv
  if _OUT.value:
    cli.output_dir(_OUT.value)
  if _FILE.value:
    cli.output_file(_FILE.value, '--output_file')
  if _COUNT.value < 1:
    raise cli.BadInput(f'--count={_COUNT.value} must be >= 1.')
  if _STATE.value:
    binary_interrupts.resumable(_STATE.value)
    if _WRITE.value:
      with open(_STATE.value, 'w', encoding='utf-8') as f:
        f.write('state')
  if _MODE.value == 'weakref':
    _signal_inside_a_callback()
    time.sleep(5)
  if _MODE.value == 'wait':
    print('waiting', flush=True)
    time.sleep(60)
  if _MODE.value in ('sigterm', 'sigint'):
    sig = signal.SIGTERM if _MODE.value == 'sigterm' else signal.SIGINT
    os.kill(os.getpid(), sig)
    time.sleep(5)
  print(f'ok resolution={_CONFIG.value.resolution}')


if __name__ == '__main__':
  cli.run(main)
