r"""Whole-domain certificates of d_p(f, g): one softmax attention layer against the paper's.

For each (target, d, n, N) builds both Theorem 2 networks, realizes each as a standard
Transformer in T^{2,1,4} blocks with exact rational params and the output clamp
(``realize(..., clamp=True)``), and runs ``yun.certify_lp`` on it: a proved upper bound
on d_p(f, g) over the whole unit cube, as the sum of d_p(f, f_bar) (Lipschitz),
d_p(f_bar, g_bar) (exact, over the grid classes) and d_p(g_bar, g) (cube interiors by box
propagation + ramp windows by one enclosure of g on [0, 1]^{n x d}).

  * paper      ``yun.build_approximator(..., contextual='paper')`` (Lemma 8, N^d + 1
               attention layers; its bad set enters d_p(f_bar, g_bar)); lam, ramp and
               bits from ``yun.plan_realization`` at the margin;
  * one_layer  ``yun.build_approximator(..., contextual='one_layer')`` (one softmax head,
               the proved lam); ramps from its own planner at the margin.

Both are certified at cube-interior margin 2^-margin_log2 (fraction of delta per side)
(the study: ``studies.one_layer_certificate``), and write one_layer_certificate.{json,md}
to --output_dir:

    python experiments/one_layer_certificate.py --output_dir=results/yun/one_layer
"""

from __future__ import annotations

from absl import flags

from transformer_ua import cli
from transformer_ua.studies import one_layer_certificate

FLAGS = flags.FLAGS
cli.define_output_dir('runs/one_layer_certificate', 'Directory of '
                      'one_layer_certificate.{json,md}.')
flags.DEFINE_string('configs', 'token_times_mean:1,3,8;token_times_mean:1,3,16',
                    'semicolon-separated target:d,n,N')
flags.DEFINE_integer('margin_log2', 20, 'cube-interior margin 2^-margin_log2 (of delta)')
flags.DEFINE_float('p', 2.0, 'exponent of d_p (>= 1)')
flags.DEFINE_integer('workers', 1, 'processes for the cube interiors')
cli.define_overwrite()
cli.define_executor_flags()


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}')
  try:
    configs = one_layer_certificate.parse_configs(FLAGS.configs)
  except ValueError as e:
    cli.fail(str(e))
  if FLAGS.margin_log2 < 2:
    cli.fail(f'--margin_log2={FLAGS.margin_log2}; it must be >= 2 (margin <= 1/4).')
  if FLAGS.workers < 1:
    cli.fail(f'--workers={FLAGS.workers}; it must be >= 1.')
  if not FLAGS.p >= 1:
    cli.fail(f'--p={FLAGS.p}; it must be >= 1.')
  outdir = cli.output_dir(FLAGS.output_dir, writes=one_layer_certificate.WRITES)
  try:
    workers = cli.executor_from_flags(FLAGS.workers, FLAGS.dask_scheduler, FLAGS.state_dir,
                                  ('--overwrite',))
  except ValueError as e:
    cli.fail(str(e))
  try:
    one_layer_certificate.study(configs, outdir, margin_log2=FLAGS.margin_log2, p=FLAGS.p,
                                workers=workers)
  except ValueError as e:   # a row that cannot be built: '<config> <method>: <why>'
    cli.fail(str(e))


if __name__ == '__main__':
  cli.run(main)
