r"""Theorems 2 and 3 as a certificate: standard Transformers with a proved d_p(f, g)
(``studies.certification``).

    python experiments/certify_approximation.py [--config=experiments/configs/certify_approximation.py[:tiny]]
        [--output_dir=runs/certify_approximation] [--overwrite]
        [--dask_scheduler=tcp://host:8786] [--state_dir=DIR] [--from_json=FILE]

Every number called certified is an upper bound proved over the whole unit cube
(``yun.bounds.certificate.certify_lp``), checked term by term against an independent
stratified Monte Carlo (``verify.certificate_mc``); a term whose whole 95% interval lies
above its bound stops the run with exit status 1 and one line naming the row and the term
(it would be a bug). Parts (config): table, ladder, lemma6, clamp.

Writes certify_approximation.json, .md and two PNG figures into --output_dir (existing
files there are refused before any work unless --overwrite); --from_json rebuilds the
report from a finished run's JSON instead.
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import os
import sys

from absl import flags

from transformer_ua.studies import certification

FLAGS = flags.FLAGS
CONFIG = cli.define_config_file(
    'config', os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configs',
                           'certify_approximation.py'),
    'ml_collections config file (append :tiny for the seconds-long variant).')
flags.DEFINE_string('output_dir', 'runs/certify_approximation',
                    f'directory for {", ".join(certification.WRITES)}.')
flags.DEFINE_string('from_json', '', f'rebuild the report (and the Lemma 6 fits) from this '
                    f'{certification.JSON_NAME} instead of running; writes into --output_dir.')
cli.define_overwrite()
cli.define_executor_flags()


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  if FLAGS.from_json:
    out_dir = cli.output_dir(FLAGS.output_dir, '--output_dir', certification.WRITES,
                             overwrite=FLAGS.overwrite)
    try:
      certification.rebuild(FLAGS.from_json, out_dir)
    except ValueError as e:
      raise cli.BadInput(str(e)) from None
    return
  c = CONFIG.value
  try:
    certification.validate(c)
  except ValueError as e:
    raise cli.BadInput(str(e)) from None
  out_dir = cli.output_dir(FLAGS.output_dir, '--output_dir', certification.WRITES,
                           overwrite=FLAGS.overwrite)
  try:
    workers = cli.executor_from_flags(c.workers, FLAGS.dask_scheduler, FLAGS.state_dir,
                                  ('--overwrite',))
  except ValueError as e:
    raise cli.BadInput(str(e)) from None
  try:
    certification.run(c, out_dir, workers=workers)
  except certification.Contradicted as e:
    print(e, file=sys.stderr, flush=True)
    raise SystemExit(1) from None


if __name__ == '__main__':
  cli.run(main)
