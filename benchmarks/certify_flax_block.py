r"""A flax.linen encoder block, trained briefly, certified from its (module, variables) pair.

What it measures (``studies.flax_block``, its docstring has the construction): Dense(1, 8),
one post-LN block of ``nn.MultiHeadDotProductAttention(num_heads=2)`` (default biases),
``nn.LayerNorm`` and a Dense(32)-gelu-Dense(8) feed-forward (flax's tanh-form gelu), and
Dense(8, 1), trained with optax Adam on token_times_mean (d=1, n=3) for at most
--train_seconds, then

    certify_network('token_times_mean', (module, variables), d=1, n=3, p=2,
                    arithmetic='float32', epsilon=max(3 s, 0.05), max_minutes=--max_minutes)

with s the Flax apply's float32 d_2 on 2e4 uniform points (onnxruntime's on the network's
flat ONNX file beside it), and the largest |f - fl(g)| at the certificate's worst boxes'
centres.

    python benchmarks/certify_flax_block.py --output_dir=results/imports/flax_block

Writes certify_flax_block.json, certify_flax_block.md, model.onnx and certificate.txt into
--output_dir (the record refused if it exists, unless --overwrite), with the command,
revision and /proc/loadavg at start and end. Timings are wall-clock on a shared machine.
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

from absl import flags

from transformer_ua import binary_interrupts
from transformer_ua.studies import flax_block

FLAGS = flags.FLAGS
flags.DEFINE_float('train_seconds', 120.0, 'training wall-clock limit (at most 120)')
flags.DEFINE_integer('steps', 100_000, 'Adam steps at most')
flags.DEFINE_float('max_minutes', 5.0, "the certifier's budget")
flags.DEFINE_integer('seed', 0, 'init and batch seed')
cli.define_output_dir('runs/certify_flax_block',
                      f'Directory of {" and ".join(flax_block.OUTPUT_FILES)}.')
cli.define_overwrite()


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  if not 0 < FLAGS.train_seconds <= 120:
    raise cli.BadInput(f'--train_seconds={FLAGS.train_seconds}; 0 < train_seconds <= 120.')
  out_dir = cli.output_dir(FLAGS.output_dir, writes=flax_block.OUTPUT_FILES)
  row = flax_block.run(output_dir=out_dir, train_seconds=FLAGS.train_seconds,
                       steps=FLAGS.steps, max_minutes=FLAGS.max_minutes, seed=FLAGS.seed,
                       command=binary_interrupts.own_command())
  print(row['line'])


if __name__ == '__main__':
  cli.run(main)
