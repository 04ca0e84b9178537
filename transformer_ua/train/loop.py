"""The one training loop: resume, log, evaluate, checkpoint, data-parallel mesh.

Shaped like the Flax examples' ``train.py``: a task supplies only its unit of training
and its evaluation; ``run`` does everything else, the same way for every task.

    state, scalars = task.train_epoch(state, unit)    # one unit: a step or an epoch
    scalars        = task.evaluate(state)             # every ``eval_every`` units

A *unit* is what the task counts in (``Schedule.unit``): one optimizer step (the
Section H BERT runs) or one epoch (the Fang regression). An epoch may be a Python loop
of jitted per-step updates or one compiled function that runs the whole epoch
(``lax.scan`` over its minibatches inside one jit); the loop cannot tell them apart.

Per unit u (``done = u + 1``):

    log     done % log_every == 0 or last:  write {**train scalars, **eval scalars}
    eval    done % eval_every == 0 or last:  ``task.evaluate`` (prefixed ``eval_prefix``)
    ckpt    done % checkpoint_every == 0 or the last unit run:  state + meta
            meta = {'step': done, 'history': rows so far, 'elapsed': seconds}

Resume: the newest checkpoint restores the state, the history and the elapsed time,
and ``metrics.jsonl`` is cut back to it (rows of an interrupted attempt are rewritten,
not duplicated); since batches and keys are functions of (seed, unit) the resumed run
is the uninterrupted run. ``stop_after`` stops after that many units in total (a
simulated preemption). Data parallelism: with a ``mesh`` the state is replicated over
it; the task shards its own batches (``parallel.shard_batch``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any, Protocol

import jax

from transformer_ua import parallel
from transformer_ua.train.checkpointing import Checkpointer
from transformer_ua.train.metrics import MetricsWriter

State = Any


class Task(Protocol):
  """What a training task supplies."""

  def train_epoch(self, state: State, unit: int) -> tuple[State, dict]:
    """Runs unit ``unit`` (0-based); returns the new state and its scalars."""

  def evaluate(self, state: State) -> dict:
    """Evaluation scalars of ``state``."""


@dataclasses.dataclass(frozen=True)
class Schedule:
  """When the loop logs, evaluates and checkpoints (all counted in units).

  Attributes:
    num_units: units of a complete run.
    log_every, eval_every, checkpoint_every: periods (the last unit always does all).
    unit: the name of a unit in the history rows ('step' or 'epoch').
    stop_after: stop once this many units are done in total (None: run them all).
    eval_prefix: prepended to the evaluation scalars' names.
    finite_key: a train scalar that must stay finite (FloatingPointError otherwise).
    max_to_keep: checkpoints kept.
    tensorboard: mirror the metrics to TensorBoard.
    desc: progress-bar label (and the name in error messages).
    progress: show the progress bar.
  """

  num_units: int
  eval_every: int
  checkpoint_every: int
  log_every: int = 1
  unit: str = 'step'
  stop_after: int | None = None
  eval_prefix: str = ''
  finite_key: str | None = None
  max_to_keep: int = 1
  tensorboard: bool = True
  desc: str = 'train'
  progress: bool = True


@dataclasses.dataclass
class Outcome:
  """What ``run`` returns: the final state, the logged rows and the training time."""

  state: State
  history: list
  elapsed: float
  units_done: int


def training_mesh(config):
  """The data-parallel mesh of ``config.num_devices`` (0 or absent: all devices), or
  None when that is one device (the unchanged one-device step)."""
  mesh = parallel.make_mesh(config.get('num_devices', 0) or None)
  return mesh if mesh.devices.size > 1 else None


def run(task: Task, state: State, *, workdir: str, schedule: Schedule, mesh=None) -> Outcome:
  """Trains ``state`` with ``task`` in ``workdir`` (see module doc); resumes if it can."""
  from tqdm.auto import tqdm  # pylint: disable=import-outside-toplevel
  s = schedule
  ckpt = Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep=s.max_to_keep)
  writer = MetricsWriter(workdir, tensorboard=s.tensorboard)
  start, history, elapsed = 0, [], 0.0
  restored = ckpt.restore_latest(state)
  if restored is not None:
    start, state, meta = restored
    history, elapsed = list(meta.get('history', [])), float(meta.get('elapsed', 0.0))
    writer.truncate_after(start)
  if mesh is not None:
    state = parallel.replicate(state, mesh)
  end = s.num_units if s.stop_after is None else min(s.num_units, s.stop_after)
  bar = tqdm(range(start, end), initial=start, total=s.num_units, desc=s.desc,
             disable=not s.progress, mininterval=2.0, dynamic_ncols=True)
  t0 = time.perf_counter()
  for unit in bar:
    state, scalars = task.train_epoch(state, unit)
    done = unit + 1
    last = done == s.num_units
    row = {}
    if done % s.log_every == 0 or last:
      row = {k: float(v) for k, v in jax.device_get(scalars).items()}
    if done % s.eval_every == 0 or last:
      row.update({s.eval_prefix + k: v for k, v in task.evaluate(state).items()})
    if row:
      history.append({s.unit: done, **row})
      writer.write(done, row)
      bar.set_postfix({k: f'{v:.4g}' for k, v in list(row.items())[:2]})
    if s.finite_key is not None and s.finite_key in row and not math.isfinite(row[s.finite_key]):
      bar.close()
      raise FloatingPointError(f'{s.desc}: training diverged at {s.unit} {done}.')
    if done % s.checkpoint_every == 0 or done == end:
      ckpt.save(done, state, meta={'step': done, 'history': history,
                                   'elapsed': elapsed + time.perf_counter() - t0})
  bar.close()
  elapsed += time.perf_counter() - t0
  ckpt.close()
  writer.close()
  return Outcome(state=state, history=history, elapsed=elapsed, units_done=max(start, end))
