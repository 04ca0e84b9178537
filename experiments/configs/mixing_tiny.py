"""`tiny`: the size every Appendix H result in results/mixing/mixing_layers_tiny.md was run at on
2 CPU cores (4 layers, d = 64, 4 heads, r = 256, max_len 64, WordPiece 4000; 200 pre-training
steps at lr 2e-3 and 200 fine-tuning steps at lr 1e-3, batch 32: sized so that
the 48 stages of the sweep fit ~90 minutes on 2 cores shared with other jobs).

    python experiments/mixing_pretrain.py --config=experiments/configs/mixing_tiny.py \
        --workdir=runs/tiny/attention_s0/pretrain --config.model.mixing=attention
    python experiments/mixing_finetune.py --config=experiments/configs/mixing_tiny.py \
        --workdir=runs/tiny/attention_s0/mnli --config.finetune.task=mnli \
        --config.finetune.pretrain_workdir=runs/tiny/attention_s0/pretrain
    python experiments/mixing_sweep.py --config=experiments/configs/mixing_tiny.py   # all

    python experiments/mixing_sweep.py --config=experiments/configs/mixing_tiny.py \
        --workdir=runs/mixing_tiny --seeds=3 --hybrid_ks=1,2 --shard=0/2   # and 1/2

Results: results/mixing/mixing_layers_tiny.md.
"""

from transformer_ua.models import mixing_config


def get_config():
  return mixing_config.base_config()
