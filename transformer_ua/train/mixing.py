"""Pre-training and fine-tuning loops for Yun et al. 2020 Appendix H (Table 1, Figure 1).

Importable from notebooks (Flax examples style; the binaries only parse flags):

    from transformer_ua.train import mixing
    from experiments.configs import mixing_tiny
    cfg = mixing_tiny.get_config()
    pre = mixing.pretrain(cfg, '/tmp/run/pretrain')                    # MLM + NSP
    cfg.finetune.pretrain_workdir = '/tmp/run/pretrain'
    ft = mixing.finetune(cfg, '/tmp/run/mnli')                         # task from cfg

What differs between runs is a task object of ``transformer_ua.train.tasks``:
``mixing_pretrain.Pretrain`` (masked LM + sentence pair) or the fine-tuning task that
``config.finetune.task`` names (``mixing_finetune.Relations``: MNLI analogue,
``mixing_finetune.Spans``: SQuAD analogue), each supplying head, forward, loss, metrics
(and, fine-tuning, its data); the unit of the loop is ``steps.Steps``.

The train state is a plain dict ``{'params', 'opt_state', 'step', 'rng'}``; the update
is ``jax.jit(step_fn, donate_argnums=0)`` of ``(state, batch)``; one unit of
``transformer_ua.train.loop`` is one step. Data parallelism
(``config.num_devices``: 0 or absent = all devices, 1 = one device, unchanged): the
state is replicated over a 1-D mesh (``transformer_ua.parallel``) and every batch is
sharded along its leading axis with ``parallel.shard_batch``; jit (GSPMD) partitions the
step and all-reduces the gradient, and the weighted-mean losses are global, so the loss
curve is the one-device curve up to float reduction order (dropout masks do not depend
on the sharding: JAX's threefry is partitionable). Batch sizes must be multiples of the
device count. optax AdamW (BERT: linear
warm-up then linear decay to 0, weight decay on matrices only, gradient clipping 1.0).
Orbax checkpoints every ``checkpoint_every`` steps (and at a halt); a rerun with the same workdir
resumes from the latest one, and because batches and dropout keys are functions of
``(seed, step)`` the resumed run is the uninterrupted run. Metrics go to
``workdir/metrics.jsonl`` and TensorBoard every ``log_every`` steps, curves to
``workdir/curves.png``, the final numbers to ``workdir/result.json`` with provenance.
Sequence packing (``config.data.max_segments`` = S > 1; default 1, unpacked): training
rows hold up to S instances kept apart by segment masks (``transformer_ua.data.text``,
``transformer_ua.models.mixers``); evaluation stays unpacked. Same parameters and
checkpoints; ``train_tokens_per_s`` counts real (non-padding) tokens,
``train_row_tokens_per_s`` every position.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from transformer_ua import layers, provenance
from transformer_ua.data import text, wordnet
from transformer_ua.models import encoder as enc
from transformer_ua.train import loop
from transformer_ua.train.checkpointing import Checkpointer
from transformer_ua.train.metrics import MetricsWriter
from transformer_ua.train.tasks import mixing_finetune, mixing_pretrain, steps

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASKS = tuple(mixing_finetune.TASKS)      # the fine-tuning tasks by name
#: The fields of a result.json that a binary prints as its one JSON line (``summary``).
SUMMARY_KEYS = ('stage', 'mixing', 'num_conv_layers', 'eval', 'params', 'train_tokens_per_s')


# ----------------------------------------------------------------------------------
# Pieces
# ----------------------------------------------------------------------------------

def encoder_config(config, vocab_size: int) -> enc.EncoderConfig:
  m = config.model
  return enc.EncoderConfig(
      vocab_size=vocab_size, max_len=m.max_len, hidden=m.hidden, num_layers=m.num_layers,
      num_heads=m.num_heads, mlp_dim=m.mlp_dim, dropout=m.dropout, mixing=m.mixing,
      num_conv_layers=m.num_conv_layers, conv_filters=m.conv_filters,
      conv_width=m.conv_width).validate()


def make_optimizer(opt, num_steps: int) -> optax.GradientTransformation:
  """AdamW with linear warm-up to ``opt.learning_rate`` and linear decay to 0."""
  warm = max(1, min(int(opt.warmup_steps), num_steps))
  schedule = optax.join_schedules([
      optax.linear_schedule(0.0, opt.learning_rate, warm),
      optax.linear_schedule(opt.learning_rate, 0.0, max(1, num_steps - warm))], [warm])
  decay_mask = lambda params: jax.tree_util.tree_map(lambda p: p.ndim >= 2, params)
  return optax.chain(
      optax.clip_by_global_norm(1.0),
      optax.adamw(schedule, b1=0.9, b2=0.999, eps=1e-6, weight_decay=opt.weight_decay,
                  mask=decay_mask))


def make_train_step(loss_fn, tx, steps_per_call: int = 1):
  """``loss_fn(params, batch, rng) -> (loss, metrics)``; returns the jitted
  ``(state, acc, batches) -> (state, acc)``: ``steps_per_call`` optimizer steps over a
  stack of batches (leading axis = step; ``lax.scan``), their metrics *summed* into the
  on-device accumulator ``acc`` (``init_metrics_acc`` builds it), so nothing is copied to
  the host between log rows."""
  def step(state, batch):
    rng = jax.random.fold_in(state['rng'], state['step'])
    (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state['params'], batch, rng)
    updates, opt_state = tx.update(grads, state['opt_state'], state['params'])
    metrics['grad_norm'] = optax.global_norm(grads)
    new = {'params': optax.apply_updates(state['params'], updates),
           'opt_state': opt_state, 'step': state['step'] + 1, 'rng': state['rng']}
    return new, metrics

  def run(state, acc, batches):
    if steps_per_call == 1:
      state, metrics = step(state, jax.tree_util.tree_map(lambda a: a[0], batches))
      total = metrics
    else:
      state, metrics = jax.lax.scan(step, state, batches)
      total = jax.tree_util.tree_map(lambda m: m.sum(0), metrics)
    return state, jax.tree_util.tree_map(jnp.add, acc, total)
  return jax.jit(run, donate_argnums=(0, 1))


def init_metrics_acc(loss_fn, params, batch):
  """Zeros shaped like the train metrics (plus grad_norm): the accumulator of
  ``make_train_step``."""
  _, metrics = jax.eval_shape(lambda p, b: loss_fn(p, b, jax.random.PRNGKey(0)),
                              params, batch)
  metrics['grad_norm'] = jax.ShapeDtypeStruct((), jnp.float32)
  return jax.tree_util.tree_map(lambda m: jnp.zeros(m.shape, m.dtype), metrics)


def _check(config):
  for sec, names in (('pretrain', ('num_steps', 'batch_size', 'checkpoint_every',
                                   'eval_every', 'log_every', 'eval_batches')),
                     ('finetune', ('num_steps', 'batch_size', 'checkpoint_every',
                                   'eval_every', 'log_every'))):
    for n in names:
      v = config[sec][n]
      if not isinstance(v, int) or v < 1:
        raise ValueError(f'config.{sec}.{n} must be a positive integer, got {v!r}')
    c = config[sec].get('steps_per_call', 1)
    if not isinstance(c, int) or c < 1:
      raise ValueError(f'config.{sec}.steps_per_call must be a positive integer, got {c!r}')
    for n in ('num_steps', 'checkpoint_every', 'eval_every', 'log_every'):
      if config[sec][n] % c:
        raise ValueError(f'config.{sec}.{n}={config[sec][n]} is not a multiple of '
                         f'config.{sec}.steps_per_call={c}')
  mixing_finetune.task(config.finetune.task)   # ValueError naming the choices
  num_devices = config.get('num_devices', 0)
  if not isinstance(num_devices, int) or not 0 <= num_devices <= jax.device_count():
    raise ValueError(f'config.num_devices must be an integer in [0, {jax.device_count()}] '
                     f'(0 = all devices), got {num_devices!r}')
  k = num_devices or jax.device_count()
  for sec in ('pretrain', 'finetune'):
    if config[sec].batch_size % k:
      raise ValueError(f'config.{sec}.batch_size={config[sec].batch_size} is not a multiple '
                       f'of the {k} devices used for data parallelism (set num_devices)')
  S = config.data.get('max_segments', 1)
  if not isinstance(S, int) or S < 1:
    raise ValueError(f'config.data.max_segments must be a positive integer (1 = no '
                     f'packing), got {S!r}')
  if not 0 < config.data.mask_prob < 1:
    raise ValueError(f'config.data.mask_prob must be in (0, 1), got {config.data.mask_prob}')


_CACHE: dict = {}      # in-process memo (sweeps run many stages in one process)


def _memo(key, fn):
  if key not in _CACHE:
    _CACHE[key] = fn()
  return _CACHE[key]


def load_corpus_and_tokenizer(config, workdir: str):
  """WordNet synsets and the (cached) WordPiece tokenizer, copied into ``workdir``."""
  from tokenizers import Tokenizer
  directory = wordnet.check_corpus(config.data.wordnet_dir or None)
  synsets = _memo(('synsets', os.path.abspath(directory)), lambda: wordnet.load(directory))
  local = os.path.join(workdir, 'tokenizer.json')
  if os.path.exists(local):
    return synsets, Tokenizer.from_file(local)
  stat = os.stat(os.path.join(directory, 'data.noun'))
  key = hashlib.sha1(f'{directory}|{stat.st_size}|{len(synsets)}|{config.data.vocab_size}|'
                     f'{config.data.heldout_fraction}'.encode()).hexdigest()[:12]
  cache = config.data.cache_dir or os.path.join(REPO, 'data_cache')
  cached = os.path.join(cache, f'wordpiece_{key}.json')
  tok = text.load_or_train_tokenizer(cached, synsets, config.data.vocab_size,
                                     config.data.heldout_fraction)
  os.makedirs(workdir, exist_ok=True)
  shutil.copyfile(cached, local)
  return synsets, tok


def _loop(*, workdir, state, train_step, get_batch, acc0, cfg, eval_fn, desc, halt_after,
          mesh, prov):
  """The one loop (``transformer_ua.train.loop``) over steps; returns (its Outcome: the
  state, and the segments of a run resumed across processes; the ``steps.Steps`` task with
  this attempt's throughput ``tps`` and ``row_tps``)."""
  c = cfg.get('steps_per_call', 1)
  task = steps.Steps(train_step, get_batch, eval_fn, acc0, steps_per_call=c,
                   log_every=cfg.log_every, num_steps=cfg.num_steps, mesh=mesh)
  schedule = loop.Schedule(
      num_units=cfg.num_steps, eval_every=cfg.eval_every,
      checkpoint_every=cfg.checkpoint_every, log_every=cfg.log_every, unit='step',
      checkpoint_seconds=cfg.get('checkpoint_seconds', loop.CHECKPOINT_SECONDS),
      stop_after=halt_after if halt_after > 0 else None, eval_prefix='eval_', desc=desc,
      units_per_call=c, tensorboard=cfg.get('tensorboard', True))
  try:
    out = loop.run(task, state, workdir=workdir, schedule=schedule, mesh=mesh, prov=prov)
  finally:
    task.close()
  MetricsWriter(workdir, tensorboard=False).plot('curves.png')
  return out, task


def summary(result: dict) -> str:
  """The one JSON line of a finished stage: its ``SUMMARY_KEYS`` fields."""
  return json.dumps({k: result[k] for k in SUMMARY_KEYS if k in result})


def _write_result(workdir, result):
  with open(os.path.join(workdir, 'result.json'), 'w') as f:
    json.dump(result, f, indent=1, sort_keys=True)
  return result


def _init_state(params, tx, seed):
  return {'params': params, 'opt_state': tx.init(params),
          'step': jnp.zeros((), jnp.int32), 'rng': jax.random.PRNGKey(seed + 1)}


# ----------------------------------------------------------------------------------
# Pre-training: masked LM + sentence pair
# ----------------------------------------------------------------------------------

def pretrain(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Pre-trains a BertPretrainer; returns (and writes) result.json's dict."""
  _check(config)
  prov = provenance.record()
  os.makedirs(workdir, exist_ok=True)
  synsets, tok = load_corpus_and_tokenizer(config, workdir)
  V = tok.get_vocab_size()
  cfg = encoder_config(config, V)
  d, p = config.data, config.pretrain
  kw = dict(heldout_fraction=d.heldout_fraction, max_len=cfg.max_len,
            max_predictions=d.max_predictions, mask_prob=d.mask_prob)
  tok_key = hashlib.sha1(tok.to_str().encode()).hexdigest()
  def data(heldout, seed):
    base = _memo(('pretrain', tok_key, heldout, tuple(sorted(kw.items()))),
                 lambda: text.PretrainData.from_synsets(synsets, tok, heldout=heldout, **kw))
    return dataclasses.replace(base, seed=seed)
  train_data, eval_data = data(False, config.seed), data(True, 10_000)
  eval_batches = [eval_data.batch(i, p.batch_size) for i in range(p.eval_batches)]
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    f.write(config.to_json_best_effort(indent=1))

  objective = mixing_pretrain.Pretrain()
  model = objective.model(cfg)
  b0 = train_data.batch(0, 2)
  params = jax.jit(model.init)(jax.random.PRNGKey(config.seed), b0['input_ids'],
                               b0['type_ids'], b0['mask'], b0['mlm_positions'])['params']
  tx = make_optimizer(p, p.num_steps)
  state = _init_state(params, tx, config.seed)

  forward = functools.partial(objective.forward, model)

  def loss_fn(params, batch, rng):
    return objective.loss(forward(params, batch, rng), batch)

  eval_step = jax.jit(lambda params, batch: objective.eval_sums(forward(params, batch), batch))

  def eval_fn(params):
    return objective.scores(sum(np.asarray(eval_step(params, b), np.float64)
                                for b in eval_batches))

  S = d.get('max_segments', 1)
  t0 = time.perf_counter()
  out, steps_task = _loop(workdir=workdir, state=state,
                          train_step=make_train_step(loss_fn, tx, p.get('steps_per_call', 1)),
                          get_batch=lambda s: train_data.batch(s, p.batch_size, S),
                          acc0=init_metrics_acc(loss_fn, params, train_data.batch(0, 2, S)),
                          cfg=p, eval_fn=eval_fn, desc='pretrain',
                          halt_after=config.get('halt_after', -1),
                          mesh=loop.training_mesh(config), prov=prov)
  state = out.state
  final = eval_fn(state['params'])
  return _write_result(workdir, {
      'stage': 'pretrain', 'mixing': cfg.mixing, 'num_conv_layers': cfg.num_conv_layers,
      'layer_kinds': list(cfg.kinds), 'seed': config.seed, 'step': int(state['step']),
      'params': layers.count_params(params),
      'params_encoder_pooler': layers.count_params(params['encoder'])
                               + layers.count_params(params['pooler']),
      'eval': final, 'train_tokens_per_s': steps_task.tps,
      'train_row_tokens_per_s': steps_task.row_tps, 'max_segments': S,
      'wall_s': round(time.perf_counter() - t0, 1), 'train_elapsed_s': round(out.elapsed, 1),
      'segments': out.segments,
      'data': {'vocab_size': V, 'train_synsets': len(train_data.headlines),
               'train_pair_synsets': int(len(train_data.with_examples)),
               'heldout_synsets': len(eval_data.headlines),
               'eval_sequences': p.eval_batches * p.batch_size},
      'provenance': prov})


# ----------------------------------------------------------------------------------
# Fine-tuning: relations (MNLI analogue) or spans (SQuAD analogue)
# ----------------------------------------------------------------------------------

def pretrained_params(config, cfg: enc.EncoderConfig, src: str):
  """The params of the newest checkpoint of the pre-training run in ``src``."""
  template = enc.init_shapes(enc.BertPretrainer(cfg), cfg.max_len, config.data.max_predictions)
  tx_pre = make_optimizer(config.pretrain, config.pretrain.num_steps)
  tmpl_state = {'params': template, 'opt_state': jax.eval_shape(tx_pre.init, template),
                'step': jax.ShapeDtypeStruct((), jnp.int32),
                'rng': jax.eval_shape(lambda: jax.random.PRNGKey(0))}
  ck = Checkpointer(os.path.join(src, 'checkpoints'))
  restored = ck.restore_latest(tmpl_state)
  ck.close()
  if restored is None:
    raise FileNotFoundError(f'no checkpoint in {src}/checkpoints')
  return restored[1]['params']


def finetune(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Fine-tunes from ``config.finetune.pretrain_workdir`` ('' = from scratch)."""
  _check(config)
  prov = provenance.record()
  os.makedirs(workdir, exist_ok=True)
  f = config.finetune
  task = mixing_finetune.task(f.task)
  src = f.pretrain_workdir
  if src:
    if not os.path.exists(os.path.join(src, 'tokenizer.json')):
      raise FileNotFoundError(f'no pre-training run in {src} (tokenizer.json missing); '
                              'run experiments/mixing_pretrain.py first')
    shutil.copyfile(os.path.join(src, 'tokenizer.json'), os.path.join(workdir, 'tokenizer.json'))
  synsets, tok = load_corpus_and_tokenizer(config, workdir)
  cfg = encoder_config(config, tok.get_vocab_size())
  key = ('finetune', hashlib.sha1(tok.to_str().encode()).hexdigest(), f.task, cfg.max_len,
         f.num_train_examples, f.num_eval_examples, config.data.heldout_fraction)
  train, test, extra = _memo(key, lambda: task.data(config, synsets, tok, cfg.max_len))
  n_train = len(train['input_ids'])
  if n_train == 0 or len(test['input_ids']) == 0:
    raise ValueError(f'task {f.task}: empty train or test split ({n_train} train examples)')

  model = task.model(cfg)
  params = jax.jit(model.init)(jax.random.PRNGKey(config.seed), train['input_ids'][:2],
                               train['type_ids'][:2], train['mask'][:2])['params']
  params = jax.tree_util.tree_map(np.asarray, params)
  if src:
    pre = pretrained_params(config, cfg, src)
    params = dict(params)
    for name in ('encoder', 'pooler'):
      if name in params:
        params[name] = pre[name]
  tx = make_optimizer(f, f.num_steps)
  state = _init_state(params, tx, config.seed)

  forward = functools.partial(task.forward, model)

  def loss_fn(params, batch, rng):
    return task.loss(forward(params, batch, rng), batch)

  eval_forward = jax.jit(lambda params, batch: forward(params, batch))
  eb = f.batch_size * 4

  def eval_fn(params):
    n = len(test['input_ids'])
    outs = []
    for i in range(0, n, eb):
      batch = {k: v[i:i + eb] for k, v in test.items()}
      pad = eb - len(batch['input_ids'])
      if pad:        # fixed shapes: one compilation
        batch = {k: np.concatenate([v, np.zeros((pad,) + v.shape[1:], v.dtype)])
                 for k, v in batch.items()}
      out = jax.device_get(eval_forward(params, batch))
      outs.append(jax.tree_util.tree_map(lambda a: a[:eb - pad], out))
    return task.scores(outs, test, extra, f)

  def get_batch(step):
    epoch, pos = divmod(step * f.batch_size, n_train)
    idx = []
    while len(idx) < f.batch_size:
      perm = np.random.default_rng([config.seed, epoch]).permutation(n_train)
      idx.extend(perm[pos:pos + f.batch_size - len(idx)].tolist())
      epoch, pos = epoch + 1, 0
    return {k: v[idx] for k, v in train.items()}

  t0 = time.perf_counter()
  out, steps_task = _loop(workdir=workdir, state=state,
                          train_step=make_train_step(loss_fn, tx, f.get('steps_per_call', 1)),
                          get_batch=get_batch,
                          acc0=init_metrics_acc(loss_fn, params, get_batch(0)),
                          cfg=f, eval_fn=eval_fn,
                          desc=f'finetune {f.task}', halt_after=config.get('halt_after', -1),
                          mesh=loop.training_mesh(config), prov=prov)
  state = out.state
  final = eval_fn(state['params'])
  info = {k: v for k, v in extra.items() if k not in task.PRIVATE}
  return _write_result(workdir, {
      'stage': 'finetune', 'task': f.task, 'mixing': cfg.mixing,
      'num_conv_layers': cfg.num_conv_layers, 'layer_kinds': list(cfg.kinds),
      'seed': config.seed, 'step': int(state['step']),
      'pretrained_from': provenance.portable(src),
      'params': layers.count_params(params), 'eval': final,
      'train_tokens_per_s': steps_task.tps,
      'wall_s': round(time.perf_counter() - t0, 1), 'train_elapsed_s': round(out.elapsed, 1),
      'segments': out.segments,
      'data': {'train_examples': n_train, 'test_examples': int(len(test['input_ids'])),
               **info},
      'provenance': prov})

