r"""One driver for a pass over a grid of g_c inputs; chunks or in-kernel blocks as strategy.

Yun et al. 2020, Appendix E.3: the verifiers check Lemma 8 / 10 (``contextual_mapping``)
and T1-T3 (``contextual_ties``) on every point of G+_delta (full grid, (N+1)^(nd)
points) or of its permutation classes (multiset grid, C((N+1)^d + n - 1, n) points).
A pass runs a *strategy* over the grid and sums what each call returns,

    counts   {property: violations}   (``checks``' names; summed as Python ints)
    max_abs  max |value| seen         (checked against the planned bound)

through ``runner.run`` (progress with an ETA; resumable state for blocks):

    Chunks   linear indices start + arange(chunk) per jitted call, any kernel
             (``fn(start, total) -> (counts, extremes, payload)``, e.g. ``chunk_fns``'
             multiset or full-grid chunk; ``collect`` gets the payload, e.g. q of the
             class representatives for the host checks);
    Blocks   the full grid in blocks decoded in-kernel, g_c on column ids
             (``sweep_kernel``: V^m points per block, ``steps`` blocks per device and
             call; resumable).

Extremes are int64 words [.., C] (``sweep_kernel.words_fn``), max and min stacked.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import parallel
from transformer_ua.verify import checks, runner, sweep_kernel
from transformer_ua.yun import enumeration
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import sweep


def max_abs_of(cm, extremes) -> int:
  """Largest |value| of host or device extremes: words [.., C] (``words_fn``)."""
  vals = []
  for e in extremes:
    e = parallel.to_host(e)
    vals += [abs(int(x)) for x in sweep_kernel.words_to_python(cm, e.reshape(-1, e.shape[-1]))]
  return max(vals, default=0)


def chunk_fns(cm, chunk: int, run: Callable, shard: Callable | None = None):
  """Jitted ``multiset_chunk(params, start, total)`` and ``full_chunk(params, start,
  total, table)`` over linear indices ``start + arange(chunk)`` (``shard`` places them,
  e.g. along a device mesh), for ``Chunks``.

  ``run(params, k [B, n, d], valid [B]) -> (counts, extremes, payload)`` checks a batch
  of grid points; ``payload[0]`` is q [B, n(, K)]. Padding indices (>= total) decode
  the last point, with ``valid`` False. ``full_chunk`` adds the permutation
  equivariance against ``table`` (q of the multiset representatives, rank order) and
  returns no payload.
  """
  n = cm.n
  codec = enumeration.make_codec(Grid(cm.d, n, cm.resolution))
  shard = shard or (lambda x: x)

  def indices(start, total):
    idx = shard(start + jnp.arange(chunk, dtype=jnp.int64))
    return jnp.minimum(idx, total - 1), idx < total

  def multiset_chunk(params, start, total):
    rank, valid = indices(start, total)
    return run(params, codec['decode_multiset'](rank), valid)

  def full_chunk(params, start, total, table):
    idx, valid = indices(start, total)
    k = codec['decode_full'](idx)
    counts, ext, payload = run(params, k, valid)
    q, col = payload[0], codec['column_index'](k)
    pos = enumeration.stable_positions(col.T)                             # [n, B]
    sorted_col = jnp.take_along_axis(col, codec['canonical_order'](k), axis=-1)
    q_rep = table[codec['rank_multiset'](sorted_col)]                     # [B, n(, K)]
    counts['permutation_equivariance'] = checks.equivariance(
        [q[:, j] for j in range(n)], list(pos),
        [q_rep[:, p] for p in range(n)], valid, cmp=cm.ops)
    return counts, ext, None

  return jax.jit(multiset_chunk), jax.jit(full_chunk)


@dataclasses.dataclass
class Chunks:
  """Strategy: one jitted call per chunk of ``chunk`` linear indices of ``total`` points.

  Attributes:
    cm: the contextual mapping (reads the extremes' words).
    fn: ``fn(start, total) -> (counts, extremes, payload)`` (jnp int64 scalars in).
    collect: optional ``collect(start, payload)`` on the host after each call.
    label: the progress line's name.
  """

  cm: object
  fn: Callable
  total: int
  chunk: int
  collect: Callable | None = None
  label: str = 'points'

  num_items = property(lambda self: self.total)
  stride = property(lambda self: self.chunk)
  points_per_item = 1
  key = property(lambda self: None)
  initial_max_abs = 0

  def step(self, t: int):
    counts, extremes, payload = self.fn(jnp.int64(t), jnp.int64(self.total))

    def resolve():
      if self.collect is not None:
        self.collect(t, payload)
      return {k: int(v) for k, v in counts.items()}, max_abs_of(self.cm, extremes)
    return resolve

  def info(self, result: dict) -> dict:
    return {'chunk_size': self.chunk}


class Blocks:
  """Strategy: the full grid in in-kernel blocks (``sweep_kernel.make_block_fn``).

  Args:
    table: q of the class representatives (host, multiset rank order), or None (each
      point's representative recomputed in-kernel).
    chunk_size: upper bound on the points one call runs per device.
    extra: optional per-point count (``make_block_fn``), summed as ``extra``.
  """

  def __init__(self, cm, table, *, chunk_size: int, num_devices: int = 1, extra=None,
               sweep_arithmetic: str = 'auto'):
    self.cm, self.table, self.num_devices = cm, table, num_devices
    self.extra, self.sweep_arithmetic = extra, sweep_arithmetic
    self.m, self.block, self.num_items = sweep_kernel.layout(cm, chunk_size)
    self.window = sweep_kernel.window_blocks(cm, self.m, table)
    self.steps = sweep_kernel.steps_per_call(chunk_size, self.block, self.num_items,
                                             num_devices, self.window)
    self.stride = num_devices * self.steps
    self.points_per_item = self.block
    self.key = {'version': runner.STATE_VERSION, 'd': cm.d, 'n': cm.n,
                'resolution': cm.resolution, 'scale': cm.scale,
                'arithmetic': cm.arithmetic.describe(), 'block': self.block}
    self.initial_max_abs = sweep_kernel.input_max_abs(cm)
    self._fn = None
    # The progress line names the ALU roofline, so its rate reads against it.
    self.limit = (os.cpu_count() or 1) * sweep_kernel.ALU_OPS_PER_SECOND_PER_CORE / \
        sweep_kernel.ops_per_point(cm)
    self.label = f'full grid; ALU roofline {self.limit / 1e6:.1f}M points/s'

  def step(self, t: int):
    if self.window and t % self.steps:  # a device's blocks would span two table parts
      raise ValueError(f'the pass resumes at block {t:,}, not a multiple of its '
                       f'{self.steps:,} blocks per device and call: resume with the first '
                       "run's --chunk_size and devices.")
    if self._fn is None:
      self._fn = sweep_kernel.make_block_fn(self.cm, self.m, self.table, self.num_devices,
                                            self.extra, self.sweep_arithmetic, self.steps)
    counts, extremes = self._fn(jnp.int64(t), jnp.int64(self.num_items))  # per device
    return lambda: ({k: int(np.sum(parallel.to_host(v))) for k, v in counts.items()},
                    max_abs_of(self.cm, extremes))

  def info(self, result: dict) -> dict:
    points = (result['items_done'] - result['resumed_from']) * self.block
    cores, ops, limit = os.cpu_count() or 1, sweep_kernel.ops_per_point(self.cm), self.limit
    rate = points / result['seconds'] if result['seconds'] > 0 else 0.0
    return {'blocks_done': result['items_done'], 'num_blocks': self.num_items,
            'block': self.block, 'points_run': points,
            'points_per_second': round(rate), 'cpu_seconds': round(result['cpu_seconds'], 3),
            'points_per_cpu_second': (round(points / result['cpu_seconds'])
                                      if result['cpu_seconds'] > 0 else 0),
            'ops_per_point': ops,
            'alu_limit_points_per_second': round(limit), 'cores': cores,
            'fraction_of_alu_limit': round(rate / limit, 3),
            'sweep': sweep.read_program(self.cm, self.sweep_arithmetic).describe(),
            'equivariance': ('class table' if self.table is not None else
                             'representative recomputed in-kernel')}


def run(strategy, *, progress: bool = True, state_path: str | None = None,
        resume: bool = False, log_every: float = runner.LOG_EVERY,
        save_every: float = runner.SAVE_EVERY, max_seconds: float | None = None) -> dict:
  """Runs ``strategy`` over its grid (under x64); returns ``runner.run``'s dict
  (``counts``, ``max_abs``, ``complete``, ``items_done``, ``resumed_from``) and the
  strategy's ``info``. State (``state_path``, ``resume``) needs a strategy with a key."""
  if state_path and strategy.key is None:
    raise ValueError(f'the {strategy.label} pass cannot be resumed (no state).')
  t = time.time()
  with jax.enable_x64(True):
    out = runner.run(strategy.step, strategy.num_items, strategy.stride, key=strategy.key,
                     points_per_item=strategy.points_per_item,
                     max_abs=strategy.initial_max_abs, state_path=state_path,
                     resume=resume, progress=progress, label=strategy.label,
                     log_every=log_every, save_every=save_every, max_seconds=max_seconds)
  out['seconds'] = time.time() - t
  return {**out, **strategy.info(out)}


def full_pass(cm, table, *, chunk_size: int, progress: bool = True, extra=None,
              num_devices: int = 1, state_path: str | None = None, resume: bool = False,
              sweep_arithmetic: str = 'auto', log_every: float = runner.LOG_EVERY,
              save_every: float = runner.SAVE_EVERY, max_seconds: float | None = None
              ) -> dict:
  """Every block of the full grid (``Blocks``): counts, ``max_abs`` and run info.

  Args:
    table: q of the class representatives (host array, multiset rank order), or None:
      every point's representative is recomputed in-kernel (``make_block_fn``).
    chunk_size: upper bound on the points one call runs per device (blocks of at most
      ``sweep_kernel.CACHE_POINTS``, ``steps_per_call`` of them).
    progress: print a progress line with the ETA every ``log_every`` seconds (stderr).
    state_path: save ``{config, completed_blocks, counts, max_abs}`` here every
      ``save_every`` seconds and at the end; ``resume``: continue from it.
    max_seconds: stop after this many seconds (state saved; ``complete`` False).
  Returns:
    dict: ``counts`` (summed over the blocks run, including resumed ones), ``max_abs``
    (Python int; |q|, |z| and the inputs), ``complete``, ``blocks_done``,
    ``num_blocks``, ``block``, ``resumed_from`` (block), ``sweep`` (its arithmetic),
    ``equivariance``, ``seconds`` (this run's), ``points_run`` (this run's),
    ``points_per_second`` (and ``cpu_seconds``, ``points_per_cpu_second``: of every
    thread, what other users' jobs do not change) against the ALU roofline: ``ops_per_point``
    (``sweep_kernel.ops_per_point``), ``cores``, ``alu_limit_points_per_second`` (cores x
    ``ALU_OPS_PER_SECOND_PER_CORE`` / ops per point), ``fraction_of_alu_limit``.
  """
  blocks = Blocks(cm, None if table is None else np.asarray(table), chunk_size=chunk_size,
                  num_devices=num_devices, extra=extra, sweep_arithmetic=sweep_arithmetic)
  return run(blocks, progress=progress, state_path=state_path, resume=resume,
             log_every=log_every, save_every=save_every, max_seconds=max_seconds)
