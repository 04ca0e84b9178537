r"""Fang et al. 2022, Section 5: what the ATTENTION representation can reach on the data.

    python experiments/fang_optimum.py --config=experiments/configs/fang_f2.py \
        --output_dir=results/fang [--runs_dir=/tmp/fang_runs] [--resume]

writes ``fang_optimum_<target>.json`` (the config's target) into --output_dir.

On the experiment's own data (``regression.make_data(target, config.data_seed)``) it
computes in float64 (``transformer_ua.fang.optimum.study``):

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

import os
import sys

from absl import flags

from transformer_ua import provenance
from transformer_ua.fang import optimum, regression

_CONFIG = cli.define_config_file('config', None, 'experiments/configs/fang_f*.py')
_OUT = cli.define_output_dir('runs/fang_optimum', 'Directory of fang_optimum_<target>.json '
                             '(--output_dir=results/fang: the record).')
_RUNS = flags.DEFINE_string('runs_dir', None, 'Optional root of the runs '
                            '(<runs_dir>/<target>/<run>/params.npz): adds the trained F.')
cli.define_overwrite()
_RESUME = flags.DEFINE_bool('resume', False, 'Keep the entries of an existing result (same '
                           'target and data_seed) and solve only the F it lacks.')


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  config = _CONFIG.value
  if config is None:
    raise cli.BadInput('--config is required (experiments/configs/fang_f1.py or fang_f2.py).')
  try:
    regression.validate_config(config)
    regression.run_configs(config)
  except ValueError as e:
    raise cli.BadInput(str(e)) from None
  path = os.path.join(_OUT.value, f'fang_optimum_{config.target}.json')
  cli.output_dir(_OUT.value, writes=(os.path.basename(path),),
                 overwrite=True if _RESUME.value else None)
  try:
    done = optimum.read_previous(path, config) if _RESUME.value else None
  except ValueError as e:
    raise cli.BadInput(str(e)) from None
  print(optimum.summary(optimum.study(config, path, runs_dir=_RUNS.value, done=done,
                                      prov=provenance.record('python ' + ' '.join(sys.argv)))))


if __name__ == '__main__':
  cli.run(main)
