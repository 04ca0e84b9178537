r"""Cost of one training epoch of each Section 5 model (Fang et al.): today's per-step
loop against the whole-epoch program (``transformer_ua.fang.epoch``), side by side,
and what a full sweep would take at each rate.

    python benchmarks/fang_epoch_cost.py [--config=experiments/configs/fang_f2.py] \
        [--rounds=3] [--output_dir=runs/benchmarks]

writes ``fang_epoch_cost.json`` into ``--output_dir`` (``--output_dir=results/benchmarks``
updates the record; an existing file is refused before the work unless --overwrite).

For each sweep entry of the config (ATTENTION n = 4368 / n_q, NN_width, NN_depth) it
builds, from the same initial state (same optimizer, batch size, ``grad_chunk``, dtype
as the runs):

* ``per_step`` -- the reference, the per-step epoch of ``train.fang_regression``
  (``config.train_epoch = 'per_step'``): host permutation of the epoch, host gather of each batch, transfer, one jitted
  step per batch, ``float(loss)`` per step; the config's ``grad_chunk``;
* ``per_step_chunk`` -- the same loop with ``--grad_chunk`` rows per gradient chunk
  (only the float summation order changes);
* ``scan`` -- ``fang.epoch``: one jit per epoch, with ``--grad_chunk``.

Each path runs one epoch to compile, then ``--rounds`` epochs, the paths interleaved
round by round so that they share the machine's load (median reported; every epoch
ends with its losses on the host). It also records the largest relative difference of
the per-step losses of the compile epoch between each path and the reference (same
order, same initial state). On a shared machine the times include contention from
other jobs (the 1-min load is recorded at start and end).

Roofline (``benchmarks/roofline.py``), to say how far each path is from what the
machine can do. Measured before and after the models (the best of the two is used:
other jobs only lower a measured figure): P = float32 2048^3 matmul
GFLOP/s in XLA; W = in-place float32 axpy over 256 MiB (DRAM stream), W_c = the same
over 8 MiB (inside the 32 MiB L3), GB/s; from /proc/cpuinfo, P_fma = cores x nominal
clock x 32 FLOPs/cycle (2 AVX2 FMA units). Per model and path, from XLA's cost model of
the compiled programs (``cost_analysis``, scan loops counted per iteration):

    F, M = FLOPs, bytes accessed per epoch   (scan: the one epoch program on the
           host-drawn order; per-step paths: the sum over the epoch's batches of the
           step program at that batch size; host gather and transfer not counted)
    achieved GFLOP/s = F / t,  GB/s = M / t   (t = median seconds per epoch)
    bound            = max(F / P, M / W)        XLA's best square matmul, DRAM traffic
    bound_optimistic = max(F / P_fma, M / W_c)  hardware FMA peak, all traffic in L3
    t / bound, t / bound_optimistic

Reading it: t / bound near 1 means the path runs near the speed the machine allows for
its work as XLA counts it, so no restructuring of the same work can make it much faster
unless its traffic moves into cache (bound_optimistic: the best case); t / bound >> 1
means time goes elsewhere (small kernels, host work, synchronization). M counts every
fused operation's operands and results as memory traffic (none reused from cache
between operations); P can be beaten by shapes XLA compiles better than a square matmul.
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import copy
import os
import statistics
import time

from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import layers, outputs, provenance
from transformer_ua.fang import epoch as fang_epoch
from transformer_ua.fang import regression

import roofline   # benchmarks/roofline.py (benchmarks/ is on sys.path)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CONFIG = cli.define_config_file(
    'config', os.path.join(ROOT, 'experiments', 'configs', 'fang_f2.py'),
    'experiments/configs/fang_f*.py')
_ROUNDS = flags.DEFINE_integer('rounds', 3, 'Timed epochs per model (median reported).')
cli.define_overwrite()
JSON_NAME = 'fang_epoch_cost.json'
_OUT = cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME} '
                             '(--output_dir=results/benchmarks: the record).')
_CHUNK = flags.DEFINE_integer('grad_chunk', 250, 'Rows per gradient chunk of the '
                              "'per_step_chunk' and 'scan' paths.")
_ONLY = flags.DEFINE_list('only_entries', [], 'Benchmark only these sweep entries.')


PATHS = ('per_step', 'per_step_chunk', 'scan')
#: MiB of the bandwidth figures: well above the 32 MiB L3 (DRAM), and inside it.
STREAM_MIB, CACHE_STREAM_MIB = 256, 8


def _loop_epoch(c, step, x, y, n_tr, steps):
  """The per-step epoch (``train.tasks.fang_task.FangRegression.train_epoch``, one
  device), keeping every step's loss."""
  def run(state, epoch):
    order = np.random.default_rng([c.seed, epoch]).permutation(n_tr)
    losses = []
    for s in range(steps):
      idx = order[s * c.batch_size:(s + 1) * c.batch_size]
      state, loss = step(state, {'x': jnp.asarray(x[idx]), 'y': jnp.asarray(y[idx])})
      losses.append(float(loss))
    return state, losses
  return run


def _scan_epoch(c, train_epoch):
  """The whole-epoch path, same (seed, epoch) order."""
  def run(state, epoch):
    state, m = train_epoch(state, np.random.default_rng([c.seed, epoch]))
    return state, list(m['losses'])
  return run


def _spec(tree):
  return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)


def epoch_costs(steps, train_epoch, state, x, y, batch_sizes):
  """{path: {'flops', 'bytes'}} per epoch from XLA's cost model (module doc).

  steps: {path: jitted per-step program} of the per-step paths; train_epoch: the scan
  path (``fang.epoch``); state: a training state (shapes only are used); x [N, d],
  y [N]; batch_sizes: the epoch's batch sizes in order."""
  st = _spec(state)
  out = {}
  for path, step in steps.items():
    by_size = {b: roofline.program_cost(step, st, {
        'x': jax.ShapeDtypeStruct((b,) + x.shape[1:], x.dtype),
        'y': jax.ShapeDtypeStruct((b,), y.dtype)}) for b in set(batch_sizes)}
    out[path] = {k: sum(by_size[b][k] for b in batch_sizes) for k in ('flops', 'bytes')}
  n = x.shape[0]
  out['scan'] = roofline.program_cost(
      train_epoch.program, st, jax.ShapeDtypeStruct(x.shape, x.dtype),
      jax.ShapeDtypeStruct(y.shape, y.dtype), jax.ShapeDtypeStruct((n,), jnp.int32))
  return out


def roofline_row(seconds, cost, machine):
  """Achieved rates, the two roofline bounds (module doc) and the measured time over
  each, for one path; ``machine``: {'peak', 'stream', 'fma_peak', 'cache_stream'}."""
  f, m = cost['flops'], cost['bytes']
  bound = roofline.bound_seconds(f, m, machine['peak'], machine['stream'])
  fma = machine['fma_peak'] or machine['peak']
  optimistic = roofline.bound_seconds(f, m, fma, machine['cache_stream'])
  return {'flops_per_epoch': f, 'bytes_per_epoch': m,
          'achieved_gflops': f / seconds / 1e9, 'achieved_gbps': m / seconds / 1e9,
          'compute_seconds': f / (machine['peak'] * 1e9),
          'memory_seconds': m / (machine['stream'] * 1e9),
          'bound_seconds': bound, 'time_over_bound': seconds / bound,
          'compute_seconds_fma': f / (fma * 1e9),
          'memory_seconds_cache': m / (machine['cache_stream'] * 1e9),
          'bound_seconds_optimistic': optimistic,
          'time_over_bound_optimistic': seconds / optimistic}


def epoch_seconds(c, data, rounds, chunk):
  """({path: {median s/epoch, ...}}, {path: XLA cost per epoch}, parameter count) for
  one sweep entry (module doc)."""
  sizes = regression.resolved_sizes(c)
  dtype = jnp.float64 if c.dtype == 'float64' else jnp.float32
  n_tr = data['x_train'].shape[0]
  steps = -(-n_tr // c.batch_size)
  tx, _ = regression.make_optimizer(c, steps)
  params = regression.init_params(jax.random.PRNGKey(c.seed), model=c.model, d=sizes['d'],
                                  q=sizes['q'], num_tokens=sizes['num_tokens'],
                                  depth_width=sizes['depth_width'], dtype=dtype)
  x = data['x_train'].astype(np.dtype(dtype))
  y = data['y_train'].astype(np.dtype(dtype))
  chunked = copy.deepcopy(c)
  chunked.grad_chunk = chunk
  step_programs = {'per_step': regression.make_train_step(c.model, tx, c.grad_chunk),
                   'per_step_chunk': regression.make_train_step(c.model, tx, chunk)}
  train_epoch = fang_epoch.make_train_epoch(chunked, tx, x, y)
  runners = {p: _loop_epoch(c, f, x, y, n_tr, steps) for p, f in step_programs.items()}
  runners['scan'] = _scan_epoch(c, train_epoch)

  def fresh_state():   # a copy per path: every path donates its state
    return {'params': jax.tree_util.tree_map(lambda a: jnp.array(a, copy=True), params),
            'opt_state': tx.init(params), 'step': jnp.zeros((), jnp.int32)}

  sizes = [min(c.batch_size, n_tr - s * c.batch_size) for s in range(steps)]
  costs = epoch_costs(step_programs, train_epoch, fresh_state(), x, y, sizes)
  states, first, times = {}, {}, {p: [] for p in runners}
  for path, run in runners.items():
    states[path], first[path] = run(fresh_state(), 0)     # compile + the agreement epoch
  for r in range(rounds):
    for path, run in runners.items():
      t0 = time.perf_counter()
      states[path], _ = run(states[path], r + 1)
      times[path].append(time.perf_counter() - t0)
  ref = np.asarray(first['per_step'])
  out = {}
  for path in runners:
    diff = float(np.max(np.abs(np.asarray(first[path]) - ref) / np.abs(ref)))
    t = statistics.median(times[path])
    out[path] = {'seconds_per_epoch': t, 'all_seconds': times[path],
                 'max_rel_loss_diff_vs_per_step': diff}
  return out, costs, layers.count_params(params)


def measure_machine():
  """The machine figures of the module doc, measured now."""
  return {'peak': roofline.peak_gflops(), 'fma_peak': roofline.nominal_fma_gflops(),
          'stream': roofline.bandwidth_gbps(mib=STREAM_MIB),
          'cache_stream': roofline.bandwidth_gbps(mib=CACHE_STREAM_MIB, reps=20)}


def print_machine(when, m):
  print(f"machine ({when}): float32 2048^3 matmul in XLA {m['peak']:.1f} GFLOP/s, nominal "
        f"FMA peak {m['fma_peak'] or float('nan'):.1f} GFLOP/s, stream {m['stream']:.1f} "
        f"GB/s ({STREAM_MIB} MiB), {m['cache_stream']:.1f} GB/s ({CACHE_STREAM_MIB} MiB, "
        "cache-resident)", flush=True)


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  if _ROUNDS.value < 1 or _CHUNK.value < 1:
    raise cli.BadInput('--rounds and --grad_chunk must be >= 1.')
  config = _CONFIG.value
  try:
    regression.validate_config(config)
    entries = {e for e, _ in regression.run_configs(config)}
  except ValueError as e:
    raise cli.BadInput(str(e)) from None
  unknown = sorted(set(_ONLY.value) - entries)
  if unknown:
    raise cli.BadInput(f'--only_entries: {", ".join(unknown)} not in the sweep; allowed: '
                       f'{", ".join(sorted(entries))}.')
  cli.output_dir(_OUT.value, writes=(JSON_NAME,))
  prov = provenance.record()
  load_start = os.getloadavg()[0]
  machine_start = measure_machine()
  print_machine('start', machine_start)
  data = regression.make_data(config.target, config.data_seed)
  rows, seen = [], set()
  for entry, c in regression.run_configs(config):
    if entry in seen or (_ONLY.value and entry not in _ONLY.value):
      continue
    seen.add(entry)
    paths, costs, n_params = epoch_seconds(copy.deepcopy(c), data, _ROUNDS.value,
                                           _CHUNK.value)
    ref = paths['per_step']['seconds_per_epoch']
    s = paths['scan']['seconds_per_epoch']
    rows.append({'entry': entry, 'run': regression.run_name(c), 'params': n_params,
                 'paths': paths, 'costs': costs, 'speedup_scan_vs_per_step': ref / s,
                 'speedup_per_step_chunk_vs_per_step':
                     ref / paths['per_step_chunk']['seconds_per_epoch'],
                 'seconds_per_epoch': s, 'epochs': c.epochs, 'seeds': len(config.seeds),
                 'sweep_seconds': s * c.epochs * len(config.seeds)})
    print(f"{entry:16s} {n_params:7d} params  " + '  '.join(
        f"{p} {v['seconds_per_epoch']:.3f} s (loss diff {v['max_rel_loss_diff_vs_per_step']:.1e})"
        for p, v in paths.items()) +
          f"  -> scan x{ref / s:.2f}; {rows[-1]['sweep_seconds'] / 3600:.2f} h for "
          f"{c.epochs} epochs x {len(config.seeds)} seeds", flush=True)
  total = sum(r['sweep_seconds'] for r in rows)
  print(f'full sweep at the scan rates: {total / 3600:.2f} h', flush=True)
  machine_end = measure_machine()
  print_machine('end', machine_end)
  # Best of the two measurements: a peak is what the machine can do, and contention
  # from other jobs only lowers a measured figure.
  machine = {k: max(machine_start[k], machine_end[k]) if machine_start[k] else None
             for k in machine_start}
  for row in rows:
    costs = row.pop('costs')
    for p, v in row['paths'].items():
      v.update(roofline_row(v['seconds_per_epoch'], costs[p], machine))
    print(f"{row['entry']:16s} roofline: " + '  '.join(
        f"{p} {v['flops_per_epoch'] / 1e9:.3g} GFLOP {v['bytes_per_epoch'] / 1e9:.3g} GB "
        f"-> {v['achieved_gflops']:.3g} GFLOP/s {v['achieved_gbps']:.3g} GB/s, bound "
        f"{v['bound_seconds']:.3g} s (compute {v['compute_seconds']:.3g}, memory "
        f"{v['memory_seconds']:.3g}), t/bound {v['time_over_bound']:.2f}; optimistic "
        f"{v['bound_seconds_optimistic']:.3g} s, t/bound {v['time_over_bound_optimistic']:.2f}"
        for p, v in row['paths'].items()), flush=True)
  result = {'benchmark': f'fang {config.target} seconds per training epoch: per-step loop '
                         '(reference) vs one jit per epoch', 'rows': rows,
            'full_sweep_seconds': total, 'grad_chunk_of_new_paths': _CHUNK.value,
            'backend': jax.default_backend(),
            'machine_peak_matmul_gflops': machine['peak'],
            'machine_nominal_fma_gflops': machine['fma_peak'],
            'machine_stream_gbps': machine['stream'], 'stream_mib': STREAM_MIB,
            'machine_cache_stream_gbps': machine['cache_stream'],
            'cache_stream_mib': CACHE_STREAM_MIB,
            'machine_at_start': machine_start, 'machine_at_end': machine_end,
            'roofline': 'bound = max(flops / matmul peak, bytes / stream); bound_optimistic '
                        '= max(flops / nominal FMA peak, bytes / cache-resident stream); '
                        'flops and bytes from XLA cost_analysis (scan loops counted per '
                        'iteration); see benchmarks/roofline.py',
            'load_average_1min_at_start': load_start,
            'load_average_1min_at_end': os.getloadavg()[0], 'provenance': prov}
  outputs.atomic_json(os.path.join(_OUT.value, JSON_NAME), result, indent=1)


if __name__ == '__main__':
  cli.run(main)
