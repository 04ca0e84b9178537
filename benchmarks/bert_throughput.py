r"""Training throughput of the Appendix H models vs Hugging Face BERT, with FLOP counts.

    python benchmarks/bert_throughput.py [--hidden=128 --layers=4 --heads=4 --mlp=512 \
        --seq=128 --batch=32 --vocab=4000 --steps=10 --rounds=3] [--reference=both] \
        [--mixers=attention,average,bilinear,sepconv] [--pipeline_steps=120] \
        [--pipeline_config=tiny|cpu] [--pipeline_mixers=attention,...] [--max_segments=4] \
        [--output_dir=runs/benchmarks]

Three parts, in one process:

1. Machine peak: GFLOP/s of a float32 2048 x 2048 x 2048 matmul in XLA (2 n^3 FLOPs).
2. Per mixer (``--mixers``): training tokens/s of ``BertPretrainer`` on synthetic
   batches (no padding), the analytic FLOPs per token (``train_flops_per_token``) and
   the achieved GFLOP/s = FLOPs/token x tokens/s, next to the peak. For the Transformer
   also the Hugging Face reference of the same size (below).
3. End to end (``--pipeline_steps`` > 0; needs the WordNet corpus): ``mixing_train.pretrain``
   with the ``--pipeline_config`` config (``tiny`` or ``cpu``) on the real corpus, for each
   of ``--pipeline_mixers``, in three settings, interleaved:
     old:  one step per jit call, a metrics row and a host sync every step, TensorBoard,
           one instance per row (the settings before the throughput work);
     new:  ``--steps_per_call`` steps per call via ``lax.scan``, a row every
           ``--log_every`` steps from on-device sums, batches built one call ahead;
     new + packing: as new, with up to ``--max_segments`` instances packed per row
           (``config.data.max_segments``; segment-aware mixing, same model and parameters).
   Reported: real (non-padding) tokens/s -- the honest measure, since padding is work
   that trains nothing -- and row tokens/s (batch x max_len per step, padding included);
   the speed-ups over old are in real tokens/s. When the synthetic shape flags equal the
   config's shape, also the ratio of each setting's real tokens/s to the Hugging Face
   reference's tokens/s (the reference sees unpadded synthetic rows, so every token it
   processes is real: a bound the reference could not beat on padded data).

FLOPs per token (forward, one multiply-add = 2 FLOPs; d hidden, n sequence length,
r feed-forward width, V vocabulary, P/n predicted positions per token, L layers):

    attention   8 d^2 + 4 n d        (Q, K, V, O projections; scores and a.V)
    average     2 d^2 + 2 d          (W_O; the masked mean)
                2 d^2 + 2 n d        packed rows: the per-segment mean as an n x n matmul
    sepconv     6 d^2 + 2 S n d      packed rows of <= S instances: S masked copies
    bilinear    2 d^2 + 2 n d        (W_O; W_P applied along the tokens)
    sepconv     6 d^2 + 2 n d        (GLU 2d x d; the banded conv as our n x n matmul; W_O)
    per layer   + 4 d r              (feed-forward)
    heads       + (P/n) (2 d^2 + 2 d V)   (MLM transform and tied output, at P positions)
    forward     F = L (mixer + 4 d r) + heads;  training = 3 F (backward ~ 2 x forward)

Layer norms, softmax, GELU, embeddings and the optimizer are left out (O(d) per token).
These are the FLOPs computed per row position; packed rows compute the same n x n
mixing as unpacked ones (segment masks, no FLOPs saved), so GFLOP/s = FLOPs/position x
row tokens/s, and FLOPs per real token = FLOPs/position / (fraction of real positions).

Part 2 measures, in one process, training steps per second of

* ours: ``transformer_ua.models.encoder.BertPretrainer`` (mixing='attention', the Table 1
  Transformer; MLM + sentence-pair heads), AdamW, dropout 0.1, one
  ``jax.jit(..., donate_argnums=0)`` step; and
* the references: Hugging Face ``transformers.BertForPreTraining`` on PyTorch CPU with
  the same sizes (the parameter counts are checked equal), ``torch.optim.AdamW``, dropout
  0.1, ``torch.set_num_threads(os.cpu_count())``, run two ways (``--reference``):
  eager (``hf``), and compiled (``compiled``: ``torch.compile(model)``, TorchInductor's
  default mode, what a PyTorch user does to make training fast; its compilation is
  in the warm-up, not in the timed rounds); ``both`` (the default) times both.

Both see the same batches (no padding, 15% of positions predicted); tokens/s =
batch x seq / step time, median over ``rounds`` interleaved rounds of ``steps`` steps
after warm-up. Our MLM head computes logits only at the predicted positions (as the
original BERT code does with ``max_predictions_per_seq``); Hugging Face computes them
at every position and ignores the rest (labels -100): that is part of what is compared.
Writes ``mixing_bert_throughput.json`` into ``--output_dir`` (default runs/benchmarks)
and appends one line to ``benchmarks.md`` there (``--output_dir=results/benchmarks``
updates the record; an existing JSON is refused before the work unless --overwrite).
The references need ``pip install torch==2.13.0 transformers``
(the CPU wheel; ``compiled`` also a C++ compiler for TorchInductor); ``--reference=none``
times ours alone.
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import importlib.util
import math
import os
import statistics
import time

from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from transformer_ua import layers, outputs, provenance
from transformer_ua.models import encoder as enc
from transformer_ua.train import mixing as mixing_train

from roofline import peak_gflops   # benchmarks/roofline.py (benchmarks/ is on sys.path)

JSON_NAME = 'mixing_bert_throughput.json'
LOG_NAME = provenance.BENCHMARK_LOG   # the log every benchmark appends to


def _define_flags() -> None:
  """Flags of the binary (defined only when run as one: tests import
  ``train_flops_per_token``, beside binaries that define --output_dir too)."""
  flags.DEFINE_integer('hidden', 128, 'd')
  flags.DEFINE_integer('layers', 4, 'layers')
  flags.DEFINE_integer('heads', 4, 'heads')
  flags.DEFINE_integer('mlp', 512, 'feed-forward width')
  flags.DEFINE_integer('seq', 128, 'sequence length')
  flags.DEFINE_integer('batch', 32, 'batch size')
  flags.DEFINE_integer('vocab', 4000, 'vocabulary')
  flags.DEFINE_integer('steps', 10, 'timed steps per round')
  flags.DEFINE_integer('rounds', 3, 'interleaved rounds (median reported)')
  flags.DEFINE_enum('reference', 'both', list(REFERENCES),
                    'Hugging Face BertForPreTraining: hf (eager PyTorch), compiled '
                    '(torch.compile), both, or none.')
  cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME} and the log {LOG_NAME} '
                        '(appended; --output_dir=results/benchmarks: the record).')
  cli.define_overwrite()
  flags.DEFINE_list('mixers', ['attention', 'average', 'bilinear', 'sepconv'],
                    'mixing layers timed on synthetic batches')
  flags.DEFINE_integer('conv_width', 31, 'SepConv filter width K')
  flags.DEFINE_integer('pipeline_steps', 0, 'end-to-end pre-training steps per setting '
                       '(0 = skip; needs the WordNet corpus)')
  flags.DEFINE_enum('pipeline_config', 'tiny', ['tiny', 'cpu'],
                    'end-to-end config: experiments/configs/mixing_<name>.py')
  flags.DEFINE_list('pipeline_mixers', ['attention'], 'mixers run end to end')
  flags.DEFINE_integer('pipeline_rounds', 0, 'end-to-end interleaved rounds (0 = --rounds)')
  flags.DEFINE_integer('max_segments', 4, 'new + packing setting: instances per row at most')
  flags.DEFINE_integer('steps_per_call', 20, 'new pipeline setting: steps per jit call')
  flags.DEFINE_integer('log_every', 40, 'new pipeline setting: steps per metrics row')


FLAGS = flags.FLAGS
#: --reference: the Hugging Face runs it times, {name: compiled}.
REFERENCES = {'hf': {'Hugging Face BertForPreTraining (PyTorch)': False},
              'compiled': {'Hugging Face BertForPreTraining (torch.compile)': True},
              'both': {'Hugging Face BertForPreTraining (PyTorch)': False,
                       'Hugging Face BertForPreTraining (torch.compile)': True},
              'none': {}}
MIXER_FLOPS = {   # forward FLOPs per token of one mixing layer (module doc)
    'attention': lambda d, n: 8 * d * d + 4 * n * d,
    'average': lambda d, n: 2 * d * d + 2 * d,
    'bilinear': lambda d, n: 2 * d * d + 2 * n * d,
    'sepconv': lambda d, n: 6 * d * d + 2 * n * d,
}
PACKED_MIXER_FLOPS = {   # the same on packed rows of up to S instances (module doc)
    'attention': lambda d, n, S: MIXER_FLOPS['attention'](d, n),
    'average': lambda d, n, S: 2 * d * d + 2 * n * d,
    'bilinear': lambda d, n, S: MIXER_FLOPS['bilinear'](d, n),
    'sepconv': lambda d, n, S: 6 * d * d + 2 * S * n * d,
}


def train_flops_per_token(mixing, *, d, n, r, V, P, L, segments=0):
  """3 x the forward FLOPs per token position (module doc); ``segments`` = S > 0:
  packed rows of up to S instances."""
  mixer = (PACKED_MIXER_FLOPS[mixing](d, n, segments) if segments
           else MIXER_FLOPS[mixing](d, n))
  forward = L * (mixer + 4 * d * r) + (P / n) * (2 * d * d + 2 * d * V)
  return 3 * forward


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


def ours(batches, mixing='attention'):
  cfg = enc.EncoderConfig(vocab_size=FLAGS.vocab, max_len=FLAGS.seq, hidden=FLAGS.hidden,
                          num_layers=FLAGS.layers, num_heads=FLAGS.heads, mlp_dim=FLAGS.mlp,
                          dropout=0.1, mixing=mixing, conv_width=FLAGS.conv_width)
  model = enc.BertPretrainer(cfg)
  b = batches[0]
  params = model.init(jax.random.PRNGKey(0), b['input_ids'], b['type_ids'], b['mask'],
                      b['mlm_positions'])['params']
  tx = optax.adamw(1e-4, weight_decay=0.01)

  def loss_fn(p, b, rng):
    mlm, nsp = model.apply({'params': p}, b['input_ids'], b['type_ids'], b['mask'],
                           b['mlm_positions'], deterministic=False, rngs={'dropout': rng})
    loss = (optax.softmax_cross_entropy_with_integer_labels(mlm, b['mlm_ids']).mean()
            + optax.softmax_cross_entropy_with_integer_labels(nsp, b['nsp_labels']).mean())
    return loss, {'loss': loss}

  # The training step of mixing_train (one jit call runs len(batches) steps, lax.scan).
  step = mixing_train.make_train_step(loss_fn, tx, len(batches))
  stack = jax.device_put({k: np.stack([b[k] for b in batches]) for k in batches[0]})
  holder = {'state': {'params': params, 'opt_state': tx.init(params),
                      'step': jnp.zeros((), jnp.int32), 'rng': jax.random.PRNGKey(1)},
            'acc': mixing_train.init_metrics_acc(loss_fn, params, batches[0])}

  def run(k):      # k steps, rounded up to whole calls
    for _ in range(-(-k // len(batches))):
      holder['state'], holder['acc'] = step(holder['state'], holder['acc'], stack)
    jax.block_until_ready(holder['acc'])

  return layers.count_params(params), run


def reference(batches, compiled: bool = False):
  """(params, run(k), versions) of Hugging Face BERT pre-training in PyTorch, eager or
  ``torch.compile``d (the model: forward and backward; AdamW stays eager)."""
  try:
    import torch
    import transformers
  except ImportError:
    raise cli.BadInput(_NO_REFERENCE) from None
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
  forward = torch.compile(model) if compiled else model
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
      loss = forward(**tb[i % len(tb)]).loss
      loss.backward()
      opt.step()

  return n_params, run, {'torch': torch.__version__, 'transformers': transformers.__version__,
                         'torch_threads': torch.get_num_threads()}


_NO_REFERENCE = ('the reference needs PyTorch and transformers: pip install torch==2.13.0 '
                 'transformers (or pass --reference=none)')

PIPELINE_CONFIGS = ('tiny', 'cpu')


def pipeline_settings():
  """{name: (pretrain overrides, data.max_segments)} of the three end-to-end settings."""
  c, le, S = FLAGS.steps_per_call, FLAGS.log_every, FLAGS.max_segments
  new = f'{c} steps per jit call, a row every {le} steps from on-device sums'
  return {
      'old (1 step per jit call, a row + host sync every step, TensorBoard, no packing)':
          (dict(steps_per_call=1, log_every=1, tensorboard=True), 1),
      f'new ({new})': (dict(steps_per_call=c, log_every=le, tensorboard=False), 1),
      f'new + packing ({new}, <= {S} instances per row)':
          (dict(steps_per_call=c, log_every=le, tensorboard=False), S)}


def pipeline_config():
  import importlib
  return importlib.import_module(
      f'experiments.configs.mixing_{FLAGS.pipeline_config}').get_config()


def pipeline(mixers, num_steps, rounds):
  """End-to-end ``mixing_train.pretrain`` on the real corpus: {mixer: {setting:
  {'tokens_per_s': [..], 'row_tokens_per_s': [..]}}} (real and padded-row tokens/s)."""
  import shutil
  import tempfile
  settings = pipeline_settings()
  out = {m: {k: {'tokens_per_s': [], 'row_tokens_per_s': []} for k in settings}
         for m in mixers}
  root = tempfile.mkdtemp(prefix='bert_pipeline_')
  try:
    for i in range(rounds):
      for m in mixers:
        for j, (name, (kw, S)) in enumerate(settings.items()):
          cfg = pipeline_config()
          cfg.model.mixing = m
          cfg.data.max_segments = S
          cfg.pretrain.update(num_steps=num_steps, eval_every=num_steps, eval_batches=1,
                              checkpoint_every=num_steps, checkpoint_seconds=1e9, **kw)
          r = mixing_train.pretrain(cfg, os.path.join(root, f'{i}_{m}_{j}'))
          out[m][name]['tokens_per_s'].append(r['train_tokens_per_s'])
          out[m][name]['row_tokens_per_s'].append(r['train_row_tokens_per_s'])
  finally:
    shutil.rmtree(root, ignore_errors=True)
  return out


def pipeline_result(pipe, ref_tps, peak):
  """Medians, speed-ups over the old setting (real tokens/s), FLOPs and GFLOP/s of the
  end-to-end runs; the ratio to the reference when the shapes agree."""
  cfg = pipeline_config()
  m = cfg.model
  shape = dict(d=m.hidden, n=m.max_len, r=m.mlp_dim, V=cfg.data.vocab_size,
               P=cfg.data.max_predictions, L=m.num_layers)
  same = (FLAGS.hidden, FLAGS.layers, FLAGS.heads, FLAGS.mlp, FLAGS.seq, FLAGS.batch,
          FLAGS.vocab, FLAGS.conv_width) == (
              m.hidden, m.num_layers, m.num_heads, m.mlp_dim, m.max_len,
              cfg.pretrain.batch_size, cfg.data.vocab_size, m.conv_width)
  settings = pipeline_settings()
  out = {'config': FLAGS.pipeline_config, 'steps': FLAGS.pipeline_steps,
         'rounds': len(next(iter(next(iter(pipe.values())).values()))['tokens_per_s']),
         'shape': {**shape, 'B': cfg.pretrain.batch_size},
         'same_shape_as_synthetic': same, 'mixers': {}}
  for mixer, runs in pipe.items():
    rows = {}
    for k, v in runs.items():
      med = statistics.median(v['tokens_per_s'])
      row = statistics.median(v['row_tokens_per_s'])
      S = settings[k][1]
      fpt = train_flops_per_token(mixer, segments=S if S > 1 else 0, **shape)
      rows[k] = {**v, 'median_tokens_per_s': med, 'median_row_tokens_per_s': row,
                 'real_fraction': med / row, 'train_flops_per_position': fpt,
                 'train_flops_per_real_token': fpt * row / med,
                 'achieved_gflops': fpt * row / 1e9,
                 'fraction_of_peak': fpt * row / 1e9 / peak}
      if ref_tps and same and mixer == 'attention':
        rows[k]['over_reference'] = med / ref_tps
    old = rows[next(iter(settings))]['median_tokens_per_s']
    for k in list(rows)[1:]:
      rows[k]['speedup_over_old'] = rows[k]['median_tokens_per_s'] / old
    out['mixers'][mixer] = rows
  return out


def check_flags():
  """Raises cli.BadInput for a flag value outside what the benchmark allows."""
  for name in ('hidden', 'layers', 'heads', 'mlp', 'seq', 'batch', 'vocab', 'steps', 'rounds',
               'conv_width', 'steps_per_call', 'log_every', 'max_segments'):
    if FLAGS[name].value < 1:
      raise cli.BadInput(f'--{name} must be >= 1, got {FLAGS[name].value}')
  if FLAGS.hidden % FLAGS.heads:
    raise cli.BadInput(f'--hidden={FLAGS.hidden} is not divisible by --heads={FLAGS.heads}')
  bad = [m for m in FLAGS.mixers if m not in MIXER_FLOPS]
  if bad or not FLAGS.mixers:
    raise cli.BadInput(f'--mixers must be a non-empty subset of {sorted(MIXER_FLOPS)}, '
                       f'got {bad}')
  if FLAGS.hidden % 16 and 'sepconv' in FLAGS.mixers:
    raise cli.BadInput(f'--hidden={FLAGS.hidden} is not divisible by the 16 SepConv filters')
  period = math.lcm(FLAGS.steps_per_call, FLAGS.log_every)
  if FLAGS.pipeline_steps < 0 or FLAGS.pipeline_steps % period:
    raise cli.BadInput(f'--pipeline_steps must be a multiple of lcm(--steps_per_call, '
                       f'--log_every) = {period}, got {FLAGS.pipeline_steps}')
  bad = [m for m in FLAGS.pipeline_mixers if m not in MIXER_FLOPS]
  if bad or not FLAGS.pipeline_mixers:
    raise cli.BadInput(f'--pipeline_mixers must be a non-empty subset of '
                       f'{sorted(MIXER_FLOPS)}, got {bad}')
  if FLAGS.pipeline_rounds < 0:
    raise cli.BadInput(f'--pipeline_rounds must be >= 0, got {FLAGS.pipeline_rounds}')
  if FLAGS.reference != 'none' and not all(importlib.util.find_spec(m)
                                         for m in ('torch', 'transformers')):
    raise cli.BadInput(_NO_REFERENCE)   # before the minutes of our own timings


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  check_flags()
  cli.output_dir(FLAGS.output_dir, writes=(JSON_NAME,))
  json_path = os.path.join(FLAGS.output_dir, JSON_NAME)
  prov = provenance.record()
  peak = peak_gflops()
  batches = make_batches(np.random.default_rng(0), 4)
  P = batches[0]['mlm_positions'].shape[1]
  shape = dict(d=FLAGS.hidden, n=FLAGS.seq, r=FLAGS.mlp, V=FLAGS.vocab, P=P, L=FLAGS.layers)
  systems, flops = {}, {}
  for m in FLAGS.mixers:
    systems[f'ours {m} (JAX/Flax)'] = ours(batches, m)
    flops[f'ours {m} (JAX/Flax)'] = train_flops_per_token(m, **shape)
  versions = {}
  refs = REFERENCES[FLAGS.reference]
  for ref_key, compiled in refs.items():
    n, run, versions = reference(batches, compiled)
    systems[ref_key] = (n, run)
    flops[ref_key] = train_flops_per_token('attention', **shape)
  counts = {k: v[0] for k, v in systems.items()}
  ours_att = 'ours attention (JAX/Flax)'
  if ours_att in counts and any(counts[k] != counts[ours_att] for k in refs):
    raise cli.BadInput(f'parameter counts differ, not an equal-size comparison: {counts}')
  for _, run in systems.values():
    run(3 * len(batches))                            # compile / warm up
  times = {k: [] for k in systems}
  for _ in range(FLAGS.rounds):
    for k, (_, run) in systems.items():
      t = time.perf_counter()
      run(FLAGS.steps)
      times[k].append(time.perf_counter() - t)
  steps = {k: -(-FLAGS.steps // len(batches)) * len(batches) if k not in refs else FLAGS.steps
           for k in systems}
  tps = {k: FLAGS.batch * FLAGS.seq * steps[k] / statistics.median(v) for k, v in times.items()}
  gflops = {k: flops[k] * tps[k] / 1e9 for k in systems}
  result = {'benchmark': 'bert_throughput', 'params': counts,
            'shape': {f: FLAGS[f].value for f in ('hidden', 'layers', 'heads', 'mlp', 'seq',
                                                  'batch', 'vocab', 'conv_width')},
            'predicted_positions': P, 'peak_matmul_gflops': peak,
            'train_flops_per_token': flops, 'achieved_gflops': gflops,
            'fraction_of_peak': {k: g / peak for k, g in gflops.items()},
            'steps_per_round': steps, 'rounds': FLAGS.rounds,
            'tokens_per_s': tps, 'round_seconds': times, 'versions': versions,
            'jax': jax.__version__, 'provenance': prov}
  if ours_att in tps:
    result['speedup_ours_over_reference'] = {k: tps[ours_att] / tps[k] for k in refs}
  if FLAGS.pipeline_steps:
    eager = next((k for k, compiled in refs.items() if not compiled), None)
    result['pipeline'] = pipeline_result(
        pipeline(FLAGS.pipeline_mixers, FLAGS.pipeline_steps,
                 FLAGS.pipeline_rounds or FLAGS.rounds),
        tps.get(eager), peak)
  outputs.atomic_json(json_path, result, indent=1)
  summary = (f"BERT pre-training throughput ({FLAGS.layers}x{FLAGS.hidden}, {FLAGS.heads} "
             f"heads, FF {FLAGS.mlp}, seq {FLAGS.seq}, batch {FLAGS.batch}, vocab {FLAGS.vocab}"
             f"; matmul peak {peak:.0f} GFLOP/s): " +
             ', '.join(f'{k} {tps[k]:,.0f} tokens/s = {gflops[k]:.1f} GFLOP/s '
                       f'({flops[k] / 1e6:.2f} MFLOP/token, {counts[k]:,} params)'
                       for k in systems) +
             ''.join(f'; Transformer ours / {k} = {v:.2f}x'
                     for k, v in result.get('speedup_ours_over_reference', {}).items()))
  if FLAGS.pipeline_steps:
    p = result['pipeline']
    old = next(iter(pipeline_settings()))
    summary += (f"; end to end {p['config']} pre-training (real = non-padding tokens/s, "
                f"median of {p['rounds']}; row tokens/s incl. padding in brackets): " +
                '; '.join(f'{m}: ' + ', '.join(
                    f"{k.split(' (')[0]} {v['median_tokens_per_s']:,.0f} "
                    f"[{v['median_row_tokens_per_s']:,.0f}]"
                    + (f" = {v['speedup_over_old']:.2f}x" if k != old else '')
                    + (f" ({v['over_reference']:.2f}x HF)" if 'over_reference' in v else '')
                    for k, v in p['mixers'][m].items()) for m in p['mixers']))
  line = provenance.append_benchmark_line(os.path.join(FLAGS.output_dir, LOG_NAME), summary,
                                          prov)
  print(line, end='')


if __name__ == '__main__':
  _define_flags()
  cli.run(main)
