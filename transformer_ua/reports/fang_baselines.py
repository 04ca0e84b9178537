"""Fang et al. 2022, Section 5 against tuned baselines: the record and its figures.

``write(bconfig, workdir, output_dir, prov)`` collects the runs under ``workdir``
(``fang.baselines.collect``) and writes, atomically, ``fang_baselines.json`` and
``fang_baselines.md`` (and the figures of ``figures``) in ``output_dir``.
"""

from __future__ import annotations

import json
import math
import os

from transformer_ua.fang import baselines


def _atomic_json(obj, path):
  with open(path + '.tmp', 'w') as f:
    json.dump(obj, f, indent=1, default=_json_default)
  os.replace(path + '.tmp', path)


def _json_default(o):
  if hasattr(o, 'tolist'):
    return o.tolist()
  return str(o)


def _finite(obj):
  """inf -> 'inf' so that the JSON stays standard."""
  if isinstance(obj, float) and not math.isfinite(obj):
    return 'inf' if obj > 0 else ('-inf' if obj < 0 else 'nan')
  if isinstance(obj, dict):
    return {k: _finite(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_finite(v) for v in obj]
  return obj


def write(bconfig, workdir, output_dir, prov) -> dict:
  record = baselines.collect(bconfig, workdir)
  record = {'report_provenance': prov, **record}
  _atomic_json(_finite(record), os.path.join(output_dir, 'fang_baselines.json'))
  try:
    from transformer_ua.reports import fang_baselines_md
    md = fang_baselines_md.render(record, output_dir)
  except ImportError:
    md = '# Fang Section 5 baselines\n\n(report renderer missing)\n'
  path = os.path.join(output_dir, 'fang_baselines.md')
  with open(path + '.tmp', 'w') as f:
    f.write(md)
  os.replace(path + '.tmp', path)
  return record
