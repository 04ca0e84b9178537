r"""Theorem 2 end to end: one softmax attention layer against Yun et al.'s N^d + 1.

For each (target, d, n, N) builds, plans, realizes with exact rational params and
certifies over every cube interior (margin delta/4 per side, arb box propagation):

  * paper      ``yun.build_approximator(..., contextual='paper')``: Lemma 8's N^d + 1
               hardmax layers -> softmax(lam .), lam / epsilon / bits from
               ``yun.plan_realization``;
  * one_layer  ``yun.build_approximator(..., contextual='one_layer')``: one softmax
               head with the proved lam (``yun.single_attention.one_layer_ids.plan``);
  * one_layer (searched lam): the power-of-two lam with the largest certified id gap
               (``yun.single_attention.one_layer_ids.search_lam``; certified, not proved).

(the study: ``studies.one_layer_compare``) and writes one_layer_compare.{md,json,png} to
--output_dir:

    python experiments/one_layer_compare.py --output_dir=results/yun/one_layer --overwrite
"""

from __future__ import annotations

from absl import flags

from transformer_ua import cli
from transformer_ua.studies import one_layer_compare

FLAGS = flags.FLAGS
cli.define_output_dir('runs/one_layer_compare', 'Directory of one_layer_compare.{md,json,png}.')
cli.define_overwrite()
flags.DEFINE_string('only', '', 'semicolon-separated row labels to run (default: all)')


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}')
  try:
    configs = one_layer_compare.select(FLAGS.only)
  except ValueError as e:
    cli.fail(str(e))
  outdir = cli.output_dir(FLAGS.output_dir, writes=one_layer_compare.WRITES)  # before the work
  one_layer_compare.study(configs, outdir)


if __name__ == '__main__':
  cli.run(main)
