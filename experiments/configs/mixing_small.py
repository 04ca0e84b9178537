"""`small`: 6 layers, d = 256, 4 heads, r = 1024, max_len 128, WordPiece 8000; for a
many-core CPU or one accelerator (about 10x the compute of `tiny` per step).

    python experiments/mixing_sweep.py --config=experiments/configs/mixing_small.py \
        --workdir=runs/small
"""

from transformer_ua.models import mixing_config


def get_config():
  c = mixing_config.base_config()
  c.model.update(max_len=128, hidden=256, num_layers=6, num_heads=4, mlp_dim=1024,
                 conv_width=63)
  c.data.update(vocab_size=8000, max_predictions=20)
  c.pretrain.update(num_steps=20_000, batch_size=128, learning_rate=5e-4,
                    warmup_steps=1000, eval_every=2000, checkpoint_every=2000,
                    log_every=10)
  c.finetune.update(num_steps=3000, batch_size=64, learning_rate=1e-4, warmup_steps=300,
                    eval_every=1000, checkpoint_every=1000, log_every=10)
  return c
