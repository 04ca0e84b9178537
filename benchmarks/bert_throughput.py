r"""Training throughput of our Transformer pre-training model vs Hugging Face BERT.

    python benchmarks/bert_throughput.py [--hidden=128 --layers=4 --heads=4 --mlp=512 \
        --seq=128 --batch=32 --vocab=4000 --steps=10 --rounds=3] [--reference=none]

Measures, in one process, training steps per second of

* ours: ``transformer_ua.models.BertPretrainer`` (mixing='attention', the Table 1
  Transformer; MLM + sentence-pair heads), AdamW, dropout 0.1, one
  ``jax.jit(..., donate_argnums=0)`` step; and
* the reference: Hugging Face ``transformers.BertForPreTraining`` on PyTorch CPU with the
  same sizes (the parameter counts are checked equal), ``torch.optim.AdamW``, dropout 0.1.

Both see the same batches (no padding, 15% of positions predicted); tokens/s =
batch x seq / step time, median over ``rounds`` interleaved rounds of ``steps`` steps
after warm-up. Our MLM head computes logits only at the predicted positions (as the
original BERT code does with ``max_predictions_per_seq``); Hugging Face computes them
at every position and ignores the rest (labels -100): that is part of what is compared.
Writes results/mixing_bert_throughput.json and appends one line to
results/benchmarks.md. The reference needs ``pip install torch==2.13.0 transformers``
(the CPU wheel); ``--reference=none`` times ours alone.
"""

import json
import os
import statistics
import sys
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from transformer_ua import provenance
from transformer_ua.models import encoder as enc

flags.DEFINE_integer('hidden', 128, 'd')
flags.DEFINE_integer('layers', 4, 'layers')
flags.DEFINE_integer('heads', 4, 'heads')
flags.DEFINE_integer('mlp', 512, 'feed-forward width')
flags.DEFINE_integer('seq', 128, 'sequence length')
flags.DEFINE_integer('batch', 32, 'batch size')
flags.DEFINE_integer('vocab', 4000, 'vocabulary')
flags.DEFINE_integer('steps', 10, 'timed steps per round')
flags.DEFINE_integer('rounds', 3, 'interleaved rounds (median reported)')
flags.DEFINE_enum('reference', 'hf', ['hf', 'none'], 'hf: Hugging Face BertForPreTraining')
flags.DEFINE_string('out', 'results/mixing_bert_throughput.json', 'JSON output')
flags.DEFINE_string('markdown', 'results/benchmarks.md', 'Markdown log (appended)')
FLAGS = flags.FLAGS


def make_batches(rng, n_batches):
  B, n, V = FLAGS.batch, FLAGS.seq, FLAGS.vocab
  P = max(1, round(0.15 * n))
  out = []
  for _ in range(n_batches):
    ids = rng.integers(5, V, (B, n)).astype(np.int32)
    pos = np.sort(np.stack([rng.choice(np.arange(1, n), P, replace=False) for _ in range(B)]),
                  axis=1).astype(np.int32)
    out.append({'input_ids': ids, 'type_ids': np.zeros((B, n), np.int32),
                'mask': np.ones((B, n), bool), 'mlm_positions': pos,
                'mlm_ids': np.take_along_axis(ids, pos, 1),
                'mlm_weights': np.ones((B, P), np.float32),
                'nsp_labels': rng.integers(0, 2, B).astype(np.int32),
                'nsp_weights': np.ones((B,), np.float32)})
  return out


def ours(batches):
  cfg = enc.EncoderConfig(vocab_size=FLAGS.vocab, max_len=FLAGS.seq, hidden=FLAGS.hidden,
                          num_layers=FLAGS.layers, num_heads=FLAGS.heads, mlp_dim=FLAGS.mlp,
                          dropout=0.1)
  model = enc.BertPretrainer(cfg)
  b = batches[0]
  params = model.init(jax.random.PRNGKey(0), b['input_ids'], b['type_ids'], b['mask'],
                      b['mlm_positions'])['params']
  tx = optax.adamw(1e-4, weight_decay=0.01)

  def loss_fn(p, b, rng):
    mlm, nsp = model.apply({'params': p}, b['input_ids'], b['type_ids'], b['mask'],
                           b['mlm_positions'], deterministic=False, rngs={'dropout': rng})
    return (optax.softmax_cross_entropy_with_integer_labels(mlm, b['mlm_ids']).mean()
            + optax.softmax_cross_entropy_with_integer_labels(nsp, b['nsp_labels']).mean())

  def step(state, b):
    rng = jax.random.fold_in(state['rng'], state['step'])
    loss, g = jax.value_and_grad(loss_fn)(state['params'], b, rng)
    upd, opt = tx.update(g, state['opt_state'], state['params'])
    return {'params': optax.apply_updates(state['params'], upd), 'opt_state': opt,
            'step': state['step'] + 1, 'rng': state['rng']}, loss

  step = jax.jit(step, donate_argnums=0)
  state = {'params': params, 'opt_state': tx.init(params), 'step': jnp.zeros((), jnp.int32),
           'rng': jax.random.PRNGKey(1)}
  dev = [jax.device_put(b) for b in batches]
  holder = {'state': state}

  def run(k):
    loss = None
    for i in range(k):
      holder['state'], loss = step(holder['state'], dev[i % len(dev)])
    jax.block_until_ready(loss)

  return enc.count_params(params), run


def reference(batches):
  try:
    import torch
    import transformers
  except ImportError:
    sys.exit('error: the reference needs PyTorch and transformers: '
             'pip install torch==2.13.0 transformers (or pass --reference=none)')
  torch.manual_seed(0)
  torch.set_num_threads(os.cpu_count())
  cfg = transformers.BertConfig(
      vocab_size=FLAGS.vocab, hidden_size=FLAGS.hidden, num_hidden_layers=FLAGS.layers,
      num_attention_heads=FLAGS.heads, intermediate_size=FLAGS.mlp,
      max_position_embeddings=FLAGS.seq, type_vocab_size=2, hidden_dropout_prob=0.1,
      attention_probs_dropout_prob=0.1)
  model = transformers.BertForPreTraining(cfg)
  model.train()
  opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
  tb = []
  for b in batches:
    labels = np.full(b['input_ids'].shape, -100, np.int64)
    np.put_along_axis(labels, b['mlm_positions'], b['mlm_ids'], 1)
    tb.append({'input_ids': torch.from_numpy(b['input_ids'].astype(np.int64)),
               'token_type_ids': torch.from_numpy(b['type_ids'].astype(np.int64)),
               'attention_mask': torch.from_numpy(b['mask'].astype(np.int64)),
               'labels': torch.from_numpy(labels),
               'next_sentence_label': torch.from_numpy(b['nsp_labels'].astype(np.int64))})
  n_params = sum(p.numel() for p in model.parameters())

  def run(k):
    for i in range(k):
      opt.zero_grad(set_to_none=True)
      loss = model(**tb[i % len(tb)]).loss
      loss.backward()
      opt.step()

  return n_params, run, {'torch': torch.__version__, 'transformers': transformers.__version__,
                         'torch_threads': torch.get_num_threads()}


def main(argv):
  if len(argv) > 1:
    sys.exit(f'error: unexpected arguments {argv[1:]}')
  for name in ('hidden', 'layers', 'heads', 'mlp', 'seq', 'batch', 'vocab', 'steps', 'rounds'):
    if FLAGS[name].value < 1:
      sys.exit(f'error: --{name} must be >= 1, got {FLAGS[name].value}')
  if FLAGS.hidden % FLAGS.heads:
    sys.exit(f'error: --hidden={FLAGS.hidden} is not divisible by --heads={FLAGS.heads}')
  prov = provenance.record()
  batches = make_batches(np.random.default_rng(0), 4)
  systems = {'ours (JAX/Flax)': ours(batches)}
  versions = {}
  if FLAGS.reference == 'hf':
    n, run, versions = reference(batches)
    systems['Hugging Face BertForPreTraining (PyTorch)'] = (n, run)
  counts = {k: v[0] for k, v in systems.items()}
  if len(set(counts.values())) != 1:
    sys.exit(f'error: parameter counts differ, not an equal-size comparison: {counts}')
  for _, run in systems.values():
    run(3)                                           # compile / warm up
  times = {k: [] for k in systems}
  for _ in range(FLAGS.rounds):
    for k, (_, run) in systems.items():
      t = time.perf_counter()
      run(FLAGS.steps)
      times[k].append(time.perf_counter() - t)
  tokens = FLAGS.batch * FLAGS.seq * FLAGS.steps
  tps = {k: tokens / statistics.median(v) for k, v in times.items()}
  keys = list(systems)
  result = {'benchmark': 'bert_throughput', 'params': counts[keys[0]],
            'shape': {f: FLAGS[f].value for f in ('hidden', 'layers', 'heads', 'mlp', 'seq',
                                                  'batch', 'vocab')},
            'steps_per_round': FLAGS.steps, 'rounds': FLAGS.rounds,
            'tokens_per_s': tps, 'round_seconds': times, 'versions': versions,
            'jax': jax.__version__, 'provenance': prov}
  if len(keys) == 2:
    result['speedup_ours_over_reference'] = tps[keys[0]] / tps[keys[1]]
  os.makedirs(os.path.dirname(FLAGS.out) or '.', exist_ok=True)
  with open(FLAGS.out, 'w') as f:
    json.dump(result, f, indent=1)
  summary = (f"BERT pre-training throughput ({FLAGS.layers}x{FLAGS.hidden}, {FLAGS.heads} "
             f"heads, FF {FLAGS.mlp}, seq {FLAGS.seq}, batch {FLAGS.batch}, vocab {FLAGS.vocab}, "
             f"{counts[keys[0]]:,} params): " +
             ', '.join(f'{k} {v:,.0f} tokens/s' for k, v in tps.items()) +
             (f"; ours/reference = {result['speedup_ours_over_reference']:.2f}x"
              if len(keys) == 2 else ''))
  line = provenance.append_benchmark_line(FLAGS.markdown, summary, prov)
  print(line, end='')


if __name__ == '__main__':
  app.run(main)
