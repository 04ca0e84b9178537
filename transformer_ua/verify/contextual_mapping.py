r"""Exact whole-grid verification of Lemma 8 and Lemma 10 (Yun et al. 2020, E.3).

Every point is run through the compiled attention layers of g_c (``yun.stages.contextual``)
in exact integer arithmetic (int64 or limbs, as planned), chunk by chunk: grid points
are decoded on device from linear indices (``yun.enumeration``), each chunk is one jit-compiled
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

Structure. The per-point properties are ``checks`` (one place); the passes run through
``grid_pass`` (``Chunks``: the multiset pass and, with a literal kernel, the full one;
``Blocks``: the full pass in-kernel, resumable with progress and ETA, ``runner``).
Kernels (``yun.stages.gc_kernels``): by default (``kernel='sweep'``) g_c runs on column ids
(``yun.stages.sweep``) and the full-grid pass runs in blocks; ``'fast'`` / ``'core'`` run the
literal layers (the cross-check: tests compare all three on whole grids). Chunks are
capped at the grid size and at a working-set budget (``chunk_cap``).

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

from transformer_ua import parallel, provenance
from transformer_ua.verify import checks, grid_pass, sweep_kernel
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import gc_kernels
from transformer_ua.yun import enumeration as enumeration_lib

#: Properties of the result: the per-point ones (``checks.LEMMA8``) and the global ones.
PROPERTIES = checks.LEMMA8 + (
    '8.2_distinct_across_classes', 'lemma10_one_to_one', 'permutation_equivariance',
    'exact_tie_averages', 'grid_point_count', 'category_counts', 'bits_within_plan')
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
# Chunk functions (the ``grid_pass.Chunks`` strategy).
# ---------------------------------------------------------------------------


def _make_chunk_fns(cm, chunk: int, vm=None, kernel: str = 'fast', mesh=None):
  """Jitted ``multiset_chunk(params, start, total)`` and ``full_chunk(params, start,
  total, table)`` (``grid_pass.chunk_fns``) checking Lemma 8 / 10 (and Lemma 9 with a
  value mapping ``vm``); with a multi-device ``mesh`` (``chunk`` a multiple of its size)
  the indices are sharded along it."""
  ops = cm.ops
  shard = None
  if mesh is not None and mesh.devices.size > 1:
    if chunk % mesh.devices.size:
      raise ValueError(f'chunk={chunk} is not a multiple of the {mesh.devices.size} devices.')
    sharding = parallel.data_sharding(mesh)
    shard = lambda x: jax.lax.with_sharding_constraint(x, sharding)  # noqa: E731
  n = cm.n
  codec = enumeration_lib.make_codec(Grid(cm.d, n, cm.resolution))
  class_codec = (enumeration_lib.make_class_codec(Grid(cm.d, n, cm.resolution))
                 if vm is not None else None)
  forward = gc_kernels.kernel_fn(cm, kernel)
  words = sweep_kernel.words_fn(cm)
  bounds = checks.scaled_constants(cm)

  def run(params, k, valid):
    const = {key: ops.constant(val) for key, val in bounds.items()}
    out = forward(params, k)
    q = out.ids
    cat = codec['category'](k)
    ltn = ops.max(out.sweep_ids, 1)
    counts = {**checks.categories(cat, valid),
              **checks.lemma8([q[:, j] for j in range(n)], cat, valid, cmp=ops,
                              t_l=const['t_l'], t_r=const['t_r'], ltn=ltn, l10_cmp=ops,
                              lo=const['id_lower'], hi=const['id_upper']),
              'inexact': out.inexact}
    if vm is not None:
      counts['lemma9_value_mapping'] = checks.lemma9(vm, ops, codec, class_codec, k, out.z,
                                                     cat, valid)
    # Extremes of q and z as int64 words (``sweep_kernel.words_fn``). Padding rows
    # (index >= total) are copies of the last grid point, so every row counts.
    ext = sweep_kernel.words_extremes(words(q)) + sweep_kernel.words_extremes(words(out.z))
    return counts, ext, (q, ltn, cat)

  return grid_pass.chunk_fns(cm, chunk, run, shard)


# ---------------------------------------------------------------------------
# Driver.
# ---------------------------------------------------------------------------


def verify_contextual_mapping(cm, *, enumeration: str = 'multiset', chunk_size: int = DEFAULT_CHUNK,
                              progress: bool = True, value_mapping=None,
                              kernel: str = 'sweep', num_devices: int | None = None,
                              state_path: str | None = None, resume: bool = False) -> dict:
  """Checks Lemma 8 / Lemma 10 on every point of the grid, exactly.

  Args:
    cm: a ``contextual.ContextualMapping``.
    enumeration: 'full' (every ordered point of G+_delta; adds the permutation-equivariance
      check) or 'multiset' (one representative per permutation class).
    chunk_size: points per jit call (bounds memory).
    progress: print progress lines (stderr).
    value_mapping: optional ``yun.stages.value.ValueMapping`` for ``cm``; then every point
      also checks Lemma 9 end to end (``lemma9_value_mapping``): the compact g_v of
      g_c(L) equals A_L on G~ (A_L = A_C permuted back) and 0 elsewhere, exactly.
    kernel: a ``yun.stages.gc_kernels`` kernel: 'sweep' (g_c on column ids, ``yun.stages.sweep``; the
      full grid runs in blocks, ``sweep_kernel``), 'fast' (shared-projection identity)
      or 'core' (the core's layers for int64, generic limb layers beyond): the literal
      kernels, the cross-check.
    num_devices: shard each chunk over the first this many devices (default: all of
      ``jax.devices()``, every host's in a multi-host run); the chunk is rounded up to
      a multiple of it. Counts do not depend on it.
    state_path, resume: full grid with kernel 'sweep': save the completed blocks and
      partial counts here; continue from them (``grid_pass.full_pass``).
  Returns:
    dict with ``grid`` (the enumeration run), ``grid_points``, ``violations`` (property
    -> count), category counts, ``max_abs_value`` seen vs the planned bound,
    ``devices``, ``chunk_size`` (as run), ``seconds``, ``provenance``.
  """
  if enumeration not in enumeration_lib.GRIDS:
    raise ValueError(f'enumeration={enumeration!r}; allowed: {enumeration_lib.GRIDS}.')
  if not isinstance(chunk_size, int) or chunk_size < 1:
    raise ValueError(f'chunk_size must be a positive integer, got {chunk_size!r}.')
  t0 = time.time()
  prov = provenance.record()  # at the start: the revision that runs
  ops = cm.ops
  d, n, N = cm.d, cm.n, cm.resolution
  m_total = enumeration_lib.grid_size(cm.grid, 'multiset')
  violations = {p: 0 for p in PROPERTIES
                if enumeration == 'full' or p != 'permutation_equivariance'}
  mesh = parallel.make_mesh(num_devices)
  num_dev = mesh.devices.size
  f_total = enumeration_lib.grid_size(cm.grid, 'full')
  requested_chunk = chunk_size
  chunk_size = chunk_cap(cm, chunk_size, m_total if enumeration == 'multiset' or kernel == 'sweep'
                         else f_total)
  chunk_size = -(-chunk_size // num_dev) * num_dev
  # The block pass reads a class table when it is small, else recomputes each point's
  # representative in-kernel (no table held).
  keep_table = enumeration == 'full' and (kernel != 'sweep' or sweep_kernel.uses_table(cm))
  per_point = checks.LEMMA8 + (('lemma9_value_mapping',) if value_mapping is not None else ())
  with jax.enable_x64(True):
    multiset_chunk, full_chunk = _make_chunk_fns(cm, chunk_size, value_mapping, kernel,
                                                 mesh)
    params = parallel.replicate(cm.exact_params, mesh) if num_dev > 1 else cm.exact_params
  cat1_q, cat1_ltn, table = [], [], []

  def collect(start, payload):  # the Category-1 representatives' q and l~_n; the table
    q, ltn, cat = payload
    valid = np.arange(start, start + chunk_size) < m_total
    is1 = (parallel.to_host(cat) == 1) & valid
    q_host = parallel.to_host(q)
    cat1_q.append(q_host[is1])
    cat1_ltn.append(parallel.to_host(ltn)[is1])
    if keep_table:
      table.append(q_host[valid])

  multiset = grid_pass.run(grid_pass.Chunks(
      cm, lambda start, total: multiset_chunk(params, start, total), m_total, chunk_size,
      collect=collect, label='classes'), progress=progress)
  cat1_q, cat1_ltn = np.concatenate(cat1_q), np.concatenate(cat1_ltn)
  m1 = len(cat1_q)
  # 8.2 on representatives: all n * m1 values distinct across classes.
  flat = cat1_q.reshape((m1 * n,) + cat1_q.shape[2:])
  violations['8.2_distinct_across_classes'] = checks.count_duplicates(
      ops, flat, np.repeat(np.arange(m1), n))
  violations['lemma10_one_to_one'] = checks.count_duplicates(ops, cat1_ltn, np.arange(m1))
  expected_m = enumeration_lib.category_counts(cm.grid, 'multiset')
  mc = multiset['counts']
  result = {'multiset_points': mc['points'],
            'multiset_categories': {str(k): mc[f'category_{k}'] for k in (1, 2, 3)}}
  bad_counts = int(mc['points'] != m_total) + sum(
      int(mc[f'category_{k}'] != expected_m[k]) for k in (1, 2, 3))
  passes = [multiset]
  t_multiset = time.time() - t0
  if enumeration == 'full':
    table = np.concatenate(table) if keep_table else None
    if kernel == 'sweep':
      extra = None
      if value_mapping is not None:
        codec = enumeration_lib.make_codec(cm.grid)
        class_codec = enumeration_lib.make_class_codec(cm.grid)
        extra = lambda k, z, cat, valid: checks.lemma9(  # noqa: E731
            value_mapping, ops, codec, class_codec, k, z, cat, valid)
      full = grid_pass.full_pass(cm, table, chunk_size=requested_chunk, progress=progress,
                                 extra=extra, num_devices=num_dev, state_path=state_path,
                                 resume=resume)
      if value_mapping is not None:
        full['counts']['lemma9_value_mapping'] = full['counts'].pop('extra')
      result['full_pass'] = {k: full[k] for k in (
          'block', 'num_blocks', 'resumed_from', 'complete', 'sweep', 'equivariance',
          'seconds', 'points_run', 'points_per_second', 'cpu_seconds',
          'points_per_cpu_second', 'ops_per_point', 'cores',
          'alu_limit_points_per_second', 'fraction_of_alu_limit')}
      result['full_pass']['seconds'] = round(result['full_pass']['seconds'], 3)
    else:
      with jax.enable_x64(True):
        table = parallel.replicate(table, mesh) if num_dev > 1 else jnp.asarray(table)
      full = grid_pass.run(grid_pass.Chunks(
          cm, lambda start, total: full_chunk(params, start, total, table), f_total,
          chunk_size), progress=progress)
    fc = full['counts']
    expected = enumeration_lib.category_counts(cm.grid, 'full')
    bad_counts += int(fc['points'] != f_total) + sum(
        int(fc[f'category_{k}'] != expected[k]) for k in (1, 2, 3))
    violations['permutation_equivariance'] = fc['permutation_equivariance']
    result['categories'] = {str(k): fc[f'category_{k}'] for k in (1, 2, 3)}
    passes.append(full)   # the representatives' per-point checks are repeated here
  for key in per_point:
    violations[key] = sum(p['counts'][key] for p in passes)
  violations['exact_tie_averages'] = sum(p['counts']['inexact'] for p in passes)
  violations['category_counts'] = bad_counts
  grid_points = passes[-1]['counts']['points']
  expected_points = enumeration_lib.grid_size(cm.grid, enumeration)
  violations['grid_point_count'] = int(grid_points != expected_points)
  max_abs = max(p['max_abs'] for p in passes)
  violations['bits_within_plan'] = int(max_abs > cm.bound)
  result.update({
      'd': d, 'n': n, 'resolution': N, 'grid': enumeration,
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
