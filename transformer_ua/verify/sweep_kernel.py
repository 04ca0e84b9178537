r"""Whole-grid pass of the verifier on column ids: blocks of G+_delta, one jit call each.

The full grid G+_delta has V^n points (V = (N+1)^d columns, ``grids``: point p has
column j = digit j of p in base V). A *block* fixes the last n - m columns and runs the
first m through all V^m combinations:

    block t, point b:  c_j = digit_j(b)          j < m    (the same for every block)
                       c_j = digit_{j-m}(t)      j >= m   (decoded in-kernel from t)

so block t holds exactly the points p = t V^m + b, the V^(n-m) blocks tile the grid
with no padding, and per-point decoding is a lookup of precomputed block columns.
Each block runs g_c on ids (``yun.sweep``: one ``lax.fori_loop`` over the sweep, the
sweep in the narrowest proven integer type, the global shift in the planned
arithmetic) and checks, per point (L in G+, C its class representative):

    8.1, 8.3, 8.4, Lemma 10 bounds      as ``contextual_mapping._point_checks``
    permutation equivariance            q(L)_j = q(C)_{pos_j},  pos_j = #{i: c_i < c_j}
                                        + #{i < j: c_i = c_j} (stable sorted position),
                                        C ranked by sum_j C(c_j + pos_j, pos_j + 1)

and returns only counts and extremes. With D devices, each call runs D consecutive
blocks, one per device (leading axis sharded).

Long runs: ``full_pass`` logs progress with an ETA and, with a ``state_path``,
saves the completed block range and the partial counts (JSON, atomically) so that a
run can be resumed (``resume=True``) where it stopped.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import parallel
from transformer_ua.yun import grids, sweep

#: Bytes per grid point of a block's working set, per word of the arithmetic and token
#: (measured peak RSS growth per block point is below this).
POINT_BYTES_PER_TOKEN_WORD = 96
#: Default memory budget of one block's working set.
BLOCK_BUDGET = 1 << 29
#: Seconds between progress lines / state saves.
LOG_EVERY, SAVE_EVERY = 30.0, 60.0
STATE_VERSION = 1


def block_points_cap(cm, budget: int = BLOCK_BUDGET) -> int:
  """Most points one block may hold within ``budget`` bytes of working set."""
  words = cm.arithmetic.num_limbs if cm.limbs else 1
  return max(1, budget // (POINT_BYTES_PER_TOKEN_WORD * cm.n * (words + 1)))


def layout(cm, chunk_size: int) -> tuple[int, int, int]:
  """(m, block = V^m, num_blocks = V^(n-m)): the largest block of at most
  ``min(chunk_size, block_points_cap)`` points (m >= 1)."""
  v = grids.num_column_values(cm.d, cm.resolution)
  cap = min(int(chunk_size), block_points_cap(cm))
  m = 1
  while m < cm.n and v ** (m + 1) <= cap:
    m += 1
  return m, v ** m, v ** (cm.n - m)


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


def make_block_fn(cm, m: int, table, num_devices: int = 1, extra=None,
                  sweep_arithmetic: str = 'auto'):
  """Jitted ``f(t0, num_blocks) -> counts`` for blocks t0 .. t0 + D - 1 (D devices).

  Args:
    cm: the contextual mapping; m: block columns; table: q of every class
      representative [M, n(, K)] in ``cm.arithmetic`` (host, multiset rank order).
    extra: optional ``extra(k [P, n, d], z [P, n, d(, K)], cat [P], valid [P]) -> count``
      added as ``counts['extra']`` (the verifier's Lemma 9 check).
  """
  prog = sweep.read_program(cm, sweep_arithmetic)
  s_ops, f_ops = sweep.sweep_ops(prog), sweep.final_ops(cm)
  ops = cm.ops
  d, n, N, S = cm.d, cm.n, cm.resolution, cm.scale
  v = grids.num_column_values(d, N)
  block = v ** m
  col_k, col_oor, col_x, col_ids = _column_tables(cm)
  # Block constants (host, once): columns j < m of every block point, their ids, the
  # z offsets x_j1 - id_j, the out-of-range / repeated flags and stable positions
  # among themselves.
  b = np.arange(block, dtype=np.int64)
  bc = [(b // v ** j) % v for j in range(m)]                             # m x [B]
  blk_cols = [jnp.asarray(c.astype(np.int32)) for c in bc]
  blk_ids = [s_ops.const(col_ids[c]) for c in bc]
  blk_zoff = [f_ops.const(col_x[c, 0] - col_ids[c]) for c in bc]
  blk_oor = jnp.asarray(np.any([col_oor[c] for c in bc], axis=0))
  blk_rep = jnp.asarray(np.any([bc[i] == bc[j] for i in range(m) for j in range(i + 1, m)]
                               + [np.zeros(block, bool)], axis=0))
  blk_pos = [jnp.asarray(sum((bc[i] < bc[j]).astype(np.int32) + ((bc[i] == bc[j]) & (i < j))
                             for i in range(m) if i != j) + np.zeros(block, np.int32))
             for j in range(m)]
  # Category 1 (G~) is empty when n > N^d; then 8.1, 8.3 and Lemma 10 are vacuous (the
  # category counts, checked against the closed forms, confirm no point is in G~).
  has_cat1 = math.perm(N ** d, n) > 0
  # Index arithmetic of the equivariance lookup in int32 when it fits.
  idx_dt = jnp.int32 if max(table.shape[0] * n, (n + 1) * (v + n)) < 2 ** 31 else jnp.int64
  # Per-column tables for the n - m columns decoded from the block index.
  ids_tab, zoff_tab = s_ops.const(col_ids), f_ops.const(col_x[:, 0] - col_ids)
  oor_tab = jnp.asarray(col_oor)
  col_pow = [v ** j for j in range(n - m)]
  binom = np.zeros((n + 1, v + n), dtype=np.int64)
  for i in range(n + 1):
    for xx in range(v + n):
      binom[i, xx] = min(math.comb(xx, i), grids.MAX_INDEX)
  binom_flat = jnp.asarray(binom.reshape(-1))
  table = np.asarray(table)
  t_l, t_r = f_ops.const(int(cm.t_l * S)), f_ops.const(int(cm.t_r * S))
  lo10, hi10 = int(cm.id_lower * S), int(cm.id_upper * S)
  l10_ops = s_ops if max(abs(lo10), abs(hi10)) < 2 ** (prog.sweep_bits - 1) else f_ops
  lo10, hi10 = l10_ops.const(lo10), l10_ops.const(hi10)
  if extra is not None:
    k_block = jnp.asarray(np.stack([col_k[c] for c in bc], axis=1))    # [B, m, d]

  def one_block(t, num_blocks, table_flat):
    """Counts of block t (scalar); all-zero counts when t >= num_blocks."""
    valid = t < num_blocks
    tt = jnp.minimum(t, num_blocks - 1)
    pre = [((tt // col_pow[j]) % v).astype(jnp.int32) for j in range(n - m)]  # scalars
    cols = blk_cols + pre
    ids0 = blk_ids + [ids_tab[c] for c in pre]
    zoff = blk_zoff + [zoff_tab[c] for c in pre]
    any_oor = blk_oor
    for c in pre:
      any_oor = any_oor | oor_tab[c]
    repeated = blk_rep
    for i in range(m, n):
      for j in range(n):
        if j < i:
          repeated = repeated | (cols[j] == cols[i])
    # Stable sorted position of every column: #{i: c_i < c_j} + #{i < j: c_i = c_j}.
    pos = []
    for j in range(n):
      p = blk_pos[j] if j < m else jnp.zeros((), jnp.int32)
      for i in range(n):
        if i == j or (i < m and j < m):
          continue
        p = p + (cols[i] < cols[j]) + ((cols[i] == cols[j]) if i < j else False)
      pos.append(p)
    cat1 = ~any_oor & ~repeated
    cat2 = ~any_oor & repeated
    ids = sweep.run_sweep(prog, [jnp.broadcast_to(x, blk_ids[0].shape) for x in ids0])
    q, _, inexact = sweep.global_shift(cm, prog, ids)
    # 8.1: distinct entries (category 1).
    distinct = jnp.ones((block,), bool)
    inside_all = jnp.ones((block,), bool)
    outside_all = jnp.ones((block,), bool)
    l10 = jnp.ones((block,), bool)
    for x in q:
      inside = ~f_ops.lt(x, t_l) & ~f_ops.gt(x, t_r)
      inside_all = inside_all & inside
      outside_all = outside_all & ~inside
    if has_cat1:
      for i in range(n):
        for j in range(i + 1, n):
          distinct = distinct & ~f_ops.eq(q[i], q[j])
      conv = (lambda x: x) if l10_ops is s_ops else (lambda x: f_ops.convert(x, s_ops))
      ltn = conv(ids[0])
      for x in ids[1:]:
        ltn = l10_ops.max(ltn, conv(x))
      l10 = ~l10_ops.lt(ltn, lo10) & ~l10_ops.gt(ltn, hi10)
    # Permutation equivariance against the class table.
    pos = [p.astype(idx_dt) for p in pos]
    rank = sum(binom_flat[(pos[j] + 1) * (v + n) + cols[j].astype(idx_dt) + pos[j]]
               for j in range(n)).astype(idx_dt)
    same = jnp.ones((block,), bool)
    for j in range(n):
      same = same & f_ops.eq(q[j], table_flat[rank * n + pos[j]])
    # Extremes of q and of z's first row z_j1 = x_j1 + q_j - id_j (the other rows are
    # the inputs).
    z0 = [f_ops.add(x, o) for x, o in zip(q, zoff)]
    q_all = jnp.stack(q, axis=0)
    z_all = jnp.stack(z0, axis=0)
    max_q, min_q = ops.extremes(q_all, jnp.ones((n, block), bool))
    max_z, min_z = ops.extremes(z_all, jnp.ones((n, block), bool))
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
      k = jnp.concatenate([k_block] + [jnp.broadcast_to(jnp.asarray(col_k)[c], (block, 1, d))
                                       for c in pre], axis=1)
      x = cm.encode(k)
      z = x.at[:, :, 0].set(jnp.stack(z0, axis=-2 if cm.limbs else -1))
      cat = jnp.where(any_oor, 3, jnp.where(repeated, 2, 1)).astype(jnp.int32)
      counts['extra'] = ok * extra(k, z, cat, jnp.ones((block,), bool)).astype(jnp.int64)
    return counts, (max_q, min_q, max_z, min_z)

  def local(ts, num_blocks, table_flat):  # this device's blocks [D_local]
    counts, ext = jax.vmap(one_block, in_axes=(0, None, None))(ts, num_blocks, table_flat)
    return {key: jnp.sum(val, keepdims=True) for key, val in counts.items()}, ext

  if num_devices > 1:
    mesh = parallel.make_mesh(num_devices)
    spec = jax.sharding.PartitionSpec(mesh.axis_names[0])
    local = jax.shard_map(local, mesh=mesh, in_specs=(spec, jax.sharding.PartitionSpec(),
                                                      jax.sharding.PartitionSpec()),
                          out_specs=spec, check_vma=False)

  def f(t0, num_blocks, table_flat):
    counts, ext = local(t0 + jnp.arange(num_devices, dtype=jnp.int64), num_blocks, table_flat)
    return {key: jnp.sum(val) for key, val in counts.items()}, ext

  # The class table is an argument, not a closed-over constant (a constant is copied
  # into the compiled program).
  table_flat = jnp.asarray(table.reshape((-1,) + table.shape[2:]))
  if num_devices > 1:  # placed on every device once, not copied on every call
    table_flat = jax.device_put(table_flat, jax.sharding.NamedSharding(
        parallel.make_mesh(num_devices), jax.sharding.PartitionSpec()))
  jitted = jax.jit(f)
  return lambda t0, num_blocks: jitted(t0, num_blocks, table_flat)


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
  tmp = path + '.tmp'
  with open(tmp, 'w') as fh:
    json.dump(state, fh, indent=1)
  os.replace(tmp, path)


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
    table: q of the class representatives (host array, multiset rank order).
    chunk_size: upper bound on the points of one block (per device).
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
  key = _config_key(cm, block)
  ops = cm.ops
  _, _, col_x, _ = _column_tables(cm)
  max_abs = int(max(abs(int(x)) for x in col_x.reshape(-1)))
  counts: dict = {}
  start = 0
  if resume:
    if not state_path:
      raise ValueError('resume needs a state file (--state_file or --output_json).')
    state = _load_state(state_path, key)
    start, counts = int(state['next_block']), {k: int(c) for k, c in state['counts'].items()}
    max_abs = max(max_abs, int(state['max_abs']))
  resumed_from = start
  t_begin = time.time()
  last_log = last_save = t_begin
  t = start
  total_points = num_blocks * block
  with jax.enable_x64(True):
    fn = make_block_fn(cm, m, table, num_devices, extra, sweep_arithmetic)
    while t < num_blocks:
      c, ext = fn(jnp.int64(t), jnp.int64(num_blocks))
      for k_, val in c.items():
        counts[k_] = counts.get(k_, 0) + int(val)
      for val in ext:  # [D] or [D, K] (every host's devices: gathered)
        max_abs = max([max_abs] + [abs(int(x)) for x in ops.to_python(parallel.to_host(val))])
      t = min(t + num_devices, num_blocks)
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
          'sweep': sweep.read_program(cm, sweep_arithmetic).describe()}
