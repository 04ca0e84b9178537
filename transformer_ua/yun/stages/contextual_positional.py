r"""Theorem 3's contextual mapping (Yun et al. 2020, Appendix G.2): its closed forms.

With ``positional=True`` the inputs are L + E (token j, 0-based, offset by j in every
coordinate), so column j's id lies in s_j + delta [0, N^d - 1], s_j = (j - 1) R with
R = sum_i u_i; every grid point is "Category 1". The sweep visits the n N^d ids of those
ranges in increasing order, and the global shift is scaled by n delta^(-(n+1)d-1):

    for l in union_j [s_j : delta : s_j + delta^(-d+1) - delta]   (n N^d layers)
        Z <- Z + delta^(-d) Psi(Z; l - delta/2, l + delta/2)
    Z <- Z + n delta^(-(n+1)d-1) psi(Z; 0)

Finding (tested): a shifted column can land on a later swept id and be shifted again
(N=2, d=1, n=2: ids (1/2, 1) end as (5/2, 2)), so the paper's l~_1 < ... < l~_n and
its bound on l~_n are not guaranteed; the map stays one-to-one on every grid we
checked. The bit bound therefore comes from an exhaustive exact simulation of the
sweep over the whole (finite) grid (``positional_sweep_max``), and
[t_l, t_r] = [c s_n, (1 + c) max id] (``positional_interval``).

Used by ``yun.stages.contextual`` (its
``PositionalContextualMapping`` is the built map) and ``yun.variants.positional``.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from transformer_ua.yun.grid import Grid, check_scale, decode_grid, u_vector


def theorem3_sweep_ids(grid: Grid) -> np.ndarray:
  """Sweep list of Theorem 3 (Appendix G.2) in units of delta, increasing.

  l in union_j [s_j : delta : s_j + delta^(-d+1) - delta], s_j = (j-1) sum_k delta^-k.
  """
  d, n, N = grid.d, grid.n, grid.N
  r = (N ** d - 1) // (N - 1)
  return np.concatenate([(j * r * N) + np.arange(N ** d, dtype=np.int64) for j in range(n)])


def theorem3_final_scale(grid: Grid) -> int:
  """n delta^(-(n+1)d-1), the final global shift scale of Theorem 3 (Appendix G.2)."""
  d, n, N = grid.d, grid.n, grid.N
  return n * N ** ((n + 1) * d + 1)


#: Largest grid (N^(dn) points) for which the Theorem 3 mapping is built: its bound
#: comes from an exhaustive exact simulation, and g_v needs a bump per grid point.
POSITIONAL_MAX_GRID = 1 << 16


def positional_grid(grid: Grid) -> np.ndarray:
  """All grid indices K [N^(dn), n, d] (lexicographic, K[0] = 0), Theorem 3's domain."""
  d, n, N = grid.d, grid.n, grid.N
  if N ** (d * n) > POSITIONAL_MAX_GRID:
    raise ValueError(f'positional (Theorem 3) construction for d={d}, n={n}, N={N} needs '
                     f'the whole grid of N^(dn) = {N ** (d * n)} points; at most '
                     f'{POSITIONAL_MAX_GRID} are allowed (choose a smaller resolution).')
  return decode_grid(np.arange(N ** (d * n), dtype=np.int64), grid)


@functools.lru_cache(maxsize=32)
def positional_sweep_max(grid: Grid) -> Fraction:
  """Exact max over the whole grid of every id during the Theorem 3 sweep.

  Exhaustive, in Python integers (units of delta): ids start at
  l_j = s_j + delta sum_i K_ji N^(i-1) >= 0 and never decrease, so the max is taken
  after the sweep. The sweep is simulated on ids alone (a Psi layer adds
  N^d (max - min) to the ids equal to its l). Unlike Theorem 2, a shifted column can
  land on a *later* swept id and be shifted again (N = 2, d = 1, n = 2,
  L + E = (1/2, 1): ids (1/2, 1) -> (3/2, 1) -> (3/2, 2) -> (5/2, 2)), which Appendix
  G.2's bound n delta^(-(n+1)d) on l~_n does not account for; the exhaustive max is
  a proof by enumeration of the finite domain.
  """
  d, n, N = grid.d, grid.n, grid.N
  k = positional_grid(grid)
  r = sum(u_vector(d, N))
  ids = (k @ np.asarray(u_vector(d, N), np.int64)).astype(object)
  ids = ids + (np.arange(n) * N * r).astype(object)[None, :]
  step = N ** d
  for l in theorem3_sweep_ids(grid):
    mask = ids == int(l)
    if not mask.any():
      continue
    spread = ids.max(axis=1) - ids.min(axis=1)
    ids = ids + mask * (step * spread)[:, None]
  return Fraction(int(ids.max()), N)


def positional_interval(grid: Grid) -> tuple[Fraction, Fraction]:
  """(t_l, t_r) bracketing every q(L) = u^T g_c(L + E) of Theorem 3 (Appendix G.2).

  The global shift adds c max_k l~_k (c = n delta^(-(n+1)d-1); every query is
  positive) to every id, and max_k l~_k >= l_n >= s_n = (n - 1) R (R = sum_i u_i), so
  q >= c s_n = t_l; with U the exhaustive max id (``positional_sweep_max``),
  q <= (1 + c) U = t_r.
  """
  c = theorem3_final_scale(grid)
  r = sum(u_vector(grid.d, grid.N))
  return Fraction(c * (grid.n - 1) * r), (1 + c) * positional_sweep_max(grid)


def positional_bound(grid: Grid, scale: int | None = None) -> int:
  """Bound on |every scaled intermediate| of the Theorem 3 g_c (inputs L + E).

  With U the exhaustive max id: ids stay in [0, U] in the sweep (U_f = U (1 + c)
  after the global shift); entries differ from ids by at most n R; tie numerators
  are at most n U and head outputs 2 N^d U (rank-one scores are never formed).
  """
  d, n, N = grid.d, grid.n, grid.N
  S = check_scale(scale, N)
  u = positional_sweep_max(grid)
  r = sum(u_vector(d, N))
  u_f = u * (1 + theorem3_final_scale(grid))
  bound = max(n * u, 2 * N ** d * u, u_f + 2 * n * r + 1)
  return math.ceil(S * bound)
