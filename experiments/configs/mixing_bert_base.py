"""`bert_base`: the paper's BERT_BASE (H.4): 12 layers, d = 768, 12 heads, r = 3072,
max_len 512, separable convolution with 16 filters of width 128 (48 dims per filter),
dropout 0.1 and weight decay 0.01, Adam. The paper pre-trains 250k steps at batch 1024
on Wikipedia + BooksCorpus (2 days on 16 TPUv3); here the corpus is WordNet, so the
step count is scaled to the corpus. For accelerators only.

    python experiments/mixing_sweep.py --config=experiments/configs/mixing_bert_base.py \
        --workdir=runs/bert_base

Parameter counts (encoder + pooler, vocabulary 30522): Transformer 109,482,240
(= BERT-base), SepConv 102,419,712, BProj 91,366,656, average attention 88,220,928.
"""

from transformer_ua.models import mixing_config


def get_config():
  c = mixing_config.base_config()
  c.model.update(max_len=512, hidden=768, num_layers=12, num_heads=12, mlp_dim=3072,
                 conv_filters=16, conv_width=128)
  c.data.update(vocab_size=30522, max_predictions=76)
  c.pretrain.update(num_steps=100_000, batch_size=256, learning_rate=1e-4,
                    warmup_steps=10_000, eval_every=10_000, checkpoint_every=5000,
                    log_every=100)
  c.finetune.update(num_steps=10_000, batch_size=32, learning_rate=3e-5,
                    warmup_steps=1000, eval_every=2000, checkpoint_every=2000,
                    log_every=50)
  return c
