r"""A stock nn.TransformerEncoderLayer, trained for at most 2 minutes on token_times_mean
(d=1, n=3), certified in float32 (p=2) from its torch.onnx.export file
(``studies.torch_encoder.run``; its module doc states the recipe).

    python experiments/certify_torch_encoder.py --variant=post_relu \
        --output_dir=runs/torch_encoder/post_relu [--train_seconds=120] [--max_minutes=5]

Writes into --output_dir: model.onnx (the export), certificate.txt (the certificate's line)
and record.json (the row: params, sampled d_2 by torch and onnxruntime, target, certified
total, seconds; command, revision, machine, load). An --output_dir that exists is refused
unless --overwrite. Bad flags end with one line.
"""

from __future__ import annotations

import json
import os

from absl import app, flags

from transformer_ua import binary_interrupts, cli, provenance
from transformer_ua.studies import torch_encoder

FLAGS = flags.FLAGS
flags.DEFINE_enum('variant', 'post_relu', sorted(torch_encoder.VARIANTS), 'the layer variant.')
flags.DEFINE_string('output_dir', None, 'directory for model.onnx, certificate.txt and '
                    'record.json; refused if it exists, unless --overwrite.')
flags.DEFINE_float('train_seconds', 120.0, 'training time, at most 120 s.')
flags.DEFINE_float('max_minutes', 5.0, 'the certifier\'s time budget.')
flags.DEFINE_integer('seed', 0, 'torch seed (init and batches).')
cli.define_overwrite()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if not FLAGS.output_dir:
    cli.fail('--output_dir is required.')
  if os.path.exists(FLAGS.output_dir) and not FLAGS.overwrite:
    cli.fail(f'--output_dir={FLAGS.output_dir} exists; pass --overwrite to write into it, '
             'or choose another directory.')
  cli.output_dir(FLAGS.output_dir, '--output_dir', overwrite=FLAGS.overwrite,
                 writes=('model.onnx', 'certificate.txt', 'record.json'))
  prov = provenance.record(binary_interrupts.own_command())
  try:
    row = torch_encoder.run(FLAGS.variant, output_dir=FLAGS.output_dir,
                            train_seconds=FLAGS.train_seconds, max_minutes=FLAGS.max_minutes,
                            seed=FLAGS.seed)
  except ValueError as e:
    cli.fail(str(e))
  row.update(prov, load_average_1min_at_end=round(os.getloadavg()[0], 2))
  with open(os.path.join(FLAGS.output_dir, 'record.json'), 'w') as fh:
    json.dump(row, fh, indent=1)
  print(row['line'])


if __name__ == '__main__':
  cli.run(main)
