r"""Exact JSON: every number of a certificate written so that it reads back equal, not close.

    bool, None, str, int   as JSON's own
    float                  {'float': repr(x)}          (repr round-trips every float64)
    Fraction               {'fraction': 'p/q'}          (any size: 94-bit rationals included)
    ndarray                {'array': [each entry encoded], 'shape': [...]}
    dict                   {'dict': [[key, value], ...]} (keys of any encodable type)
    list, tuple            [each entry encoded]
    anything else          {'repr': repr(x)}             (read back as that text)

``canonical`` gives the bytes a manifest's sha256 is taken over (sorted keys, no spaces).
Used by ``saved_network`` for its manifest.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np


def encode(v):
  """JSON with every number exact: floats {'float': repr}, Fractions {'fraction': 'p/q'},
  arrays {'array': nested, 'shape'}, tuples as lists."""
  if isinstance(v, bool) or v is None or isinstance(v, str):
    return v
  if isinstance(v, (int, np.integer)):
    return int(v)
  if isinstance(v, (float, np.floating)):
    return {'float': repr(float(v))}
  if isinstance(v, Fraction):
    return {'fraction': str(v)}
  if isinstance(v, np.ndarray):
    return {'array': [encode(x) for x in v.reshape(-1).tolist()], 'shape': list(v.shape)}
  if isinstance(v, dict):
    return {'dict': [[encode(k), encode(x)] for k, x in v.items()]}
  if isinstance(v, (list, tuple)):
    return [encode(x) for x in v]
  return {'repr': repr(v)}


def decode(v):
  """The value ``encode`` wrote (arrays as object arrays of exact numbers; tuples, and
  lists, as lists; dict keys that were tuples as tuples)."""
  if isinstance(v, list):
    return [decode(x) for x in v]
  if not isinstance(v, dict):
    return v
  if 'float' in v:
    return float(v['float'])
  if 'fraction' in v:
    return Fraction(v['fraction'])
  if 'array' in v:
    return np.asarray([decode(x) for x in v['array']], dtype=object).reshape(v['shape'])
  if 'dict' in v:
    return {(tuple(k) if isinstance(k, list) else k): decode(x)
            for k, x in ((decode(a), b) for a, b in v['dict'])}
  return v['repr']


def canonical(obj) -> bytes:
  """The bytes that are hashed: sorted keys, no spaces."""
  return json.dumps(obj, sort_keys=True, separators=(',', ':')).encode()
