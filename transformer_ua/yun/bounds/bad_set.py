"""Yun et al. Theorem 2's bad set: the grid cubes with two equal columns, exactly.

With ``G~_delta`` the grid points whose n columns
are distinct, the bad set ``B = union_{L in G_delta \\ G~_delta} S_L`` has measure

    |B| = 1 - (N^d)(N^d - 1)...(N^d - n + 1) / N^{dn}       (N = 1/delta),

and where g_bar = f_bar off B and g_bar = 0 on B (Proposition 5),

    d_p(f_bar, g_bar)^p = N^{-dn} sum_{L in G_delta \\ G~_delta} ||f(C_L)||_p^p.
"""

from __future__ import annotations

import fractions
import itertools
import math

import numpy as np

from transformer_ua.targets import distances
from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun.grid import Grid, decode_grid

#: Largest grid enumerated exactly by ``dp_on_bad_set``.
MAX_EXACT_CELLS = 2_000_000


def bad_set_measure(grid: Grid) -> fractions.Fraction:
  """Exact measure of the cubes whose grid point has two equal columns (tokens)."""
  d, n, N = grid.d, grid.n, grid.N
  cols = N**d
  distinct = math.prod(cols - i for i in range(n)) if n <= cols else 0
  return 1 - fractions.Fraction(distinct, cols**n)


def _grid_points(grid: Grid, chunk: int):
  """All grid indices K [*, n, d] in chunks (lexicographic order)."""
  total = grid.N**(grid.d * grid.n)
  for start in range(0, total, chunk):
    idx = np.arange(start, min(total, start + chunk), dtype=np.int64)
    yield decode_grid(idx, grid)


def distinct_columns(k: np.ndarray) -> np.ndarray:
  """[batch] mask: the n tokens (rows of K [batch, n, d]) are pairwise distinct."""
  k = np.asarray(k)
  n = k.shape[-2]
  ok = np.ones(k.shape[0], dtype=bool)
  for i, j in itertools.combinations(range(n), 2):
    ok &= np.any(k[:, i] != k[:, j], axis=-1)
  return ok


def dp_on_bad_set(target: targets_lib.Target, grid: Grid,
                  *, p: float, chunk: int = 65536) -> float:
  """``(N^{-dn} sum_{L bad} ||f(C_L)||_p^p)^{1/p}``: d_p(f_bar, g_bar) when g_bar is
  f_bar off the bad set and 0 on it. Enumerates the whole grid (refuses if too big)."""
  d, n, N = grid.d, grid.n, grid.N
  p = distances.check_p(p)
  cells = N**(d * n)
  if cells > MAX_EXACT_CELLS:
    raise ValueError(f'the grid has {cells} cells; exact enumeration is limited to '
                     f'{MAX_EXACT_CELLS} (use dp_distances for a Monte Carlo estimate).')
  total = 0.0
  for k in _grid_points(grid, chunk):
    bad = ~distinct_columns(k)
    if np.any(bad):
      vals = targets_lib.grid_values(target, k[bad], N)
      total += float(np.sum(np.abs(vals)**p))
  return (total / cells)**(1 / p)
