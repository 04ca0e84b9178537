r"""Fang et al. 2022, Section 5: what the ATTENTION representation can reach on the data.

    python experiments/fang_optimum.py --config=experiments/configs/fang_f2.py \
        --output_dir=results/fang [--runs_dir=/tmp/fang_runs] [--resume]

writes ``fang_optimum_<target>.json`` (the config's target) into --output_dir.

On the experiment's own data (``regression.make_data(target, config.data_seed)``) it
computes in float64 (``transformer_ua.fang.optimum``):

* the global optimum over (F, beta, b): least squares over all polynomials of degree
  <= q (attained by the model whenever M(F) has full row rank);
* for every ATTENTION sweep entry and every seed: the optimum over (beta, b) with F
  fixed at the seed's initial F (``regression.init_params``), and at the trained F when
  ``--runs_dir`` holds that run's ``params.npz``; with the spectrum of G = Phi M(F).

``--resume`` keeps what an existing ``fang_optimum_<target>.json`` already holds and solves only the F it
lacks (each F is an SVD of a [3003, n q + 1] matrix, minutes for f2), so the trained F
of a sweep can be added seed by seed as its runs finish.

The report writer (``transformer_ua.reports.fang_regression``) reads that file from its
output directory and puts it under the key ``optimum`` of ``fang_regression_<target>.json`` and beside
the trained rows of Table 1.
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import json
import os
import sys
import time

from absl import flags
import jax
import numpy as np

from transformer_ua import outputs, provenance
from transformer_ua.fang import optimum, regression

_CONFIG = cli.define_config_file('config', None, 'experiments/configs/fang_f*.py')
_OUT = cli.define_output_dir('runs/fang_optimum', 'Directory of fang_optimum_<target>.json '
                             '(--output_dir=results/fang: the record).')
_RUNS = flags.DEFINE_string('runs_dir', None, 'Optional root of the runs '
                            '(<runs_dir>/<target>/<run>/params.npz): adds the trained F.')
cli.define_overwrite()
_RESUME = flags.DEFINE_bool('resume', False, 'Keep the entries of an existing result (same '
                           'target and data_seed) and solve only the F it lacks.')


def _path(config) -> str:
  """The result file: ``--output_dir/fang_optimum_<target>.json``."""
  return os.path.join(_OUT.value, f'fang_optimum_{config.target}.json')


def _previous(config) -> dict:
  """The existing result for --resume, checked to be of this config's data."""
  path = _path(config)
  try:
    with open(path) as f:
      done = json.load(f)
  except (OSError, ValueError) as e:
    raise cli.BadInput(f'--resume: cannot read {path} ({e}); run without '
                       '--resume to start a new file.')
  if (done.get('target'), done.get('data_seed')) != (config.target, config.data_seed):
    raise cli.BadInput(f"--resume: {path} is for target {done.get('target')!r}, "
                       f"data_seed {done.get('data_seed')!r}; the config has "
                       f'{config.target!r}, {config.data_seed}.')
  if not {'polynomial', 'fixed_F', 'seconds', 'provenance'} <= set(done):
    raise cli.BadInput(f'--resume: {path} is not a fang_optimum result.')
  return done


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  config = _CONFIG.value
  if config is None:
    raise cli.BadInput('--config is required (experiments/configs/fang_f1.py or fang_f2.py).')
  try:
    regression.validate_config(config)
    runs = [(e, c) for e, c in regression.run_configs(config) if c.model == 'attention']
  except ValueError as e:
    raise cli.BadInput(str(e)) from None
  cli.output_dir(_OUT.value, writes=(os.path.basename(_path(config)),),
                 overwrite=True if _RESUME.value else None)
  done = _previous(config) if _RESUME.value else None
  prov = provenance.record('python ' + ' '.join(sys.argv))
  t0 = time.perf_counter()
  data = regression.make_data(config.target, config.data_seed)
  q = regression.DATA[config.target]['q']
  Fs, meta = {}, {}
  for entry, c in runs:
    s = regression.resolved_sizes(c)
    p = regression.init_params(jax.random.PRNGKey(c.seed), model='attention', d=s['d'],
                               q=s['q'], num_tokens=s['num_tokens'],
                               depth_width=s['depth_width'])
    label = f'{regression.run_name(c)}:init'
    Fs[label] = np.asarray(p['F'], np.float64)
    meta[label] = {'entry': entry, 'seed': c.seed, 'num_tokens': s['num_tokens'], 'F': 'init'}
    trained = os.path.join(_RUNS.value or '', c.target, regression.run_name(c))
    if _RUNS.value and os.path.exists(os.path.join(trained, 'params.npz')):
      label = f'{regression.run_name(c)}:trained'
      Fs[label] = np.asarray(regression.load_params(trained)['F'], np.float64)
      meta[label] = dict(meta[f'{regression.run_name(c)}:init'], F='trained')
  res = optimum.optimum_report(data, q, Fs, done)
  for label, m in meta.items():
    res['fixed_F'][label].update(m)
  result = {'target': config.target, 'data_seed': config.data_seed,
            'seeds': list(config.seeds), 'num_train': int(data['x_train'].shape[0]),
            'num_test': int(data['x_test'].shape[0]),
            'note': ('Same data set for every seed (data_seed); seeds change the '
                     'initialization only, so the polynomial optimum is one number.'),
            'seconds': time.perf_counter() - t0, **res, 'provenance': prov}
  if done is not None:
    result['earlier_runs'] = done.get('earlier_runs', []) + [
        {'seconds': done['seconds'], 'provenance': done['provenance']}]
  outputs.atomic_json(_path(config), result, indent=1)
  p = res['polynomial']
  print(f"polynomial LS (degree <= {q}, {p['num_features']} monomials, rank {p['rank']}, "
        f"cond {p['cond_equilibrated']:.3g} equilibrated): MSE_Tr {p['mse_train']:.4f} "
        f"MSE_Te {p['mse_test']:.4f} MSE_Te vs f {p['mse_test_vs_f']:.4f}")
  for label, r in res['fixed_F'].items():
    print(f"{label}: rank {r['rank']} of {r['max_rank']}, cond(G) {r['cond_G_on_rank']:.3g}, "
          f"MSE_Tr {r['mse_train']:.4f} MSE_Te {r['mse_test']:.4f}")


if __name__ == '__main__':
  cli.run(main)
