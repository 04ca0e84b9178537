r"""Exact whole-grid verification of the tie-complete contextual mapping.

For ``yun.contextual_ties`` (``ties='complete'``): every point of the grid is run through
the compiled layers in exact integer arithmetic (int64 or limbs, as planned), chunk by
chunk, with the grid decoders of ``yun.grids``. Properties (violation counts, all 0):

    T1_one_to_one         over every multiset of G (Categories 1 and 2, repeats
                          included): distinct (multiset, column) pairs never share an id
                          (sorted values, adjacent equal values of different owners)
    T1_ties_within_point  within a point of G: two columns have equal ids iff they are
                          equal columns
    T2_inside_interval    every id of a point of G lies in [t_l, t_r]
    T3_outside_interval   every id of a Category-3 point lies outside [t_l, t_r]
    distinct_id_count     the number of distinct ids equals V C(V + n - 2, n - 1)
    t_l_attained          min over G of the ids equals t_l (the all-zero input)
    permutation_equivariance (full grid)  q(L)[P] = q(C), C the sorted representative
    exact_tie_averages, bits_within_plan, grid_point_count, category_counts
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import provenance
from transformer_ua.verify.contextual_mapping import count_duplicates
from transformer_ua.yun import grids

PROPERTIES = ('T1_one_to_one', 'T1_ties_within_point', 'T2_inside_interval',
              'T3_outside_interval', 'distinct_id_count', 't_l_attained',
              'exact_tie_averages', 'bits_within_plan', 'grid_point_count', 'category_counts')
DEFAULT_CHUNK = 1 << 14


def _chunk_fns(cm, chunk: int, kernel: str):
  ops = cm.ops
  codec = grids.make_codec(cm.d, cm.n, cm.resolution)
  forward = cm.forward_fn(kernel)
  n, s = cm.n, cm.scale
  t_l, t_r = ops.constant(int(cm.t_l * s)), ops.constant(int(cm.t_r * s))

  def run(params, k, valid):
    out = forward(params, k)
    q = out['ids']
    cat = codec['category'](k)
    col = codec['column_index'](k)
    inside = (ops.cmp(q, t_l) >= 0) & (ops.cmp(q, t_r) <= 0)
    in_g = valid & (cat != 3)
    ties_ok = jnp.ones(cat.shape, bool)
    for i in range(n):
      for j in range(i + 1, n):
        ties_ok = ties_ok & (ops.eq(q[:, i], q[:, j]) == (col[:, i] == col[:, j]))
    counts = {
        'T1_ties_within_point': jnp.sum(in_g & ~ties_ok),
        'T2_inside_interval': jnp.sum(in_g & ~jnp.all(inside, axis=-1)),
        'T3_outside_interval': jnp.sum(valid & (cat == 3) & jnp.any(inside, axis=-1)),
        'inexact': out['inexact'],
        'points': jnp.sum(valid),
    }
    for c in (1, 2, 3):
      counts[f'category_{c}'] = jnp.sum(valid & (cat == c))
    hi, lo = ops.extremes(out['z'], valid[:, None, None])
    return counts, q, col, cat, (hi, lo)

  def multiset_chunk(params, start, total):
    rank = start + jnp.arange(chunk, dtype=jnp.int64)
    valid = rank < total
    return run(params, codec['decode_multiset'](jnp.minimum(rank, total - 1)), valid)

  def full_chunk(params, start, total, table):
    idx = start + jnp.arange(chunk, dtype=jnp.int64)
    valid = idx < total
    k = codec['decode_full'](jnp.minimum(idx, total - 1))
    counts, q, _, _, ext = run(params, k, valid)
    perm = codec['canonical_order'](k)
    col = jnp.take_along_axis(codec['column_index'](k), perm, axis=-1)
    q_rep = table[codec['rank_multiset'](col)]
    same = jnp.all(ops.eq(ops.take(q, perm, 1), q_rep), axis=-1)
    counts['permutation_equivariance'] = jnp.sum(valid & ~same)
    return counts, ext

  return jax.jit(multiset_chunk), jax.jit(full_chunk)


def verify(cm, *, grid: str = 'multiset', chunk_size: int = DEFAULT_CHUNK,
           kernel: str = 'fast') -> dict:
  """Checks (T1)-(T3) of ``yun.contextual_ties`` on every point of the grid, exactly.

  Args:
    cm: a ``yun.contextual_ties.TiesContextualMapping``.
    grid: 'multiset' (one point per permutation class of G+, repeats included) or
      'full' (every ordered point; adds the permutation-equivariance check).
    chunk_size: points per jit call; kernel: 'fast' or 'core' (same integers).
  Returns:
    dict with ``violations`` (property -> count), ``all_hold``, counts, bits, seconds,
    ``provenance``.
  """
  if grid not in grids.GRIDS:
    raise ValueError(f'grid={grid!r}; allowed: {grids.GRIDS}.')
  if not isinstance(chunk_size, int) or chunk_size < 1:
    raise ValueError(f'chunk_size must be a positive integer, got {chunk_size!r}.')
  t0 = time.time()
  prov = provenance.record()
  ops = cm.ops
  d, n, N = cm.d, cm.n, cm.resolution
  total = grids.grid_size(d, n, N, 'multiset')
  viol = {p: 0 for p in PROPERTIES}
  sums: dict = {}
  max_abs = 0

  def add(counts, ext):
    nonlocal max_abs
    for key, val in counts.items():
      sums[key] = sums.get(key, 0) + int(val)
    for v in ext:
      max_abs = max(max_abs, abs(int(ops.to_python(np.asarray(v)[None])[0])))

  with jax.enable_x64(True):
    multiset_chunk, full_chunk = _chunk_fns(cm, chunk_size, kernel)
    values, owners, table = [], [], []
    base = (N + 1) ** d
    for start in range(0, total, chunk_size):
      counts, q, col, cat, ext = multiset_chunk(cm.exact_params, jnp.int64(start),
                                                jnp.int64(total))
      add(counts, ext)
      valid = np.arange(start, start + chunk_size) < total
      q, col, cat = np.asarray(q), np.asarray(col), np.asarray(cat)
      in_g = valid & (cat != 3)
      rank = np.arange(start, start + chunk_size, dtype=np.int64)
      values.append(q[in_g].reshape((-1,) + q.shape[2:]))
      owners.append((rank[in_g, None] * base + col[in_g]).reshape(-1))
      table.append(q[valid])
    values, owners = np.concatenate(values), np.concatenate(owners)
    viol['T1_one_to_one'] = count_duplicates(ops, values, owners)
    order = ops.sort_keys(values)
    distinct = 1 + int(np.sum(~ops.host_equal_adjacent(values[order]))) if len(values) else 0
    c = cm.coefficients
    expected_ids = c.V * math.comb(c.V + n - 2, n - 1)
    viol['distinct_id_count'] = int(distinct != expected_ids)
    smallest = int(ops.to_python(values[order][:1])[0])
    viol['t_l_attained'] = int(smallest != int(cm.t_l * cm.scale))
    expected = grids.category_counts(d, n, N, 'multiset')
    bad = int(sums['points'] != total) + sum(int(sums[f'category_{k}'] != expected[k])
                                            for k in (1, 2, 3))
    points = total
    if grid == 'full':
      table = jnp.asarray(np.concatenate(table))
      f_total = grids.grid_size(d, n, N, 'full')
      m_sums = dict(sums)
      sums.clear()
      for start in range(0, f_total, chunk_size):
        add(*full_chunk(cm.exact_params, jnp.int64(start), jnp.int64(f_total), table))
      expected = grids.category_counts(d, n, N, 'full')
      bad += int(sums['points'] != f_total) + sum(int(sums[f'category_{k}'] != expected[k])
                                                 for k in (1, 2, 3))
      viol['permutation_equivariance'] = sums['permutation_equivariance']
      for key in ('T1_ties_within_point', 'T2_inside_interval', 'T3_outside_interval',
                  'inexact'):
        sums[key] += m_sums[key]
      points = f_total
    for key in ('T1_ties_within_point', 'T2_inside_interval', 'T3_outside_interval'):
      viol[key] = sums[key]
    viol['exact_tie_averages'] = sums['inexact']
    viol['category_counts'] = bad
    viol['grid_point_count'] = int(sums['points'] != points)
    viol['bits_within_plan'] = int(max_abs > cm.bound)
  return {'d': d, 'n': n, 'resolution': N, 'grid': grid, 'grid_points': points,
          'violations': viol, 'all_hold': not any(viol.values()),
          'distinct_ids': distinct, 'expected_ids': expected_ids,
          'arithmetic': cm.arithmetic.describe(), 'kernel': kernel,
          'bits_required': cm.bits_required, 'max_abs_bits': max_abs.bit_length(),
          'num_layers': cm.depth(), 'num_params': cm.num_params(),
          't_l': str(cm.t_l), 't_r': str(cm.t_r),
          'seconds': round(time.time() - t0, 3), 'provenance': prov}
