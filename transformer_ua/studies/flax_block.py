r"""A flax.linen encoder block, trained as people train it, certified from its (module,
variables) pair.

    g = Dense(8 -> 1) o block o Dense(1 -> 8),   block = stock_candidates.StockBlock(d=1,
        width=32, norm='post', activation='gelu_tanh'):
        Z <- LN(Z + MultiHeadDotProductAttention(num_heads=2)(Z))   (default use_bias=True)
        Z <- LN(Z + Dense(8)(gelu(Dense(32)(Z))))                   (nn.gelu: the tanh form)

Trained in float32 with optax Adam (lr 3e-3, batches of 256 fresh uniform X in
[0,1]^{3x1}, loss mean_b sum_ji (g - f)^2 to f = token_times_mean, d = 1, n = 3, seeded)
for at most ``train_seconds`` (<= 120) and ``steps``; then

    s_flax = the Flax apply's float32 d_2(f, g) on 2e4 uniform points
             (torch_encoder.sampled_d2: the estimate and its upper 95% end)
    s_ort  = onnxruntime's on model.onnx: the network certify_network reads from the pair
             (flax_import, checked against the apply), written by flat_onnx.write in
             float32 (torch.onnx.export has no Flax counterpart: this is the project's file
             of the same network, its attention per head and LayerNormalization as an op)
    eps    = max(3 s_flax, 0.05)
    cert   = certify_network(f, (module, variables), d=1, n=3, p=2, arithmetic='float32',
                             epsilon=eps, max_minutes)

and, at the certificate's worst boxes' centres c, the largest |f(c) - fl(g)(c)| (entrywise)
and the largest sum_ji |f(c) - fl(g)(c)|^2, by the Flax apply and by onnxruntime: what the
runs give where the certificate's boxes bound the most. ``run`` returns the row and writes
into ``output_dir``: model.onnx, certificate.txt, and OUTPUT_FILES (the row with the
command, revision, machine and /proc/loadavg at start and end; and its table).
"""

from __future__ import annotations

import os
import time

import numpy as np

from transformer_ua import outputs, provenance
from transformer_ua.decimal_text import bound_text
from transformer_ua.studies import torch_encoder

#: The record ``run`` writes (beside model.onnx and certificate.txt).
OUTPUT_FILES = ('certify_flax_block.json', 'certify_flax_block.md')

#: The block's fields (stock_candidates.StockBlock) at d = 1.
BLOCK = dict(d=1, width=32, norm='post', activation='gelu_tanh')
N, D = 3, 1


def build(seed: int = 0):
  """(module, variables): the block, initialized by ``module.init`` from ``seed``."""
  import jax  # noqa: PLC0415 -- jax on demand
  import jax.numpy as jnp  # noqa: PLC0415
  from transformer_ua.certify import stock_candidates  # noqa: PLC0415
  module = stock_candidates.StockBlock(**BLOCK)
  return module, module.init(jax.random.PRNGKey(seed), jnp.zeros((1, N, D), jnp.float32))


def train(module, variables, *, seconds: float, steps: int, seed: int = 0) -> tuple:
  """Adam (lr 3e-3) on token_times_mean for at most ``seconds`` and ``steps``, float32:
  (variables, {'steps', 'loss' (the last batch's), 'seconds'})."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  import optax  # noqa: PLC0415
  tx = optax.adam(3e-3)

  @jax.jit
  def step(params, opt_state, x):
    def loss_fn(p):
      err = module.apply({'params': p}, x) - x * jnp.mean(x, axis=1, keepdims=True)
      return jnp.mean(jnp.sum(err ** 2, axis=(1, 2)))
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  params = variables['params']
  opt_state = tx.init(params)
  rng = np.random.default_rng(seed)
  start = time.perf_counter()
  done, loss = 0, float('nan')
  while done < steps and time.perf_counter() - start < seconds:
    x = jnp.asarray(rng.random((256, N, D)), jnp.float32)
    params, opt_state, loss_j = step(params, opt_state, x)
    done += 1
    loss = float(loss_j)
  return {'params': params}, {'steps': done, 'loss': loss,
                              'seconds': round(time.perf_counter() - start, 1)}


def _worst(run, centres) -> dict:
  """Largest entrywise |f - fl(g)| and largest sum_ji |f - fl(g)|^2 at ``centres``."""
  if not len(centres):
    return {'max_abs': None, 'max_sq': None}
  err = np.abs(np.asarray(run(centres), np.float64) - centres * centres.mean(axis=1,
                                                                           keepdims=True))
  return {'max_abs': float(err.max()), 'max_sq': float(np.max(np.sum(err ** 2, axis=(1, 2))))}


def run(*, output_dir: str, train_seconds: float = 120.0, steps: int = 100_000,
        max_minutes: float = 5.0, seed: int = 0, command: str | None = None) -> dict:
  """Trains, samples, writes the file and certifies the block (module docstring); the row."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  import onnxruntime  # noqa: PLC0415
  from transformer_ua.certify import network_certificate  # noqa: PLC0415
  from transformer_ua.networks import flat_onnx, source_check  # noqa: PLC0415
  if not 0 < train_seconds <= 120:
    raise ValueError(f'train_seconds={train_seconds!r}; 0 < train_seconds <= 120.')
  prov, load_start = provenance.record(command), provenance.loadavg_text()
  module, variables = build(seed)
  variables, trained = train(module, variables, seconds=train_seconds, steps=steps, seed=seed)
  apply = jax.jit(lambda x: module.apply(variables, x))

  def flax_run(x):
    return np.asarray(apply(jnp.asarray(x, jnp.float32)))
  s_flax = torch_encoder.sampled_d2(flax_run)
  net, read_text = source_check.read_network((module, variables), d=D, n=N,
                                             arithmetic='float32')
  path = os.path.join(output_dir, 'model.onnx')
  flat_onnx.write(net, path, dtype='float32', overwrite=True)
  sess = onnxruntime.InferenceSession(path, providers=['CPUExecutionProvider'])
  name = sess.get_inputs()[0].name

  def ort_run(x):
    return sess.run(None, {name: np.asarray(x, np.float32)})[0]
  s_ort = torch_encoder.sampled_d2(ort_run)
  target = max(3 * s_flax[0], 0.05)
  row = {'block': BLOCK, 'params': int(net.count_params()), 'train': trained,
         'sampled_d2_flax': s_flax[0], 'sampled_d2_flax_upper95': s_flax[1],
         'sampled_d2_onnxruntime': s_ort[0], 'sampled_d2_onnxruntime_upper95': s_ort[1],
         'target': target, 'read': read_text,
         'onnx_file': 'model.onnx: flat_onnx.write of the network read from the pair '
                      '(float32); torch.onnx.export has no Flax counterpart'}
  t0 = time.perf_counter()
  try:
    cert = network_certificate.certify_network(
        'token_times_mean', (module, variables), d=D, n=N, p=2, arithmetic='float32',
        epsilon=target, max_minutes=max_minutes, progress=False)
  except ValueError as e:        # no certificate: the one line is the result
    row.update(certified_total=None, reached=False, certify_seconds=time.perf_counter() - t0,
               line=f'no certificate: {e}')
  else:
    centres = np.asarray(cert.worst_centres, np.float64).reshape(-1, N, D)
    row.update(certified_total=float(cert.total), reached=bool(cert.reached),
               boxes=cert.boxes, rounds=cert.rounds,
               certify_seconds=time.perf_counter() - t0, float_sup=cert.float_sup,
               worst_centres=len(centres), worst_flax=_worst(flax_run, centres),
               worst_onnxruntime=_worst(ort_run, centres), line=cert.line())
  outputs.atomic_write(os.path.join(output_dir, 'certificate.txt'), row['line'] + '\n')
  record = {'provenance': prov, 'loadavg_start': load_start, 'loadavg_end': provenance.loadavg_text(),
            'row': row}
  outputs.atomic_json(os.path.join(output_dir, OUTPUT_FILES[0]), record, indent=1,
                      default=str)
  outputs.atomic_write(os.path.join(output_dir, OUTPUT_FILES[1]), table(record))
  return row


def table(record: dict) -> str:
  """The record as Markdown: provenance, one table row, the certificate's line."""
  r, prov = record['row'], record['provenance']
  total = '-' if r['certified_total'] is None else bound_text(r['certified_total'], 4)
  wf, wo = r.get('worst_flax', {}), r.get('worst_onnxruntime', {})

  def num(v):
    return '-' if v is None else f'{v:.4g}'
  return '\n'.join([
      '# A flax.linen encoder block certified from its (module, variables) pair (float32, '
      'p=2)', '',
      f'command: `{prov["command"]}`  ', f'revision: {prov["git_revision"]}  ',
      f'machine: {prov["machine"]}  ',
      f'/proc/loadavg at start: {record["loadavg_start"]}; at the end: '
      f'{record["loadavg_end"]}', '',
      '| params | train steps (s) | sampled d_2 Flax | sampled d_2 onnxruntime | epsilon | '
      'certified total | reached | boxes | certify seconds | worst centres: max abs error '
      'Flax / onnxruntime |', '|' + '---|' * 10,
      f'| {r["params"]} | {r["train"]["steps"]} ({r["train"]["seconds"]}) | '
      f'{r["sampled_d2_flax"]:.4g} | {r["sampled_d2_onnxruntime"]:.4g} | {r["target"]:.4g} | '
      f'{total} | {r["reached"]} | {r.get("boxes", "-")} | {r["certify_seconds"]:.1f} | '
      f'{num(wf.get("max_abs"))} / {num(wo.get("max_abs"))} |', '',
      f'The onnxruntime column runs {r["onnx_file"]}.', '',
      f'Certificate: {r["line"]}', ''])
