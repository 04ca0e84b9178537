r"""Cost of one training epoch of each Section 5 model (Fang et al.), and what a full
sweep would take at that rate.

    python benchmarks/fang_epoch_cost.py [--config=experiments/configs/fang_f2.py] \
        [--rounds=3] [--out=results/fang_epoch_cost.json]

For each sweep entry of the config (ATTENTION n = 4368 / n_q, NN_width, NN_depth) it
builds the real train step of ``transformer_ua.fang.regression`` (same optimizer,
batch size, ``grad_chunk`` and dtype as the runs), runs one epoch over the training
set to compile, then times ``--rounds`` epochs (median reported; the device is
synchronized after every epoch). The extrapolation is seconds/epoch x epochs x seeds
of the config -- on a shared machine it includes contention from other jobs (the
1-min load is recorded).
"""

import copy
import json
import os
import statistics
import time

from absl import app, flags
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import numpy as np

from transformer_ua import provenance
from transformer_ua.fang import regression

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CONFIG = config_flags.DEFINE_config_file(
    'config', os.path.join(ROOT, 'experiments', 'configs', 'fang_f2.py'),
    'experiments/configs/fang_f*.py')
_ROUNDS = flags.DEFINE_integer('rounds', 3, 'Timed epochs per model (median reported).')
_OUT = flags.DEFINE_string('out', 'results/fang_epoch_cost.json', 'JSON result.')


def epoch_seconds(c, data, rounds):
  sizes = regression.resolved_sizes(c)
  dtype = jnp.float64 if c.dtype == 'float64' else jnp.float32
  n_tr = data['x_train'].shape[0]
  steps = -(-n_tr // c.batch_size)
  tx, _ = regression.make_optimizer(c, steps)
  params = regression.init_params(jax.random.PRNGKey(c.seed), model=c.model, d=sizes['d'],
                                  q=sizes['q'], num_tokens=sizes['num_tokens'],
                                  depth_width=sizes['depth_width'], dtype=dtype)
  state = {'params': params, 'opt_state': tx.init(params), 'step': jnp.zeros((), jnp.int32)}
  step = regression.make_train_step(c.model, tx, c.grad_chunk)
  x = data['x_train'].astype(np.dtype(dtype))
  y = data['y_train'].astype(np.dtype(dtype))
  batches = [{'x': jnp.asarray(x[s * c.batch_size:(s + 1) * c.batch_size]),
              'y': jnp.asarray(y[s * c.batch_size:(s + 1) * c.batch_size])}
             for s in range(steps)]

  def epoch(state):
    for b in batches:
      state, loss = step(state, b)
    float(loss)  # synchronize
    return state

  state = epoch(state)  # compile
  ts = []
  for _ in range(rounds):
    t0 = time.perf_counter()
    state = epoch(state)
    ts.append(time.perf_counter() - t0)
  return statistics.median(ts), regression.count_params(params)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if _ROUNDS.value < 1:
    raise app.UsageError('--rounds must be >= 1.')
  config = _CONFIG.value
  prov = provenance.record()
  data = regression.make_data(config.target, config.data_seed)
  rows, seen = [], set()
  for entry, c in regression.run_configs(config):
    if entry in seen:
      continue
    seen.add(entry)
    s, n_params = epoch_seconds(copy.deepcopy(c), data, _ROUNDS.value)
    rows.append({'entry': entry, 'run': regression.run_name(c), 'params': n_params,
                 'seconds_per_epoch': s, 'epochs': c.epochs, 'seeds': len(config.seeds),
                 'sweep_seconds': s * c.epochs * len(config.seeds)})
    print(f"{entry:16s} {n_params:7d} params  {s:.3f} s/epoch  -> "
          f"{rows[-1]['sweep_seconds'] / 3600:.2f} h for {c.epochs} epochs x "
          f"{len(config.seeds)} seeds", flush=True)
  total = sum(r['sweep_seconds'] for r in rows)
  print(f'full sweep at these rates: {total / 3600:.2f} h', flush=True)
  result = {'benchmark': f'fang {config.target} seconds per training epoch', 'rows': rows,
            'full_sweep_seconds': total, 'backend': jax.default_backend(),
            'provenance': prov}
  if _OUT.value:
    os.makedirs(os.path.dirname(_OUT.value) or '.', exist_ok=True)
    with open(_OUT.value, 'w') as f:
      json.dump(result, f, indent=1)


if __name__ == '__main__':
  app.run(main)
