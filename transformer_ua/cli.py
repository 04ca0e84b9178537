"""What every binary shares: one-line errors, checked output paths, clean interrupts.

The contract of every absl binary in ``experiments/`` and ``benchmarks/``:

  * bad input  -> one line on stderr, ``error: <what was wrong and what is allowed>``,
                  then ``(see <prog> --help)``; exit status 2; never a traceback.
                  Covers unknown flags, bad flag values, config-key typos
                  (``--config.resoluton=8``), ``BadInput`` (or absl's ``UsageError``)
                  raised by the binary, e.g. from the library's validation before any
                  work starts. Raise ``BadInput``; a ``sys.exit('error: ...')`` is
                  turned into the same line and status.
  * output     -> one flag names where files go: ``--output_dir``
                  (``define_output_dir``), the files inside under fixed names
                  (``--workdir`` where training resumes). Every output directory / file
                  is checked (created, writable, not a file where a directory is
                  needed) *before* the work starts (a run refused after that removes
                  the directories it created while they are still empty), and an
                  existing file is refused unless ``--overwrite`` (``define_overwrite``)
                  says to replace it; files are written atomically
                  (``transformer_ua.outputs``: ``atomic_open``, ``atomic_json``, ...).
  * Ctrl-C     -> SIGINT / SIGTERM at any moment: one line, exit status 130 / 143, no
                  traceback. The line gives the exact command that resumes when a
                  resumable state exists (training loops checkpoint first and raise
                  ``transformer_ua.interrupts.Interrupted``, see ``transformer_ua.train``;
                  a binary declares other state with ``binary_interrupts.resumable``),
                  and otherwise says that nothing needs resuming.
  * CPU-only   -> JAX's "Unable to initialize backend 'tpu'" probe is not printed.

Interrupts are robust to where the signal lands (``binary_interrupts``): importing this
module from a script in ``experiments/`` or ``benchmarks/`` arms a handler that exits at
once while the modules load (nothing has been written then); ``run`` replaces it by one
that raises KeyboardInterrupt, and re-delivers that interrupt if Python swallowed it
(raised inside a weakref callback or a finalizer, where it would only print "Exception
ignored in ...").

Usage::

    from transformer_ua import cli
    def main(argv): ...
    if __name__ == '__main__':
      cli.run(main)
"""

from __future__ import annotations

import difflib
import logging
import os
import signal
import sys
from typing import Callable, Iterable

from transformer_ua import binary_interrupts, executor as executor_lib, interrupts, outputs

from absl import app, flags
from ml_collections import config_flags

#: Exit status for bad input (flags, config keys, paths).
USAGE_ERROR = 2


class BadInput(ValueError):
  """A flag, config value or path outside what the binary allows (one line)."""


def quiet_backend_probe() -> None:
  """Hides JAX's INFO line about the missing TPU backend on CPU/GPU machines."""
  logging.getLogger('jax._src.xla_bridge').setLevel(logging.WARNING)


def _prog() -> str:
  return os.path.basename(sys.argv[0]) if sys.argv else 'binary'


#: Directories ``output_dir`` created in this process, outermost first: a refused run
#: (``fail``) removes those that are still empty, so it leaves no directory behind.
_CREATED_DIRS: list = []


def _remove_created_dirs() -> None:
  """Removes the still-empty directories ``output_dir`` created, innermost first."""
  while _CREATED_DIRS:
    try:
      os.rmdir(_CREATED_DIRS.pop())  # refuses a directory that holds anything
    except OSError:
      pass


def fail(message: str) -> None:
  """Prints ``error: message`` and the help hint on stderr; exits with USAGE_ERROR.

  The output directories this process created and left empty are removed first."""
  _remove_created_dirs()
  first = ' '.join(str(message).split())  # one line, whatever the exception held
  print(f'error: {first}', file=sys.stderr)
  print(f'(see {_prog()} --help)', file=sys.stderr)
  sys.exit(USAGE_ERROR)


def _config_error(e: Exception, argv: Iterable[str] = ()) -> None:
  explained = _explain_overrides(argv)
  if explained:
    fail(f'bad config override {explained}')
  # ml_collections reports typos as AttributeError("'key'\nDid you mean ...").
  text = str(e).strip().strip('\'"').replace('\\n', ' ').replace("\\'", "'")
  fail(f'bad config override: {text}')


def _config_flags() -> dict:
  """Name -> flag of every ml_collections config flag defined."""
  return {name: flags.FLAGS[name] for name in flags.FLAGS
          if type(flags.FLAGS[name]).__name__ == '_ConfigFlag'}


def _config_of(flag, argv: Iterable[str]):
  """The config a config flag holds before overrides (None when it cannot be had)."""
  parser = getattr(flag, 'parser', None)
  if type(parser).__name__ != 'ConfigFileFlagParser':   # a config dict: the value itself
    return flag.value if hasattr(flag.value, 'keys') else None
  path = flag.default
  for arg in argv:
    if arg.startswith(f'--{flag.name}='):
      path = arg.split('=', 1)[1]
  try:
    return parser.parse(path) if path else None
  except Exception:  # pylint: disable=broad-except
    return None


def _explain_overrides(argv: Iterable[str]) -> str | None:
  """'--config.a.b=...: why it cannot be set' for the first override that names no
  field of its config (a typo, or a field inside a value that is not a group)."""
  argv = list(argv)
  for name, flag in _config_flags().items():
    if any(arg.startswith(f'--{name}.') for arg in argv):
      config = _config_of(flag, argv)
      if config is None:
        return None
      explained = _explain_overrides_of(name, config, argv)
      if explained:
        return explained
  return None


def _explain_overrides_of(name: str, config, argv: Iterable[str]) -> str | None:
  """``_explain_overrides`` for the config flag ``name`` holding ``config``."""
  for arg in argv:
    if not arg.startswith(f'--{name}.'):
      continue
    dotted = arg[len(name) + 3:].split('=', 1)[0]
    node, where = config, name
    for part in dotted.split('.'):
      if not hasattr(node, 'keys'):
        return (f'--{where}.{part}: {where} is a {type(node).__name__} ({node!r}), not a '
                'group of fields; set it as a whole')
      keys = sorted(node.keys())
      if part not in keys:
        close = difflib.get_close_matches(part, keys, n=1)
        hint = f'did you mean {close[0]!r}? ' if close else ''
        return (f'--{where}.{part}: {where} has no field {part!r}; {hint}'
                f'fields: {", ".join(keys)}')
      node, where = node[part], f'{where}.{part}'
  return None


def _config_file_of(name: str, default: str | None, argv: Iterable[str]):
  """The config the file flag ``name`` loads (--name=path or ``default``), without its
  overrides; None when it cannot be loaded."""
  path = default
  for arg in argv:
    if arg.startswith(f'--{name}='):
      path = arg.split('=', 1)[1]
  try:
    from ml_collections.config_flags import config_flags as impl  # pylint: disable=import-outside-toplevel
    return impl.ConfigFileFlagParser(name=name).parse(path) if path else None
  except Exception:  # pylint: disable=broad-except
    return None


def _flag_error(e: Exception) -> None:
  """A flag parsing error in one line; a config file that raised while loading (absl
  quotes the whole traceback) is reduced to the exception's own line."""
  text = str(e)
  if 'Traceback (most recent call last)' in text:
    head = text.split(': Error whilst parsing', 1)[0].split('Traceback', 1)[0]
    last = [l.strip() for l in text.strip().splitlines() if l.strip()][-1]
    if 'get_config() takes 0 positional arguments' in last:
      spec = head.split('=', 1)[-1].strip()
      path, _, variant = spec.rpartition(':')
      fail(f'{head.strip()}: {path} takes no variant after ":" (got {variant!r}); use '
           f'{head.split("=", 1)[0].replace("flag ", "").strip()}={path}')
    fail(f'{head.strip()}: {last}')
  fail(e)


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
    _flag_error(e)
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    _config_error(e, argv)
  except (ImportError, SyntaxError, OSError) as e:  # a config file that does not load
    fail(f'config file did not load: {type(e).__name__}: {e}')
  return []  # unreachable: fail() exits


def define_config_file(name: str, default: str | None = None,
                       help_string: str = 'Path to a configuration file.', **kwargs):
  """``config_flags.DEFINE_config_file`` (``kwargs``: e.g. ``lock_config``), with
  load/override errors in one line."""
  try:
    return config_flags.DEFINE_config_file(name, default, help_string, **kwargs)
  except (AttributeError, KeyError, TypeError, ValueError, OSError) as e:
    if 'Did you mean' not in str(e):   # ml_collections named no field: say which exist
      # (the flag is not defined yet, so explain from the file itself)
      config = _config_file_of(name, default, sys.argv)
      explained = config is not None and _explain_overrides_of(name, config, sys.argv)
      if explained:
        fail(f'bad config override {explained}')
    _config_error(e, sys.argv)


def workdir_binary(fn: Callable[[object, str], dict], summary: Callable[[dict], str], *,
                   config_help: str, config_example: str, workdir_example: str):
  """``main(argv)`` of a binary that runs one resumable stage ``fn(config, workdir)``
  (e.g. ``train.mixing.pretrain``). Defines ``--config`` (a locked config file) and
  ``--workdir`` (adopt this module's key flags for ``--help`` to list them); ``main``
  declares the workdir ``resumable`` (its checkpoints resume the run), refuses missing
  flags and a bad workdir before the work, reports ``fn``'s ValueError and
  FileNotFoundError (a missing corpus or pre-training run) as ``BadInput``, and prints
  ``summary(result)``."""
  config_flag = define_config_file('config', None, config_help, lock_config=True)
  workdir_flag = flags.DEFINE_string('workdir', None, 'Run directory (checkpoints, metrics).')

  def main(argv):
    if workdir_flag.value:
      binary_interrupts.resumable(workdir_flag.value)
    if len(argv) > 1:
      raise BadInput(f'unexpected arguments {argv[1:]}; use --config=... --workdir=...')
    if config_flag.value is None:
      raise BadInput(f'--config is required, e.g. --config={config_example}')
    if not workdir_flag.value:
      raise BadInput(f'--workdir is required (a run directory, e.g. {workdir_example})')
    output_dir(workdir_flag.value, '--workdir')  # before the work
    try:
      result = fn(config_flag.value, workdir_flag.value)
    except (ValueError, FileNotFoundError) as e:
      raise BadInput(str(e)) from None
    print(summary(result))

  return main


def run(main: Callable[[list[str]], object]) -> None:
  """``absl.app.run(main)`` under the contract in the module docstring."""
  quiet_backend_probe()
  # SIGTERM behaves like Ctrl-C, so training loops checkpoint on either. SIGINT is
  # (re)armed too: a shell starts background jobs with SIGINT ignored, and then
  # `kill -INT` would neither stop nor checkpoint a run.
  signal.signal(signal.SIGTERM, binary_interrupts.raise_interrupt)
  signal.signal(signal.SIGINT, binary_interrupts.raise_interrupt)
  if not hasattr(sys.unraisablehook, 'wrapped'):
    sys.unraisablehook = binary_interrupts.redelivering_hook(sys.unraisablehook)

  def stop(name: str, line: Callable[[], str]):
    # From here on a further signal must not interrupt the exit (nor print a traceback).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(line(), file=sys.stderr, flush=True)
    sys.exit(binary_interrupts.exit_status(name))

  def wrapped(argv):
    try:
      try:
        out = main(argv)
      except (app.UsageError, BadInput) as e:
        fail(e)
      except SystemExit as e:   # sys.exit('error: ...'): bad input, said in one line
        if isinstance(e.code, str) and e.code.startswith('error: '):
          fail(e.code[len('error: '):])
        raise
      if interrupts.received():   # a swallowed interrupt that was never re-raised
        raise KeyboardInterrupt(interrupts.received())
      return out
    except interrupts.Interrupted as e:
      stop(e.signal_name, lambda: f'interrupted ({e.signal_name}); {e.note}')
    except KeyboardInterrupt as e:
      name = interrupts.received() or str(e) or 'SIGINT'
      stop(name, lambda: binary_interrupts.interrupt_line(name))

  try:
    app.run(wrapped, flags_parser=_parse_flags)
  except KeyboardInterrupt as e:   # after main, e.g. while absl or JAX shut down
    name = interrupts.received() or str(e) or 'SIGINT'
    stop(name, lambda: binary_interrupts.interrupt_line(name))


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


def host_device_per_core() -> None:
  """One XLA host (CPU) device per core, unless XLA_FLAGS already sets a count. Call it
  before JAX's backend starts (before importing jax)."""
  flags_ = os.environ.get('XLA_FLAGS', '')
  if 'xla_force_host_platform_device_count' not in flags_:
    os.environ['XLA_FLAGS'] = (f'{flags_} --xla_force_host_platform_device_count='
                               f'{os.cpu_count() or 1}').strip()


def integer(name: str, raw, low: int) -> int:
  """The value of an integer flag ``--name`` given as text (``raw``): an integer >= ``low``
  written plainly (no float, no spaces inside), or BadInput (one line)."""
  text = str(raw).strip().lstrip('+')
  if not (text.lstrip('-').isdecimal() and str(int(text)) == text and int(text) >= low):
    raise BadInput(f'--{name}={raw}: must be an integer >= {low}.')
  return int(text)


def function_flag(name: str, value):
  """The value of a flag that may name a function as ``module:function`` (e.g.
  ``--config.target=my_targets:bumps``; the module is looked for on sys.path, then in
  the working directory), imported; a value without ':' (a built-in's name) is returned as
  it is. BadInput (one line) for a module that does not import, a missing attribute or one
  that is not callable."""
  if not isinstance(value, str) or ':' not in value:
    return value
  module_name, _, attr = value.partition(':')
  if not module_name or not attr:
    raise BadInput(f'--{name}={value}: expected a built-in name or module:function.')
  import importlib  # pylint: disable=import-outside-toplevel
  cwd = os.getcwd()
  added = cwd not in sys.path
  if added:
    sys.path.append(cwd)
  try:
    module = importlib.import_module(module_name)
  except ModuleNotFoundError as e:
    raise BadInput(f'--{name}={value}: no module named {e.name!r} (looked on sys.path and '
                   f'in {cwd}).') from None
  except Exception as e:  # pylint: disable=broad-except -- the module's own error, one line
    first = str(e).splitlines()[0] if str(e) else ''
    raise BadInput(f'--{name}={value}: importing {module_name} failed: '
                   f'{type(e).__name__}: {first}') from None
  finally:
    if added:
      sys.path.remove(cwd)
  fn = module
  for part in attr.split('.'):
    if not hasattr(fn, part):
      raise BadInput(f'--{name}={value}: module {module_name} has no {attr!r}.')
    fn = getattr(fn, part)
  if not callable(fn):
    raise BadInput(f'--{name}={value}: {attr} is a {type(fn).__name__}, not a function.')
  return fn


def exit_now(status: int) -> None:
  """Ends a finished binary with ``status`` once its output is flushed, skipping the
  interpreter's teardown of JAX (its CPU client and thread pools: 0.4 s on 2 idle cores,
  1 s at load 9). Only for a run whose files are all written and closed: the compilation
  cache writes its entries when a program is compiled."""
  sys.stdout.flush()
  sys.stderr.flush()
  logging.shutdown()
  os._exit(status)  # pylint: disable=protected-access


def int_list(name: str, values, low: int) -> list[int]:
  """The integers of a comma-separated list flag ``--name``, each >= ``low``, or BadInput
  (one line)."""
  try:
    out = [int(v) for v in values]
  except ValueError:
    out = None
  if not out or any(v < low for v in out):
    raise BadInput(f'--{name}={",".join(values)}: expected integers >= {low}, '
                   'comma separated.')
  return out


def define_output_dir(default: str | None, help_string: str):
  """The ``--output_dir`` flag of a binary: the directory its files go into, under fixed
  names."""
  return flags.DEFINE_string('output_dir', default, help_string)


def define_overwrite():
  """The ``--overwrite`` flag of a binary that writes files (see ``output_file``); defined
  once per process, so modules that each declare it can be imported together."""
  if 'overwrite' in flags.FLAGS:
    return flags.FlagHolder(flags.FLAGS, flags.FLAGS['overwrite'])
  return flags.DEFINE_bool('overwrite', False, 'Replace output files that already exist '
                           '(without it they are refused before the work starts).')


def _may_replace(flag: str) -> bool:
  """Whether outputs named by ``flag`` may replace existing files without being asked:
  with ``--overwrite``, or when the user did not give ``flag`` (its default path is the
  binary's own run directory, e.g. under runs/, which its earlier runs wrote)."""
  if 'overwrite' in flags.FLAGS and flags.FLAGS['overwrite'].value:
    return True
  name = flag.lstrip('-').split('=')[0]
  return name in flags.FLAGS and not flags.FLAGS[name].present


#: The checked-in record: reports a binary rebuilds are refused there without --overwrite.
RECORD_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          'results')


def in_record(path: str) -> bool:
  """Whether ``path`` lies in the checked-in record (results/ of this checkout)."""
  return os.path.commonpath([os.path.realpath(path), os.path.realpath(RECORD_DIR)]) == (
      os.path.realpath(RECORD_DIR))


def output_dir(path: str, flag: str = '--output_dir', writes: Iterable[str] = (),
               overwrite: bool | None = None, rebuilds: bool = False) -> str:
  """Creates ``path`` if needed and checks that it is a writable directory.

  ``writes``: the names of the files the binary will write into it; if one of them
  exists already, it is refused unless ``overwrite`` (default: ``--overwrite`` was given,
  or ``flag`` was not: see ``_may_replace``). ``rebuilds``: the files are a report the
  binary rebuilds from its own workdir whenever it runs (so the command that resumes it
  must not be refused): they are checked only inside the record (``in_record``).
  Raises BadInput (one line, naming ``flag``) when it is empty, a file, or cannot be
  created or written. Call it before the work starts.
  """
  if not path:
    raise BadInput(f'{flag} is empty; give a directory to write into.')
  if os.path.exists(path) and not os.path.isdir(path):
    raise BadInput(f'{flag}={path} is a file; give a directory.')
  overwrite = _may_replace(flag) if overwrite is None else overwrite
  if rebuilds and not in_record(path):
    overwrite = True
  there = outputs.existing(path, writes) if os.path.isdir(path) else []
  if there and not overwrite:
    more = f' (and {len(there) - 1} more)' if len(there) > 1 else ''
    raise BadInput(f'{flag}={path} already holds {os.path.basename(there[0])}{more}; pass '
                   '--overwrite to replace, or choose another directory.')
  missing, parent = [], os.path.abspath(path)
  while not os.path.exists(parent):   # the directories makedirs will create
    missing.append(parent)
    parent = os.path.dirname(parent)
  try:
    os.makedirs(path, exist_ok=True)
    _CREATED_DIRS.extend(reversed(missing))
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


def output_file(path: str, flag: str, overwrite: bool | None = None,
                append: bool = False) -> str:
  """Checks that ``path`` can be written (its directory made and writable) before the work.

  An existing file is refused unless ``overwrite`` (default: ``--overwrite`` was given, or
  ``flag`` was not, see ``_may_replace``) or ``append`` (a log the binary appends to); a
  directory is refused.
  """
  if not path:
    raise BadInput(f'{flag} is empty; give a file path.')
  if os.path.isdir(path):
    raise BadInput(f'{flag}={path} is a directory; give a file path.')
  overwrite = _may_replace(flag) if overwrite is None else overwrite
  try:
    outputs.check_new(path, overwrite=overwrite or append, what=f'{flag}={path}',
                      how='pass --overwrite')
  except OSError as e:
    raise BadInput(str(e)) from None
  output_dir(os.path.dirname(os.path.abspath(path)), flag=f'the directory of {flag}')
  return path


def define_executor_flags() -> None:
  """A certifying binary's --dask_scheduler and --state_dir (``executor_from_flags``
  decodes them)."""
  flags.DEFINE_string('dask_scheduler', '', 'run the certification chunks on this Dask '
                      'scheduler (e.g. tcp://host:8786) instead of local processes; see '
                      'docs/performance.md')
  flags.DEFINE_string('state_dir', '', 'keep each finished certification chunk in this '
                      'directory; the same command run again resumes from it')


def executor_from_flags(workers: int | None, dask_scheduler: str, state_dir: str,
                        resume_flags: tuple = ()) -> executor_lib.Workers:
  """A binary's --workers / --dask_scheduler / --state_dir decoded once, at its edge.

  The scheduler is connected here (one ValueError line if it does not answer); the state
  directory is created and declared to ``binary_interrupts.resumable`` (with
  ``resume_flags`` added to this process's command, e.g. ('--overwrite',)), so an
  interrupted run prints the command that resumes it.
  """
  executor = executor_lib.dask_executor(dask_scheduler) if dask_scheduler else None
  if state_dir:
    output_dir(state_dir, '--state_dir')
    binary_interrupts.resumable(state_dir, binary_interrupts.own_command(resume_flags))
  return executor_lib.Workers(None if executor is not None else workers, executor,
                              state_dir or None)
