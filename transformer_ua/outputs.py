"""Output files without surprises: refuse what exists, write atomically.

The one policy every binary and API call that writes files follows:

  * An existing file is never replaced unless the caller asks (``overwrite=True``, a
    binary's ``--overwrite``): ``check_new`` refuses it *before* the work starts, with a
    message naming the path and how to replace it.
  * A file is written whole or not at all: ``atomic_open`` writes a temporary file in
    the same directory and renames it over the target only when the block succeeds, so an
    interrupted run leaves either the old file or none, never a truncated one.

  * A run's records outlive its workdir: ``archive`` copies every finished run's record
    files (no checkpoints) to the same relative path under a folder that can be
    committed, skipping what is already there with the same bytes and refusing, before
    copying anything, a different record at the same path (a rerun).
  * A run directory has one writer: two processes may share a sweep's workdir (one core
    each), and ``claim`` lets only one of them train a run at a time.

No dependency beyond the standard library (``transformer_ua.cli`` turns the refusals
into one-line errors with exit status 2)::

    from transformer_ua import outputs
    outputs.check_new(path, overwrite=overwrite)      # before the work
    with outputs.atomic_open(path) as f:              # after it
      f.write(text)
    with outputs.claim(run_dir) as mine:              # run_dir/running.lock: a pid
      if mine:
        train(run_dir)                                # else a live process trains it
"""

from __future__ import annotations

import contextlib
import filecmp
import glob
import json
import os
import shutil
import tempfile
from typing import Iterable, Iterator


class OutputExists(FileExistsError):
  """An output path that already holds a file the caller did not ask to replace."""


def check_new(path: str, *, overwrite: bool = False, what: str | None = None,
              how: str = 'pass overwrite=True') -> str:
  """Returns ``path`` if it can be written as a new file (or may be replaced).

  Raises:
    OutputExists: ``path`` exists and ``overwrite`` is False; the message names ``what``
      (default: the path) and ``how`` to replace it.
    IsADirectoryError: ``path`` is a directory.
  """
  label = what or str(path)
  if os.path.isdir(path):
    raise IsADirectoryError(f'{label} is a directory; give a file path.')
  if os.path.lexists(path) and not overwrite:
    raise OutputExists(f'{label} already exists; {how} to replace it, or choose another '
                       'path.')
  return path


def existing(directory: str, names: Iterable[str]) -> list[str]:
  """The paths among ``directory/name`` that exist (what a run there would replace)."""
  return [os.path.join(directory, n) for n in names
          if os.path.lexists(os.path.join(directory, n))]


@contextlib.contextmanager
def atomic_open(path: str, mode: str = 'w', encoding: str | None = 'utf-8') -> Iterator:
  """Opens a temporary file next to ``path``; on success it replaces ``path`` at once.

  ``mode`` is 'w' (text) or 'wb' (bytes). On an exception (KeyboardInterrupt included)
  the temporary file is removed and ``path`` is left as it was.
  """
  if mode not in ('w', 'wb'):
    raise ValueError(f"atomic_open mode must be 'w' or 'wb', got {mode!r}")
  directory = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.', suffix='.tmp',
                             dir=directory)
  try:
    with os.fdopen(fd, mode, encoding=None if 'b' in mode else encoding) as f:
      yield f
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def atomic_write(path: str, data: str | bytes) -> str:
  """Writes ``data`` (str or bytes) to ``path`` atomically; returns ``path``."""
  with atomic_open(path, 'wb' if isinstance(data, bytes) else 'w') as f:
    f.write(data)
  return path


def atomic_json(path: str, obj, **kwargs) -> str:
  """``json.dump(obj, ..., **kwargs)`` into ``path`` atomically (a trailing newline)."""
  with atomic_open(path) as f:
    json.dump(obj, f, **kwargs)
    f.write('\n')
  return path


def atomic_savefig(fig, path: str, **kwargs) -> str:
  """``fig.savefig`` into ``path`` atomically (format from the suffix, default png)."""
  fmt = kwargs.pop('format', None) or os.path.splitext(path)[1].lstrip('.') or 'png'
  with atomic_open(path, 'wb') as f:
    fig.savefig(f, format=fmt, **kwargs)
  return path


def archive(root: str, dest: str, *, markers: Iterable[str], files: Iterable[str],
            depth: str = '**') -> int:
  """Copies the records of every finished run under ``root`` to ``dest``; returns how
  many runs it copied.

  A finished run is a directory ``root/<depth>/`` holding one of ``markers`` (e.g.
  ``result.json``, or ``diverged.json`` for a run that ended by diverging); ``depth`` is
  a glob (``'*/*'`` for exactly two levels, ``'**'`` for any). Of ``files`` those it holds
  are copied to ``dest/<its path under root>/``, each atomically and the markers last, so
  an interrupted archive never shows a run as finished without its records. A run whose
  files are all archived with the same bytes is skipped.

  Raises:
    OutputExists: a file in ``dest`` differs from the run's file it would archive (a
      rerun of the same run); raised before anything is copied.
  """
  markers, files = tuple(markers), tuple(files)
  runs = sorted({os.path.dirname(p) for m in markers
                 for p in glob.glob(os.path.join(root, depth, m), recursive=True)})
  todo = []
  for src in runs:
    out = os.path.join(dest, os.path.relpath(src, root))
    new = []
    for f in files:
      a, b = os.path.join(src, f), os.path.join(out, f)
      if not os.path.exists(a):
        continue
      if not os.path.exists(b):
        new.append(f)
      elif not filecmp.cmp(a, b, shallow=False):
        raise OutputExists(f'{b} already holds a different record of this run than {a}; '
                           'move it away to archive the new run.')
    if new:
      todo.append((src, out, sorted(new, key=lambda f: f in markers)))
  for src, out, new in todo:
    os.makedirs(out, exist_ok=True)
    for f in new:
      with open(os.path.join(src, f), 'rb') as g, atomic_open(os.path.join(out, f), 'wb') as h:
        shutil.copyfileobj(g, h)
  return len(todo)


#: The file in a run's directory that names the process training it.
LOCK = 'running.lock'


@contextlib.contextmanager
def claim(workdir: str) -> Iterator[bool]:
  """Yields True once this process holds ``workdir/running.lock`` (its pid, created
  atomically), False if a live process holds it. A lock left by a dead process is
  replaced. The lock is removed when the block ends, however it ends."""
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, LOCK)
  mine = False
  for _ in range(2):
    try:
      fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
      try:
        with open(path) as f:
          pid = int(f.read().strip() or 0)
        if pid <= 0:
          raise ValueError('no pid')
        os.kill(pid, 0)
        break                   # alive: another process trains this run
      except (ValueError, ProcessLookupError, PermissionError, OSError):
        with contextlib.suppress(OSError):
          os.remove(path)       # stale lock of a dead process
      continue
    with os.fdopen(fd, 'w') as f:
      f.write(str(os.getpid()))
    mine = True
    break
  try:
    yield mine
  finally:
    if mine:
      with contextlib.suppress(OSError):
        os.remove(path)


#: Seconds between two progress lines when the output is not a terminal (a log file).
PLAIN_PROGRESS_SECONDS = 30.0


class _PlainLines:
  """A stream for tqdm that turns its carriage-return redraws into whole lines."""

  def __init__(self, stream):
    self.stream = stream

  def write(self, text: str) -> None:
    line = text.replace('\r', '').strip()
    if line:
      self.stream.write(line + '\n')

  def flush(self) -> None:
    self.stream.flush()


def progress(iterable=None, *, file=None, mininterval: float = 0.1, **kwargs):
  """A tqdm progress bar (``tqdm.auto``: a widget in a notebook) on a terminal; on a file
  or a pipe, plain lines instead, one every ``PLAIN_PROGRESS_SECONDS`` (or
  ``mininterval`` if longer), and the last one when the bar closes. ``file``: default
  sys.stderr; ``kwargs``: tqdm's (desc, total, initial, disable, bar_format, ...)."""
  import sys  # pylint: disable=import-outside-toplevel
  from tqdm import auto, std  # pylint: disable=import-outside-toplevel
  stream = sys.stderr if file is None else file
  if auto.tqdm is not std.tqdm and file is None:   # a notebook: its own widget
    return auto.tqdm(iterable, mininterval=mininterval, **kwargs)
  isatty = getattr(stream, 'isatty', None)
  if isatty is not None and isatty():
    return std.tqdm(iterable, file=stream, mininterval=mininterval, **kwargs)
  kwargs.pop('dynamic_ncols', None)
  return std.tqdm(iterable, file=_PlainLines(stream),
                  mininterval=max(mininterval, PLAIN_PROGRESS_SECONDS), ncols=100, **kwargs)
