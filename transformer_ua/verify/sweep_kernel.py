r"""Whole-grid pass of the verifier on column ids: blocks of G+_delta, many per jit call.

The full grid G+_delta has V^n points (V = (N+1)^d columns, ``grids``: point p has
column j = digit j of p in base V). A *block* fixes the last n - m columns and runs the
first m through all V^m combinations:

    block t, point b:  c_j = digit_j(b)          j < m    (the same for every block)
                       c_j = digit_{j-m}(t)      j >= m   (decoded in-kernel from t)

so block t holds exactly the points p = t V^m + b, the V^(n-m) blocks tile the grid
with no padding, and per-point decoding is a lookup of precomputed block columns.
Each block runs g_c on ids (``yun.stages.sweep``: token-major [n, B] arrays, one
``lax.fori_loop`` over the sweep, the sweep in the narrowest proven integer type, the
global shift in the planned arithmetic) and checks, per point (L in G+, C its class
representative, the columns of L sorted):

    8.1, 8.3, 8.4, Lemma 10 bounds      ``checks.lemma8`` (as every pass)
    permutation equivariance            q(L)_j = q(C)_{pos_j} (``checks.equivariance_aligned``,
                                        ``checks.equivariance``),
                                        pos_j = #{i: c_i < c_j} + #{i < j: c_i = c_j}
                                        (stable sorted position)

and returns only counts and extremes. The positions cost O(n) per point: the block
columns' positions among themselves, #{block c_i <= c} and {c : some block c_i = c}
([V, B] tables) are host constants, the decoded columns are scalars per block. q(C)
comes from one of two places:

    class table (when it holds <= TABLE_BUDGET bytes): q of every representative from
        the multiset pass, C ranked by sum_j C(c_j + pos_j, pos_j + 1) (colex rank);
        q(C)_{pos_j} is read at row rank n + pos_j, one gather per token, and compared
        with q(L)_j;
    in-kernel: C's ids are L's ids permuted (C_p = L_j where pos_j = p) and g_c runs on
        them in the same call -- twice the sweep, no table (N=3, d=3, n=5: the table
        would be 1.2 GiB); q(L)_j = q(C)_{pos_j} is then an [n, n] network (for every
        j, p: pos_j != p or the two are equal).

A table larger than SUBTABLE_BUDGET is read through parts that stay in the cache (its
reads at random rows otherwise wait on memory: a quarter of the pass at N=2, d=3, n=7):
the last n - u columns are the top digits of the block index, fixed for a window of
V^(u - m) consecutive blocks (``free_columns``), so a window's points fall in the
classes A + W, A a multiset of the first u columns, W the fixed columns' values:

    part(W)[r n + p] = table[rank(A_r + W) n + p]      r < C(V + u - 1, u)
    q(C)_{pos_j}     = part(W)[rank_u(c_0 .. c_{u-1}) n + pos_j]

with rank_u the colex rank of the free columns (their own stable positions). Each
device builds the part for each window of its call (a call covers whole windows or
lies in one, ``steps_per_call``).

Final values are compared, ordered and reduced as int64 *words* (``words_fn``): the
value itself in int64, or the limbs
packed two to a word (``limbs.ordered_words``; 3 limbs of 30 bits -> 2 words), so a
limb comparison costs two int64 ones.

Blocks hold at most ``CACHE_POINTS`` points (their [n, B] arrays stay in L2); one jit
call runs ``steps`` consecutive blocks per device in a ``lax.scan`` (a call covers up
to the chunk size), so the per-call dispatch is paid once per chunk. With D devices,
device k runs blocks t0 + k steps .. t0 + (k + 1) steps - 1 (leading axis sharded) and
returns its own counts (no collective, so no device waits for another).

This module is the block *strategy* (``layout``, ``make_block_fn``); the pass itself
(progress with an ETA, resumable state) is ``grid_pass.full_pass`` through ``runner``.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import parallel
from transformer_ua.exact import limbs
from transformer_ua.verify import checks
from transformer_ua.yun import enumeration
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import sweep

#: Bytes per grid point of a block's working set, per word of the arithmetic and token
#: (measured peak RSS growth per block point is below this).
POINT_BYTES_PER_TOKEN_WORD = 96
#: Default memory budget of one block's working set.
BLOCK_BUDGET = 1 << 29
#: Most points of one block: its [n, B] arrays then stay in a core's L2 cache (1 MiB on
#: the AMD EPYC measured; 4,096-point blocks were as fast as 16k-64k ones within the
#: +-20% noise of that shared machine) and a call's working set stays small. One call
#: runs ``steps`` consecutive blocks per device (``lax.scan``), up to the chunk size.
CACHE_POINTS = 4096
#: Largest class table the equivariance check reads; beyond it each point's class
#: representative is recomputed in-kernel (``make_block_fn``).
TABLE_BUDGET = 1 << 30
#: Largest part of the class table one call reads (``free_columns``): a table that
#: stays in the cache, where reads of the whole table at random rows wait on memory.
SUBTABLE_BUDGET = 1 << 22


#: Integer operations per second per core of the roofline (``ops_per_point``): 3 GHz x 4
#: int64 lanes (256-bit vectors, what XLA's CPU backend emits by default; AVX-512 would
#: double it).
ALU_OPS_PER_SECOND_PER_CORE = 1.2e10


def ops_per_point(cm) -> int:
  """Integer operations per grid point of the block pass (the ALU roofline's count).

  Per layer of the sweep a max and a min over n tokens, spread x gain, two compares, an
  and, an add and a select per token; the global shift's max, min, sum, mean and per
  token two selects, a multiply and an add in the mapping's words (limbs: each op once
  per word); the checks (distinct pairs, interval, equivariance compares) per word; the
  sorted positions and the class rank. Without a class table the representative runs
  through the sweep and the global shift too (twice those).
  """
  N, d, n = cm.resolution, cm.d, cm.n
  words = cm.arithmetic.num_limbs if cm.limbs else 1
  sweep = N ** d * (2 * (n - 1) + 2 + 5 * n)
  shift = 3 * (n - 1) + 2 + 4 * n
  checks = (n * (n - 1) + 4 * n + 2 * n) * words
  index = n * (n - 1) + 6 * n
  runs = 1 if uses_table(cm) else 2
  return runs * (sweep + shift * words) + checks + index


def block_points_cap(cm, budget: int = BLOCK_BUDGET) -> int:
  """Most points one block may hold within ``budget`` bytes of working set."""
  words = cm.arithmetic.num_limbs if cm.limbs else 1
  return max(1, budget // (POINT_BYTES_PER_TOKEN_WORD * cm.n * (words + 1)))


def layout(cm, chunk_size: int) -> tuple[int, int, int]:
  """(m, block = V^m, num_blocks = V^(n-m)): the largest block of at most
  ``min(chunk_size, block_points_cap, CACHE_POINTS)`` points (m >= 1)."""
  v = enumeration.num_column_values(cm.d, cm.resolution)
  cap = min(int(chunk_size), block_points_cap(cm), CACHE_POINTS)
  m = 1
  while m < cm.n and v ** (m + 1) <= cap:
    m += 1
  return m, v ** m, v ** (cm.n - m)


def steps_per_call(chunk_size: int, block: int, num_blocks: int,
                   num_devices: int, window: int | None = None) -> int:
  """Blocks each device runs per call: up to ``chunk_size`` points (at most the grid);
  with a ``window`` (``window_blocks``), a multiple or a divisor of it, so that a
  device's blocks cover whole windows or lie in one."""
  per_device = -(-num_blocks // num_devices)
  steps = max(1, min(int(chunk_size) // block, per_device))
  if window is None:
    return steps
  if steps >= window:
    return steps // window * window
  return next(s for s in range(steps, 0, -1) if window % s == 0)


def free_columns(cm, m: int) -> int:
  """u in (m, n]: the class table is read through its part for the classes of the
  first u columns with the last n - u fixed (the top digits of the block index, the
  same for a window of V^(u - m) consecutive blocks). A part has C(V + u - 1, u)
  classes (the multisets of the u free columns); u is the largest whose part holds at
  most ``SUBTABLE_BUDGET`` bytes, n (the whole table) when none does."""
  v, n = enumeration.num_column_values(cm.d, cm.resolution), cm.n
  return next((u for u in range(n, m, -1)
               if 8 * num_words(cm) * n * math.comb(v + u - 1, u) <= SUBTABLE_BUDGET), n)


def window_blocks(cm, m: int, table) -> int | None:
  """Consecutive blocks that share the table part a call reads (``free_columns``):
  V^(u - m), or None (no table, or the whole table)."""
  if table is None or (free := free_columns(cm, m)) == cm.n:
    return None
  return enumeration.num_column_values(cm.d, cm.resolution) ** (free - m)


def _column_tables(cm):
  """Per column index c in [0, V): K [V, d] (grid indices, ``enumeration.column_digits``),
  out-of-range flag [V], and the scaled input entries x [V, d] (``cm.encode``, as the
  first token) and id u^T x [V] as Python ints."""
  d, v = cm.d, enumeration.num_column_values(cm.d, cm.resolution)
  k = enumeration.column_digits(np.arange(v, dtype=np.int64), d, cm.resolution + 1) - 1
  x = cm.encode_python(np.broadcast_to(k[:, None], (v, cm.n, d)))[:, 0]
  ids = (x * np.asarray(cm.u, dtype=object)).sum(axis=1)
  return k, np.any(k < 0, axis=1), x, ids


def table_bytes(grid: Grid, words: int) -> int:
  """Bytes of the class table of ``grid`` (a ``yun.grid.Grid``): q of every multiset
  representative, ``words`` int64 each."""
  return 8 * words * grid.n * enumeration.grid_size(grid, 'multiset')


def uses_table(cm, budget: int = TABLE_BUDGET) -> bool:
  """Whether the equivariance check reads a class table (else: in-kernel representative)."""
  words = cm.arithmetic.num_limbs if cm.limbs else 1
  return table_bytes(Grid(cm.d, cm.n, cm.resolution), words) <= budget


def _host(ops, values) -> np.ndarray:
  """``ops.const(values)`` computed on the host (NumPy, the same dtype and layout): an
  argument of the block function, placed on the devices once with the others (a device
  conversion would be one more program to trace and load per constant)."""
  return ops.constants(values) if ops.limbs else ops.constants(values).astype(ops.dtype)


def _block_constants(cm, m: int, s_ops, f_ops, tables) -> dict:
  """Host constants of every block (columns j < m of the block points), device arrays:

    cols [m, B] int32, ids [m, B(, K)], zoff [m, B(, K)] (x_j1 - id_j), oor [B],
    rep [B] (two equal columns among them), pos [m, B] int32 (stable positions among
    them), leq [V, B] int8 (#{j < m: c_j <= c}), has [V, B] (some c_j = c).
  """
  v = enumeration.num_column_values(cm.d, cm.resolution)
  _, col_oor, col_x, col_ids = tables
  b = np.arange(v ** m, dtype=np.int64)
  bc = enumeration.column_digits(b, m, v).T                                   # [m, B]
  rep = np.zeros(b.shape, bool)
  for j in range(m):
    for i in range(j):
      rep |= bc[i] == bc[j]
  values = np.arange(v)[:, None, None]
  return {'cols': bc.astype(np.int32), 'ids': _host(s_ops, col_ids[bc]),
          'zoff': _host(f_ops, col_x[bc, 0] - col_ids[bc]),
          'oor': col_oor[bc].any(axis=0), 'rep': rep, 'pos': enumeration.stable_positions(bc),
          'leq': (bc[None] <= values).sum(axis=1).astype(np.int8),
          'has': (bc[None] == values).any(axis=1)}


def words_fn(cm):
  """Values of the mapping's arithmetic [...(, K)] -> int64 words [...], most
  significant first, ordered and identified lexicographically: the value itself (int64),
  or ``limbs.ordered_words`` (2 words for 3 limbs of 30 bits)."""
  if cm.limbs:
    return lambda x: limbs.ordered_words(x, cm.arithmetic.spec)
  return lambda x: [x]


def num_words(cm) -> int:
  """int64 words per value of ``words_fn``."""
  if not cm.limbs:
    return 1
  return -(-cm.arithmetic.num_limbs // max(1, 63 // cm.arithmetic.spec.limb_bits))


def words_to_python(cm, words) -> np.ndarray:
  """Host words [..., C] (``words_fn``) -> Python ints."""
  if cm.limbs:
    return limbs.words_to_python(words, cm.arithmetic.spec)
  return np.asarray(words)[..., 0].astype(object)


def words_extremes(words):
  """(max, min) over every entry, each as its words stacked [C]."""
  out = []
  for largest, fill in ((True, jnp.iinfo(jnp.int64).min), (False, jnp.iinfo(jnp.int64).max)):
    cand, ext = True, []
    for w in words:
      e = (jnp.max if largest else jnp.min)(jnp.where(cand, w, fill))
      ext.append(e)
      cand = cand & (w == e)
    out.append(jnp.stack(ext))
  return tuple(out)


def _column_table_arrays(s_ops, f_ops, tables) -> dict:
  """Per column index c in [0, V), host arrays: ids [V(, K)] in the sweep's arithmetic,
  zoff [V(, K)] (x_c1 - id_c) in the mapping's, oor [V] (out of range)."""
  _, col_oor, col_x, col_ids = tables
  return {'ids': _host(s_ops, col_ids), 'zoff': _host(f_ops, col_x[:, 0] - col_ids),
          'oor': col_oor}


def _decode_block(cm, m: int, c: dict, tab: dict, t):
  """Block t's points, token-major: the n - m decoded columns ``pre`` [n - m] and

    cols [n, B], ids0 [n, B(, K)] (input ids), zoff [n, B(, K)], cat [B] in {1, 2, 3},
    pos [n, B] (stable sorted positions, O(n) per point: block columns j < m add
    #{decoded c_i < c_j}; decoded columns add #{block c_i <= c_j} (row c_j of ``leq``)
    and their own order).
  """
  n, v = cm.n, enumeration.num_column_values(cm.d, cm.resolution)
  block = v ** m
  pre = enumeration.column_digits(t, n - m, v).astype(jnp.int32)                # [n - m]

  def stack(own, per_column):
    rest = per_column[pre][:, None]
    return jnp.concatenate([own, jnp.broadcast_to(rest, (n - m, block) + rest.shape[2:])])

  cols = stack(c['cols'], jnp.arange(v, dtype=jnp.int32))
  ids0, zoff = stack(c['ids'], tab['ids']), stack(c['zoff'], tab['zoff'])
  any_oor = c['oor'] | jnp.any(tab['oor'][pre])
  pre_eq = pre[:, None] == pre[None, :]
  repeated = (c['rep'] | jnp.any(pre_eq & ~jnp.eye(n - m, dtype=bool))
              | jnp.any(c['has'][pre], axis=0))
  cat = jnp.where(any_oor, 3, jnp.where(repeated, 2, 1)).astype(jnp.int32)
  pos_blk = c['pos'] + jnp.sum(pre[:, None, None] < c['cols'][None], axis=0,
                               dtype=jnp.int32)
  pre_tie = pre_eq & (jnp.arange(n - m)[:, None] < jnp.arange(n - m)[None, :])
  pre_own = jnp.sum((pre[:, None] < pre[None, :]) | pre_tie, axis=0).astype(jnp.int32)
  pos_pre = c['leq'][pre].astype(jnp.int32) + pre_own[:, None]
  return pre, cols, ids0, zoff, cat, jnp.concatenate([pos_blk, pos_pre])


def _representative_ids(s_ops, ids0, pos):
  """Ids of each point's class representative C, C_p = L_j where pos_j = p: [n, B(, K)]."""
  n = ids0.shape[0]
  out = []
  for p in range(n):
    c_p = ids0[0]
    for j in range(1, n):
      c_p = s_ops.where(pos[j] == p, ids0[j], c_p)
    out.append(c_p)
  return jnp.stack(out)


def _colex_rank(binom, values, positions, v: int, n: int):
  """sum_j C(c_j + p_j, p_j + 1) over the leading axis: the colex rank of the multiset
  whose sorted sequence has c_j at p_j (``binom``: ``_class_binomials(n, v)``)."""
  return jnp.sum(binom[(positions + 1) * (v + n) + values + positions], axis=0)


def _table_part(table_rows, binom, free_sets, top, v: int, n: int, idx_dt):
  """Rows q(A + W) [R n, C] of the classes of ``free_sets`` A [R, u] (sorted, colex
  order) joined with the fixed columns' values W = ``top`` [n - u]: in the merged
  sorted sequence a_i sits at i + #{k: w_k < a_i}, w_k at k + #{i: a_i <= w_k}."""
  a, w = free_sets.T, jnp.sort(top).astype(free_sets.dtype)                # [u, R], [n - u]
  u = a.shape[0]
  pos_a = jnp.arange(u, dtype=a.dtype)[:, None] + jnp.sum(
      w[None, :, None] < a[:, None, :], axis=1, dtype=a.dtype)
  pos_w = jnp.arange(n - u, dtype=a.dtype)[:, None] + jnp.sum(
      a[None, :, :] <= w[:, None, None], axis=1, dtype=a.dtype)
  rank = (_colex_rank(binom, a.astype(idx_dt), pos_a.astype(idx_dt), v, n)
          + _colex_rank(binom, jnp.broadcast_to(w[:, None], pos_w.shape).astype(idx_dt),
                        pos_w.astype(idx_dt), v, n))
  return table_rows[(rank.astype(idx_dt)[:, None] * n + jnp.arange(n, dtype=idx_dt)
                     ).reshape(-1)]


def _free_multisets(v: int, u: int) -> np.ndarray:
  """Every multiset of u column values as its sorted sequence [R, u] int32, in colex
  rank order (R = C(V + u - 1, u)): colex compares sorted sequences from the last entry."""
  sets = sorted(itertools.combinations_with_replacement(range(v), u), key=lambda a: a[::-1])
  return np.asarray(sets, np.int32).reshape(-1, u)


def _run_with_reference(cm, prog, words, ids0, cols, pos, table_rows, binom, idx_dt,
                        free: int):
  """g_c on the block (``yun.stages.sweep``) and q(C) of each point's representative, as words:
  (sweep ids [n, B(, K)], q [n, B(, K)], ref [n][C] words [B], inexact).

  With a class table (or its part for the fixed columns, ``free_columns`` u < n; row
  r n + p holds q(C)_p of class r): ref_j = q(C)_{pos_j}, read at row rank n + pos_j,
  rank the colex rank of the first ``free`` columns (all n: of C), one gather per token
  and word; without: ref_p = q(C)_p, C's ids run through g_c in the same call (twice
  the sweep)."""
  v = enumeration.num_column_values(cm.d, cm.resolution)
  n, block = ids0.shape[0], ids0.shape[1]
  if table_rows is not None:
    ids = sweep.run_sweep(prog, ids0)
    q, _, inexact = sweep.global_shift(cm, prog, ids)
    free_pos = pos if free == n else enumeration.stable_positions(cols[:free]).astype(idx_dt)
    rank = _colex_rank(binom, cols[:free].astype(idx_dt), free_pos, v, n)
    at = table_rows[rank.astype(idx_dt)[None] * n + pos]                 # [n, B, C]
    return ids, q, [[at[j, :, i] for i in range(at.shape[-1])] for j in range(n)], inexact
  s_ops = sweep.sweep_ops(prog)
  both = sweep.run_sweep(prog, jnp.concatenate([ids0, _representative_ids(s_ops, ids0, pos)],
                                               axis=1))                 # [n, 2B(, K)]
  ids = both[:, :block]
  q, _, inexact = sweep.global_shift(cm, prog, ids)
  q_c, _, inexact_c = sweep.global_shift(cm, prog, both[:, block:])
  return ids, q, [[w[p] for w in words(q_c)] for p in range(n)], inexact + inexact_c


def _class_binomials(n: int, v: int) -> np.ndarray:
  """binom [(n + 1) (V + n)]: C(x, i) at i (V + n) + x, clipped at ``enumeration.MAX_INDEX``."""
  return np.asarray([min(math.comb(x, i), enumeration.MAX_INDEX) for i in range(n + 1)
                     for x in range(v + n)], np.int64)


def make_block_fn(cm, m: int, table, num_devices: int = 1, extra=None,
                  sweep_arithmetic: str = 'auto', steps: int = 1):
  """Jitted ``f(t0, num_blocks) -> (counts, extremes)`` for blocks t0 .. t0 + D steps - 1:
  device k runs blocks t0 + k steps + i, i < steps, one after the other (``lax.scan``).

  Args:
    cm: the contextual mapping; m: block columns; table: q of every class
      representative [M, n(, K)] in ``cm.arithmetic`` (host, multiset rank order), or
      None: each point's representative C (its columns sorted) is run through g_c in
      the same call (twice the sweep, no table in memory).
    extra: optional ``extra(k [P, n, d], z [P, n, d(, K)], cat [P], valid [P]) -> count``
      added as ``counts['extra']`` (the verifier's Lemma 9 check).
  Returns counts (``checks``' names, per device [D]) and extremes (max, min of q and of
  z's first row, as words [D, steps, C]).
  """
  prog = sweep.read_program(cm, sweep_arithmetic)
  s_ops, f_ops = sweep.sweep_ops(prog), sweep.final_ops(cm)
  d, n, N = cm.d, cm.n, cm.resolution
  v = enumeration.num_column_values(d, N)
  block = v ** m
  tables = _column_tables(cm)
  col_k = tables[0]
  # Category 1 (G~) is empty when n > N^d; then 8.1, 8.3 and Lemma 10 are vacuous (the
  # category counts, checked against the closed forms, confirm no point is in G~).
  has_cat1 = math.perm(N ** d, n) > 0
  with_table = table is not None
  # The table is read through its part for the last n - free columns (one per device
  # and call: a device's steps blocks lie in one window of V^(free - m) blocks).
  free = free_columns(cm, m) if with_table else n
  window = window_blocks(cm, m, table)
  if window is not None and window % steps and steps % window:
    raise ValueError(f'steps={steps} must divide or be a multiple of the window of '
                     f'{window} blocks.')
  # Index arithmetic of the equivariance lookup in int32 when it fits.
  rows = table.shape[0] if with_table else 0
  idx_dt = jnp.int32 if max(rows * n, (n + 1) * (v + n)) < 2 ** 31 else jnp.int64
  # The final values are compared, ordered and reduced as int64 words (``words_fn``).
  words = words_fn(cm)
  bounds = checks.scaled_constants(cm)
  t_l, t_r = words(f_ops.const(bounds['t_l'])), words(f_ops.const(bounds['t_r']))
  lo10, hi10 = bounds['id_lower'], bounds['id_upper']
  l10_ops = s_ops if max(abs(lo10), abs(hi10)) < 2 ** (prog.sweep_bits - 1) else f_ops
  lo10, hi10 = l10_ops.const(lo10), l10_ops.const(hi10)
  if extra is not None:
    k_block = jnp.asarray(col_k[enumeration.column_digits(np.arange(block), m, v)])   # [B, m, d]

  def one_block(t, num_blocks, table_rows, binom, c, tab):
    """Counts of block t (scalar); all-zero counts when t >= num_blocks."""
    ok = t < num_blocks
    pre, cols, ids0, zoff, cat, pos = _decode_block(cm, m, c, tab,
                                                    jnp.minimum(t, num_blocks - 1))
    pos = pos.astype(idx_dt)
    ids, q, ref, inexact = _run_with_reference(cm, prog, words, ids0, cols, pos,
                                               table_rows, binom, idx_dt, free)
    qw = words(q)                                                          # C x [n, B]
    q_tokens = [[w[j] for w in qw] for j in range(n)]
    valid = jnp.broadcast_to(ok, (block,))
    ltn = s_ops.reduce_max(ids)
    if l10_ops is not s_ops:
      ltn = f_ops.convert(ltn, s_ops)
    counts = {**checks.categories(cat, valid),
              **checks.lemma8(q_tokens, cat, valid, cmp=checks.WORDS, t_l=t_l, t_r=t_r,
                              ltn=ltn, l10_cmp=l10_ops, lo=lo10, hi=hi10,
                              category_1_possible=has_cat1),
              'permutation_equivariance': (
                  checks.equivariance_aligned(q_tokens, ref, valid, cmp=checks.WORDS)
                  if with_table else
                  checks.equivariance(q_tokens, pos, ref, valid, cmp=checks.WORDS)),
              'inexact': ok * inexact}
    # Extremes of q and of z's first row z_j1 = x_j1 + q_j - id_j (the other rows are
    # the inputs).
    z0 = f_ops.add(q, zoff)
    ext = words_extremes(qw) + words_extremes(words(z0))                 # 4 x [C]
    if extra is not None:
      k = jnp.concatenate([k_block, jnp.broadcast_to(jnp.asarray(col_k)[pre][None],
                                                     (block, n - m, d))], axis=1)
      z = cm.encode(k).at[:, :, 0].set(jnp.moveaxis(z0, 0, 1))
      counts['extra'] = extra(k, z, cat, valid)
    return {key: jnp.asarray(val, jnp.int64) for key, val in counts.items()}, ext

  def run_steps(t, count, num_blocks, *args):  # blocks t .. t + count - 1
    _, (counts, ext) = jax.lax.scan(
        lambda carry, i: (carry, one_block(t + i, num_blocks, *args)), None,
        jnp.arange(count, dtype=jnp.int64))
    return {key: jnp.sum(val) for key, val in counts.items()}, ext

  def run_windows(t, num_blocks, table_rows, binom, c, tab, free_sets):
    """Blocks t .. t + steps - 1, window by window, each with its part of the table."""
    per = min(window, steps)

    def one_window(k):
      t_k = t + k * per
      top = enumeration.column_digits(jnp.minimum(t_k, num_blocks - 1) // window, n - free, v)
      part = _table_part(table_rows, binom, free_sets, top, v, n, idx_dt)
      return run_steps(t_k, per, num_blocks, part, binom, c, tab)

    _, (counts, ext) = jax.lax.scan(lambda carry, k: (carry, one_window(k)), None,
                                    jnp.arange(steps // per, dtype=jnp.int64))
    return ({key: jnp.sum(val) for key, val in counts.items()},
            tuple(e.reshape((steps,) + e.shape[2:]) for e in ext))

  def local(ts, num_blocks, table_rows, binom, c, tab, free_sets):  # ts [1]: first block
    if window is None:
      counts, ext = run_steps(ts[0], steps, num_blocks, table_rows, binom, c, tab)
    else:
      counts, ext = run_windows(ts[0], num_blocks, table_rows, binom, c, tab, free_sets)
    return {key: val[None] for key, val in counts.items()}, tuple(e[None] for e in ext)

  if num_devices > 1:
    mesh = parallel.make_mesh(num_devices)
    spec = jax.sharding.PartitionSpec(mesh.axis_names[0])
    rep_spec = jax.sharding.PartitionSpec()
    local = jax.shard_map(local, mesh=mesh, in_specs=(spec,) + (rep_spec,) * 6,
                          out_specs=spec, check_vma=False)

  def f(t0, num_blocks, *args):  # per device: no collective, so no device waits for another
    return local(t0 + steps * jnp.arange(num_devices, dtype=jnp.int64), num_blocks, *args)

  # The class table and the block constants are arguments, not closed-over constants
  # (a constant is copied into the compiled program).
  if with_table:  # [M n, C] words (int64: the values themselves, no device program)
    table = (np.asarray(table)[..., None] if not cm.limbs else
             np.asarray(jnp.stack(words(jnp.asarray(table)), axis=-1)))
    table = table.reshape(-1, table.shape[-1])
  args = (table if with_table else None, _class_binomials(n, v),
          _block_constants(cm, m, s_ops, f_ops, tables),
          _column_table_arrays(s_ops, f_ops, tables),
          _free_multisets(v, free) if free < n else None)
  # Placed on the devices once (on every device with several), not copied on every call.
  args = jax.device_put(args, jax.sharding.NamedSharding(parallel.make_mesh(num_devices),
                                                         jax.sharding.PartitionSpec())
                        if num_devices > 1 else None)
  jitted = jax.jit(f)
  return lambda t0, num_blocks: jitted(t0, num_blocks, *args)


def input_max_abs(cm) -> int:
  """Largest |entry| of an encoded grid column (scaled): the extremes' starting value."""
  col_x = _column_tables(cm)[2]
  return int(max(abs(int(x)) for x in col_x.reshape(-1)))
