"""The interrupts the library raises and records, below everything that handles them.

A SIGINT / SIGTERM that the library handled (the training loop saved a checkpoint first)
is raised as ``Interrupted``, a KeyboardInterrupt whose ``note`` says what was saved and
the command that resumes. A signal handler that raises a plain KeyboardInterrupt records
the signal's name first (``mark_interrupted``), so that whoever runs the process
(``transformer_ua.cli.run``) can raise it again should Python swallow it (inside a weakref
callback or a finalizer) and can name the signal (``received``).

Imports run one way: ``train.loop`` raises these, ``cli`` catches them.
"""

from __future__ import annotations


class Interrupted(KeyboardInterrupt):
  """A SIGINT / SIGTERM that was handled: ``note`` says what was saved and how to resume.

  Raised by ``transformer_ua.train.loop`` after its checkpoint; ``cli.run`` prints it.
  """

  def __init__(self, signal_name: str, note: str):
    super().__init__(signal_name, note)
    self.signal_name, self.note = signal_name, note

  def __str__(self) -> str:
    return f'{self.signal_name}: {self.note}'


#: The name of the signal that interrupted this process ('' while none has).
_received = {'name': ''}


def mark_interrupted(name: str) -> None:
  """Records that signal ``name`` ('SIGINT' | 'SIGTERM') asked this process to stop: a
  KeyboardInterrupt raised for it that Python swallows is then raised again (see
  ``cli.run``). Every handler that raises KeyboardInterrupt for a signal calls it."""
  _received['name'] = _received['name'] or name


def received() -> str:
  """The name of the first signal ``mark_interrupted`` recorded ('' while none)."""
  return _received['name']
