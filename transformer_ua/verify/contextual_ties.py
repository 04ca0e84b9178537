r"""Exact whole-grid verification of the tie-complete contextual mapping.

For ``yun.stages.contextual_ties`` (``ties='complete'``): every point of the grid is run through
the compiled layers in exact integer arithmetic (int64 or limbs, as planned), chunk by
chunk (``grid_pass.Chunks``), with the grid decoders of ``yun.enumeration``; the per-point
properties are ``checks.ties`` and ``checks.equivariance``. Properties (violation
counts, all 0):

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
from transformer_ua.verify import checks, grid_pass, sweep_kernel
from transformer_ua.yun.stages import gc_kernels
from transformer_ua.yun import enumeration as enumeration_lib

#: Properties of the result: the per-point ones (``checks.TIES``) and the global ones.
PROPERTIES = (('T1_one_to_one',) + checks.TIES
              + ('distinct_id_count', 't_l_attained', 'exact_tie_averages',
                 'bits_within_plan', 'grid_point_count', 'category_counts'))
DEFAULT_CHUNK = 1 << 14


def _chunk_fns(cm, chunk: int, kernel: str):
  """Jitted ``multiset_chunk(params, start, total)`` and ``full_chunk(params, start,
  total, table)`` (``grid_pass.chunk_fns``) checking T1-T3; extremes of z as words."""
  ops = cm.ops
  codec = enumeration_lib.make_codec(cm.grid)
  forward = gc_kernels.kernel_fn(cm, kernel)
  words = sweep_kernel.words_fn(cm)
  n, s = cm.n, cm.scale
  t_l, t_r = ops.constant(int(cm.t_l * s)), ops.constant(int(cm.t_r * s))

  def run(params, k, valid):
    out = forward(params, k)
    q = out.ids
    cat = codec['category'](k)
    col = codec['column_index'](k)
    counts = {**checks.categories(cat, valid),
              **checks.ties([q[:, j] for j in range(n)], col, cat, valid, cmp=ops,
                            t_l=t_l, t_r=t_r),
              'inexact': out.inexact}
    # Padding rows (index >= total) are copies of the last grid point: every row counts.
    return counts, sweep_kernel.words_extremes(words(out.z)), (q, col, cat)

  return grid_pass.chunk_fns(cm, chunk, run)


def verify(cm, *, enumeration: str = 'multiset', chunk_size: int = DEFAULT_CHUNK,
           kernel: str = 'fast') -> dict:
  """Checks (T1)-(T3) of ``yun.stages.contextual_ties`` on every point of the grid, exactly.

  Args:
    cm: a ``yun.stages.contextual_ties.TiesContextualMapping``.
    enumeration: 'multiset' (one point per permutation class of G+, repeats included) or
      'full' (every ordered point; adds the permutation-equivariance check).
    chunk_size: points per jit call; kernel: 'fast' or 'core' (same integers).
  Returns:
    dict with ``grid`` (the enumeration run), ``violations`` (property -> count),
    ``all_hold``, counts, bits, seconds,
    ``provenance``.
  """
  if enumeration not in enumeration_lib.GRIDS:
    raise ValueError(f'enumeration={enumeration!r}; allowed: {enumeration_lib.GRIDS}.')
  if not isinstance(chunk_size, int) or chunk_size < 1:
    raise ValueError(f'chunk_size must be a positive integer, got {chunk_size!r}.')
  t0 = time.time()
  prov = provenance.record()
  ops = cm.ops
  d, n, N = cm.d, cm.n, cm.resolution
  total = enumeration_lib.grid_size(cm.grid, 'multiset')
  viol = {p: 0 for p in PROPERTIES}
  with jax.enable_x64(True):
    multiset_chunk, full_chunk = _chunk_fns(cm, chunk_size, kernel)
  values, owners, table = [], [], []
  base = (N + 1) ** d

  def collect(start, payload):  # ids of G's points, owned by (multiset, column); table
    q, col, cat = (np.asarray(a) for a in payload)
    valid = np.arange(start, start + chunk_size) < total
    in_g = valid & (cat != 3)
    rank = np.arange(start, start + chunk_size, dtype=np.int64)
    values.append(q[in_g].reshape((-1,) + q.shape[2:]))
    owners.append((rank[in_g, None] * base + col[in_g]).reshape(-1))
    table.append(q[valid])

  passes = [grid_pass.run(grid_pass.Chunks(
      cm, lambda start, tot: multiset_chunk(cm.exact_params, start, tot), total, chunk_size,
      collect=collect, label='classes'), progress=False)]
  values, owners = np.concatenate(values), np.concatenate(owners)
  viol['T1_one_to_one'] = checks.count_duplicates(ops, values, owners)
  order = ops.sort_keys(values)
  distinct = 1 + int(np.sum(~ops.host_equal_adjacent(values[order]))) if len(values) else 0
  c = cm.coefficients
  expected_ids = c.V * math.comb(c.V + n - 2, n - 1)
  viol['distinct_id_count'] = int(distinct != expected_ids)
  smallest = int(ops.to_python(values[order][:1])[0])
  viol['t_l_attained'] = int(smallest != int(cm.t_l * cm.scale))
  sizes = {'multiset': total}
  if enumeration == 'full':
    with jax.enable_x64(True):
      table = jnp.asarray(np.concatenate(table))
    sizes['full'] = enumeration_lib.grid_size(cm.grid, 'full')
    passes.append(grid_pass.run(grid_pass.Chunks(
        cm, lambda start, tot: full_chunk(cm.exact_params, start, tot, table),
        sizes['full'], chunk_size), progress=False))
    viol['permutation_equivariance'] = passes[-1]['counts']['permutation_equivariance']
  bad = 0
  for (name, size), p in zip(sizes.items(), passes):
    expected = enumeration_lib.category_counts(cm.grid, name)
    bad += int(p['counts']['points'] != size) + sum(
        int(p['counts'][f'category_{k}'] != expected[k]) for k in (1, 2, 3))
  for key in checks.TIES:
    viol[key] = sum(p['counts'][key] for p in passes)
  viol['exact_tie_averages'] = sum(p['counts']['inexact'] for p in passes)
  viol['category_counts'] = bad
  points = sizes[enumeration]
  viol['grid_point_count'] = int(passes[-1]['counts']['points'] != points)
  max_abs = max(p['max_abs'] for p in passes)
  viol['bits_within_plan'] = int(max_abs > cm.bound)
  return {'d': d, 'n': n, 'resolution': N, 'grid': enumeration, 'grid_points': points,
          'violations': viol, 'all_hold': not any(viol.values()),
          'distinct_ids': distinct, 'expected_ids': expected_ids,
          'arithmetic': cm.arithmetic.describe(), 'kernel': kernel,
          'bits_required': cm.bits_required, 'max_abs_bits': max_abs.bit_length(),
          'num_layers': cm.depth(), 'num_params': cm.num_params(),
          't_l': str(cm.t_l), 't_r': str(cm.t_r),
          'seconds': round(time.time() - t0, 3), 'provenance': prov}
