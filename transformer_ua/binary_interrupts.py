"""What a binary does on SIGINT / SIGTERM: one line, exit status 130 / 143, no traceback.

The contract (``cli`` module docstring, "Ctrl-C"), below ``cli.run`` which installs it:

    while the modules load   _exit_at_once: one line, exit at once (nothing written yet);
                             armed when this module is imported by a script in
                             experiments/ or benchmarks/ (``main_is_a_binary``), not in
                             the workers its pools start
    while main runs          raise_interrupt: KeyboardInterrupt, the signal recorded
                             (``interrupts.mark_interrupted``); redelivering_hook raises
                             it again where Python swallowed it (a weakref callback, a
                             finalizer)
    the line                 interrupt_line: the command that resumes (``resumable``:
                             the state a binary declared, when it holds something), or
                             that nothing needs resuming; exit_status: 130 / 143
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from typing import Iterable

from transformer_ua import interrupts

#: Exit status after SIGINT (128 + 2) and SIGTERM (128 + 15), as shells report them.
INTERRUPTED = 130
TERMINATED = 143


#: Resumable state declared by the running binary: [(path, command)] (``resumable``).
_RESUMABLE: list[tuple[str, str]] = []


def own_command(add: Iterable[str] = ()) -> str:
  """This process's command line as a shell command (``python script.py --flags``), with
  the arguments ``add`` appended where it lacks them (e.g. ``('--resume',)``)."""
  argv = list(sys.argv) or ['binary']
  argv += [a for a in add if a not in argv]
  return 'python ' + shlex.join(argv)


def resumable(path: str, command: str | None = None) -> None:
  """Declares that ``path`` (a file, or a directory with files in it) holds state that a
  rerun of ``command`` (default: this process's own command line) resumes from. If the
  binary is interrupted, ``run`` prints that command when ``path`` holds something."""
  _RESUMABLE.append((path, command or own_command()))


def _has_state(path: str) -> bool:
  if os.path.isfile(path):
    return os.path.getsize(path) > 0
  for _, _, files in os.walk(path):
    if any(not f.startswith('.write_probe') for f in files):
      return True
  return False


def interrupt_line(name: str) -> str:
  states = [(p, c) for p, c in _RESUMABLE if _has_state(p)]
  if states:
    path, command = states[-1]
    return f'interrupted ({name}); state kept in {path}; resume with: {command}'
  return f'interrupted ({name}); nothing needs resuming (no resumable state was written)'


def exit_status(name: str) -> int:
  return TERMINATED if name == 'SIGTERM' else INTERRUPTED


def _exit_at_once(signum, frame):  # pylint: disable=unused-argument
  """While a binary's modules load: nothing has been written, so stop right here."""
  name = signal.Signals(signum).name
  try:
    sys.stdout.flush()
  except (OSError, ValueError):
    pass
  print(f'\ninterrupted ({name}) while starting; nothing needs resuming', file=sys.stderr,
        flush=True)
  os._exit(exit_status(name))  # pylint: disable=protected-access


def raise_interrupt(signum, frame):  # pylint: disable=unused-argument
  name = signal.Signals(signum).name
  interrupts.mark_interrupted(name)
  raise KeyboardInterrupt(name)


def redelivering_hook(hook):
  """sys.unraisablehook that re-delivers a KeyboardInterrupt Python had to swallow (it
  was raised inside a weakref callback, a finalizer or a GC callback): a helper thread
  simulates the signal again once the callback has returned, and the handler raises at
  an ordinary bytecode (the hook itself must not block: the signal would land in it)."""
  import _thread  # pylint: disable=import-outside-toplevel
  import threading  # pylint: disable=import-outside-toplevel
  again = threading.Event()

  def redeliver():
    while True:
      again.wait()
      again.clear()
      _thread.interrupt_main(getattr(signal, interrupts.received(), signal.SIGINT))

  threading.Thread(target=redeliver, name='cli-interrupt-redeliver', daemon=True).start()

  def unraisable(info):
    if isinstance(info.exc_value, KeyboardInterrupt) and interrupts.received():
      again.set()
      return
    hook(info)
  unraisable.wrapped = hook
  return unraisable


def main_is_a_binary() -> bool:
  """True in the process of a script in experiments/ or benchmarks/ (not in the workers
  a multiprocessing pool starts from it: those leave interrupts to their parent)."""
  import multiprocessing  # pylint: disable=import-outside-toplevel
  if multiprocessing.parent_process() is not None:
    return False
  main = sys.modules.get('__main__')
  path = getattr(main, '__file__', None) or ''
  return os.path.basename(os.path.dirname(os.path.abspath(path))) in ('experiments',
                                                                     'benchmarks')


def arm_early_interrupts() -> None:
  """Until ``run`` starts: SIGINT / SIGTERM print one line and exit 130 / 143 at once
  (a default Python would print a traceback from whatever module was loading)."""
  import threading  # pylint: disable=import-outside-toplevel
  if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, _exit_at_once)
    signal.signal(signal.SIGTERM, _exit_at_once)


if main_is_a_binary():
  arm_early_interrupts()
