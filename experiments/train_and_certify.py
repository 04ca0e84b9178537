r"""Train to certify: the smallest trained standard Transformer whose certificate reaches
epsilon (``certify.trainer.train_and_certify``; its module doc states the search rule).

    python experiments/train_and_certify.py --output_dir=runs/train_and_certify \
        [--config=experiments/configs/train_and_certify.py] [--config.epsilon=0.01] \
        [--config.arithmetic=float32] [--config.target=module:function \
        --config.lipschitz=L | --config.jacobian=module:function --config.hessian=H]]
        [--overwrite]

Writes into --output_dir: network.npz (the network-dict arrays), network.onnx (the same
network as a flat ONNX graph), certificate.txt (the certificate's line) and record.json
(config, seeds, trials, the row: parameters, non-zero parameters, bits, certified total,
sampled d_p by NumPy, JAX and onnxruntime; command, revision, machine, load). An
--output_dir that exists is refused unless --overwrite; nothing is written under results/
unless asked for. Bad flags end with one line, a --config.target=module:function that does
not import or name a function included.
"""

from __future__ import annotations

import importlib.util
import os

from absl import app, flags
import ml_collections

from transformer_ua import cli
from transformer_ua import binary_interrupts
from transformer_ua.certify import trainer

FLAGS = flags.FLAGS
CONFIG = cli.define_config_file(
    'config', os.path.join(os.path.dirname(__file__), 'configs', 'train_and_certify.py'),
    'ml_collections config file; its fields are listed below.')
flags.DEFINE_string('output_dir', 'runs/train_and_certify',
                    'directory for network.npz, certificate.txt and record.json; refused '
                    'if it exists, unless --overwrite.')
cli.define_overwrite()


def _help() -> str:
  """The config module's docstring (its fields), appended to --help."""
  path = os.path.join(os.path.dirname(__file__), 'configs', 'train_and_certify.py')
  spec = importlib.util.spec_from_file_location('train_and_certify_config', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.__doc__


__doc__ += '\n' + _help()      # absl prints the main module's docstring with --help


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  config = CONFIG.value
  target = cli.function_flag('config.target', config.target)
  if target is not config.target:             # a callable: the config holds it from here
    if config.lipschitz is None and config.hessian is None:
      cli.fail(f'--config.target={config.target} is a callable; give --config.lipschitz=L '
               'with |f(X)_ij - f(Y)_ij| <= L max|X - Y| (it cannot be guessed from samples), '
               'or --config.jacobian=module:function with --config.hessian=H.')
    jacobian = cli.function_flag('config.jacobian', config.jacobian)
    if isinstance(jacobian, str):
      cli.fail(f'--config.jacobian={jacobian}: expected module:function.')
    config = ml_collections.ConfigDict(dict(config.to_dict(), target=target,
                                            jacobian=jacobian))
  elif config.jacobian is not None or config.hessian is not None:
    cli.fail(f'--config.jacobian and --config.hessian are for a callable target; '
             f'{config.target!r} is a built-in with a closed-form interval extension.')
  try:
    trainer.validate(config)
  except ValueError as e:
    cli.fail(str(e))
  if os.path.exists(FLAGS.output_dir) and not FLAGS.overwrite:
    cli.fail(f'--output_dir={FLAGS.output_dir} exists; pass --overwrite to write into it, '
             'or choose another directory.')
  cli.output_dir(FLAGS.output_dir, '--output_dir', writes=trainer.OUTPUT_FILES,
                 overwrite=FLAGS.overwrite)
  try:
    trainer.run(config, FLAGS.output_dir, command=binary_interrupts.own_command())
  except ValueError as e:
    cli.fail(str(e))


if __name__ == '__main__':
  cli.run(main)
