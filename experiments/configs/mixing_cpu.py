"""`cpu`: the Appendix H budget for 2 CPU cores that leaves the unigram regime.

The `tiny` runs (200 steps x 32 x 64 tokens) stayed in the unigram regime
(results/mixing/mixing_layers_tiny.md). This config spends ~10x more compute per run on
a model 4x wider, with
the sequence length cut to the corpus: WordNet pre-training instances are 28 tokens on
average (median 26, 95th percentile 48; measured on 1,024 training instances), so
max_len = 48 truncates ~5% of them where 64 left 57% of every batch as padding.

Same data, WordPiece vocabulary (4000) and token budget for every mixer and seed: the
batches are functions of (seed, step) only. Pilot runs of the Transformer that chose
the step count and learning rate are recorded in results/mixing/mixing_cpu_pilots.md.

    python experiments/mixing_pretrain.py --config=experiments/configs/mixing_cpu.py \
        --workdir=runs/mixing_cpu/attention_s0/pretrain
    bash experiments/mixing_cpu_sweep.sh runs/mixing_cpu       # the whole sweep
    python experiments/mixing_sweep.py --config=experiments/configs/mixing_cpu.py \
        --workdir=runs/mixing_cpu --seeds=3 --hybrid_ks=1,2,3 --hybrid_seeds=3 --status
"""

from transformer_ua.models import mixing_config


def get_config():
  c = mixing_config.base_config()
  c.model.update(
      max_len=48,            # 95th percentile of the instance lengths (see above)
      hidden=128,            # d
      num_layers=4,          # L: hybrids k = 1, 2, 3
      num_heads=4,           # head size 32
      mlp_dim=512,           # r = 4 d
      conv_filters=16,       # H: 8 channels per filter
      conv_width=31)         # K: covers 2/3 of the sequence (paper: 128 of 512)
  c.data.update(max_predictions=8,   # 15% of 48 tokens = 7.2
                max_segments=1)      # no packing: the pilots chose the step count and
                                     # learning rate on unpacked rows, and the sweep's
                                     # first runs were unpacked. Packing (<= 4 instances
                                     # per row) carries more real tokens per step at the
                                     # same step cost (results/benchmarks/mixing_bert_throughput_
                                     # packing.json) but changes what a step sees.
  c.pretrain.update(
      num_steps=2000,
      batch_size=64,
      learning_rate=2e-3,
      warmup_steps=200,
      steps_per_call=10,     # optimizer steps per jit call (lax.scan)
      log_every=50,          # train rows: means over 50 steps
      eval_every=100,        # held-out MLM accuracy curve (every 100 steps = 0.3M positions)
      eval_batches=10,       # 640 held-out sequences
      checkpoint_every=500,
      checkpoint_seconds=300.0,
      tensorboard=False)
  c.finetune.update(
      num_steps=1000,
      batch_size=64,
      learning_rate=5e-4,
      warmup_steps=100,
      steps_per_call=10,
      log_every=50,
      eval_every=250,
      checkpoint_every=500,
      checkpoint_seconds=300.0,
      tensorboard=False)
  return c
