r"""Whole-grid pass of the verifier on column ids: blocks of G+_delta, many per jit call.

The full grid G+_delta has V^n points (V = (N+1)^d columns, ``grids``: point p has
column j = digit j of p in base V). A *block* fixes the last n - m columns and runs the
first m through all V^m combinations:

    block t, point b:  c_j = digit_j(b)          j < m    (the same for every block)
                       c_j = digit_{j-m}(t)      j >= m   (decoded in-kernel from t)

so block t holds exactly the points p = t V^m + b, the V^(n-m) blocks tile the grid
with no padding, and per-point decoding is a lookup of precomputed block columns.
Each block runs g_c on ids (``yun.sweep``: token-major [n, B] arrays, one
``lax.fori_loop`` over the sweep, the sweep in the narrowest proven integer type, the
global shift in the planned arithmetic) and checks, per point (L in G+, C its class
representative, the columns of L sorted):

    8.1, 8.3, 8.4, Lemma 10 bounds      as ``contextual_mapping._point_checks``
    permutation equivariance            q(L)_j = q(C)_{pos_j},  pos_j = #{i: c_i < c_j}
                                        + #{i < j: c_i = c_j} (stable sorted position)

and returns only counts and extremes. The positions cost O(n) per point: the block
columns' positions among themselves, #{block c_i <= c} and {c : some block c_i = c}
([V, B] tables) are host constants, the decoded columns are scalars per block. q(C)
comes from one of two places:

    class table (when it holds <= TABLE_BUDGET bytes): q of every representative from
        the multiset pass, C ranked by sum_j C(c_j + pos_j, pos_j + 1) (colex rank);
    in-kernel: C's ids are L's ids permuted (C_p = L_j where pos_j = p) and g_c runs on
        them in the same call -- twice the sweep, no table (N=3, d=3, n=5: the table
        would be 1.2 GiB).

The comparison q(L)_j = q(C)_{pos_j} is an [n, n] network (for every j, p: pos_j != p
or the two are equal), vectorized over the block: no per-token gathers (the class
table is read by one row gather per point). Final values are compared, ordered and
reduced as int64 *words* (``words_fn``): the value itself in int64, or the limbs
packed two to a word (``limbs.ordered_words``; 3 limbs of 30 bits -> 2 words), so a
limb comparison costs two int64 ones.

Blocks hold at most ``CACHE_POINTS`` points (their [n, B] arrays stay in L2); one jit
call runs ``steps`` consecutive blocks per device in a ``lax.scan`` (a call covers up
to the chunk size), so the per-call dispatch is paid once per chunk. With D devices,
device k runs blocks t0 + k steps .. t0 + (k + 1) steps - 1 (leading axis sharded).

Long runs: ``full_pass`` logs progress with an ETA and, with a ``state_path``,
saves the completed block range and the partial counts (JSON, atomically) so that a
run can be resumed (``resume=True``) where it stopped.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import outputs, parallel
from transformer_ua.exact import limbs
from transformer_ua.yun import grids, sweep

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
TABLE_BUDGET = 1 << 26
#: Seconds between progress lines / state saves.
LOG_EVERY, SAVE_EVERY = 30.0, 60.0
STATE_VERSION = 1


def block_points_cap(cm, budget: int = BLOCK_BUDGET) -> int:
  """Most points one block may hold within ``budget`` bytes of working set."""
  words = cm.arithmetic.num_limbs if cm.limbs else 1
  return max(1, budget // (POINT_BYTES_PER_TOKEN_WORD * cm.n * (words + 1)))


def layout(cm, chunk_size: int) -> tuple[int, int, int]:
  """(m, block = V^m, num_blocks = V^(n-m)): the largest block of at most
  ``min(chunk_size, block_points_cap, CACHE_POINTS)`` points (m >= 1)."""
  v = grids.num_column_values(cm.d, cm.resolution)
  cap = min(int(chunk_size), block_points_cap(cm), CACHE_POINTS)
  m = 1
  while m < cm.n and v ** (m + 1) <= cap:
    m += 1
  return m, v ** m, v ** (cm.n - m)


def steps_per_call(chunk_size: int, block: int, num_blocks: int,
                   num_devices: int) -> int:
  """Blocks each device runs per call: up to ``chunk_size`` points (at most the grid)."""
  per_device = -(-num_blocks // num_devices)
  return max(1, min(int(chunk_size) // block, per_device))


def _column_tables(cm):
  """Per column index c in [0, V): K [V, d] (grid indices), out-of-range flag [V], and
  the scaled input entries x [V, d] and id u^T x [V] as Python ints."""
  d, N, S = cm.d, cm.resolution, cm.scale
  v = grids.num_column_values(d, N)
  c = np.arange(v, dtype=np.int64)
  k = (c[:, None] // (N + 1) ** np.arange(d)) % (N + 1) - 1
  x = np.where(k < 0, -S * cm.out_of_range, k * (S // N)).astype(object)
  ids = (x * np.asarray(cm.u, dtype=object)).sum(axis=1)
  return k, np.any(k < 0, axis=1), x, ids


def table_bytes(d: int, n: int, resolution: int, words: int) -> int:
  """Bytes of the class table: q of every multiset representative, ``words`` int64 each."""
  return 8 * words * n * grids.grid_size(d, n, resolution, 'multiset')


def uses_table(cm, budget: int = TABLE_BUDGET) -> bool:
  """Whether the equivariance check reads a class table (else: in-kernel representative)."""
  words = cm.arithmetic.num_limbs if cm.limbs else 1
  return table_bytes(cm.d, cm.n, cm.resolution, words) <= budget


def _block_constants(cm, m: int, s_ops, f_ops) -> dict:
  """Host constants of every block (columns j < m of the block points), device arrays:

    cols [m, B] int32, ids [m, B(, K)], zoff [m, B(, K)] (x_j1 - id_j), oor [B],
    rep [B] (two equal columns among them), pos [m, B] int32 (stable positions among
    them), leq [V, B] int8 (#{j < m: c_j <= c}), has [V, B] (some c_j = c).
  """
  v = grids.num_column_values(cm.d, cm.resolution)
  _, col_oor, col_x, col_ids = _column_tables(cm)
  b = np.arange(v ** m, dtype=np.int64)
  bc = np.stack([(b // v ** j) % v for j in range(m)])                  # [m, B]
  pos = np.zeros(bc.shape, np.int32)
  rep = np.zeros(b.shape, bool)
  for j in range(m):
    for i in range(m):
      if i != j:
        pos[j] += (bc[i] < bc[j]) | ((bc[i] == bc[j]) & (i < j))
        rep |= bc[i] == bc[j]
  values = np.arange(v)[:, None, None]
  return {'cols': jnp.asarray(bc.astype(np.int32)), 'ids': s_ops.const(col_ids[bc]),
          'zoff': f_ops.const(col_x[bc, 0] - col_ids[bc]),
          'oor': jnp.asarray(col_oor[bc].any(axis=0)), 'rep': jnp.asarray(rep),
          'pos': jnp.asarray(pos),
          'leq': jnp.asarray((bc[None] <= values).sum(axis=1).astype(np.int8)),
          'has': jnp.asarray((bc[None] == values).any(axis=1))}


def words_fn(cm):
  """Values of the mapping's arithmetic [...(, K)] -> int64 words [...], most
  significant first, ordered and identified lexicographically: the value itself (int64),
  or ``limbs.ordered_words`` (2 words for 3 limbs of 30 bits)."""
  if cm.limbs:
    return lambda x: limbs.ordered_words(x, cm.arithmetic.spec)
  return lambda x: [x]


def words_to_python(cm, words) -> np.ndarray:
  """Host words [..., C] (``words_fn``) -> Python ints."""
  if cm.limbs:
    return limbs.words_to_python(words, cm.arithmetic.spec)
  return np.asarray(words)[..., 0].astype(object)


def _words_eq(a, b):
  return functools.reduce(jnp.logical_and, [x == y for x, y in zip(a, b)])


def _words_lt(a, b):
  """a < b, lexicographic over the words (broadcast)."""
  less, tied = False, True
  for x, y in zip(a, b):
    less = less | (tied & (x < y))
    tied = tied & (x == y)
  return less


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


def make_block_fn(cm, m: int, table, num_devices: int = 1, extra=None,
                  sweep_arithmetic: str = 'auto', steps: int = 1):
  """Jitted ``f(t0, num_blocks) -> counts`` for blocks t0 .. t0 + D steps - 1: device k
  runs blocks t0 + k steps + i, i < steps, one after the other (``lax.scan``).

  Args:
    cm: the contextual mapping; m: block columns; table: q of every class
      representative [M, n(, K)] in ``cm.arithmetic`` (host, multiset rank order), or
      None: each point's representative C (its columns sorted) is run through g_c in
      the same call (twice the sweep, no table in memory).
    extra: optional ``extra(k [P, n, d], z [P, n, d(, K)], cat [P], valid [P]) -> count``
      added as ``counts['extra']`` (the verifier's Lemma 9 check).
  """
  prog = sweep.read_program(cm, sweep_arithmetic)
  s_ops, f_ops = sweep.sweep_ops(prog), sweep.final_ops(cm)
  d, n, N, S = cm.d, cm.n, cm.resolution, cm.scale
  v = grids.num_column_values(d, N)
  block = v ** m
  col_k, col_oor, col_x, col_ids = _column_tables(cm)
  # Category 1 (G~) is empty when n > N^d; then 8.1, 8.3 and Lemma 10 are vacuous (the
  # category counts, checked against the closed forms, confirm no point is in G~).
  has_cat1 = math.perm(N ** d, n) > 0
  # Per-column tables for the n - m columns decoded from the block index.
  ids_tab, zoff_tab = s_ops.const(col_ids), f_ops.const(col_x[:, 0] - col_ids)
  oor_tab = jnp.asarray(col_oor)
  col_pow = np.asarray([v ** j for j in range(n - m)], np.int64)
  binom = np.zeros((n + 1, v + n), dtype=np.int64)
  for i in range(n + 1):
    for xx in range(v + n):
      binom[i, xx] = min(math.comb(xx, i), grids.MAX_INDEX)
  with_table = table is not None
  # Index arithmetic of the equivariance lookup in int32 when it fits.
  rows = table.shape[0] if with_table else 0
  idx_dt = jnp.int32 if max(rows * n, (n + 1) * (v + n)) < 2 ** 31 else jnp.int64
  binom_flat = jnp.asarray(binom.reshape(-1))
  # The final values are compared, ordered and reduced as int64 words (``words_fn``).
  words = words_fn(cm)
  t_l, t_r = words(f_ops.const(int(cm.t_l * S))), words(f_ops.const(int(cm.t_r * S)))
  lo10, hi10 = int(cm.id_lower * S), int(cm.id_upper * S)
  l10_ops = s_ops if max(abs(lo10), abs(hi10)) < 2 ** (prog.sweep_bits - 1) else f_ops
  lo10, hi10 = l10_ops.const(lo10), l10_ops.const(hi10)
  if extra is not None:
    k_block = jnp.asarray(np.stack([col_k[(np.arange(block) // v ** j) % v]
                                    for j in range(m)], axis=1))           # [B, m, d]

  def one_block(t, num_blocks, table_rows, c):
    """Counts of block t (scalar); all-zero counts when t >= num_blocks."""
    valid = t < num_blocks
    tt = jnp.minimum(t, num_blocks - 1)
    pre = ((tt // col_pow) % v).astype(jnp.int32)                         # [n - m]
    cols = jnp.concatenate([c['cols'], jnp.broadcast_to(pre[:, None], (n - m, block))])
    ids0 = jnp.concatenate([c['ids'], jnp.broadcast_to(ids_tab[pre][:, None],
                                                       (n - m, block) + ids_tab.shape[1:])])
    zoff = jnp.concatenate([c['zoff'], jnp.broadcast_to(zoff_tab[pre][:, None],
                                                        (n - m, block) + zoff_tab.shape[1:])])
    any_oor = c['oor'] | jnp.any(oor_tab[pre])
    # Repeated columns: among the block columns, among the decoded ones, across.
    pre_eq = pre[:, None] == pre[None, :]
    repeated = c['rep'] | jnp.any(pre_eq & ~jnp.eye(n - m, dtype=bool))
    repeated = repeated | jnp.any(c['has'][pre], axis=0)
    # Stable sorted positions pos_j = #{i: c_i < c_j} + #{i < j: c_i = c_j}, O(n) per
    # point: block columns j < m add #{decoded c_i < c_j} (n - m compares, no gather);
    # decoded columns add #{block c_i <= c_j} (row c_j of ``leq``; i < j) and a scalar.
    pos_blk = c['pos'] + jnp.sum(pre[:, None, None] < c['cols'][None], axis=0,
                                 dtype=jnp.int32)
    pre_lt = pre[:, None] < pre[None, :]                                   # [i, j]
    pre_tie = pre_eq & (jnp.arange(n - m)[:, None] < jnp.arange(n - m)[None, :])
    pre_own = jnp.sum(pre_lt | pre_tie, axis=0).astype(jnp.int32)          # [n - m]
    pos_pre = c['leq'][pre].astype(jnp.int32) + pre_own[:, None]
    pos = jnp.concatenate([pos_blk, pos_pre]).astype(idx_dt)               # [n, B]
    cat1 = ~any_oor & ~repeated
    cat2 = ~any_oor & repeated
    at = [[pos[j] == p for p in range(n)] for j in range(n)]               # [j][p] [B]
    if with_table:
      ids = sweep.run_sweep(prog, ids0)
      q, _, inexact = sweep.global_shift(cm, prog, ids)
      rank = jnp.sum(binom_flat[(pos + 1) * (v + n) + cols.astype(idx_dt) + pos], axis=0)
      rows = table_rows[rank.astype(idx_dt)]                               # [B, n, C]
      ref = [[rows[:, p, i] for i in range(rows.shape[-1])] for p in range(n)]
    else:  # the representative's ids: C_p = L_j where pos_j = p
      ids_c = []
      for p in range(n):
        c_p = ids0[0]
        for j in range(1, n):
          c_p = s_ops.where(at[j][p], ids0[j], c_p)
        ids_c.append(c_p)
      both = sweep.run_sweep(prog, jnp.concatenate([ids0, jnp.stack(ids_c)], axis=1))
      ids = both[:, :block]                                     # both: [n, 2B(, K)]
      q, _, inexact = sweep.global_shift(cm, prog, ids)
      q_c, _, inexact_c = sweep.global_shift(cm, prog, both[:, block:])
      inexact = inexact + inexact_c
      ref = [[w[p] for w in words(q_c)] for p in range(n)]
    # q(L)_j = q(C)_{pos_j}: a compare for every (j, p) with pos_j = p -- an [n, n]
    # network vectorized over the block instead of per-token gathers (3x slower).
    qw = words(q)                                                          # C x [n, B]
    same = jnp.ones((block,), bool)
    for j in range(n):
      for p in range(n):
        same = same & (~at[j][p] | _words_eq([w[j] for w in qw], ref[p]))
    # 8.1 distinct entries, 8.3 / 8.4 interval, Lemma 10 bounds.
    inside = ~_words_lt(qw, t_l) & ~_words_lt(t_r, qw)                     # [n, B]
    inside_all, outside_all = jnp.all(inside, axis=0), jnp.all(~inside, axis=0)
    distinct = jnp.ones((block,), bool)
    l10 = jnp.ones((block,), bool)
    if has_cat1:
      for i in range(n):
        for j in range(i + 1, n):
          distinct = distinct & ~_words_eq([w[i] for w in qw], [w[j] for w in qw])
      ltn = s_ops.reduce_max(ids)
      if l10_ops is not s_ops:
        ltn = f_ops.convert(ltn, s_ops)
      l10 = ~l10_ops.lt(ltn, lo10) & ~l10_ops.gt(ltn, hi10)
    # Extremes of q and of z's first row z_j1 = x_j1 + q_j - id_j (the other rows are
    # the inputs).
    z0 = f_ops.add(q, zoff)
    ext = words_extremes(qw) + words_extremes(words(z0))                 # 4 x [C]
    ok = valid.astype(jnp.int64)
    counts = {
        'points': ok * block,
        'category_1': ok * jnp.sum(cat1), 'category_2': ok * jnp.sum(cat2),
        'category_3': ok * jnp.sum(any_oor),
        '8.1_distinct_entries': ok * jnp.sum(cat1 & ~distinct),
        '8.3_inside_interval': ok * jnp.sum(cat1 & ~inside_all),
        '8.4_outside_interval': ok * jnp.sum(~cat1 & ~outside_all),
        'lemma10_bounds': ok * jnp.sum(cat1 & ~l10),
        'permutation_equivariance': ok * jnp.sum(~same),
        'inexact': ok * inexact.astype(jnp.int64),
    }
    if extra is not None:
      k = jnp.concatenate([k_block, jnp.broadcast_to(jnp.asarray(col_k)[pre][None],
                                                     (block, n - m, d))], axis=1)
      x = cm.encode(k)
      z = x.at[:, :, 0].set(jnp.moveaxis(z0, 0, 1))
      cat = jnp.where(any_oor, 3, jnp.where(repeated, 2, 1)).astype(jnp.int32)
      counts['extra'] = ok * extra(k, z, cat, jnp.ones((block,), bool)).astype(jnp.int64)
    return counts, ext

  def run_steps(t, num_blocks, table_flat, c):  # blocks t .. t + steps - 1
    _, (counts, ext) = jax.lax.scan(
        lambda carry, i: (carry, one_block(t + i, num_blocks, table_flat, c)), None,
        jnp.arange(steps, dtype=jnp.int64))
    return {key: jnp.sum(val) for key, val in counts.items()}, ext

  def local(ts, num_blocks, table_flat, c):  # ts [1]: this device's first block
    counts, ext = run_steps(ts[0], num_blocks, table_flat, c)
    return {key: val[None] for key, val in counts.items()}, tuple(e[None] for e in ext)

  if num_devices > 1:
    mesh = parallel.make_mesh(num_devices)
    spec = jax.sharding.PartitionSpec(mesh.axis_names[0])
    rep_spec = jax.sharding.PartitionSpec()
    local = jax.shard_map(local, mesh=mesh, in_specs=(spec, rep_spec, rep_spec, rep_spec),
                          out_specs=spec, check_vma=False)

  def f(t0, num_blocks, table_flat, c):
    counts, ext = local(t0 + steps * jnp.arange(num_devices, dtype=jnp.int64), num_blocks,
                        table_flat, c)
    return {key: jnp.sum(val) for key, val in counts.items()}, ext

  # The class table and the block constants are arguments, not closed-over constants
  # (a constant is copied into the compiled program).
  consts = _block_constants(cm, m, s_ops, f_ops)
  table_flat = (jnp.stack(words(jnp.asarray(table)), axis=-1) if with_table  # [M, n, C]
                else jnp.zeros((1,), jnp.int64))
  if num_devices > 1:  # placed on every device once, not copied on every call
    everywhere = jax.sharding.NamedSharding(parallel.make_mesh(num_devices),
                                            jax.sharding.PartitionSpec())
    table_flat, consts = jax.device_put((table_flat, consts), everywhere)
  jitted = jax.jit(f)
  return lambda t0, num_blocks: jitted(t0, num_blocks, table_flat, consts)


def _config_key(cm, block: int) -> dict:
  return {'version': STATE_VERSION, 'd': cm.d, 'n': cm.n, 'resolution': cm.resolution,
          'scale': cm.scale, 'arithmetic': cm.arithmetic.describe(), 'block': block}


def _load_state(path: str, key: dict) -> dict:
  try:
    with open(path) as fh:
      state = json.load(fh)
  except (OSError, ValueError) as e:
    raise ValueError(f'cannot resume: state file {path!r} is missing or unreadable ({e}).') \
        from None
  if state.get('config') != key:
    raise ValueError(f'cannot resume: state file {path!r} is for {state.get("config")}, '
                     f'this run is {key}.')
  return state


def _save_state(path: str, key: dict, next_block: int, num_blocks: int, counts: dict,
                max_abs: int, seconds: float) -> None:
  state = {'config': key, 'completed_blocks': [[0, next_block]], 'next_block': next_block,
           'num_blocks': num_blocks, 'counts': counts, 'max_abs': str(max_abs),
           'seconds': round(seconds, 1)}
  outputs.atomic_json(path, state, indent=1)


def _fmt_s(sec: float) -> str:
  sec = int(sec)
  return f'{sec // 3600}h{sec % 3600 // 60:02d}m{sec % 60:02d}s' if sec >= 3600 else \
      f'{sec // 60}m{sec % 60:02d}s'


def full_pass(cm, table, *, chunk_size: int, progress: bool = True, extra=None,
              num_devices: int = 1, state_path: str | None = None, resume: bool = False,
              sweep_arithmetic: str = 'auto', log_every: float = LOG_EVERY,
              save_every: float = SAVE_EVERY, max_seconds: float | None = None) -> dict:
  """Runs every block of the full grid; returns counts, ``max_abs`` and run info.

  Args:
    table: q of the class representatives (host array, multiset rank order), or None:
      every point's representative is recomputed in-kernel (``make_block_fn``).
    chunk_size: upper bound on the points one call runs per device (blocks of at most
      ``CACHE_POINTS``, ``steps_per_call`` of them).
    progress: print a progress line with the ETA every ``log_every`` seconds (stderr).
    state_path: save ``{config, completed_blocks, counts, max_abs}`` here every
      ``save_every`` seconds and at the end; ``resume``: continue from it.
    max_seconds: stop after this many seconds (state saved; ``complete`` False).
  Returns:
    dict: ``counts`` (summed over the blocks run, including resumed ones), ``max_abs``
    (Python int; |q|, |z| and the inputs), ``complete``, ``blocks_done``,
    ``num_blocks``, ``block``, ``resumed_from`` (block), ``sweep`` (its arithmetic).
  """
  m, block, num_blocks = layout(cm, chunk_size)
  steps = steps_per_call(chunk_size, block, num_blocks, num_devices)
  key = _config_key(cm, block)
  _, _, col_x, _ = _column_tables(cm)
  max_abs = int(max(abs(int(x)) for x in col_x.reshape(-1)))
  counts: dict = {}
  start = 0
  if resume:
    if not state_path:
      raise ValueError('resume needs a state file (--state_file or --output_dir).')
    state = _load_state(state_path, key)
    start, counts = int(state['next_block']), {k: int(c) for k, c in state['counts'].items()}
    max_abs = max(max_abs, int(state['max_abs']))
  resumed_from = start
  t_begin = time.time()
  last_log = last_save = t_begin
  t = start
  total_points = num_blocks * block
  with jax.enable_x64(True):
    fn = make_block_fn(cm, m, table, num_devices, extra, sweep_arithmetic, steps)
    while t < num_blocks:
      c, ext = fn(jnp.int64(t), jnp.int64(num_blocks))
      for k_, val in c.items():
        counts[k_] = counts.get(k_, 0) + int(val)
      for val in ext:  # words [D, steps, C] (every host's devices: gathered)
        val = parallel.to_host(val)
        max_abs = max([max_abs] + [abs(int(x)) for x in
                                   words_to_python(cm, val.reshape(-1, val.shape[-1]))])
      t = min(t + num_devices * steps, num_blocks)
      now = time.time()
      if progress and (now - last_log >= log_every or t == num_blocks):
        rate = (t - start) * block / max(now - t_begin, 1e-9)
        eta = (num_blocks - t) * block / max(rate, 1e-9)
        print(f'[full grid] {t * block:,} / {total_points:,} points '
              f'({100 * t / num_blocks:.1f}%), {rate:,.0f} points/s, '
              f'elapsed {_fmt_s(now - t_begin)}, ETA {_fmt_s(eta)}', file=sys.stderr,
              flush=True)
        last_log = now
      if state_path and (now - last_save >= save_every or t == num_blocks):
        _save_state(state_path, key, t, num_blocks, counts, max_abs, now - t_begin)
        last_save = now
      if max_seconds is not None and now - t_begin >= max_seconds:
        break
  if state_path:
    _save_state(state_path, key, t, num_blocks, counts, max_abs, time.time() - t_begin)
  return {'counts': counts, 'max_abs': max_abs, 'complete': t >= num_blocks,
          'blocks_done': t, 'num_blocks': num_blocks, 'block': block,
          'resumed_from': resumed_from,
          'sweep': sweep.read_program(cm, sweep_arithmetic).describe(),
          'equivariance': ('class table' if table is not None else
                           'representative recomputed in-kernel')}
