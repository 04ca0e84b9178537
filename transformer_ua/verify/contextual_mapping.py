r"""Exact whole-grid verification of Lemma 8 and Lemma 10 (Yun et al. 2020, E.3).

Every point is run through the compiled attention layers of g_c (``yun.contextual``)
in exact integer arithmetic (int64 or limbs, as planned), chunk by chunk: grid points
are decoded on device from linear indices (``grids``), each chunk is one jit-compiled
vmapped call, and only violation counts (and, for the class representatives, the
values needed by the global checks) come back to the host.

Properties checked (counts of violations; every count must be 0):

    8.1  L in G~:         the n entries of q(L) are distinct           (every point)
    8.3  L in G~:         every entry of q(L) lies in [t_l, t_r]        (every point)
    8.4  L in G+ \ G~:    every entry of q(L) lies outside [t_l, t_r]   (every point)
    lemma10_bounds        L in G~: lower <= l~_n <= upper, l~_n = max_j u^T of the
                          sweep output (the sweep ends with l~_1 < ... < l~_n)
    lemma10_one_to_one    distinct permutation classes of G~ give distinct l~_n
    8.2                   L, L' in G~ not permutations of each other: q(L), q(L')
                          share no entry
    permutation_equivariance (full grid)   q(L)[P] = q(C) at every point, where C is
                          the canonical representative of L's class (columns sorted
                          by column index) and P the sorting permutation
    exact_tie_averages    no hardmax tie average was inexact
    grid_point_count, category_counts   points enumerated and per category equal the
                          closed forms (N+1)^(nd), N^d (N^d - 1) ... (N^d - n + 1), ...

Reduction of 8.2 to class representatives. The multiset pass runs g_c on one
representative C per permutation class (all C((N+1)^d + n - 1, n) of them), sorts
the n C(N^d, n) values q(C)_j of the Category-1 representatives and checks that no
two are equal (adjacent equal values of different representatives are violations).
In full-grid mode every point L is then checked against its representative:
q(L)[P] = q(C). Together: for L, L' in G~ that are not permutations of each other,
the entries of q(L) are those of q(C) and the entries of q(L') those of q(C') with
C != C', which share no entry -- Property 8.2 on the whole grid. (Claim 1 proves the
equivariance for any Transformer; here it is *checked*, on the integers computed.)

Kernels. By default (``kernel='sweep'``) g_c runs on column ids (``yun.sweep``) and the
full-grid pass runs in blocks with in-kernel decoding (``sweep_kernel``: resumable,
with progress and ETA); ``'fast'`` / ``'core'`` run the literal layers (the cross-check:
tests compare all three on whole grids). Chunks are capped at the grid size and at a
working-set budget (``chunk_cap``).

Devices. Each chunk's linear indices ``start + arange(chunk)`` are generated on device
and constrained to ``NamedSharding(mesh, P('data'))`` over a 1-D mesh of all devices
(``transformer_ua.parallel``; every host's devices after ``initialize_distributed``),
so ``jax.jit`` (GSPMD) decodes and checks each device's slice of the grid where it
lives and sums the per-chunk violation counts across devices (all-reduce); params and
the class table are replicated. The chunk is rounded up to a multiple of the device
count (padding is masked by ``valid``). Counts are integers, so the result equals the
single-device run exactly; on one device nothing is sharded.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from transformer_ua import parallel, provenance
from transformer_ua.exact.ops import ExactOps
from transformer_ua.verify import sweep_kernel
from transformer_ua.yun import grids, sweep

PROPERTIES = ('8.1_distinct_entries', '8.2_distinct_across_classes', '8.3_inside_interval',
              '8.4_outside_interval', 'lemma10_bounds', 'lemma10_one_to_one',
              'permutation_equivariance', 'exact_tie_averages', 'grid_point_count',
              'category_counts', 'bits_within_plan')
DEFAULT_CHUNK = 1 << 20
#: Default budget (bytes) of one chunk's working set in the literal kernels; the chunk
#: is capped by it and by the grid size (``chunk_cap``).
CHUNK_BUDGET = 1 << 29
#: Working-set bytes per point, per token and word, of the literal kernels (measured:
#: peak RSS grows by less than this per point of a chunk).
LITERAL_POINT_BYTES = 256


def chunk_cap(cm, chunk_size: int, points: int, budget: int = CHUNK_BUDGET) -> int:
  """``chunk_size`` capped at the points to run and at ``budget`` bytes of working set."""
  words = cm.arithmetic.num_limbs if cm.limbs else 1
  per_point = LITERAL_POINT_BYTES * cm.n * (cm.d + 2) * words
  return max(1, min(int(chunk_size), int(points), budget // per_point))


# ---------------------------------------------------------------------------
# Helpers.
# ---------------------------------------------------------------------------


def count_duplicates(ops: ExactOps, values: np.ndarray, owners: np.ndarray) -> int:
  """Adjacent equal values (after sorting) that belong to different owners."""
  if len(values) < 2:
    return 0
  order = ops.sort_keys(values)
  same = ops.host_equal_adjacent(values[order])
  diff_owner = owners[order][1:] != owners[order][:-1]
  return int(np.sum(same & diff_owner))


# ---------------------------------------------------------------------------
# Chunk functions.
# ---------------------------------------------------------------------------


def _point_checks(cm, ops, q, lt, cat, valid):
  """Per-point property violations (8.1, 8.3, 8.4, Lemma 10 bounds) of one chunk."""
  n = cm.n
  c = cm.ops.constant
  s = cm.scale
  t_l, t_r = c(int(cm.t_l * s)), c(int(cm.t_r * s))
  lo, hi = c(int(cm.id_lower * s)), c(int(cm.id_upper * s))
  distinct = jnp.ones(cat.shape, bool)
  for i in range(n):
    for j in range(i + 1, n):
      distinct = distinct & ~ops.eq(q[:, i], q[:, j])
  ge_l = ops.cmp(q, t_l) >= 0
  le_r = ops.cmp(q, t_r) <= 0
  inside = jnp.all(ge_l & le_r, axis=-1)
  outside = jnp.all(~(ge_l & le_r), axis=-1)
  ltn = ops.max(lt, 1)
  l10 = (ops.cmp(ltn, lo) >= 0) & (ops.cmp(ltn, hi) <= 0)
  cat1 = valid & (cat == 1)
  return {
      '8.1_distinct_entries': jnp.sum(cat1 & ~distinct),
      '8.3_inside_interval': jnp.sum(cat1 & ~inside),
      '8.4_outside_interval': jnp.sum(valid & (cat != 1) & ~outside),
      'lemma10_bounds': jnp.sum(cat1 & ~l10),
      'category_1': jnp.sum(cat1),
      'category_2': jnp.sum(valid & (cat == 2)),
      'category_3': jnp.sum(valid & (cat == 3)),
      'points': jnp.sum(valid),
  }, ltn


def _value_mapping_check(vm, ops, codec, class_codec, k, z, cat, valid):
  """Lemma 9 end to end: g_v(g_c(L)) = A_L on G~, 0 elsewhere (compact g_v, exact)."""
  out = vm.compact_fn()(z)
  if vm.num_classes == 0:  # G~ empty: g_v must be 0 everywhere
    same = jnp.all(ops.eq(out, jnp.zeros_like(out)), axis=(-2, -1))
    return jnp.sum(valid & ~same)
  perm = codec['canonical_order'](k)
  k_sorted = jnp.take_along_axis(k, perm[..., None], axis=1)
  rank = jnp.where(cat == 1, class_codec['rank'](k_sorted), 0)
  a = vm.targets_scaled[rank]                      # [B, n, d(, K)], sorted columns
  inv = jnp.argsort(perm, axis=-1)
  idx = inv[:, :, None, None] if ops.limbs else inv[:, :, None]
  a = jnp.take_along_axis(a, idx, axis=1)          # output column j <- sorted inv[j]
  expected = ops.where((cat == 1)[:, None, None], a, jnp.zeros_like(a))
  same = jnp.all(ops.eq(out, expected), axis=(-2, -1))
  return jnp.sum(valid & ~same)


def _make_chunk_fns(cm, chunk: int, vm=None, kernel: str = 'fast', mesh=None):
  """Jitted ``multiset_chunk(params, start, total)`` and ``full_chunk(params, start,
  total, table)`` over indices ``start + arange(chunk)``; with a multi-device ``mesh``
  (``chunk`` a multiple of its size) the indices are sharded along it."""
  ops = cm.ops
  if mesh is not None and mesh.devices.size > 1:
    if chunk % mesh.devices.size:
      raise ValueError(f'chunk={chunk} is not a multiple of the {mesh.devices.size} devices.')
    sharding = parallel.data_sharding(mesh)
    shard = lambda x: jax.lax.with_sharding_constraint(x, sharding)
  else:
    shard = lambda x: x
  codec = grids.make_codec(cm.d, cm.n, cm.resolution)
  class_codec = grids.make_class_codec(cm.d, cm.n, cm.resolution) if vm is not None else None
  forward = sweep.kernel_fn(cm, kernel)
  words = sweep_kernel.words_fn(cm)

  def run(params, k, valid):
    out = forward(params, k)
    q, lt = out['ids'], out['sweep_ids']
    cat = codec['category'](k)
    counts, ltn = _point_checks(cm, ops, q, lt, cat, valid)
    counts['inexact'] = out['inexact']
    if vm is not None:
      counts['lemma9_value_mapping'] = _value_mapping_check(vm, ops, codec, class_codec, k,
                                                            out['z'], cat, valid)
    z = out['z']
    # Extremes of q and z as int64 words (``sweep_kernel.words_fn``). Padding rows
    # (index >= total) are copies of the last grid point, so every row counts.
    counts['extremes'] = jnp.stack(sweep_kernel.words_extremes(words(q))
                                   + sweep_kernel.words_extremes(words(z)))   # [4, C]
    return counts, q, ltn, cat

  def multiset_chunk(params, start, total):
    rank = shard(start + jnp.arange(chunk, dtype=jnp.int64))
    valid = rank < total
    k = codec['decode_multiset'](jnp.minimum(rank, total - 1))
    return run(params, k, valid)

  def full_chunk(params, start, total, table):
    idx = shard(start + jnp.arange(chunk, dtype=jnp.int64))
    valid = idx < total
    k = codec['decode_full'](jnp.minimum(idx, total - 1))
    counts, q, _, _ = run(params, k, valid)
    perm = codec['canonical_order'](k)
    col = jnp.take_along_axis(codec['column_index'](k), perm, axis=-1)
    q_rep = table[codec['rank_multiset'](col)]
    same = jnp.all(ops.eq(ops.take(q, perm, 1), q_rep), axis=-1)
    counts['permutation_equivariance'] = jnp.sum(valid & ~same)
    return counts

  return jax.jit(multiset_chunk), jax.jit(full_chunk)


# ---------------------------------------------------------------------------
# Driver.
# ---------------------------------------------------------------------------


class _Totals:
  """Host-side accumulation of per-chunk counts and value extremes (Python ints)."""

  def __init__(self, cm):
    self.cm = cm
    self.counts = {}
    self.max_abs = 0

  def add(self, counts):
    for key, val in counts.items():
      if key == 'extremes':  # words [4, C]
        vals = sweep_kernel.words_to_python(self.cm, parallel.to_host(val))
        self.max_abs = max([self.max_abs] + [abs(int(v)) for v in vals])
      else:
        self.counts[key] = self.counts.get(key, 0) + int(val)


def verify_contextual_mapping(cm, *, grid: str = 'multiset', chunk_size: int = DEFAULT_CHUNK,
                              progress: bool = True, value_mapping=None,
                              kernel: str = 'sweep', num_devices: int | None = None,
                              state_path: str | None = None, resume: bool = False) -> dict:
  """Checks Lemma 8 / Lemma 10 on every point of the grid, exactly.

  Args:
    cm: a ``yun.ContextualMapping``.
    grid: 'full' (every ordered point of G+_delta; adds the permutation-equivariance
      check) or 'multiset' (one representative per permutation class).
    chunk_size: points per jit call (bounds memory).
    progress: show tqdm progress bars.
    value_mapping: optional ``yun.value.ValueMapping`` for ``cm``; then every point
      also checks Lemma 9 end to end (``lemma9_value_mapping``): the compact g_v of
      g_c(L) equals A_L on G~ (A_L = A_C permuted back) and 0 elsewhere, exactly.
    kernel: 'sweep' (g_c on column ids, ``yun.sweep``; the full grid runs in blocks,
      ``sweep_kernel``), 'fast' (shared-projection identity) or 'core' (the core's
      layers for int64, generic limb layers beyond): the literal kernels, the
      cross-check. See ``yun.sweep.kernel_fn``.
    num_devices: shard each chunk over the first this many devices (default: all of
      ``jax.devices()``, every host's in a multi-host run); the chunk is rounded up to
      a multiple of it. Counts do not depend on it.
    state_path, resume: full grid with kernel 'sweep': save the completed blocks and
      partial counts here; continue from them (``sweep_kernel.full_pass``).
  Returns:
    dict with ``grid_points``, ``violations`` (property -> count), category counts,
    ``max_abs_value`` seen vs the planned bound, ``devices``, ``chunk_size`` (as
    run), ``seconds``, ``provenance``.
  """
  if grid not in grids.GRIDS:
    raise ValueError(f'grid={grid!r}; allowed: {grids.GRIDS}.')
  if not isinstance(chunk_size, int) or chunk_size < 1:
    raise ValueError(f'chunk_size must be a positive integer, got {chunk_size!r}.')
  t0 = time.time()
  prov = provenance.record()  # at the start: the revision that runs
  ops = cm.ops
  d, n, N = cm.d, cm.n, cm.resolution
  m_total = grids.grid_size(d, n, N, 'multiset')
  violations = {p: 0 for p in PROPERTIES if grid == 'full' or p != 'permutation_equivariance'}
  mesh = parallel.make_mesh(num_devices)
  num_dev = mesh.devices.size
  f_total = grids.grid_size(d, n, N, 'full')
  requested_chunk = chunk_size
  chunk_size = chunk_cap(cm, chunk_size, m_total if grid == 'multiset' or kernel == 'sweep'
                         else f_total)
  chunk_size = -(-chunk_size // num_dev) * num_dev
  # The block pass reads a class table when it is small, else recomputes each point's
  # representative in-kernel (no table held).
  keep_table = grid == 'full' and (kernel != 'sweep' or sweep_kernel.uses_table(cm))
  with jax.enable_x64(True):
    multiset_chunk, full_chunk = _make_chunk_fns(cm, chunk_size, value_mapping, kernel,
                                                 mesh)
    params = parallel.replicate(cm.exact_params, mesh) if num_dev > 1 else cm.exact_params
    totals_m = _Totals(cm)
    cat1_q, cat1_ltn, table = [], [], []
    starts = range(0, m_total, chunk_size)
    for start in tqdm.tqdm(starts, desc='classes', disable=not progress, unit='chunk'):
      counts, q, ltn, cat = multiset_chunk(params, jnp.int64(start), jnp.int64(m_total))
      totals_m.add(counts)
      valid = np.arange(start, start + chunk_size) < m_total
      is1 = (parallel.to_host(cat) == 1) & valid
      q_host = parallel.to_host(q)
      cat1_q.append(q_host[is1])
      cat1_ltn.append(parallel.to_host(ltn)[is1])
      if keep_table:
        table.append(q_host[valid])
    cat1_q = np.concatenate(cat1_q)
    cat1_ltn = np.concatenate(cat1_ltn)
    m1 = len(cat1_q)
    # 8.2 on representatives: all n * m1 values distinct across classes.
    flat = cat1_q.reshape((m1 * n,) + cat1_q.shape[2:])
    violations['8.2_distinct_across_classes'] = count_duplicates(
        ops, flat, np.repeat(np.arange(m1), n))
    violations['lemma10_one_to_one'] = count_duplicates(ops, cat1_ltn, np.arange(m1))
    expected_m = grids.category_counts(d, n, N, 'multiset')
    result = {'multiset_points': totals_m.counts['points'],
              'multiset_categories': {str(k): totals_m.counts[f'category_{k}'] for k in (1, 2, 3)}}
    bad_counts = int(totals_m.counts['points'] != m_total) + sum(
        int(totals_m.counts[f'category_{k}'] != expected_m[k]) for k in (1, 2, 3))
    totals = totals_m
    t_multiset = time.time() - t0
    if grid == 'full':
      table = np.concatenate(table) if keep_table else None
      if kernel != 'sweep':  # the block pass takes the host table (one device copy)
        table = parallel.replicate(table, mesh) if num_dev > 1 else jnp.asarray(table)
      totals = _Totals(cm)
      if kernel == 'sweep':
        extra = None
        if value_mapping is not None:
          codec = grids.make_codec(d, n, N)
          class_codec = grids.make_class_codec(d, n, N)
          extra = lambda k, z, cat, valid: _value_mapping_check(  # noqa: E731
              value_mapping, ops, codec, class_codec, k, z, cat, valid)
        run = sweep_kernel.full_pass(cm, table, chunk_size=requested_chunk,
                                     progress=progress, extra=extra, num_devices=num_dev,
                                     state_path=state_path, resume=resume)
        totals.counts = dict(run['counts'])
        if value_mapping is not None:
          totals.counts['lemma9_value_mapping'] = totals.counts.pop('extra')
        totals.max_abs = run['max_abs']
        result['full_pass'] = {k: run[k] for k in ('block', 'num_blocks', 'resumed_from',
                                                   'sweep', 'equivariance')}
      else:
        for start in tqdm.tqdm(range(0, f_total, chunk_size), desc='points',
                               disable=not progress, unit='chunk'):
          totals.add(full_chunk(params, jnp.int64(start), jnp.int64(f_total), table))
      expected = grids.category_counts(d, n, N, 'full')
      bad_counts += int(totals.counts['points'] != f_total) + sum(
          int(totals.counts[f'category_{k}'] != expected[k]) for k in (1, 2, 3))
      violations['permutation_equivariance'] = totals.counts['permutation_equivariance']
      # The representatives' per-point checks are repeated on every ordered point.
      for key in ('8.1_distinct_entries', '8.3_inside_interval', '8.4_outside_interval',
                  'lemma10_bounds'):
        violations[key] += totals_m.counts[key]
      result['categories'] = {str(k): totals.counts[f'category_{k}'] for k in (1, 2, 3)}
    for key in ('8.1_distinct_entries', '8.3_inside_interval', '8.4_outside_interval',
                'lemma10_bounds'):
      violations[key] += totals.counts[key]
    violations['exact_tie_averages'] = totals_m.counts['inexact'] + (
        totals.counts['inexact'] if totals is not totals_m else 0)
    violations['category_counts'] = bad_counts
    if value_mapping is not None:
      violations['lemma9_value_mapping'] = totals_m.counts['lemma9_value_mapping'] + (
          totals.counts['lemma9_value_mapping'] if totals is not totals_m else 0)
    grid_points = totals.counts['points']
    expected_points = grids.grid_size(d, n, N, grid)
    violations['grid_point_count'] = int(grid_points != expected_points)
    max_abs = max(totals_m.max_abs, totals.max_abs)
    violations['bits_within_plan'] = int(max_abs > cm.bound)
  result.update({
      'd': d, 'n': n, 'resolution': N, 'grid': grid,
      'grid_points': grid_points, 'grid_points_expected': expected_points,
      'violations': violations,
      'all_hold': not any(violations.values()),
      'arithmetic': cm.arithmetic.kind, 'arithmetic_detail': cm.arithmetic.describe(),
      'kernel': kernel,
      'bits_required': cm.bits_required, 'bound': str(cm.bound),
      'max_abs_output': str(max_abs), 'max_abs_output_bits': int(max_abs).bit_length(),
      't_l': str(cm.t_l), 't_r': str(cm.t_r),
      'num_layers': cm.depth(), 'num_params': cm.num_params(),
      'category_1_classes': m1, 'chunk_size': chunk_size, 'devices': num_dev,
      'seconds': round(time.time() - t0, 3),
      'multiset_pass_seconds': round(t_multiset, 3),
      'provenance': prov,
  })
  return result
