r"""Tabulates the certified one-layer contextual-mapping runs (JSON from the binary).

Reads every ``*.json`` that ``experiments/verify_contextual_mapping.py
--contextual=one_layer --output_dir=...`` wrote under --indirs, and writes a Markdown
table (one row per run, each with its own command, revision and load) and a PNG of the
certified and proved id gaps, grids.md and grids.png, to --output_dir
(``reports.one_layer_grids.write``):

    python experiments/one_layer_grids_report.py \
        --indirs=results/yun/one_layer/grids,results/yun/one_layer/grids_search \
        --output_dir=results/yun/one_layer --overwrite
"""

from __future__ import annotations

import os

from absl import flags

from transformer_ua import cli
from transformer_ua.reports import one_layer_grids

FLAGS = flags.FLAGS
flags.DEFINE_string('indirs', '', 'comma-separated folders of run JSONs (required)')
cli.define_output_dir('runs/one_layer', 'Directory of grids.md and grids.png.')
cli.define_overwrite()


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}')
  indirs = [d.strip() for d in FLAGS.indirs.split(',') if d.strip()]
  if not indirs:
    cli.fail('--indirs is required: the folders holding the one-layer run JSONs.')
  for d in indirs:
    if not os.path.isdir(d):
      cli.fail(f'--indirs: {d!r} is not a folder.')
  out = cli.output_dir(FLAGS.output_dir, writes=one_layer_grids.WRITES)   # before the work
  try:
    count, md, png = one_layer_grids.write(indirs, out)
  except ValueError as e:
    cli.fail(str(e))
  print(f'{count} runs -> {md}, {png}')


if __name__ == '__main__':
  cli.run(main)
