r"""Fine-tuning on the MNLI or SQuAD analogue (Yun et al. 2020, Appendix H.3-H.4).

    python experiments/mixing_finetune.py --config=experiments/configs/mixing_tiny.py \
        --workdir=runs/tiny/attention_s0/mnli --config.finetune.task=mnli \
        --config.finetune.pretrain_workdir=runs/tiny/attention_s0/pretrain

Parses flags only; the loop is ``transformer_ua.models.mixing_train.finetune`` (re-exported
here as ``finetune(config, workdir)``). The model flags must match the
pre-training run's.
"""


from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

from absl import flags

from transformer_ua.models import mixing_cli, mixing_train

finetune = mixing_train.finetune
_main = mixing_cli.binary_main(finetune)


def main(argv):
  if flags.FLAGS.workdir:   # its checkpoints resume the run
    cli.resumable(flags.FLAGS.workdir)
  return _main(argv)


flags.adopt_module_key_flags(mixing_cli)  # --help lists --config and --workdir


if __name__ == '__main__':
  cli.run(main)
