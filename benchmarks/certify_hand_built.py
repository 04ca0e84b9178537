r"""The hand-built token_times_mean network at (d, n), certified over the whole cube.

What it measures: ``certify.hand_built_certificate.certify_hand_built`` at one (d, n) and
epsilon: the hand-built network of certify/hand_built.py (a uniform head and a ReLU product
layer per coordinate; closed-form d_2) certified by ``certify_network`` within
--max_minutes, then sampled independently by JAX and onnxruntime (--points uniform points
plus the worst boxes' centres). Prints the certificate's line (with the cost model's
projection when epsilon is not reached) and the record's Markdown row.

    python benchmarks/certify_hand_built.py --d=1 --n=8 --units=16 --epsilon=0.02 \
        --out=runs/benchmarks/certify_hand_built_d1_n8.json
    python benchmarks/certify_hand_built.py --d=1 --n=8 --units=16 --epsilon=0.02 \
        --max_boxes=40000 --dask_workers=2 --out=runs/benchmarks/dask_d1_n8.json
    python benchmarks/certify_hand_built.py --d=1 --n=8 --units=16 --epsilon=0.02 \
        --max_boxes=40000 --box_kernel=off --out=runs/benchmarks/local_d1_n8.json

Writes the record as JSON to --out only (an existing file is refused before any work
unless --overwrite). Timings are wall-clock on a shared machine: the load is recorded.
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

from absl import flags

from transformer_ua import outputs
from transformer_ua.certify import hand_built_certificate

FLAGS = flags.FLAGS
flags.DEFINE_integer('d', 1, 'token width d')
flags.DEFINE_integer('n', 8, 'number of tokens n')
flags.DEFINE_integer('units', 16, 'ReLUs per coordinate (a multiple of 4)')
flags.DEFINE_float('epsilon', 0.02, 'the d_p the certificate is to reach')
flags.DEFINE_float('max_minutes', 12.0, 'the certificate\'s time budget')
flags.DEFINE_string('arithmetic', 'float32', 'the arithmetic g runs in')
flags.DEFINE_integer('points', 20000, 'uniform points of the independent check')
flags.DEFINE_integer('max_boxes', None, 'also stop the certificate at this many boxes')
flags.DEFINE_integer('dask_workers', 0, 'run the rounds on a Dask LocalCluster of this many '
                     'worker processes (0: this process)')
flags.DEFINE_enum('box_kernel', 'auto', ['auto', 'on', 'off'], 'the jit box kernel: '
                  'automatic, always, or never (NumPy, as the workers run)')
flags.DEFINE_string('out', None, 'the JSON record to write')
cli.define_overwrite()
flags.mark_flag_as_required('out')


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  out = cli.output_file(FLAGS.out, '--out')
  try:
    record = hand_built_certificate.certify_hand_built(
        FLAGS.d, FLAGS.n, FLAGS.units, FLAGS.epsilon, max_minutes=FLAGS.max_minutes,
        arithmetic=FLAGS.arithmetic, p=2, points=FLAGS.points, max_boxes=FLAGS.max_boxes,
        dask_workers=FLAGS.dask_workers,
        box_kernel={'auto': None, 'on': True, 'off': False}[FLAGS.box_kernel])
  except ValueError as e:
    raise cli.BadInput(str(e)) from None
  outputs.atomic_json(out, record, indent=1, default=str)
  print(record['line'])
  print(hand_built_certificate.row_text(record))
  print(f'wrote {out}')


if __name__ == '__main__':
  cli.run(main)
