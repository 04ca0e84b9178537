"""``Steps``: the unit of the Section H BERT runs (``train.loop.Task``), one optimizer step.

Pre-training and fine-tuning alike (``train.mixing``) train with it; only the
jitted step, the batches and the evaluation differ, and the driver hands them in.
"""

from __future__ import annotations

import concurrent.futures
import time

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import parallel


class Steps:
  """One call = ``steps_per_call`` steps of ``train_step`` on the stacked batches
  ``get_batch(step) .. get_batch(step + c - 1)`` (sharded over a mesh), built one call
  ahead in a background thread. Train metrics are summed on device; on log rows only
  (every ``log_every`` steps and the last one, where the host waits) their mean over the
  window is computed and returned. Throughput: real (non-padding) tokens per
  second of training between the end of the first call (compilation) and the end of
  the last finished window (``tps``); ``row_tps`` counts every position of every row,
  padding included (batch x max_len per step)."""

  def __init__(self, train_step, get_batch, eval_fn, acc0, *, steps_per_call, log_every,
               num_steps, mesh=None):
    self.train_step, self.eval_fn, self.acc0 = train_step, eval_fn, acc0
    self.c, self.log_every, self.num_steps, self.mesh = (steps_per_call, log_every,
                                                         num_steps, mesh)
    self.get_batch = get_batch
    self.pool = concurrent.futures.ThreadPoolExecutor(1)
    self.pending = None                    # (first step, future of the next stack)
    self.acc, self.count = None, 0
    self.tokens, self.window_tokens, self.train_time = 0, 0, 0.0
    self.rows, self.window_rows = 0, 0     # the same, every position of every row
    self.t_start = None                    # perf_counter at the end of the first call
    self.tps = self.row_tps = float('nan')

  def _stack(self, step):
    bs = [self.get_batch(s) for s in range(step, step + self.c)]
    stacked = {k: np.stack([b[k] for b in bs]) for k in bs[0]}
    return stacked, (int(stacked['mask'].sum()), stacked['mask'].size)

  def _batches(self, step):
    if self.pending is not None and self.pending[0] == step:
      stacked, ntok = self.pending[1].result()
    else:
      stacked, ntok = self._stack(step)
    nxt = step + self.c
    self.pending = ((nxt, self.pool.submit(self._stack, nxt))
                    if nxt < self.num_steps else None)
    if self.mesh is not None:     # the batch axis is axis 1 of the stack
      stacked = parallel.shard_batch(stacked, self.mesh, axis=1)
    return stacked, ntok

  def train_epoch(self, state, step):
    batches, ntok = self._batches(step)
    if self.acc is None:
      self.acc = jax.tree_util.tree_map(jnp.copy, self.acc0)
    state, self.acc = self.train_step(state, self.acc, batches)
    self.count += self.c
    done = step + self.c
    if self.t_start is None:        # compilation: excluded from the throughput
      jax.block_until_ready(self.acc)
      self.t_start = time.perf_counter()
    else:
      self.window_tokens += ntok[0]
      self.window_rows += ntok[1]
    if done % self.log_every != 0 and done != self.num_steps:
      return state, {'tokens_per_s': self.tps}   # the loop reads scalars only on log rows
    mean = jax.tree_util.tree_map(lambda a: a / self.count, self.acc)
    jax.block_until_ready(mean)
    self.tokens += self.window_tokens
    self.rows += self.window_rows
    self.window_tokens = self.window_rows = 0
    self.train_time = time.perf_counter() - self.t_start
    if self.train_time > 0 and self.tokens:
      self.tps = self.tokens / self.train_time
      self.row_tps = self.rows / self.train_time
    self.acc, self.count = None, 0
    return state, {**mean, 'tokens_per_s': self.tps}

  def evaluate(self, state):
    t = time.perf_counter()
    out = self.eval_fn(state['params'])
    if self.t_start is not None:     # evaluation time is not training time
      self.t_start += time.perf_counter() - t
    return out

  def close(self):
    self.pool.shutdown(wait=True, cancel_futures=True)
