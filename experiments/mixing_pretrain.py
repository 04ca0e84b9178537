r"""Masked-LM + sentence-pair pre-training (Yun et al. 2020, Appendix H.3-H.4).

    python experiments/mixing_pretrain.py --config=experiments/configs/mixing_tiny.py \
        --workdir=runs/tiny/attention_s0/pretrain [--config.model.mixing=sepconv ...]

Parses flags only; the loop is ``transformer_ua.models.mixing_train.pretrain`` (re-exported
here as ``pretrain(config, workdir)``). Rerunning with the same workdir
resumes from the latest checkpoint.
"""


from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

from absl import flags

from transformer_ua.models import mixing_cli, mixing_train

pretrain = mixing_train.pretrain
_main = mixing_cli.binary_main(pretrain)


def main(argv):
  if flags.FLAGS.workdir:   # its checkpoints resume the run
    cli.resumable(flags.FLAGS.workdir)
  return _main(argv)


flags.adopt_module_key_flags(mixing_cli)  # --help lists --config and --workdir


if __name__ == '__main__':
  cli.run(main)
