"""Chunk functions for tests/test_executor.py (module level: spawned workers import them)."""

import os
import time

_BUILDS = {'count': 0}


def build_offset(offset):
  """The shipment: counts how many times this process built it."""
  _BUILDS['count'] += 1
  return {'offset': offset, 'build': _BUILDS['count']}


def sum_of_squares(obj, start, stop):
  """sum_{i=start}^{stop-1} (i + offset)^2, with the worker's pid and its build count."""
  return {'sum': sum((i + obj['offset']) ** 2 for i in range(start, stop)),
          'pid': os.getpid(), 'builds': obj['build']}


def spin(obj, start, stop):
  """Writes this process's pid into obj (a directory), then burns CPU for 120 s."""
  with open(os.path.join(obj, f'pid_{os.getpid()}'), 'w', encoding='utf-8') as f:
    f.write(str(os.getpid()))
  end = time.time() + 120
  x = 0
  while time.time() < end:
    x += 1
  return x


def identity(obj):
  return obj
