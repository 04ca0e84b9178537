r"""Grid enumeration on device: G+_delta decoded from linear indices, exactly counted.

Shapes: ``index [B]`` int64 linear indices; ``K [B, n, d]`` grid indices in
{-1, 0, ..., N-1} (-1: the out-of-range value -delta^(-nd)); ``col [B, n]`` column
indices in [0, V), V = (N+1)^d.

* A *column index* c encodes one column (token) in base N+1, little-endian:
  ``K[j, i] = digit_i(c) - 1``; an in-range column also has an index in base N,
  ``r = sum_i K[i] N^i``. Both are ``column_digits`` / ``column_number`` (the one
  encoding of a column, used by the codecs here, the verifier's block tables and the
  planner's classes).
* The *full* grid G+_delta (all ordered points) has (N+1)^(nd) points; point ``p`` has
  column j = digits j*d .. j*d + d - 1 of ``p`` in base N+1 (mixed radix decoding).
* The *multiset* grid has one point per permutation class: the non-decreasing column
  index tuples c_1 <= ... <= c_n, C(V + n - 1, n) of them, ranked in colexicographic
  order of the strictly increasing b_i = c_i + i - 1:
  ``rank = sum_{i=1..n} C(b_i, i)`` (the combinatorial number system). Unranking
  finds b_n, ..., b_1 greedily by binary search in a table of binomials.

Categories (Yun et al. E.3): 1 = all entries in range and all columns distinct
(G~_delta), 2 = in range with a repeated column, 3 = some entry out of range.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua.yun.grid import Grid, decode_grid

GRIDS = ('full', 'multiset')
#: Largest count the int64 index arithmetic here may handle.
MAX_INDEX = 2 ** 62


def num_column_values(d: int, resolution: int) -> int:
  """V = (N+1)^d distinct columns of G+_delta."""
  return (resolution + 1) ** d


def grid_size(grid: Grid, kind: str) -> int:
  """Exact number of points: (N+1)^(nd) (full) or C(V+n-1, n) (multiset)."""
  d, n, N = grid.d, grid.n, grid.N
  if kind == 'full':
    return (N + 1) ** (n * d)
  if kind == 'multiset':
    return math.comb(num_column_values(d, N) + n - 1, n)
  raise ValueError(f'grid={kind!r}; allowed: {GRIDS}.')


def category_counts(grid: Grid, kind: str) -> dict:
  """Exact number of points of categories 1, 2, 3 (closed forms)."""
  d, n, N = grid.d, grid.n, grid.N
  v_in = N ** d  # in-range columns
  if kind == 'full':
    cat1 = math.perm(v_in, n)
    cat12 = v_in ** n
  elif kind == 'multiset':
    cat1 = math.comb(v_in, n)
    cat12 = math.comb(v_in + n - 1, n)
  else:
    raise ValueError(f'grid={kind!r}; allowed: {GRIDS}.')
  total = grid_size(grid, kind)
  return {1: cat1, 2: cat12 - cat1, 3: total - cat12}


def column_digits(col, d: int, base: int):
  """Column numbers [...] -> their d digits in ``base``, little-endian [..., d]:
  ``digit_i(c) = (c // base^i) % base`` (NumPy in, NumPy out; jnp in, jnp out)."""
  return (col[..., None] // np.asarray([base ** i for i in range(d)], np.int64)) % base


def column_number(digits, base: int):
  """The inverse of ``column_digits``: digits [..., d] -> sum_i digits_i base^i [...]."""
  d = digits.shape[-1]
  return (digits * np.asarray([base ** i for i in range(d)], np.int64)).sum(axis=-1)


def stable_positions(cols):
  """The stable sorted position of each entry along the leading axis of cols [u, ...]:

      pos_j = #{i: c_i < c_j} + #{i < j: c_i = c_j}            (int32 [u, ...])

  u (u - 1) elementwise compares, no sort (small-row sorts are slow on XLA CPU); NumPy
  in, NumPy out; jnp in, jnp out."""
  xp = jnp if isinstance(cols, jax.Array) else np
  u = cols.shape[0]
  return xp.stack([sum((((cols[i] <= cols[j]) if i < j else (cols[i] < cols[j])).astype(np.int32)
                        for i in range(u) if i != j), xp.zeros(cols.shape[1:], np.int32))
                   for j in range(u)])


def rank_colex(binom: np.ndarray, b):
  """rank = sum_{i=1..n} C(b_i, i) of strictly increasing b [B, n] (binom[i, x] = C(x, i))."""
  table = jnp.asarray(binom)
  return sum(table[i + 1][b[..., i]] for i in range(b.shape[-1]))


def unrank_colex(binom: np.ndarray, rank, n: int):
  """The inverse of ``rank_colex``: b_n, ..., b_1 found greedily, b_i the largest x with
  C(x, i) <= the remaining rank (binary search in row i of the table). Returns b [B, n]."""
  table = jnp.asarray(binom)
  r = rank
  b = []
  for i in range(n, 0, -1):
    b_i = jnp.searchsorted(table[i], r, side='right') - 1
    r = r - table[i][b_i]
    b.append(b_i)
  return jnp.stack(b[::-1], axis=-1)


def make_codec(grid: Grid):
  """Pure jnp functions for this configuration (call under ``jax.enable_x64``).

  Returns a dict with
    ``decode_full(index [B]) -> K [B, n, d]``,
    ``decode_multiset(rank [B]) -> K [B, n, d]`` (columns in non-decreasing index),
    ``column_index(K) -> [B, n]``, ``rank_multiset(sorted col [B, n]) -> [B]``,
    ``category(K) -> [B]`` in {1, 2, 3}, ``canonical_order(K) -> perm [B, n]``,
    ``col_to_k``.
  """
  d, n, N = grid.d, grid.n, grid.N
  base = N + 1
  v = num_column_values(d, N)
  if grid_size(grid, 'full') >= MAX_INDEX and \
      grid_size(grid, 'multiset') >= MAX_INDEX:
    raise ValueError('this grid has more than 2^62 points in both modes; it cannot be '
                     'enumerated.')
  full_fits = grid_size(grid, 'full') < MAX_INDEX
  full_pow = np.asarray([base ** p if full_fits else 0 for p in range(n * d)], np.int64)
  # binom[i, x] = C(x, i) for i <= n, x < V + n (clipped at 2^62; only used if it fits).
  binom = np.zeros((n + 1, v + n), dtype=np.int64)
  for i in range(n + 1):
    for x in range(v + n):
      binom[i, x] = min(math.comb(x, i), MAX_INDEX)

  def decode_full(index):
    digits = (index[:, None] // jnp.asarray(full_pow)) % base  # [B, n d]
    return digits.reshape(index.shape[0], n, d) - 1

  def col_to_k(col):  # [B, n] -> [B, n, d]
    return column_digits(col, d, base) - 1

  def column_index(k):
    return column_number(k + 1, base)

  def decode_multiset(rank):
    col = unrank_colex(binom, rank, n) - jnp.arange(n)  # non-decreasing
    return col_to_k(col)

  def rank_multiset(col_sorted):
    return rank_colex(binom, col_sorted + jnp.arange(n))  # strictly increasing

  def category(k):
    col = column_index(k)
    equal = col[..., :, None] == col[..., None, :]
    repeated = jnp.any(equal & ~jnp.eye(n, dtype=bool), axis=(-2, -1))
    out_of_range = jnp.any(k < 0, axis=(-2, -1))
    return jnp.where(out_of_range, 3, jnp.where(repeated, 2, 1)).astype(jnp.int32)

  def canonical_order(k):
    """perm [B, n] with col[perm] non-decreasing (stable): the inverse of the stable
    positions."""
    r = jnp.moveaxis(stable_positions(jnp.moveaxis(column_index(k), -1, 0)), 0, -1)
    onehot = r[..., :, None] == jnp.arange(n)              # [.., j, position]
    return jnp.argmax(onehot, axis=-2)

  return {'decode_full': decode_full, 'decode_multiset': decode_multiset,
          'column_index': column_index, 'rank_multiset': rank_multiset,
          'category': category, 'canonical_order': canonical_order, 'col_to_k': col_to_k}


def make_class_codec(grid: Grid):
  """Category-1 permutation classes: n distinct in-range columns, ranked.

  An in-range column has index ``r = sum_i K[i] N^i`` in [0, N^d) (same order as the
  column index, both lexicographic from the last coordinate). A class is a strictly
  increasing tuple r_1 < ... < r_n, ranked colexicographically:
  ``rank = sum_{i=1..n} C(r_i, i)``, C(N^d, n) classes. Returns jnp functions
  ``decode(rank [B]) -> K [B, n, d]`` (columns sorted), ``rank(K sorted [B, n, d])``,
  and ``in_range_index(K) -> [B, n]``. Call under ``jax.enable_x64``.
  """
  d, n, N = grid.d, grid.n, grid.N
  v = N ** d
  if math.comb(v, n) >= MAX_INDEX:
    raise ValueError(f'C({v}, {n}) classes cannot be enumerated with int64 ranks.')
  binom = np.asarray([[math.comb(x, i) for x in range(v + 1)] for i in range(n + 1)],
                     dtype=np.int64)

  def decode(rank):
    idx = unrank_colex(binom, rank, n)  # strictly increasing
    return column_digits(idx, d, N)

  def in_range_index(k):
    return column_number(k, N)

  def rank(k_sorted):
    return rank_colex(binom, jnp.clip(in_range_index(k_sorted), 0, v))

  return {'decode': decode, 'rank': rank, 'in_range_index': in_range_index}


def cube_classes(grid: Grid, equivariant: bool) -> np.ndarray:
  """Grid indices K [C, n, d] of every cube of ``grid`` up to what the theorem needs
  (Lemma 6's and the certification's domain): ``equivariant`` (Theorem 2, g and g_bar
  permutation equivariant): one representative per multiset of n cells (columns sorted
  by cell), repeated cells included; else (Theorem 3) every one of the N^(dn) cubes."""
  d, n, N = grid.d, grid.n, grid.N
  if not equivariant:
    return decode_grid(np.arange(N ** (d * n), dtype=np.int64), grid)
  cells = N ** d
  digits = column_digits(np.arange(cells, dtype=np.int64), d, N)   # [N^d, d]
  combos = np.asarray(list(itertools.combinations_with_replacement(range(cells), n)),
                      np.int64)
  return digits[combos]
