"""Output files without surprises: refuse what exists, write atomically.

The one policy every binary and API call that writes files follows:

  * An existing file is never replaced unless the caller asks (``overwrite=True``, a
    binary's ``--overwrite``): ``check_new`` refuses it *before* the work starts, with a
    message naming the path and how to replace it.
  * A file is written whole or not at all: ``atomic_open`` writes a temporary file in
    the same directory and renames it over the target only when the block succeeds, so an
    interrupted run leaves either the old file or none, never a truncated one.

No dependency beyond the standard library (``transformer_ua.cli`` turns the refusals
into one-line errors with exit status 2)::

    from transformer_ua import outputs
    outputs.check_new(path, overwrite=overwrite)      # before the work
    with outputs.atomic_open(path) as f:              # after it
      f.write(text)
"""

from __future__ import annotations

import contextlib
import json
import os
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
