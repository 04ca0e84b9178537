r"""The main job: compile a target into Transformers and measure every error term
(``studies.approximation``).

    python experiments/approximate.py [--config=experiments/configs/approximate.py[:ladder]]
        [--config.target=...] [--output_dir=runs/approximate]
        [--dask_scheduler=tcp://host:8786] [--state_dir=DIR]

For the configured target (Yun et al. 2020, Theorem 2, or Theorem 3 with
``positional``): the certified headline d_p(f, g) <= ``certify_epsilon`` for a standard
Transformer g as it runs in ``certify_arithmetic`` (binary64 weights by default; exact
rational weights with ``exact``) ([certified]), the paper's g_bar and its certified
realizations at the main resolution ([paper]), the same realized in floats and sampled
([float64]); then the resolution ladder, the lambda / epsilon sweeps and the precision map.

Every size is checked before anything is built or written: a size no network can have is
refused in one line naming the size and the limit.

Writes ``approximate.json``, approximate.md and PNG figures to --output_dir. Bad flags end
with a one-line error naming what is allowed.
"""

from __future__ import annotations

import os
import runpy
import sys

from absl import app, flags

from transformer_ua import cli
from transformer_ua.studies import approximation

FLAGS = flags.FLAGS
CONFIG_FILE = os.path.join(os.path.dirname(__file__), 'configs', 'approximate.py')
FIELDS = ', '.join(f'{k}={v!r}' for k, v in runpy.run_path(CONFIG_FILE)['get_config']().items())
CONFIG = cli.define_config_file(
    'config', CONFIG_FILE,
    'ml_collections config file (append :ladder for the long variant); --config.FIELD=VALUE '
    f'sets one field. Fields and defaults (meanings: {CONFIG_FILE}): {FIELDS}.')
flags.DEFINE_string('output_dir', 'runs/approximate',
                    'directory for approximate.json and the PNG figures.')
cli.define_overwrite()
cli.define_executor_flags()
flags.adopt_module_key_flags(cli)       # --help lists --config, --overwrite, the executor's


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  try:
    approximation.validate(CONFIG.value)   # check everything, then make the directory
  except ValueError as e:
    cli.fail(str(e))
  cli.output_dir(FLAGS.output_dir, '--output_dir', writes=approximation.OUTPUT_FILES)
  try:
    workers = cli.executor_from_flags(None, FLAGS.dask_scheduler, FLAGS.state_dir,
                                  ('--overwrite',))
    approximation.run(CONFIG.value, FLAGS.output_dir, workers=workers,
                      command=' '.join(['python'] + sys.argv))
  except ValueError as e:  # one line, no traceback
    cli.fail(str(e))


if __name__ == '__main__':
  cli.run(main)
