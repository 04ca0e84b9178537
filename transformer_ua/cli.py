"""What every binary shares: one-line errors, checked output paths, clean interrupts.

The contract of every absl binary in ``experiments/`` and ``benchmarks/``:

  * bad input  -> one line on stderr, ``error: <what was wrong and what is allowed>``,
                  then ``(see <prog> --help)``; exit status 2; never a traceback.
                  Covers unknown flags, bad flag values, config-key typos
                  (``--config.resoluton=8``) and ``ValueError`` / ``UsageError`` raised by
                  the binary or by the library's validation before any work starts.
  * output     -> every output directory / file is checked (created, writable, not a
                  file where a directory is needed) *before* the work starts.
  * Ctrl-C     -> one line, exit status 130 (SIGTERM: 143); training loops checkpoint
                  first (``transformer_ua.train``) and say how to resume.
  * CPU-only   -> JAX's "Unable to initialize backend 'tpu'" probe is not printed.

Usage::

    from transformer_ua import cli
    def main(argv): ...
    if __name__ == '__main__':
      cli.run(main)
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Callable

from absl import app, flags
from ml_collections import config_flags

#: Exit status for bad input (flags, config keys, paths).
USAGE_ERROR = 2
#: Exit status after SIGINT (128 + 2) and SIGTERM (128 + 15), as shells report them.
INTERRUPTED = 130
TERMINATED = 143


class BadInput(ValueError):
  """A flag, config value or path outside what the binary allows (one line)."""


class Interrupted(KeyboardInterrupt):
  """A SIGINT / SIGTERM that was handled: ``note`` says what was saved and how to resume.

  Raised by ``transformer_ua.train.loop`` after its checkpoint; ``run`` prints it.
  """

  def __init__(self, signal_name: str, note: str):
    super().__init__(signal_name, note)
    self.signal_name, self.note = signal_name, note

  def __str__(self) -> str:
    return f'{self.signal_name}: {self.note}'


def quiet_backend_probe() -> None:
  """Hides JAX's INFO line about the missing TPU backend on CPU/GPU machines."""
  logging.getLogger('jax._src.xla_bridge').setLevel(logging.WARNING)


def _prog() -> str:
  return os.path.basename(sys.argv[0]) if sys.argv else 'binary'


def fail(message: str) -> None:
  """Prints ``error: message`` and the help hint on stderr; exits with USAGE_ERROR."""
  first = ' '.join(str(message).split())  # one line, whatever the exception held
  print(f'error: {first}', file=sys.stderr)
  print(f'(see {_prog()} --help)', file=sys.stderr)
  sys.exit(USAGE_ERROR)


def _config_error(e: Exception) -> None:
  # ml_collections reports typos as AttributeError("'key'\nDid you mean ...").
  text = str(e).strip().strip('\'"').replace('\\n', ' ').replace("\\'", "'")
  fail(f'bad config override: {text}')


def _check_config_files_loaded() -> None:
  """ml_collections defers an unreadable config file (missing path, permissions) to the
  first attribute access, deep inside a run; report it at parse time instead."""
  for name in flags.FLAGS:
    value = flags.FLAGS[name].value
    if type(value).__name__ == '_ErrorConfig':  # ml_collections' stand-in for a failed load
      # Its message ends with the reason per attempted path, e.g. "[Errno 2] No such file".
      reason = str(vars(value)['_error']).strip().splitlines()[-1].strip()
      fail(f'config file did not load: {reason}')


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with any failure reported in one line."""
  try:
    rest = flags.FLAGS(argv)
    _check_config_files_loaded()
    return rest
  except flags.Error as e:
    fail(e)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    _config_error(e)
  except (ImportError, SyntaxError, OSError) as e:  # a config file that does not load
    fail(f'config file did not load: {type(e).__name__}: {e}')
  return []  # unreachable: fail() exits


def define_config_dict(name: str, config, help_string: str = 'Configuration.', **kwargs):
  """``config_flags.DEFINE_config_dict``, with override errors in one line.

  ml_collections applies ``--name.key=value`` overrides while the flag is *defined*
  (at import), before ``run`` could catch anything; this guards that moment.
  """
  try:
    return config_flags.DEFINE_config_dict(name, config, help_string, **kwargs)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    _config_error(e)


def define_config_file(name: str, default: str | None = None,
                       help_string: str = 'Path to a configuration file.', **kwargs):
  """``config_flags.DEFINE_config_file`` (``kwargs``: e.g. ``lock_config``), with
  load/override errors in one line."""
  try:
    return config_flags.DEFINE_config_file(name, default, help_string, **kwargs)
  except (AttributeError, KeyError, TypeError, ValueError, OSError) as e:
    _config_error(e)


def _raise_interrupt(signum, frame):  # pylint: disable=unused-argument
  raise KeyboardInterrupt(signal.Signals(signum).name)


def run(main: Callable[[list[str]], object]) -> None:
  """``absl.app.run(main)`` under the contract in the module docstring."""
  quiet_backend_probe()
  # SIGTERM behaves like Ctrl-C, so training loops checkpoint on either. SIGINT is
  # (re)armed too: a shell starts background jobs with SIGINT ignored, and then
  # `kill -INT` would neither stop nor checkpoint a run.
  signal.signal(signal.SIGTERM, _raise_interrupt)
  signal.signal(signal.SIGINT, signal.default_int_handler)

  def wrapped(argv):
    try:
      return main(argv)
    except (app.UsageError, BadInput) as e:
      fail(e)
    except Interrupted as e:
      print(f'interrupted ({e.signal_name}); {e.note}', file=sys.stderr)
      sys.exit(TERMINATED if e.signal_name == 'SIGTERM' else INTERRUPTED)
    except KeyboardInterrupt as e:
      name = str(e) or 'SIGINT'
      print(f'interrupted ({name}); nothing further was written', file=sys.stderr)
      sys.exit(TERMINATED if name == 'SIGTERM' else INTERRUPTED)

  app.run(wrapped, flags_parser=_parse_flags)


#: Default directory of JAX's persistent compilation cache (``compilation_cache``).
DEFAULT_COMPILATION_CACHE = os.path.join(
    os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache'),
    'transformer_ua', 'jax_compilation_cache')


def compilation_cache(path: str) -> str:
  """Turns on JAX's persistent compilation cache in ``path`` ('' turns it off).

  A compiled XLA program is written there and read back by a later run of the same
  program (same JAX, flags and devices), which then skips compiling it. Every program
  is cached, however fast it compiled. Returns the directory used ('' when off).
  """
  import jax  # pylint: disable=import-outside-toplevel
  if not path:
    jax.config.update('jax_enable_compilation_cache', False)
    return ''
  output_dir(path, flag='--compilation_cache')
  jax.config.update('jax_enable_compilation_cache', True)
  jax.config.update('jax_compilation_cache_dir', path)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
  jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)
  return path


def output_dir(path: str, flag: str = '--output_dir') -> str:
  """Creates ``path`` if needed and checks that it is a writable directory.

  Raises BadInput (one line, naming ``flag``) when it is empty, a file, or cannot be
  created or written. Call it before the work starts.
  """
  if not path:
    raise BadInput(f'{flag} is empty; give a directory to write into.')
  if os.path.exists(path) and not os.path.isdir(path):
    raise BadInput(f'{flag}={path} is a file; give a directory.')
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    raise BadInput(f'{flag}={path} cannot be created: {e.strerror}.') from None
  if not os.access(path, os.W_OK | os.X_OK):
    raise BadInput(f'{flag}={path} is not writable.')
  probe = os.path.join(path, f'.write_probe.{os.getpid()}')  # own name: concurrent runs
  try:
    with open(probe, 'w', encoding='utf-8'):
      pass
    os.remove(probe)
  except OSError as e:
    raise BadInput(f'{flag}={path} is not writable: {e.strerror}.') from None
  return path


def output_file(path: str, flag: str) -> str:
  """Checks that ``path`` can be written (its directory made and writable) before the work.

  An existing file is kept until the new one is written; a directory is refused.
  """
  if not path:
    raise BadInput(f'{flag} is empty; give a file path.')
  if os.path.isdir(path):
    raise BadInput(f'{flag}={path} is a directory; give a file path.')
  output_dir(os.path.dirname(os.path.abspath(path)), flag=f'the directory of {flag}')
  return path
