r"""Cost of one training epoch of each Section 5 model (Fang et al.): today's per-step
loop against the whole-epoch program (``transformer_ua.fang.epoch``), side by side,
and what a full sweep would take at each rate.

    python benchmarks/fang_epoch_cost.py [--config=experiments/configs/fang_f2.py] \
        [--rounds=3] [--out=/tmp/fang_epoch_cost.json]

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
"""

import copy
import json
import os
import statistics
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import cli, provenance
from transformer_ua.fang import epoch as fang_epoch
from transformer_ua.fang import regression

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CONFIG = cli.define_config_file(
    'config', os.path.join(ROOT, 'experiments', 'configs', 'fang_f2.py'),
    'experiments/configs/fang_f*.py')
_ROUNDS = flags.DEFINE_integer('rounds', 3, 'Timed epochs per model (median reported).')
_OUT = flags.DEFINE_string('out', 'runs/benchmarks/fang_epoch_cost.json',
                           'JSON result (--out=results/... to update the record).')
_CHUNK = flags.DEFINE_integer('grad_chunk', 250, 'Rows per gradient chunk of the '
                              "'per_step_chunk' and 'scan' paths.")
_ONLY = flags.DEFINE_list('only_entries', [], 'Benchmark only these sweep entries.')


PATHS = ('per_step', 'per_step_chunk', 'scan')


def _loop_epoch(c, step, x, y, n_tr, steps):
  """The per-step epoch (``train.fang_regression._Task.train_epoch``, one device),
  keeping every step's loss."""
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


def epoch_seconds(c, data, rounds, chunk):
  """{path: (median s/epoch, compile-epoch losses)} for one sweep entry."""
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
  runners = {
      'per_step': _loop_epoch(c, regression.make_train_step(c.model, tx, c.grad_chunk),
                              x, y, n_tr, steps),
      'per_step_chunk': _loop_epoch(c, regression.make_train_step(c.model, tx, chunk),
                                    x, y, n_tr, steps),
      'scan': _scan_epoch(c, fang_epoch.make_train_epoch(chunked, tx, x, y))}
  states, first, times = {}, {}, {p: [] for p in runners}
  for path, run in runners.items():
    st = {'params': jax.tree_util.tree_map(lambda a: jnp.array(a, copy=True), params),
          'opt_state': tx.init(params), 'step': jnp.zeros((), jnp.int32)}
    states[path], first[path] = run(st, 0)     # compile + the agreement epoch
  for r in range(rounds):
    for path, run in runners.items():
      t0 = time.perf_counter()
      states[path], _ = run(states[path], r + 1)
      times[path].append(time.perf_counter() - t0)
  ref = np.asarray(first['per_step'])
  out = {}
  for path in runners:
    diff = float(np.max(np.abs(np.asarray(first[path]) - ref) / np.abs(ref)))
    out[path] = {'seconds_per_epoch': statistics.median(times[path]),
                 'all_seconds': times[path], 'max_rel_loss_diff_vs_per_step': diff}
  return out, regression.count_params(params)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if _ROUNDS.value < 1 or _CHUNK.value < 1:
    raise app.UsageError('--rounds and --grad_chunk must be >= 1.')
  cli.output_file(_OUT.value, '--out')
  config = _CONFIG.value
  prov = provenance.record()
  data = regression.make_data(config.target, config.data_seed)
  rows, seen = [], set()
  for entry, c in regression.run_configs(config):
    if entry in seen or (_ONLY.value and entry not in _ONLY.value):
      continue
    seen.add(entry)
    paths, n_params = epoch_seconds(copy.deepcopy(c), data, _ROUNDS.value, _CHUNK.value)
    ref = paths['per_step']['seconds_per_epoch']
    s = paths['scan']['seconds_per_epoch']
    rows.append({'entry': entry, 'run': regression.run_name(c), 'params': n_params,
                 'paths': paths, 'speedup_scan_vs_per_step': ref / s,
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
  result = {'benchmark': f'fang {config.target} seconds per training epoch: per-step loop '
                         '(reference) vs one jit per epoch', 'rows': rows,
            'full_sweep_seconds': total, 'grad_chunk_of_new_paths': _CHUNK.value, 'backend': jax.default_backend(),
            'load_average_1min_at_end': os.getloadavg()[0], 'provenance': prov}
  if _OUT.value:
    os.makedirs(os.path.dirname(_OUT.value) or '.', exist_ok=True)
    with open(_OUT.value, 'w') as f:
      json.dump(result, f, indent=1)


if __name__ == '__main__':
  cli.run(main)
