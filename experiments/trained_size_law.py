r"""The trained line on the size law: a figure and a table of the smallest trained networks
certified by ``certify_network``, beside the constructions of the size law
(``reports.trained_size_law``).

    python experiments/trained_size_law.py --rows_dir=results/yun/trained/rows \
        --size_law_json=results/yun/size_law/size_law.json --output_dir=runs/trained_size_law

--rows_dir holds one directory per trained row, as experiments/train_and_certify.py writes
it (record.json). Writes trained_size_law.png and trained_size_law.md into --output_dir
(existing files refused unless --overwrite). Bad flags end with one line.
"""

from __future__ import annotations

import os

from absl import app, flags

from transformer_ua import cli
from transformer_ua import binary_interrupts
from transformer_ua.reports import trained_size_law

FLAGS = flags.FLAGS
flags.DEFINE_string('rows_dir', None, 'directory of trained rows (record.json each), '
                    'e.g. results/yun/trained/rows.')
flags.DEFINE_string('size_law_json', None, "the size law's rows (the constructions), e.g. "
                    'results/yun/size_law/size_law.json.')
flags.DEFINE_string('output_dir', 'runs/trained_size_law', 'where the figure and table go.')
cli.define_overwrite()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if not FLAGS.rows_dir or not FLAGS.size_law_json:
    cli.fail('pass --rows_dir and --size_law_json (the trained rows and the size law).')
  if not os.path.isdir(FLAGS.rows_dir):
    cli.fail(f'--rows_dir={FLAGS.rows_dir} is not a directory.')
  if not os.path.isfile(FLAGS.size_law_json):
    cli.fail(f'--size_law_json={FLAGS.size_law_json} is not a file.')
  try:
    cli.output_dir(FLAGS.output_dir, '--output_dir', writes=trained_size_law.OUTPUT_FILES)
    count = trained_size_law.write(FLAGS.rows_dir, FLAGS.size_law_json, FLAGS.output_dir,
                                   command=binary_interrupts.own_command())
  except (ValueError, cli.BadInput) as e:
    cli.fail(str(e))
  print(f'{count} trained rows -> {FLAGS.output_dir}/trained_size_law.png, .md')


if __name__ == '__main__':
  cli.run(main)
