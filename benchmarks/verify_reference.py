r"""Reference whole-grid verifier of Lemma 8 / Lemma 10: vectorized NumPy, no JAX.

    python benchmarks/verify_reference.py --d=2 --n=6 --resolution=3

What a competent user would write to check Yun et al.'s contextual mapping on every
point of G+_delta, with the same math tricks as the project's verifier, from the
paper's closed forms (not from the project's params or kernels):

* points p in chunks of 2^20, decoded with integer division: column j = digit j of p
  in base V = (N+1)^d, entry i of a column = digit i of it in base N + 1, minus 1
  (-1: the out-of-range value -delta^(-nd)); scaled by S = 2N;
* the rank-one identity on column ids (id_j = u^T x_j): each of the N^d sweep steps is
  a max and a min over the tokens, two threshold compares, a select and an add

      id_j += N^d (max id - min id)   where  S(l - delta/2) < id_j < S(l + delta/2);

  then the global shift q_j = id_j + N^((n+1)d) (max | min | mean, by the sign of id_j);
* the properties on the sorted ids (8.1 adjacent sorted entries differ; 8.3 the
  smallest >= t_l and the largest <= t_r; 8.4 no entry inside), Lemma 10's bounds on
  max_j l~_j, category counts, and permutation equivariance q(L)[P] = q(C) against a
  table of the class representatives C (enumerated with itertools, colex-ranked);
  8.2 and Lemma 10's one-to-one on the representatives (sort, compare neighbours).

Arithmetic: int64 where the project's proven bounds allow it (the sweep needs
``yun.stages.contextual_params.sweep_bound``, the global shift ``contextual_mapping_bound``), Python
ints (``object`` arrays) beyond -- at N=8, d=2, n=4 the sweep runs in int64 and only
the global shift and the checks in Python ints, the same split as the JAX kernel.
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import itertools
import json
import math
import sys
import time

from absl import flags
import numpy as np

from transformer_ua.exact import planner
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import contextual_params

CHUNK = 1 << 20


class Config:
  """Scaled constants of the construction (S = 2N), from the paper's closed forms."""

  def __init__(self, d: int, n: int, N: int):
    self.d, self.n, self.N = d, n, N
    self.S = S = 2 * N
    self.V = (N + 1) ** d
    self.omega = N ** (n * d)
    self.u = np.asarray([N ** i for i in range(d)], dtype=np.int64)
    self.gain = N ** d
    self.final = N ** ((n + 1) * d)
    self.lo = [l * (S // N) - S // (2 * N) for l in range(N ** d)]   # S(l - delta/2)
    self.hi = [l * (S // N) + S // (2 * N) for l in range(N ** d)]   # S(l + delta/2)
    t_l, t_r = contextual_params.interval(Grid(d, n, N))
    l10_lo, l10_hi = contextual_params.lemma10_bounds(Grid(d, n, N))
    self.t_l, self.t_r = int(t_l * S), int(t_r * S)
    self.l10_lo, self.l10_hi = int(l10_lo * S), int(l10_hi * S)
    self.sweep_int64 = (planner.bits_for(contextual_params.sweep_bound(Grid(d, n, N)))
                        <= planner.INT64_BITS)
    self.final_int64 = (planner.bits_for(contextual_params.contextual_mapping_bound(Grid(d, n, N)))
                        <= planner.INT64_BITS)
    self.binom = np.asarray([[math.comb(x, i) for x in range(self.V + n)]
                             for i in range(n + 1)], dtype=object)
    self.binom64 = self.binom.astype(np.int64) if self.binom.max() < 2 ** 62 else None

  def describe(self) -> str:
    return (f"sweep {'int64' if self.sweep_int64 else 'object'}, global shift and checks "
            f"{'int64' if self.final_int64 else 'object (Python ints)'}")


def decode(cfg: Config, idx: np.ndarray):
  """Linear indices [P] -> column indices [P, n] and grid indices [P, n, d]."""
  cols = np.stack([(idx // cfg.V ** j) % cfg.V for j in range(cfg.n)], axis=1)
  k = np.stack([(cols // (cfg.N + 1) ** i) % (cfg.N + 1) for i in range(cfg.d)], axis=2) - 1
  return cols, k


def g_c(cfg: Config, k: np.ndarray):
  """(sweep ids l~ [P, n], q [P, n], z's first row [P, n]) of grid indices k [P, n, d]."""
  S = cfg.S
  sweep_dt = np.int64 if cfg.sweep_int64 else object
  x = np.where(k < 0, -S * cfg.omega, k * (S // cfg.N)).astype(sweep_dt)
  ids0 = (x * cfg.u.astype(sweep_dt)).sum(axis=2)
  ids = ids0.copy()
  for lo, hi in zip(cfg.lo, cfg.hi):
    big, small = ids.max(axis=1), ids.min(axis=1)
    shift = (big - small) * cfg.gain
    ids = np.where((ids > lo) & (ids < hi), ids + shift[:, None], ids)
  big, small = ids.max(axis=1), ids.min(axis=1)
  total = ids.sum(axis=1)
  if np.any((ids == 0) & (total % cfg.n != 0)[:, None]):
    raise ArithmeticError('inexact tie average')
  mean = total // cfg.n
  sel = np.where(ids > 0, big[:, None], np.where(ids < 0, small[:, None], mean[:, None]))
  if not cfg.final_int64:
    ids, sel, ids0, x = (a.astype(object) for a in (ids, sel, ids0, x))
  q = ids + cfg.final * sel
  z0 = x[:, :, 0] + (q - ids0)
  return ids, q, z0


def class_table(cfg: Config):
  """q of every class representative (non-decreasing columns), by colex rank; and the
  8.2 / Lemma 10 one-to-one violation counts on the category-1 representatives."""
  reps = np.asarray(list(itertools.combinations_with_replacement(range(cfg.V), cfg.n)),
                    dtype=np.int64).reshape(-1, cfg.n)
  k = np.stack([(reps // (cfg.N + 1) ** i) % (cfg.N + 1) for i in range(cfg.d)], axis=2) - 1
  lt, q, _ = g_c(cfg, k)
  rank = _rank(cfg, reps)
  table = np.empty_like(q)
  table[rank] = q
  cat1 = ~np.any(k < 0, axis=(1, 2)) & np.all(np.diff(reps, axis=1) != 0, axis=1)
  vals = q[cat1].reshape(-1)
  owners = np.repeat(np.arange(int(cat1.sum())), cfg.n)
  order = np.argsort(vals, kind='stable')
  v82 = int(np.sum((vals[order][1:] == vals[order][:-1]) & (owners[order][1:] != owners[order][:-1])))
  ltn = np.sort(lt[cat1].max(axis=1))
  v10 = int(np.sum(ltn[1:] == ltn[:-1]))
  return table, v82, v10, int(len(reps))


def _rank(cfg: Config, sorted_cols: np.ndarray) -> np.ndarray:
  """Colex rank sum_j C(c_j + j, j + 1) of non-decreasing column tuples [P, n]."""
  b = sorted_cols + np.arange(cfg.n)
  binom = cfg.binom64 if cfg.binom64 is not None else cfg.binom
  return sum(binom[j + 1][b[:, j]] for j in range(cfg.n))


def check_chunk(cfg: Config, idx: np.ndarray, table: np.ndarray) -> dict:
  """Violation and category counts of the points ``idx`` (linear indices)."""
  cols, k = decode(cfg, idx)
  lt, q, z0 = g_c(cfg, k)
  oor = np.any(k < 0, axis=(1, 2))
  perm = np.argsort(cols, axis=1, kind='stable')
  scols = np.take_along_axis(cols, perm, axis=1)
  repeated = np.any(np.diff(scols, axis=1) == 0, axis=1)
  cat1 = ~oor & ~repeated
  qs = np.sort(q, axis=1)
  distinct = np.all(qs[:, 1:] != qs[:, :-1], axis=1)
  inside = (qs[:, 0] >= cfg.t_l) & (qs[:, -1] <= cfg.t_r)
  any_inside = np.any((q >= cfg.t_l) & (q <= cfg.t_r), axis=1)
  ltn = lt.max(axis=1)
  l10 = (ltn >= cfg.l10_lo) & (ltn <= cfg.l10_hi)
  same = np.all(np.take_along_axis(q, perm, axis=1) == table[_rank(cfg, scols)], axis=1)
  max_abs = max(int(np.max(np.abs(q))), int(np.max(np.abs(z0))), cfg.S * cfg.omega)
  return {'points': len(idx), 'category_1': int(cat1.sum()),
          'category_2': int((~oor & repeated).sum()), 'category_3': int(oor.sum()),
          '8.1_distinct_entries': int((cat1 & ~distinct).sum()),
          '8.3_inside_interval': int((cat1 & ~inside).sum()),
          '8.4_outside_interval': int((~cat1 & any_inside).sum()),
          'lemma10_bounds': int((cat1 & ~l10).sum()),
          'permutation_equivariance': int((~same).sum()), 'max_abs': max_abs}


def verify(d: int, n: int, N: int, chunk: int = CHUNK, max_chunks: int | None = None) -> dict:
  """Every point of G+_delta (or the first ``max_chunks`` chunks); counts and timing."""
  t0 = time.time()
  cfg = Config(d, n, N)
  table, v82, v10, reps = class_table(cfg)
  table_s = time.time() - t0
  total = cfg.V ** n
  counts: dict = {}
  max_abs = 0
  starts = range(0, total, chunk)
  if max_chunks is not None:
    starts = starts[:max_chunks]
  for s in starts:
    c = check_chunk(cfg, np.arange(s, min(s + chunk, total), dtype=np.int64), table)
    max_abs = max(max_abs, c.pop('max_abs'))
    for key, val in c.items():
      counts[key] = counts.get(key, 0) + val
  counts['8.2_distinct_across_classes'] = v82
  counts['lemma10_one_to_one'] = v10
  return {'d': d, 'n': n, 'resolution': N, 'grid_points': total, 'counts': counts,
          'points_checked': counts['points'], 'complete': counts['points'] == total,
          'class_representatives': reps, 'max_abs': max_abs, 'arithmetic': cfg.describe(),
          'table_seconds': table_s, 'seconds': time.time() - t0}


def _define_flags() -> None:
  """Flags of the binary (defined only when run as one: tests import ``verify``)."""
  flags.DEFINE_integer('d', 2, 'Embedding dimension d >= 1.', lower_bound=1)
  flags.DEFINE_integer('n', 6, 'Sequence length n >= 2.', lower_bound=2)
  flags.DEFINE_integer('resolution', 3, 'Grid resolution N = 1/delta >= 2.', lower_bound=2)
  flags.DEFINE_integer('max_chunks', None, 'Stop after this many 2^20-point chunks.',
                       lower_bound=1)


def main(argv):
  """Prints the result as one JSON line; exit status 1 if a property fails."""
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  f = flags.FLAGS
  r = verify(f.d, f.n, f.resolution, max_chunks=f.max_chunks)
  r['max_abs'] = str(r['max_abs'])
  print(json.dumps(r))
  sys.exit(0 if not any(v for k, v in r['counts'].items()
                        if not k.startswith('category') and k != 'points') else 1)


if __name__ == '__main__':
  _define_flags()
  cli.run(main)
