r"""Theorem 3 with one softmax attention layer: g_bar on positionally shifted cells.

Yun et al.'s Theorem 3 (any continuous f, positional encodings E) on the one-layer
contextual map of ``yun.single_attention.one_layer``. Token-major: X [.., n, d]; M = N^d cells per
position; u = (1, N, .., N^(d-1)), w = N u.

    E        E_j = j e_(d-1): token j's last coordinate moves to [j, j + 1), so after
             quantization (``yun.single_attention.one_layer_wide``: a staircase on [0, n) for the last
             coordinate) its cell integer is m'_j = w^T L'_j = m_j + j M in block j of
             {0, .., M' - 1}, M' = n M: the n tokens of X are n distinct cells, one per
             block, and X <-> {m'_1, .., m'_n} is a bijection of cubes.
    attn     ``one_layer``'s head on M' cells: key m'_k, query lam (m'_j + T'),
             T' = M' - 1, value m'_k, W_O = c' e_1 with c' = 1 / (2 N (M' - 1)):
               id_j = m'_j + mean_{beta_j}(S) / (2 (M' - 1)),   beta_j = lam (m'_j + T').
             ``one_layer_ids``' separation theorem holds for every multiset of M' cells,
             so with lam planned for M' (the same closed form, h = (M' - 1) / 2) the ids
             of distinct (X, j) are proved distinct; the value map uses the *certified*
             enclosures (arb, sorted, consecutive ones disjoint).
    value    one bump per (X, j): A = f(C_X)_j, the state r = L'_j + c' mid e_1 (mid:
             the enclosure's midpoint); no offset (one wide layer: nothing fires twice).

There is no bad set (every X is its own context). The table enclosing the ids is
``one_layer_ids.mean_enclosures`` over all multisets of M' cells, restricted to the
positional contexts (one cell per block): n M^n ids of the M' C(M' + n - 2, n - 1)
rows; a restriction keeps the per-token order and only widens the gaps.
"""

from __future__ import annotations

import dataclasses
import math
import time
from fractions import Fraction

import numpy as np

from transformer_ua import construction
from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun import grid
from transformer_ua.yun.single_attention.one_layer_ids import (CAUCHY_B, ID_GUARD_BITS, MAX_BITS, MAX_IDS,
                                              IdTable, _log2, cells_of, gamma_mean_bound,
                                              gaps, mean_enclosures, ramp_below)
from transformer_ua.yun.single_attention.one_layer import STATE_EXTRA_BITS, bump_edges


def num_ids(d: int, n: int, resolution: int) -> int:
  """(X, position) pairs: n M^n, M = N^d."""
  return n * (resolution ** d) ** n


def plan_lam(n: int, cells: int) -> dict:
  """``one_layer_ids.plan``'s closed form for ``cells`` = M' cells: {'lam', 'gamma_mean',
  'bits'} (lam a power of two with lam 2 (M' - 1) <= beta*)."""
  h = max(Fraction(cells - 1, 2), Fraction(1))
  beta_star = 1 / (16 * CAUCHY_B * n * math.factorial(n - 2) * n ** (n - 1) * h ** n)
  lam = Fraction(2) ** math.floor(_log2(beta_star / (2 * (cells - 1))))
  while lam * 2 * (cells - 1) > beta_star:
    lam /= 2
  gamma_mean = gamma_mean_bound(n, cells, lam)
  return {'lam': lam, 'gamma_mean': gamma_mean,
          'bits': math.ceil(_log2(Fraction(cells) / gamma_mean)) + ID_GUARD_BITS}


@dataclasses.dataclass(frozen=True)
class _Plan:
  """What ``one_layer_wide`` reads of a plan: w, M (cells per position), T'."""
  w: tuple
  M: int
  T: int


@dataclasses.dataclass(frozen=True, eq=False)
class PositionalOneLayer:
  """g_bar of Theorem 3 with one softmax attention layer (module docstring).

  Attributes: target, f_bar, d, n, resolution; plan (w, M, T' = nM - 1); lam; table
  (``IdTable`` restricted to positional contexts); values [P, d] float64; edges (P + 1
  dyadic Fractions, id space); states (P exact d-vectors); min_edge_clearance; index
  {(m'_j, others): row}; build_seconds; variant (the ``yun.variants`` object).
  """

  target: targets_lib.Target
  f_bar: targets_lib.Target
  d: int
  n: int
  resolution: int
  plan: _Plan
  lam: Fraction
  table: IdTable
  values: np.ndarray
  edges: tuple
  states: tuple
  min_edge_clearance: Fraction
  index: dict
  bits: int
  build_seconds: float
  variant: object

  offset = 0

  @property
  def positional(self) -> bool:
    return True

  def positional_encoding(self) -> list:
    """E [n, d] exact: E_j = j e_(d-1)."""
    return [[j if i == self.d - 1 else 0 for i in range(self.d)] for j in range(self.n)]

  def apply(self, x) -> np.ndarray:
    """g_bar(X) [batch, n, d] for X in [0, 1)^{n x d}: token j's value A = f(C_X)_j,
    selected by its (m'_j, others) pair (float64)."""
    x = grid.check_domain(grid.check_input(x, self.n, self.d))
    k = np.floor(x * self.resolution).astype(np.int64)
    m = np.sum(k * (self.resolution ** np.arange(self.d)), axis=-1)       # [batch, n]
    m = m + self.plan.M * np.arange(self.n)
    out = np.zeros(x.shape)
    for b in range(x.shape[0]):
      for j in range(self.n):
        rest = tuple(int(v) for i, v in enumerate(m[b]) if i != j)
        out[b, j] = self.values[self.index[(int(m[b, j]), rest)]]
    return out

  def apply_exact(self, x) -> np.ndarray:
    return construction.to_fractions(self.apply(x))

  def output_range(self) -> tuple[list, list]:
    """(lo, hi) [d]: the range of g_bar per coordinate (exact rationals of the values)."""
    lo = [min(Fraction(float(v)) for v in self.values[:, i]) for i in range(self.d)]
    hi = [max(Fraction(float(v)) for v in self.values[:, i]) for i in range(self.d)]
    return lo, hi

  def attention_params(self) -> dict:
    """The one head [L=1, h=1, ..], exact: W_Q = lam w^T, b_Q = lam T', W_K = W_V = w^T,
    W_O = c' e_1."""
    w = [Fraction(v) for v in self.plan.w]
    c_out = Fraction(1, 2 * self.resolution * self.plan.T)
    ex = lambda a: np.asarray(a, object)[None]  # noqa: E731
    return {'W_Q': ex([[[self.lam * v for v in w]]]), 'b_Q': ex([[self.lam * self.plan.T]]),
            'W_K': ex([[w]]), 'W_V': ex([[w]]),
            'W_O': ex([[[c_out if i == 0 else 0] for i in range(self.d)]])}

  def plan_epsilon(self, margin) -> dict:
    """Ramp widths 2^floor(log2(c / 2)) below c: margin delta (quantization) and the
    smallest id-to-edge clearance (value)."""
    return {'quantization': ramp_below(Fraction(margin) / self.resolution),
            'value': ramp_below(self.min_edge_clearance)}

  def plan_bits(self, tolerance: float = 1e-6) -> int:
    """Ball precision: ids resolved well below the clearance, outputs below tolerance."""
    top = self.n * self.plan.M
    return (math.ceil(_log2(Fraction(top) / self.min_edge_clearance))
            + math.ceil(-math.log2(tolerance)) + ID_GUARD_BITS)


def build(target, variant) -> PositionalOneLayer:
  """Compiles any target (Theorem 3) into the positional one-attention-layer g_bar on
  ``variant``'s grid (a Theorem 3 ``yun.variants`` object).

  Raises:
    ValueError: bad (d, n, N), more than ``one_layer_ids.MAX_IDS`` ids, enclosures past
      MAX_BITS, or ids whose certified enclosures overlap.
  """
  t0 = time.perf_counter()
  d, n, N = variant.d, variant.n, variant.N
  M = N ** d
  cells = n * M
  P = num_ids(d, n, N)
  if P > MAX_IDS:
    raise ValueError(f'd={d}, n={n}, resolution={N} has {P:,} (X, position) ids (n N^(dn)); '
                     f'at most {MAX_IDS:,} are planned. Choose a smaller grid.')
  f = targets_lib.get_target(target, d=d, n=n)
  p = plan_lam(n, cells)
  if p['bits'] > MAX_BITS:
    raise ValueError(f'd={d}, n={n}, resolution={N}: the proved gap needs {p["bits"]} bits '
                     f'per id enclosure; at most {MAX_BITS} are planned.')
  lam, T = p['lam'], cells - 1
  full = mean_enclosures(cells, n, lam, T=T, bits=p['bits'] + STATE_EXTRA_BITS)
  # positional contexts: the n tokens in n distinct blocks (block = m' // M)
  blocks = np.concatenate([full.tokens[:, None], full.rests], axis=1) // M
  keep = np.flatnonzero(np.all(np.sort(blocks, axis=1) == np.arange(n), axis=1))
  table = dataclasses.replace(full, tokens=full.tokens[keep], rests=full.rests[keep],
                              lo=[full.lo[i] for i in keep], hi=[full.hi[i] for i in keep])
  g = gaps(table)
  if g['min_gap'] is not None and g['min_gap'] <= 0:
    i = g['argmin']
    raise ValueError(f'lam={float(lam):g}: the certified id enclosures of rows {i} and '
                     f'{i + 1} overlap (token {table.tokens[i]}).')
  # values: token t = m' in block j; the context by position
  ctx = np.sort(np.concatenate([table.tokens[:, None], table.rests], axis=1), axis=1)
  pos = table.tokens // M
  k = cells_of(ctx - M * np.arange(n), d, N)                   # [P, n, d] by position
  fx = targets_lib.check_output(f.name, f((k + 0.5) / N), k.shape)
  values = fx[np.arange(len(pos)), pos]
  s = Fraction(2) ** table.scale
  scale = Fraction(1, 2 * T)
  ids_lo = [int(t) + scale * Fraction(a) / s for t, a in zip(table.tokens, table.lo)]
  ids_hi = [int(t) + scale * Fraction(b) / s for t, b in zip(table.tokens, table.hi)]
  edges, clearance = bump_edges(ids_lo, ids_hi)
  # r_i: L'_t (last coordinate shifted by j) + c' mean e_1
  c_out = Fraction(1, 2 * N * T)
  tok_cells = cells_of(table.tokens % M, d, N)
  states = []
  for i in range(P):
    r = [Fraction(int(v), N) for v in tok_cells[i]]
    r[d - 1] += int(pos[i])
    r[0] += c_out * Fraction(table.lo[i] + table.hi[i], 2) / s
    states.append(tuple(r))
  index = {(int(t), tuple(int(v) for v in r)): i
           for i, (t, r) in enumerate(zip(table.tokens, table.rests))}
  return PositionalOneLayer(
      target=f, f_bar=targets_lib.piecewise_constant(f, N), d=d, n=n, resolution=N,
      plan=_Plan(w=tuple(N ** (i + 1) for i in range(d)), M=M, T=T), lam=lam, table=table,
      values=np.asarray(values, np.float64), edges=tuple(edges), states=tuple(states),
      min_edge_clearance=clearance, index=index, bits=p['bits'],
      build_seconds=time.perf_counter() - t0, variant=variant)
