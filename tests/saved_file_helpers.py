"""Saved-network files edited by hand, for the tests of ``networks.saved_network``: the
archive's members rewritten, its manifest read and written back (with its content hash
redone or not), independently of the module under test."""

import hashlib
import io
import json
import zipfile

import numpy as np


def rewrite(path, edit):
  """The archive at path with edit(files) applied (files: name -> bytes), rewritten."""
  with zipfile.ZipFile(path) as z:
    files = {n: z.read(n) for n in z.namelist()}
  edit(files)
  with zipfile.ZipFile(path, 'w') as z:
    for n, b in files.items():
      z.writestr(n, b)


def npy(arr) -> bytes:
  """``arr`` as the bytes of a .npy member."""
  buf = io.BytesIO()
  np.save(buf, arr)
  return buf.getvalue()


def manifest(files) -> dict:
  return json.loads(np.load(io.BytesIO(files['manifest.npy'])).tobytes().decode())


def set_manifest(files, m: dict, *, rehash: bool = False):
  """Writes ``m`` back as the manifest; ``rehash``: with its content_sha256 recomputed
  (sorted keys, no spaces: the canonical JSON the format hashes), so that only the checks
  behind it can refuse the edit."""
  if rehash:
    body = {k: v for k, v in m.items() if k != 'content_sha256'}
    canonical = json.dumps(body, sort_keys=True, separators=(',', ':')).encode()
    m = dict(m, content_sha256='sha256:' + hashlib.sha256(canonical).hexdigest())
  files['manifest.npy'] = npy(np.frombuffer(json.dumps(m).encode(), np.uint8))
