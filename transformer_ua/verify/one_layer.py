r"""Certified whole-grid check that one softmax attention layer is a contextual mapping.

For the construction of ``yun.single_attention.one_layer`` on the grid (d, n, N), M = N^d cells:

    id(S, t) = O + t + mean_{beta_t}(S) / (2 (M - 1)),  beta_t = lam (t + M - 1),
    mean_beta(S) = sum_k m_k e^{beta m_k} / sum_k e^{beta m_k}

for every context S (a multiset of n cells, repeated cells included) and every token t
of it. The certificate (no sampling):

  1. arb enclosures [lo, hi] of every mean_{beta_t}(S) (``yun.single_attention.one_layer_ids.mean_enclosures``,
     bounds rounded outward to integers over 2^bits), sorted per token t by lo;
  2. within one t, consecutive enclosures are disjoint with lo_{i+1} - hi_i >= gamma_req
     (default: the proved gamma_mean at the planned lam); sorted by lo, this makes every
     pair of the token's enclosures that far apart. A consecutive pair below gamma_req
     is a *violation* (an overlap is a violation whatever gamma_req);
  3. across tokens, the id windows [t + c lo_min(t), t + c hi_max(t)] (c = 1/(2(M-1)))
     are disjoint; the certified minimum id gap is the smaller of c times the smallest
     within-token gap and the smallest cross-token gap (exact rationals).

Independent checks (not part of the certificate): mpmath evaluates the means of a
sample of rows (and of the closest pair) at a higher precision and must fall inside the
enclosures; a float64 brute force computes every mean, sorts each token's means, and
must agree with the certified order on every consecutive pair whose certified gap is
above float64's error bound (pairs below it are counted, not judged).
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import mpmath
import numpy as np

from transformer_ua.yun.grid import Grid
from transformer_ua.yun.single_attention import one_layer_ids

#: float64 error bound of a computed mean, in units of M eps (n terms, exp, quotient).
FLOAT_ERROR_UNITS = 16
#: Extra mpmath bits beyond the enclosures' precision.
MPMATH_EXTRA_BITS = 64


def parse_lam(text: str):
  """``verify_one_layer``'s ``lam`` from text: '' -> None (the plan's), 'search', or a
  rational >= 0 written as a fraction ('1/1024') or a power of two ('2^-10').

  Raises:
    ValueError: anything else (naming ``lam=<text>``).
  """
  raw = text.strip()
  if raw in ('', 'search'):
    return raw or None
  try:
    lam = Fraction(2) ** int(raw[2:]) if raw.startswith('2^') else Fraction(raw)
  except (ValueError, ZeroDivisionError):
    lam = None
  if lam is None or lam < 0:
    raise ValueError(f'lam={text}: must be a rational >= 0 (e.g. 1/1024 or 2^-10), '
                     "'search', or empty for the planned lam.")
  return lam


def verify_one_layer(grid: Grid, *, lam=None, bits: int | None = None,
                     required_gap=None, samples: int = 64, seed: int = 0,
                     float_check: bool = True) -> dict:
  """Runs the certificate and the independent checks; returns a JSON-able dict.

  Args:
    grid: a ``yun.grid.Grid`` (d, n, N); every context of it (a multiset of n cells) and
      every token of a context is certified.
    lam: softmax scale (default: the plan's; 0 allowed: the plain mean, which collides;
      'search': ``yun.single_attention.one_layer_ids.search_lam``'s, certified but past the proved range).
    bits: enclosure precision (default: the plan's).
    required_gap: gamma_req on the means (default: the proved gamma_mean at the plan's
      lam).
    samples: rows checked by mpmath (plus the closest pair).
  Raises:
    ValueError: bad configuration, or one past ``yun.single_attention.one_layer_ids.plan``.
  """
  t_start = time.perf_counter()
  d, n, resolution = grid.d, grid.n, grid.N
  p = one_layer_ids.plan(grid)
  M = p.M
  search = None
  if isinstance(lam, str):
    if lam != 'search':
      raise ValueError(f"lam={lam!r}; allowed: a rational >= 0, None or 'search'.")
    search = one_layer_ids.search_lam(grid)
    lam = search['lam']
  lam = p.lam if lam is None else Fraction(lam)
  if lam < 0:
    raise ValueError(f'lam must be >= 0, got {lam}.')
  bits = p.bits if bits is None else int(bits)
  if bits < 16:
    raise ValueError(f'bits={bits}; at least 16.')
  req = p.gamma_mean if required_gap is None else Fraction(required_gap)
  table = one_layer_ids.mean_enclosures(M, n, lam, T=p.T, bits=bits)
  t_check = time.perf_counter()
  s = table.scale
  scale = Fraction(2) ** s
  g = one_layer_ids.gaps(table)
  req_scaled = math.ceil(req * scale)
  gap_list = g['gaps']
  violations = sum(1 for v in gap_list if v < req_scaled)
  overlaps = sum(1 for v in gap_list if v <= 0)
  worst_rows = sorted(range(len(gap_list)), key=lambda i: gap_list[i])[:5]
  # cross-token windows
  c = p.id_scale
  lo_min, hi_max = {}, {}
  for t, a, b in zip(table.tokens.tolist(), table.lo, table.hi):
    lo_min[t] = min(lo_min.get(t, a), a)
    hi_max[t] = max(hi_max.get(t, b), b)
  cross = min(((t + 1 + c * Fraction(lo_min[t + 1]) / scale) - (t + c * Fraction(hi_max[t]) / scale)
               for t in range(M - 1)), default=None)
  within = g['min_gap']
  min_id_gap = min(x for x in (None if within is None else c * within, cross) if x is not None)
  # repeated tokens
  toks, rests = table.tokens, table.rests
  full = np.sort(np.concatenate([toks[:, None], rests], axis=1), axis=1)
  repeated = int(np.sum(np.any(full[:, 1:] == full[:, :-1], axis=1)))
  check_seconds = time.perf_counter() - t_check
  out = {
      'd': d, 'n': n, 'resolution': resolution, 'M': M, 'contexts': one_layer_ids.num_classes(
          grid), 'ids': len(table), 'ids_with_repeated_tokens': repeated,
      'lam': float(lam), 'log2_lam': math.log2(lam) if lam > 0 else None,
      'planned_lam': float(p.lam), 'bits': bits,
      'required_gap_mean': float(req), 'proved_gap_mean': float(p.gamma_mean),
      'certified_min_gap_mean': float(within) if within is not None else None,
      'certified_min_cross_token_gap': float(cross) if cross is not None else None,
      'certified_min_id_gap': float(min_id_gap), 'proved_min_id_gap': float(p.gamma),
      'log2_certified_min_id_gap': (math.log2(min_id_gap) if min_id_gap > 0 else None),
      'violations': violations, 'overlaps': overlaps,
      'closest_pairs': [_pair(table, g['rows'][i], gap_list[i], scale) for i in worst_rows],
      'enclosure_seconds': table.seconds, 'check_seconds': check_seconds,
      'lam_search': None if search is None else {
          'tried_log2_lam_and_gap': search['tried'], 'seconds': search['seconds']},
      'plan': p.as_dict()}
  t_ind = time.perf_counter()
  out['mpmath'] = _mpmath_check(table, p, g, samples, seed)
  if float_check:
    out['float64'] = _float_check(table, p)
  out['independent_seconds'] = time.perf_counter() - t_ind
  out['seconds'] = time.perf_counter() - t_start
  out['all_hold'] = bool(violations == 0 and (cross is None or cross > 0)
                         and out['mpmath']['outside'] == 0
                         and (not float_check or out['float64']['disagreements'] == 0))
  return out


def _pair(table, i, gap, scale) -> dict:
  row = lambda k: sorted([int(table.tokens[k])] + table.rests[k].tolist())  # noqa: E731
  return {'token': int(table.tokens[i]), 'context_a': row(i), 'context_b': row(i + 1),
          'certified_gap_mean': float(Fraction(gap) / scale)}


def _mp_mean(t: int, rest, lam: Fraction, T: int):
  beta = mpmath.mpf(lam.numerator) / lam.denominator * (t + T)
  vals = [t] + [int(v) for v in rest]
  e = [mpmath.exp(beta * v) for v in vals]
  return mpmath.fsum(v * x for v, x in zip(vals, e)) / mpmath.fsum(e)


def _mpmath_check(table, p, g, samples: int, seed: int) -> dict:
  """mpmath means of sampled rows (and the closest pair) inside the enclosures."""
  rng = np.random.default_rng(seed)
  rows = set(rng.choice(len(table), size=min(samples, len(table)), replace=False).tolist())
  if g['argmin'] is not None:
    rows |= {g['argmin'], g['argmin'] + 1}
  outside = []
  with mpmath.workprec(table.bits + MPMATH_EXTRA_BITS):
    for i in sorted(rows):
      v = _mp_mean(int(table.tokens[i]), table.rests[i], table.lam, p.T)
      lo = mpmath.mpf(table.lo[i]) / mpmath.mpf(2) ** table.scale
      hi = mpmath.mpf(table.hi[i]) / mpmath.mpf(2) ** table.scale
      if not lo <= v <= hi:
        outside.append(int(i))
    closest = None
    if g['argmin'] is not None:
      i = g['argmin']
      a = _mp_mean(int(table.tokens[i]), table.rests[i], table.lam, p.T)
      b = _mp_mean(int(table.tokens[i + 1]), table.rests[i + 1], table.lam, p.T)
      closest = {'mpmath_difference': float(b - a),
                 'certified_lower_bound': float(g['min_gap']),
                 'consistent': bool(b - a >= mpmath.mpf(g['min_gap'].numerator)
                                    / g['min_gap'].denominator)}
  return {'rows': len(rows), 'outside': len(outside), 'outside_rows': outside[:10],
          'precision_bits': table.bits + MPMATH_EXTRA_BITS, 'closest_pair': closest}


def _float_check(table, p) -> dict:
  """float64 brute force: every mean, sorted per token; compared with the certified order
  on consecutive pairs whose certified gap exceeds the float64 error bound."""
  M, n, T, lam = p.M, p.n, p.T, float(table.lam)
  tol = FLOAT_ERROR_UNITS * n * M * np.finfo(np.float64).eps
  scale = 2.0 ** table.scale
  vals = np.concatenate([table.tokens[:, None], table.rests], axis=1).astype(np.float64)
  beta = lam * (table.tokens.astype(np.float64) + T)
  e = np.exp(beta[:, None] * vals)
  means = np.sum(vals * e, axis=1) / np.sum(e, axis=1)
  checked = disagree = unresolved = 0
  for i in range(len(table) - 1):
    if table.tokens[i] != table.tokens[i + 1]:
      continue
    if (table.lo[i + 1] - table.hi[i]) / scale > tol:
      checked += 1
      disagree += int(not means[i] < means[i + 1])
    else:
      unresolved += 1
  # the float64 sort itself, per token: same permutation as the certified one where resolved
  same_sort = 0
  for t in range(M):
    idx = np.flatnonzero(table.tokens == t)
    same_sort += int(np.array_equal(np.argsort(means[idx], kind='stable'), np.arange(len(idx))))
  return {'pairs_checked': checked, 'disagreements': disagree,
          'pairs_below_float64_resolution': unresolved, 'error_bound': tol,
          'tokens_whose_float64_sort_equals_certified_order': same_sort, 'tokens': M}
