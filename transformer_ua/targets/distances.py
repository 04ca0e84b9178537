"""The distance d_p of Yun et al. Section 3, estimated with confidence intervals.

    d_p(f1, f2) = ( integral_{[0,1]^{d x n}} ||f1(X) - f2(X)||_p^p dX )^{1/p},  1 <= p < inf,

with the entry-wise l^p norm. The domain is the unit cube (volume 1): the support of
f_bar and g_bar in Theorem 2 and the compact domain of Theorem 3.

Monte Carlo: ``e_s = ||f1(X_s) - f2(X_s)||_p^p`` for X_s uniform; the mean ``m`` has the
CLT interval ``m +- z sd / sqrt(S)``; since t -> t^{1/p} is increasing, the interval
for d_p is the interval for m mapped through it (lower end clipped at 0).
"""

from __future__ import annotations

import dataclasses
import fractions
import itertools
import math
from typing import Callable, Mapping, Sequence

import numpy as np
from transformer_ua.targets import functions as targets_lib

#: Two-sided normal quantiles for the supported confidence levels.
_Z = {0.90: 1.6448536269514722, 0.95: 1.959963984540054, 0.99: 2.5758293035489004}


def check_p(p, *, allow_inf: bool = False) -> float:
  """Validates the exponent p of d_p: 1 <= p < inf, and with ``allow_inf`` also p = inf
  (math.inf or 'inf': the sup norm, for certificates that bound it)."""
  if allow_inf and (p == math.inf or (isinstance(p, str) and p.strip().lower() == 'inf')):
    return math.inf
  if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p < 1:
    if allow_inf:
      raise ValueError(f'p={p!r}; d_p needs 1 <= p < inf, or p = inf (the sup norm).')
    raise ValueError(f'p must be a finite number >= 1 (d_p is defined for 1 <= p < inf), '
                     f'got {p!r}.')
  return float(p)


@dataclasses.dataclass(frozen=True)
class DpEstimate:
  """A Monte Carlo estimate of d_p with its confidence interval."""

  p: float
  value: float
  ci_low: float
  ci_high: float
  samples: int
  confidence: float

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)

  def __str__(self) -> str:
    return f'{self.value:.4g} [{self.ci_low:.4g}, {self.ci_high:.4g}]'


def _estimate(sum_e, sum_e2, count, p, confidence) -> DpEstimate:
  mean = sum_e / count
  var = max(sum_e2 / count - mean**2, 0.0) * count / max(count - 1, 1)
  half = _Z[confidence] * math.sqrt(var / count)
  lo, hi = max(mean - half, 0.0), mean + half
  return DpEstimate(p, mean**(1 / p), lo**(1 / p), hi**(1 / p), count, confidence)


def dp_distances(functions: Mapping[str, Callable], pairs: Sequence[tuple[str, str]], *,
                 d: int, n: int, p: float, samples: int, seed: int = 0,
                 batch: int = 16384, confidence: float = 0.95,
                 sampler: Callable | None = None) -> dict:
  """Estimates d_p for several pairs on shared uniform samples.

  Every function is evaluated once per sample, so f, f_bar, g_bar and g can be compared
  pairwise at the cost of one evaluation each.

  Args:
    functions: name -> callable ``[batch, n, d] -> [batch, n, d]``.
    pairs: the (name, name) pairs to compare.
    d, n: shapes. p: exponent >= 1. samples: Monte Carlo sample count.
    sampler: optional ``(rng, batch) -> X`` replacing the uniform sampler (must sample
      the uniform distribution on the unit cube for the estimate to mean d_p).
  Returns:
    dict ``'a|b' -> DpEstimate``.
  """
  p = check_p(p)
  if confidence not in _Z:
    raise ValueError(f'confidence must be one of {sorted(_Z)}, got {confidence!r}.')
  if not isinstance(samples, (int, np.integer)) or samples < 2:
    raise ValueError(f'samples must be an integer >= 2, got {samples!r}.')
  for a, b in pairs:
    for name in (a, b):
      if name not in functions:
        raise ValueError(f'unknown function {name!r} in pair {(a, b)}; '
                         f'have {sorted(functions)}.')
  rng = np.random.default_rng(seed)
  acc = {pair: [0.0, 0.0] for pair in pairs}
  done = 0
  while done < samples:
    b = min(batch, samples - done)
    x = sampler(rng, b) if sampler else rng.random((b, n, d))
    outs = {name: targets_lib.check_output(name, functions[name](x), (b, n, d))
            for name in {nm for pair in pairs for nm in pair}}
    for pair in pairs:
      e = np.sum(np.abs(outs[pair[0]] - outs[pair[1]])**p, axis=(1, 2))
      acc[pair][0] += float(e.sum())
      acc[pair][1] += float((e**2).sum())
    done += b
  return {f'{a}|{b}': _estimate(s, s2, samples, p, confidence)
          for (a, b), (s, s2) in acc.items()}
