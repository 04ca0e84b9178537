r"""Fine-tuning on the MNLI or SQuAD analogue (Yun et al. 2020, Appendix H.3-H.4).

    python experiments/mixing_finetune.py --config=experiments/configs/mixing_tiny.py \
        --workdir=runs/tiny/attention_s0/mnli --config.finetune.task=mnli \
        --config.finetune.pretrain_workdir=runs/tiny/attention_s0/pretrain

Parses flags only; the loop is ``transformer_ua.train.mixing.finetune``. The model flags
must match the pre-training run's. Rerunning with the same workdir resumes from the
latest checkpoint.
"""


from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

from absl import flags

from transformer_ua.train import mixing

main = cli.workdir_binary(
    mixing.finetune, mixing.summary,
    config_help='Path to an experiments/configs/mixing_*.py file.',
    config_example='experiments/configs/mixing_tiny.py',
    workdir_example='runs/tiny/attention')

flags.adopt_module_key_flags(cli)  # --help lists --config and --workdir


if __name__ == '__main__':
  cli.run(main)
