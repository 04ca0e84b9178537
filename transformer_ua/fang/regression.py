"""Fang et al. 2022, Section 5: noisy polynomial regression, ATTENTION vs ReLU MLPs.

Targets (y = f(x) + eps, eps ~ N(0, 1)):

    f1(x) = x1^2 + x2^2,                       x ~ N(0, diag(100, 100)), 10000 samples,
                                               9000 train / 1000 test   (d = 2, q = 2)
    f2(x) = x1^5 + 3 x2^4 + 2 x3^3 + 5 x3 x4 + 3 x5^2 + 2 x6 x7 x8 + 2 x9,
                                               x ~ N(0, I_10), 50000 samples,
                                               45000 train / 5000 test  (d = 10, q = 5)

Models (params are plain dicts of arrays; shapes with n tokens / hidden units):

    attention  C(x) = sum_{i,k} beta[i,k-1] (-t_i)^k + b,  t = x F^T      (compact path)
               F [n, d], beta [n, q], b []  -- trainable; the q Lemma 3.1 blocks are
               fixed and never trained; ``polynomial.from_params`` turns the trained
               params into the literal network (tests prove both paths equal).
               Horner form: C = sum_i u_i (beta_1 + u_i (beta_2 + ... u_i beta_q)) + b,
               u = -t.
    nn_width   Linear(d, n) ReLU Linear(n, 1)                         (Tables 2-3)
    nn_depth   Linear(d, w) ReLU [Linear(w, w) ReLU] x q  Linear(w, 1)
               (q + 1 hidden layers: w = 4 for f1, w = 120 for f2)

The paper's token counts: n = 10 (f1) and 4368 (f2), as NN_width's hidden units;
the theory's n_q = C(d-1+q, q) = 3 and 2002 (``num_tokens=0`` selects n_q).

Training (paper: "SGD optimizer with one cycle learning rate, initial 1e-4, maximum
1e-3"; batch 5000 / 25000; 600 / 2000 epochs; gradient clipping): optax
``clip_by_global_norm(clip_norm)`` then SGD with momentum under a one-cycle schedule
that mirrors PyTorch's ``OneCycleLR`` defaults (cosine, pct_start 0.3,
final_div_factor 1e4, and -- because PyTorch cycles SGD's momentum by default --
momentum 0.95 -> 0.85 -> 0.95). Not stated in the paper, chosen and recorded in
the configs: clip_norm, the momentum cycle, PyTorch-default initialization
(U(-1/sqrt(fan_in), 1/sqrt(fan_in)); beta's fan-in is n q), epoch shuffling without
drop_last. Controlled variants (``train.fang_baselines``; defaults are the above): clip_norm 0
= no clipping, config.schedule 'constant' (lr = lr_peak throughout), config.init
'kaiming_normal', config.validation_rows = V > 0 (train on the first N_tr - V training
rows, evaluate on the last V: ``validation_split``).

The train state is a plain dict ``{'params', 'opt_state', 'step'}`` and the step is
``jax.jit(train_step, donate_argnums=0)(state, batch)`` with ``batch = {'x', 'y'}``.
Epoch order is a pure function of (seed, epoch), so a run resumed from an orbax
checkpoint reproduces the uninterrupted run bit for bit.

Data parallelism (``config.num_devices``: 0 = all devices, the default; 1 = the
one-device step, unchanged): with a mesh of k > 1 devices (``transformer_ua.parallel``)
the state is replicated, each batch is padded to a multiple of k (padding rows carry
weight 0) and sharded along the mesh's 'data' axis, and the step runs under
``jax.shard_map``: every device accumulates the squared-error sum and its gradient
over its own rows with the same chunked scan, one ``psum`` adds them, and the mean
divides by the number of real rows. The loss curve is the one-device curve up to
float summation order (tests/test_parallel.py measures it on 8 forced CPU devices).
"""

from __future__ import annotations

import copy
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import PartitionSpec as P

from transformer_ua import parallel
from transformer_ua.fang import ridge

TARGETS = ('f1', 'f2')
MODELS = ('attention', 'nn_width', 'nn_depth')
OPTIMIZERS = ('sgd', 'adam')   # 'sgd' is Section 5's; 'adam' is a labelled deviation
# Learning-rate schedules: Section 5's one cycle, or a constant lr_peak (a controlled
# variant for train.fang_baselines; SGD momentum then stays at momentum_max).
SCHEDULES = ('one_cycle', 'constant')
# Initializations: PyTorch's nn.Linear default, or Kaiming-normal weights with zero
# biases (He et al. 2015; MLP layers only, ATTENTION keeps the default).
INITS = ('pytorch', 'kaiming_normal')
# How an epoch runs (speed only): one jit per step, or one jit per epoch (fang.epoch).
TRAIN_EPOCHS = ('per_step', 'scan')

# Section 5's data.
F1 = {(2, 0): 1.0, (0, 2): 1.0}
F2 = {(5, 0, 0, 0, 0, 0, 0, 0, 0, 0): 1.0, (0, 4, 0, 0, 0, 0, 0, 0, 0, 0): 3.0,
      (0, 0, 3, 0, 0, 0, 0, 0, 0, 0): 2.0, (0, 0, 1, 1, 0, 0, 0, 0, 0, 0): 5.0,
      (0, 0, 0, 0, 2, 0, 0, 0, 0, 0): 3.0, (0, 0, 0, 0, 0, 1, 1, 1, 0, 0): 2.0,
      (0, 0, 0, 0, 0, 0, 0, 0, 1, 0): 2.0}
DATA = {
    'f1': dict(poly=F1, d=2, q=2, std=10.0, num_samples=10000, num_train=9000),
    'f2': dict(poly=F2, d=10, q=5, std=1.0, num_samples=50000, num_train=45000),
}
NOISE_STD = 1.0
# Convergence rule of Table 1: |MSE_Tr(e) - MSE_Tr(e-1)| < CONVERGENCE_TOL.
CONVERGENCE_TOL = 0.01
EVAL_CHUNK = 5000


# ---------------------------------------------------------------------------
# Data.
# ---------------------------------------------------------------------------


def make_data(target: str, seed: int) -> dict:
  """Section 5's data: x ~ N(0, std^2 I_d), y = f(x) + N(0, 1), random split.

  Returns float64 numpy arrays x_train [N_tr, d], y_train [N_tr], f_train [N_tr]
  (noiseless), and the same for test.
  """
  if target not in TARGETS:
    raise ValueError(f'target={target!r}; allowed: {TARGETS}.')
  spec = DATA[target]
  rng = np.random.default_rng([seed, 0xF4A6])
  x = rng.normal(size=(spec['num_samples'], spec['d'])) * spec['std']
  f = ridge.evaluate_poly(spec['poly'], x)
  y = f + NOISE_STD * rng.normal(size=f.shape)
  perm = rng.permutation(spec['num_samples'])
  tr, te = perm[:spec['num_train']], perm[spec['num_train']:]
  return {'x_train': x[tr], 'y_train': y[tr], 'f_train': f[tr],
          'x_test': x[te], 'y_test': y[te], 'f_test': f[te]}


def validation_split(data: dict, num_val: int) -> dict:
  """The last ``num_val`` training rows (the split is already a random permutation) as
  the held-out set, returned under the test keys; the rest stays the training set.
  The test set of ``make_data`` is not used. num_val = 0 returns ``data`` unchanged."""
  if num_val == 0:
    return data
  n = data['x_train'].shape[0] - num_val
  if n < 1:
    raise ValueError(f'validation rows {num_val} leave no training rows.')
  return {'x_train': data['x_train'][:n], 'y_train': data['y_train'][:n],
          'f_train': data['f_train'][:n], 'x_test': data['x_train'][n:],
          'y_test': data['y_train'][n:], 'f_test': data['f_train'][n:]}


# ---------------------------------------------------------------------------
# Models: init and apply (pure functions of plain dicts).
# ---------------------------------------------------------------------------


def _uniform(key, shape, fan_in, dtype):
  bound = 1.0 / math.sqrt(fan_in)
  return jax.random.uniform(key, shape, dtype, -bound, bound)


def _linear(key, d_in, d_out, dtype, bias=True):
  kw, kb = jax.random.split(key)
  p = {'w': _uniform(kw, (d_in, d_out), d_in, dtype)}
  if bias:
    p['b'] = _uniform(kb, (d_out,), d_in, dtype)
  return p


def _kaiming_linear(key, d_in, d_out, dtype):
  return {'w': jax.random.normal(key, (d_in, d_out), dtype) * math.sqrt(2.0 / d_in),
          'b': jnp.zeros((d_out,), dtype)}


def init_params(key, *, model: str, d: int, q: int, num_tokens: int, depth_width: int,
                dtype=jnp.float32, init: str = 'pytorch') -> dict:
  """PyTorch-default initialization of one model (see module doc); ``init=
  'kaiming_normal'`` draws the MLP layers' weights from N(0, 2 / fan_in), biases 0."""
  if init not in INITS:
    raise ValueError(f'init={init!r}; allowed: {INITS}.')
  linear = _linear if init == 'pytorch' else _kaiming_linear
  if model == 'attention':
    kf, kb, kc = jax.random.split(key, 3)
    return {'F': _uniform(kf, (num_tokens, d), d, dtype),
            'beta': _uniform(kb, (num_tokens, q), num_tokens * q, dtype),
            'b': _uniform(kc, (), num_tokens * q, dtype)}
  if model == 'nn_width':
    k1, k2 = jax.random.split(key)
    return {'layers': [linear(k1, d, num_tokens, dtype), linear(k2, num_tokens, 1, dtype)]}
  if model == 'nn_depth':
    keys = jax.random.split(key, q + 2)
    sizes = [d] + [depth_width] * (q + 1) + [1]
    return {'layers': [linear(k, a, b, dtype) for k, a, b in zip(keys, sizes[:-1], sizes[1:])]}
  raise ValueError(f'model={model!r}; allowed: {MODELS}.')


def attention_apply(params, x):
  """The compact ATTENTION model (Horner form), x [batch, d] -> [batch].

  Token-major inside ([n, batch]: the powers of one token are contiguous in the
  batch), which XLA's CPU backend runs ~1.6x faster than [batch, n] for n = 4368.
  """
  u = -(params['F'] @ x.T)                                        # u = -t, [n, batch]
  beta = params['beta']
  acc = beta[:, -1:] * u
  for k in range(beta.shape[1] - 2, -1, -1):
    acc = u * (beta[:, k:k + 1] + acc)                            # Horner in u
  return jnp.ones((u.shape[0],), u.dtype) @ acc + params['b']     # sum over tokens


def mlp_apply(params, x):
  h = x
  for i, layer in enumerate(params['layers']):
    h = h @ layer['w'] + layer['b']
    if i < len(params['layers']) - 1:
      h = jax.nn.relu(h)
  return h[..., 0]


def apply_fn(model: str):
  if model not in MODELS:
    raise ValueError(f'model={model!r}; allowed: {MODELS}.')
  return attention_apply if model == 'attention' else mlp_apply




# ---------------------------------------------------------------------------
# Optimizer and steps.
# ---------------------------------------------------------------------------


def one_cycle(*, total_steps: int, lr_init: float, lr_peak: float, pct_start: float,
              final_div_factor: float, momentum_max: float, momentum_min: float):
  """(lr schedule, momentum schedule) as PyTorch's OneCycleLR (anneal 'cos')."""
  lr = optax.cosine_onecycle_schedule(
      transition_steps=total_steps, peak_value=lr_peak, pct_start=pct_start,
      div_factor=lr_peak / lr_init, final_div_factor=final_div_factor)
  up = max(1, int(pct_start * total_steps))

  def momentum(step):
    step = jnp.asarray(step, jnp.float32)
    frac_up = jnp.clip(step / up, 0.0, 1.0)
    frac_down = jnp.clip((step - up) / max(1, total_steps - up), 0.0, 1.0)
    cos = lambda a, b, f: b + (a - b) / 2 * (1 + jnp.cos(jnp.pi * f))
    return jnp.where(step <= up, cos(momentum_max, momentum_min, frac_up),
                     cos(momentum_min, momentum_max, frac_down))
  return lr, momentum


def make_optimizer(config, steps_per_epoch: int):
  """(optax transform, lr schedule): clip_by_global_norm(clip_norm) (none when
  clip_norm == 0), then SGD with momentum or Adam under the config's schedule."""
  lr, mom = one_cycle(total_steps=config.epochs * steps_per_epoch, lr_init=config.lr_init,
                      lr_peak=config.lr_peak, pct_start=config.pct_start,
                      final_div_factor=config.final_div_factor,
                      momentum_max=config.momentum_max, momentum_min=config.momentum_min)
  if config.get('schedule', 'one_cycle') == 'constant':
    lr = optax.constant_schedule(config.lr_peak)
    mom = config.momentum_max
  if config.get('optimizer', 'sgd') == 'adam':   # a deviation from the paper (fang_f2_adam)
    opt = optax.inject_hyperparams(optax.adam)(learning_rate=lr)
  else:
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=lr, momentum=mom)
  if config.clip_norm == 0:
    return opt, lr
  tx = optax.chain(optax.clip_by_global_norm(config.clip_norm), opt)
  return tx, lr


def batch_loss_and_grad(model: str, grad_chunk: int):
  """(params, x, y) -> (mean squared error, its gradient), accumulated over chunks of
  ``grad_chunk`` examples by ``lax.scan``: the same sums as one big batch (up to float
  summation order), but the [chunk, n] temporaries stay small -- 2-3x faster on CPU
  for the n = 4368 models and much lighter on memory."""
  sums = _chunked_sums(model, grad_chunk)

  def run(params, x, y):
    size = x.shape[0]
    total, grads = sums(params, x, y)
    return total / size, jax.tree_util.tree_map(lambda a: a / size, grads)

  return run


def _chunked_sums(model: str, grad_chunk: int):
  """(params, x [B, d], y [B](, w [B])) -> (sum of (w *) squared errors, its gradient),
  accumulated over chunks of ``grad_chunk`` rows by ``lax.scan``."""
  f = apply_fn(model)

  def sq_sum(params, x, y, *w):
    err = f(params, x) - y
    return jnp.sum(err * err * w[0]) if w else jnp.sum(err * err)

  vg = jax.value_and_grad(sq_sum)

  def sums(params, x, y, *w):
    size = x.shape[0]
    nc = size // grad_chunk
    zero = (jnp.zeros((), y.dtype), jax.tree_util.tree_map(jnp.zeros_like, params))

    def body(carry, xy):
      l, g = vg(params, *xy)
      return (carry[0] + l, jax.tree_util.tree_map(jnp.add, carry[1], g)), None

    total, grads = zero
    if nc:
      (total, grads), _ = jax.lax.scan(
          body, zero, (x[:nc * grad_chunk].reshape(nc, grad_chunk, -1),
                       *(a[:nc * grad_chunk].reshape(nc, grad_chunk) for a in (y, *w))))
    if size % grad_chunk:
      (total, grads), _ = body((total, grads), (x[nc * grad_chunk:],
                                                *(a[nc * grad_chunk:] for a in (y, *w))))
    return total, grads

  return sums


def sharded_loss_and_grad(model: str, grad_chunk: int, mesh):
  """Data-parallel ``(params, x, y, w) -> (mean loss, gradient)`` over ``mesh``.

  x [B, d], y [B], w [B] (1 real row, 0 padding) sharded along 'data' (B a multiple of
  the mesh size), params replicated. Each device runs the chunked sums on its rows;
  ``psum`` adds the (loss, gradient, weight) sums; the mean divides by sum(w).
  """
  sums = _chunked_sums(model, grad_chunk)
  axis = parallel.DATA_AXIS

  def local(params, x, y, w):
    total, grads = sums(params, x, y, w)
    return jax.lax.psum((total, grads, jnp.sum(w)), axis)

  spec = P(axis)
  summed = jax.shard_map(local, mesh=mesh, in_specs=(P(), spec, spec, spec),
                         out_specs=P())

  def run(params, x, y, w):
    total, grads, count = summed(params, x, y, w)
    return total / count, jax.tree_util.tree_map(lambda a: a / count, grads)

  return run


def make_train_step(model: str, tx, grad_chunk: int = 1000, mesh=None):
  """jit((state, batch) -> (state, loss)): one SGD step on the MSE, state donated.

  With a multi-device ``mesh`` the batch is ``{'x', 'y', 'w'}`` sharded along it (see
  ``shard_training_batch``) and the state replicated; otherwise ``{'x', 'y'}``.
  """
  if mesh is not None and mesh.devices.size > 1:
    loss_and_grad = sharded_loss_and_grad(model, grad_chunk, mesh)    # (params, x, y, w)
  else:
    loss_and_grad = batch_loss_and_grad(model, grad_chunk)             # (params, x, y)
  return jax.jit(train_step_fn(tx, loss_and_grad), donate_argnums=0)


def train_step_fn(tx, loss_and_grad):
  """(state, batch) -> (state, loss): one SGD step, not jitted. ``loss_and_grad(params,
  x, y[, w])`` -> (mean loss, gradient); ``batch`` = {'x', 'y'[, 'w']}. Shared by the
  per-step path and the whole-epoch path (``fang.epoch``)."""

  def train_step(state, batch):
    extra = (batch['w'],) if 'w' in batch else ()
    loss, grads = loss_and_grad(state['params'], batch['x'], batch['y'], *extra)
    updates, opt_state = tx.update(grads, state['opt_state'], state['params'])
    params = optax.apply_updates(state['params'], updates)
    return {'params': params, 'opt_state': opt_state, 'step': state['step'] + 1}, loss

  return train_step


def shard_training_batch(x: np.ndarray, y: np.ndarray, mesh) -> dict:
  """``{'x', 'y', 'w'}``: rows padded with zeros (weight 0) to a multiple of the mesh
  size, then sharded over it (``parallel.shard_batch``)."""
  k = mesh.devices.size
  pad = -len(x) % k
  w = np.ones(len(x), x.dtype)
  if pad:
    x = np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)])
    y = np.concatenate([y, np.zeros(pad, y.dtype)])
    w = np.concatenate([w, np.zeros(pad, w.dtype)])
  return parallel.shard_batch({'x': x, 'y': y, 'w': w}, mesh)


def make_predict(model: str):
  return jax.jit(apply_fn(model))


def predict(predict_fn, params, x, dtype) -> np.ndarray:
  out = [np.asarray(predict_fn(params, jnp.asarray(x[i:i + EVAL_CHUNK], dtype)))
         for i in range(0, x.shape[0], EVAL_CHUNK)]
  return np.concatenate(out).astype(np.float64)


def mse(a, b) -> float:
  return float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))


def epochs_to_convergence(train_mse, tol: float = CONVERGENCE_TOL):
  """The paper's rule: the first epoch e (1-based) with |MSE_Tr(e) - MSE_Tr(e-1)| < tol,
  and the first epoch after which the rule holds for every later epoch (None if never)."""
  first = next((e + 1 for e in range(1, len(train_mse))
                if abs(train_mse[e] - train_mse[e - 1]) < tol), None)
  stable = None
  for e in range(len(train_mse) - 1, 0, -1):
    if abs(train_mse[e] - train_mse[e - 1]) < tol:
      stable = e + 1
    else:
      break
  return first, stable


# ---------------------------------------------------------------------------
# Config checks, run names, sweep entries, saved params.
# ---------------------------------------------------------------------------


def resolved_sizes(config) -> dict:
  """num_tokens (0 -> n_q), q, d, depth width for the config's target."""
  spec = DATA[config.target]
  n = config.num_tokens if config.num_tokens else ridge.n_q(spec['d'], spec['q'])
  return {'d': spec['d'], 'q': spec['q'], 'num_tokens': int(n),
          'depth_width': int(config.depth_width)}


def validate_config(config) -> None:
  """One-line ValueErrors for bad config values."""
  if config.target not in TARGETS:
    raise ValueError(f'config.target={config.target!r}; allowed: {TARGETS}.')
  if config.model not in MODELS:
    raise ValueError(f'config.model={config.model!r}; allowed: {MODELS}.')
  for name in ('epochs', 'batch_size', 'depth_width', 'checkpoint_every', 'eval_every',
               'grad_chunk'):
    v = getattr(config, name)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
      raise ValueError(f'config.{name} must be a positive integer, got {v!r}.')
  if not isinstance(config.num_tokens, int) or config.num_tokens < 0:
    raise ValueError(f'config.num_tokens must be an integer >= 0 (0 = n_q), got '
                     f'{config.num_tokens!r}.')
  for name in ('lr_init', 'lr_peak', 'final_div_factor'):
    v = getattr(config, name)
    if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
      raise ValueError(f'config.{name} must be a finite number > 0, got {v!r}.')
  v = config.clip_norm
  if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
    raise ValueError(f'config.clip_norm must be a finite number >= 0 (0 = no clipping), '
                     f'got {v!r}.')
  if config.get('schedule', 'one_cycle') not in SCHEDULES:
    raise ValueError(f"config.schedule={config.get('schedule')!r}; allowed: {SCHEDULES}.")
  if config.get('init', 'pytorch') not in INITS:
    raise ValueError(f"config.init={config.get('init')!r}; allowed: {INITS}.")
  val = config.get('validation_rows', 0)
  if not isinstance(val, int) or isinstance(val, bool) or \
      not 0 <= val < DATA[config.target]['num_train']:
    raise ValueError(f'config.validation_rows must be an integer in [0, '
                     f"{DATA[config.target]['num_train']}), got {val!r}.")
  if config.lr_init > config.lr_peak:
    raise ValueError(f'config.lr_init={config.lr_init} exceeds lr_peak={config.lr_peak}.')
  if not 0 < config.pct_start < 1:
    raise ValueError(f'config.pct_start must be in (0, 1), got {config.pct_start!r}.')
  for name in ('momentum_min', 'momentum_max'):
    v = getattr(config, name)
    if not (isinstance(v, (int, float)) and 0 <= v < 1):
      raise ValueError(f'config.{name} must be in [0, 1), got {v!r}.')
  num_devices = config.get('num_devices', 0)
  if not isinstance(num_devices, int) or isinstance(num_devices, bool) or \
      not 0 <= num_devices <= jax.device_count():
    raise ValueError(f'config.num_devices must be an integer in [0, {jax.device_count()}] '
                     f'(0 = all devices), got {num_devices!r}.')
  train_epoch = config.get('train_epoch', 'per_step')
  if train_epoch not in TRAIN_EPOCHS:
    raise ValueError(f'config.train_epoch={train_epoch!r}; allowed: {TRAIN_EPOCHS}.')
  if config.get('optimizer', 'sgd') not in OPTIMIZERS:
    raise ValueError(f"config.optimizer={config.get('optimizer')!r}; allowed: {OPTIMIZERS}.")
  if config.dtype not in ('float32', 'float64'):
    raise ValueError(f"config.dtype={config.dtype!r}; allowed: ('float32', 'float64').")


def run_name(config) -> str:
  s = resolved_sizes(config)
  width = s['num_tokens'] if config.model != 'nn_depth' else s['depth_width']
  return f"{config.target}_{config.model}_{width}_seed{config.seed}"


def parse_entry(entry: str):
  """'model[:num_tokens|n_q]' -> (model, num_tokens) with 0 meaning n_q."""
  model, _, tokens = entry.partition(':')
  if model not in MODELS:
    raise ValueError(f'sweep entry {entry!r}: model must be one of {MODELS}.')
  if model == 'nn_depth':
    if tokens:
      raise ValueError(f'sweep entry {entry!r}: nn_depth takes no token count.')
    return model, 0
  if tokens == 'n_q':
    return model, 0
  if not tokens.isdigit() or int(tokens) < 1:
    raise ValueError(f"sweep entry {entry!r}: expected '{model}:<positive int>' or "
                     f"'{model}:n_q'.")
  return model, int(tokens)


def run_configs(config):
  """[(entry name, per-run config)] of ``config.sweep`` x ``config.seeds``, seed-major."""
  entries = [parse_entry(e) for e in config.sweep]
  out = []
  for seed in config.seeds:
    for model, tokens in entries:
      c = copy.deepcopy(config)
      c.model, c.num_tokens, c.seed = model, tokens, int(seed)
      validate_config(c)
      out.append((f'{model}:{tokens or "n_q"}' if model != 'nn_depth' else model, c))
  return out


def load_params(workdir: str) -> dict:
  """The saved final params of a run as a flat dict 'path' -> array."""
  with np.load(os.path.join(workdir, 'params.npz')) as z:
    return {k: z[k] for k in z.files}
