r"""Lemma 6 at scale: planned, exact-parameter, certified standard Transformers.

For each configuration (target, Theorem 2 or 3, d, n, N): build g_bar, plan lam,
epsilon and bits from the construction's exact bounds (``yun.realization.plan``), realize g with
exact rational params, certify max |g - g_bar| over every cube interior (margin
delta/4 per side) by arb box propagation, search the smallest working precision that
still certifies, and check whether float64 at the planned lam, epsilon reproduces
g_bar on sampled interiors (measured, for comparison); the study is
``studies.realization_certified``. Writes realization_certified.{md,json,png} to
--output_dir (default: a run directory, never results/ unless asked).

    python experiments/realization_certified.py --output_dir=results/yun/realization
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import sys

from absl import flags

from transformer_ua.studies import realization_certified

FLAGS = flags.FLAGS
cli.define_output_dir('runs/realization_certified', 'Directory of '
                      'realization_certified.{md,json,png}.')
flags.DEFINE_bool('search', True, 'search the smallest certifying bits')
flags.DEFINE_string('only', '', 'comma-separated row labels to run (default: all)')
cli.define_overwrite()


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  try:
    configs = realization_certified.select(FLAGS.only)
  except ValueError as e:
    raise cli.BadInput(str(e)) from None
  cli.output_dir(FLAGS.output_dir, writes=realization_certified.WRITES)
  realization_certified.study(configs, FLAGS.output_dir, search=FLAGS.search,
                              command=' '.join(['python'] + sys.argv))


if __name__ == '__main__':
  cli.run(main)
