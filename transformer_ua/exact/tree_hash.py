"""A SHA-256 of nested parameter trees from their exact text, the identity of a resumable
certification's work (``executor``): the same network hashes the same on any machine and
Python (``Fraction`` as p/q, floats by their hex)."""

from __future__ import annotations

import hashlib
from fractions import Fraction

import numpy as np


def tree_sha256(*trees) -> str:
  """A SHA-256 of nested dicts / lists / tuples / arrays of numbers or rationals, from
  their exact text (``Fraction`` as p/q): the same network hashes the same on any
  machine and Python."""
  h = hashlib.sha256()

  def walk(x):
    if isinstance(x, dict):
      h.update(b'{')
      for k in sorted(x, key=str):
        h.update(str(k).encode() + b':')
        walk(x[k])
      h.update(b'}')
    elif isinstance(x, (list, tuple)):
      h.update(b'[')
      for v in x:
        walk(v)
      h.update(b']')
    elif isinstance(x, np.ndarray):
      h.update(f'a{x.shape}'.encode())
      for v in x.ravel():
        walk(v.item() if isinstance(v, np.generic) else v)
    elif isinstance(x, (bool, np.bool_)):
      h.update(b'T,' if x else b'F,')
    elif isinstance(x, (int, np.integer, Fraction)):
      h.update(str(Fraction(x)).encode() + b',')
    elif isinstance(x, (float, np.floating)):
      h.update(float(x).hex().encode() + b',')
    else:
      h.update(repr(x).encode() + b',')

  for t in trees:
    walk(t)
  return h.hexdigest()
