r"""The executor's resumable state: the state directory, its identity, its signed chunks.

A resumable map (``executor.map_spans`` with ``Workers(state_dir=...)`` and an
``identity``) keeps ``state_dir/certification_k/``:

    identity.json                        what is computed (the caller's identity, count,
                                         code_version, work_sha256)
    chunk_<start>_<stop>.json            {identity, span, result, mac}
    mac = HMAC-SHA256(key, json(identity, span, result), sorted keys, no spaces)

``code_version`` is the package version and the SHA-256 of the source of the modules that
define the chunk's functions; ``work_sha256`` the ``tree_sha256`` of what the shipment
builds (its builder's name and arguments). A stored identity that differs from this run's
is refused in one line, naming the plain keys that differ (the two hashes only where no
plain key does).

Every chunk file is signed: an HMAC-SHA256 (``hmac``) of its identity, span and result
under a key that lives outside the state directory (``state_key_path``: the file named by
``$TRANSFORMER_UA_STATE_KEY``, else ~/.cache/transformer_ua/state_key, 32 random bytes made
on first use, mode 0600). A chunk whose MAC does not verify (edited, unsigned, or written
under another key) is refused in one line, so a resumed state cannot lower a total
unnoticed by whoever cannot read the key; the executor's re-run sample (``executor.recheck``)
still runs.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import os
import pickle
import sys

from transformer_ua.exact import tree_hash

#: Identity keys that summarize others (named only when no plain key differs).
_DERIVED = ('code_version', 'work_sha256')


def code_version(*functions) -> str:
  """The package version and the SHA-256 (16 hex) of the sources of the modules that
  define ``functions``: a state written by other code is refused."""
  from transformer_ua import __version__  # pylint: disable=import-outside-toplevel
  h = hashlib.sha256()
  for fn in functions:
    module = sys.modules.get(getattr(fn, '__module__', ''), None)
    try:
      h.update(inspect.getsource(module).encode() if module is not None else b'?')
    except (OSError, TypeError, ValueError):
      h.update(repr(fn).encode())
  return f'{__version__} {h.hexdigest()[:16]}'


def work_sha256(shipment: 'Shipment') -> str:
  """``tree_sha256`` of what the shipment builds: its builder's name and its arguments
  (machine-independent, unlike the pickled bytes)."""
  build, args = pickle.loads(shipment.blob)
  return tree_hash.tree_sha256(f'{build.__module__}.{build.__qualname__}', list(args))


class State:
  """``directory``/identity.json and one chunk_<start>_<stop>.json per finished span."""

  def __init__(self, directory: str, identity: dict):
    self.directory, self.identity = directory, json.loads(json.dumps(identity))
    os.makedirs(directory, exist_ok=True)
    self._key = _state_key(directory)
    path = os.path.join(directory, 'identity.json')
    if os.path.exists(path):
      with open(path, encoding='utf-8') as f:
        self._refuse_unless_same(json.load(f), path)
    else:
      self._write(path, self.identity)

  def _refuse_unless_same(self, stored: dict, path: str) -> None:
    keys = sorted(set(stored) | set(self.identity), key=str)
    diff = [k for k in keys if stored.get(k) != self.identity.get(k)]
    plain = [k for k in diff if k not in _DERIVED]
    diff = plain or diff      # the hashes of code and work follow from the plain keys
    if diff:
      said = '; '.join(f'{k}: stored {_short(stored.get(k))}, this run {_short(self.identity.get(k))}'
                       for k in diff)
      raise ValueError(f'{path} belongs to another certification ({said}); rerun the '
                       'command that wrote it, or give an empty state directory.')

  @staticmethod
  def _write(path: str, obj) -> None:
    tmp = f'{path}.tmp{os.getpid()}'
    with open(tmp, 'w', encoding='utf-8') as f:
      json.dump(obj, f)
    os.replace(tmp, path)

  def load(self) -> dict:
    """{(start, stop): result} of the chunks kept."""
    done = {}
    for name in sorted(os.listdir(self.directory)):
      if not (name.startswith('chunk_') and name.endswith('.json')):
        continue
      path = os.path.join(self.directory, name)
      with open(path, encoding='utf-8') as f:
        rec = json.load(f)
      mac = rec.pop('mac', None) if isinstance(rec, dict) else None
      if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(self._key, rec)):
        raise ValueError(f'{path} does not carry a valid signature under the state key '
                         f'{state_key_path()} (edited, unsigned, or written under another '
                         'key); it is not trusted: give an empty state directory.')
      self._refuse_unless_same(rec.get('identity', {}), path)
      done[tuple(rec['span'])] = rec['result']
    return done

  def keep(self, span, result) -> None:
    s, e = span
    rec = json.loads(json.dumps({'identity': self.identity, 'span': [s, e], 'result': result}))
    rec['mac'] = _mac(self._key, rec)
    self._write(os.path.join(self.directory, f'chunk_{s:012d}_{e:012d}.json'), rec)


#: The environment variable that names the state key's file (module doc).
STATE_KEY_ENV = 'TRANSFORMER_UA_STATE_KEY'


_DEFAULT_STATE_KEY = os.path.join('~', '.cache', 'transformer_ua', 'state_key')


def state_key_path() -> str:
  """The file of the key that signs state chunks (module doc)."""
  return os.path.abspath(os.path.expanduser(os.environ.get(STATE_KEY_ENV)
                                            or _DEFAULT_STATE_KEY))


def _state_key(directory: str) -> bytes:
  """The signing key, made on first use; ValueError (one line) if it sits in the state
  directory that holds ``directory`` (its certification_k)."""
  path = state_key_path()
  where = os.path.dirname(os.path.abspath(directory))     # state_dir, above certification_k
  if os.path.commonpath([path, where]) == where:
    raise ValueError(f'the state key {path} lies inside the state directory {where}: a '
                     f'key there signs nothing; set ${STATE_KEY_ENV} to a file outside it.')
  if not os.path.exists(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
      fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
      with os.fdopen(fd, 'wb') as f:
        f.write(os.urandom(32))
    except FileExistsError:
      pass                              # another process made it first
  with open(path, 'rb') as f:
    key = f.read()
  if len(key) < 16:
    raise ValueError(f'the state key {path} holds {len(key)} bytes; it needs at least 16 '
                     '(delete it: a new one is made).')
  return key


def _mac(key: bytes, record: dict) -> str:
  text = json.dumps(record, sort_keys=True, separators=(',', ':'))
  return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def _short(v) -> str:
  s = str(v)
  return s[:12] + '...' if len(s) > 16 and all(c in '0123456789abcdef' for c in s) else s
