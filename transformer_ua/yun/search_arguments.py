"""The checks at ``yun.approximate``'s boundary: each argument refused in one line that
names what was wrong and what is allowed, and the plain texts its messages use (no NumPy
reprs, no 4300-digit integers, p exactly)."""

from __future__ import annotations

import concurrent.futures as cf
import math
import numbers
from fractions import Fraction

from transformer_ua import executor as executor_lib
from transformer_ua.targets import distances



def show(v) -> str:
  """A value for a message: plain numbers (no NumPy reprs, no 4300-digit strings)."""
  if isinstance(v, bool) or v is None or isinstance(v, str):
    return repr(v)
  if isinstance(v, numbers.Integral):
    v = int(v)
    return str(v) if abs(v) < 10 ** 18 else f'~10^{math.log10(abs(v)):.0f}'
  if isinstance(v, numbers.Real):
    return repr(float(v))
  return f'a {type(v).__name__}'


def p_text(p: float) -> str:
  """p exactly (2 for 2.0; 1.0000001 stays 1.0000001)."""
  return str(int(p)) if float(p).is_integer() and abs(p) < 2 ** 53 else repr(float(p))


def count(x) -> str:
  """An int with thousands separators, or ~10^k past 10^15."""
  x = int(x)
  return f'{x:,}' if x < 10 ** 15 else f'~10^{math.log10(x):.1f}'


def check_int(name: str, value, low: int, high: int | None, what: str) -> int:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low \
      or (high is not None and value > high):
    allowed = f'an integer in [{low}, {high}]' if high is not None else f'an integer >= {low}'
    raise ValueError(f'{name}={show(value)}; it must be {allowed} ({what}).')
  return int(value)


def check_positive(name: str, value, what: str) -> float:
  if isinstance(value, bool) or not isinstance(value, (numbers.Real, Fraction)) \
      or not math.isfinite(float(value)) or value <= 0:
    raise ValueError(f'{name}={show(value)}; it must be a positive finite number ({what}).')
  return float(value)


def check_args(epsilon, d, n, p, workers, max_minutes, max_layers, positional, clamp,
               progress, *, max_d: int, max_n: int):
  """The checked (epsilon, d, n, p, workers, max_minutes, max_layers) of one call."""
  d = check_int('d', d, 1, max_d, 'the token dimension')
  n = check_int('n', n, 2, max_n, 'the number of tokens')
  epsilon = check_positive('epsilon', epsilon, 'the d_p(f, g) to certify')
  if isinstance(p, str):
    raise ValueError(f'p={p!r}; it must be a finite number >= 1 (the exponent of d_p).')
  p = distances.check_p(float(p) if isinstance(p, numbers.Real)
                        and not isinstance(p, bool) else p)
  if workers is not None and not isinstance(workers, (executor_lib.Workers, cf.Executor)):
    workers = check_int('workers', workers, 1, 1024, 'processes for the cube interiors')
  workers = executor_lib.as_workers(workers)
  max_minutes = check_positive('max_minutes', max_minutes, 'the time budget of the call')
  max_layers = check_int('max_layers', max_layers, 1, None, 'the deepest network built')
  for name, v in (('positional', positional), ('clamp', clamp)):
    if not isinstance(v, bool):
      raise ValueError(f'{name}={show(v)}; it must be True or False.')
  if not (progress is None or isinstance(progress, bool) or callable(progress)):
    raise ValueError(f'progress={show(progress)}; it must be None (lines on stderr for '
                     'long attempts only), True, False or a callable taking one line.')
  return epsilon, d, n, p, workers, max_minutes, max_layers
