"""Shared fields of the Appendix H configs (mixing_tiny, mixing_small, mixing_bert_base).

Every field is commented here; the size configs override what differs.
"""

import ml_collections


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.halt_after = -1                 # >0: stop after this many steps (simulated preemption)

  c.model = m = ml_collections.ConfigDict()
  m.mixing = 'attention'            # attention | average | bilinear | sepconv
  m.num_conv_layers = 0             # k: first k layers sepconv (Figure 1 hybrids)
  m.max_len = 64                    # tokens; bi-linear W_P is max_len x max_len
  m.hidden = 64                     # d
  m.num_layers = 4
  m.num_heads = 4
  m.mlp_dim = 256                   # feed-forward width r
  m.dropout = 0.1                   # embeddings, attention probs, residual branches
  m.conv_filters = 16               # lightweight conv: H filters shared over d/H dims
  m.conv_width = 31                 # K (paper: 128 at max_len 512)

  c.data = d = ml_collections.ConfigDict()
  d.wordnet_dir = ''                # '' = $WORDNET_DIR or /usr/share/wordnet
  d.cache_dir = ''                  # tokenizer cache; '' = <repo>/data_cache (ignored)
  d.vocab_size = 4000               # WordPiece vocabulary
  d.heldout_fraction = 0.1          # synsets held out of pre-training and task training
  d.mask_prob = 0.15                # BERT masking rate (80/10/10)
  d.max_predictions = 10            # masked positions per sequence (per row) at most
  d.max_segments = 1                # pre-training instances per row: 1 = one instance per
                                    # row, padded; > 1 = sequence packing, up to this many
                                    # instances per row, kept apart by segment masks
                                    # (transformer_ua/data/text.py); evaluation is unpacked

  c.pretrain = p = ml_collections.ConfigDict()
  p.num_steps = 200
  p.batch_size = 32
  p.learning_rate = 2e-3
  p.warmup_steps = 20               # linear warm-up, then linear decay to 0
  p.weight_decay = 0.01             # AdamW, matrices only
  p.log_every = 1                   # metrics.jsonl / TensorBoard rows (means over the window)
  p.steps_per_call = 1              # optimizer steps per jit call (lax.scan over batches)
  p.tensorboard = True              # mirror metrics.jsonl to TensorBoard event files
  p.eval_every = 100                # held-out MLM / NSP evaluation
  p.eval_batches = 20               # held-out batches per evaluation
  p.checkpoint_every = 100
  p.checkpoint_seconds = 300.0      # also checkpoint after this much wall time (<= 5 min lost)

  c.finetune = f = ml_collections.ConfigDict()
  f.task = 'mnli'                   # mnli (relations) | squad (spans)
  f.pretrain_workdir = ''           # '' = from scratch
  f.num_steps = 200
  f.batch_size = 32
  f.learning_rate = 1e-3
  f.warmup_steps = 20
  f.weight_decay = 0.01
  f.num_train_examples = 0          # 0 = all
  f.num_eval_examples = 1000        # 0 = all
  f.max_answer_tokens = 10          # span task: longest predicted answer
  f.log_every = 1
  f.steps_per_call = 1
  f.tensorboard = True
  f.eval_every = 100
  f.checkpoint_every = 100
  f.checkpoint_seconds = 300.0
  return c
