"""The one training loop: resume, log, evaluate, checkpoint, data-parallel mesh.

Shaped like the Flax examples' ``train.py``: a task supplies only its unit of training
and its evaluation; ``run`` does everything else, the same way for every task.

    state, scalars = task.train_epoch(state, unit)    # one unit: a step or an epoch
    scalars        = task.evaluate(state)             # every ``eval_every`` units

A *unit* is what the task counts in (``Schedule.unit``): one optimizer step (the
Section H BERT runs) or one epoch (the Fang regression). With ``units_per_call = c > 1``
one call ``task.train_epoch(state, u)`` runs units ``u .. u + c - 1`` (e.g. ``lax.scan``
over a stack of c batches in one jit call) and ``done = u + c``; the periods below
must then be multiples of c. An epoch may be a Python loop
of jitted per-step updates or one compiled function that runs the whole epoch
(``lax.scan`` over its minibatches inside one jit); the loop cannot tell them apart.

Per call starting at unit u (``done = u + units_per_call``):

    log     done % log_every == 0 or last:  write {**train scalars, **eval scalars}
    eval    done % eval_every == 0 or last:  ``task.evaluate`` (prefixed ``eval_prefix``)
    ckpt    done % checkpoint_every == 0, or checkpoint_seconds since the last save
            (or since the start), or the last unit run:  state + meta
            meta = {'step': done, 'history': rows so far, 'elapsed': seconds}

Interrupts: a SIGINT / SIGTERM lets the unit in progress finish (a second one stops at
once), then the loop saves a checkpoint of the last finished unit and raises
``interrupts.Interrupted`` (a KeyboardInterrupt) whose message says where the checkpoint
is and the command that resumes; ``cli.run`` prints it as one line and exits 130 / 143. A
KeyboardInterrupt raised inside a unit (outside the main thread, or a second signal)
saves the last finished unit too, unless its buffers were donated to the unit. So at
most ``checkpoint_seconds`` of work (plus the unit in progress) is ever lost.

Resume: the newest checkpoint restores the state, the history, the elapsed time and
the segments (each attempt's provenance: command, revision, machine, time, load),
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
import shlex
import signal
import sys
import threading
import time
from typing import Any, Protocol

import jax

from transformer_ua import interrupts, outputs, parallel, provenance
from transformer_ua.train.checkpointing import Checkpointer
from transformer_ua.train.metrics import MetricsWriter

State = Any
#: Default wall-time period of the time-based checkpoint (seconds).
CHECKPOINT_SECONDS = 300.0


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
    checkpoint_seconds: also checkpoint once this much wall time has passed since the
      last save (or the start), so an interruption loses at most this much.
    unit: the name of a unit in the history rows ('step' or 'epoch').
    stop_after: stop once this many units are done in total (None: run them all).
    eval_prefix: prepended to the evaluation scalars' names.
    finite_key: a train scalar that must stay finite (FloatingPointError otherwise).
    max_to_keep: checkpoints kept.
    units_per_call: units run by one ``task.train_epoch`` call (num_units and the
      periods must be multiples of it).
    tensorboard: mirror the metrics to TensorBoard.
    desc: progress-bar label (and the name in error messages).
    progress: show the progress bar.
  """

  num_units: int
  eval_every: int
  checkpoint_every: int
  log_every: int = 1
  checkpoint_seconds: float = CHECKPOINT_SECONDS
  unit: str = 'step'
  stop_after: int | None = None
  eval_prefix: str = ''
  finite_key: str | None = None
  max_to_keep: int = 1
  tensorboard: bool = True
  desc: str = 'train'
  progress: bool = True
  units_per_call: int = 1

  def __post_init__(self):
    for name in ('num_units', 'eval_every', 'checkpoint_every', 'log_every',
                 'units_per_call'):
      v = getattr(self, name)
      if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f'{name}={v!r}; it must be an integer >= 1.')
    c = self.units_per_call
    for name in ('num_units', 'eval_every', 'checkpoint_every', 'log_every'):
      if getattr(self, name) % c:
        raise ValueError(f'{name}={getattr(self, name)} is not a multiple of '
                         f'units_per_call={c} ({self.unit}s run per call).')
    if self.stop_after is not None and self.stop_after % c:
      raise ValueError(f'stop_after={self.stop_after} is not a multiple of '
                       f'units_per_call={c}.')
    c = self.checkpoint_seconds
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not c >= 0:
      raise ValueError(f'checkpoint_seconds={c!r}; it must be a number >= 0 (seconds).')


@dataclasses.dataclass
class Outcome:
  """What ``run`` returns: the final state, the logged rows, the training time (every
  attempt's, summed), and ``segments``: one provenance record per attempt (process) that
  trained this run, oldest first, each with the units it ran (``from_<unit>`` ..
  ``to_<unit>``) and its seconds."""

  state: State
  history: list
  elapsed: float
  units_done: int
  segments: list = dataclasses.field(default_factory=list)


def training_mesh(config):
  """The data-parallel mesh of ``config.num_devices`` (0 or absent: all devices), or
  None when that is one device (the unchanged one-device step)."""
  mesh = parallel.make_mesh(config.get('num_devices', 0) or None)
  return mesh if mesh.devices.size > 1 else None


def resume_hint() -> str:
  """The command that resumes this run: this process's own command line (a rerun with
  the same workdir resumes), or a sentence when the loop was not started by a script."""
  if sys.argv and sys.argv[0].endswith('.py'):
    return 'resume with: python ' + shlex.join(sys.argv)
  return 'call again with the same workdir to resume'


class _StopRequest:
  """SIGINT / SIGTERM handler for the loop's duration: the first signal asks the loop to
  stop after the unit in progress; a second one interrupts at once."""

  SIGNALS = (signal.SIGINT, signal.SIGTERM)

  def __init__(self, unit: str):
    self.unit, self.name, self._previous = unit, None, {}

  def __call__(self, signum, frame):  # pylint: disable=unused-argument
    name = signal.Signals(signum).name
    if self.name is not None:
      interrupts.mark_interrupted(name)   # re-raised by cli.run should Python swallow it
      raise KeyboardInterrupt(name)
    self.name = name
    print(f'\n{name}: finishing the current {self.unit}, then saving a checkpoint '
          '(send it again to stop at once)', file=sys.stderr, flush=True)

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for sig in self.SIGNALS:
        self._previous[sig] = signal.signal(sig, self)
    return self

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)


def _alive(state) -> bool:
  """False when some array of ``state`` was donated to (deleted by) a unit in progress."""
  return not any(isinstance(a, jax.Array) and a.is_deleted()
                 for a in jax.tree_util.tree_leaves(state))


def run(task: Task, state: State, *, workdir: str, schedule: Schedule, mesh=None,
        prov: dict | None = None) -> Outcome:
  """Trains ``state`` with ``task`` in ``workdir`` (see module doc); resumes if it can.
  ``prov``: this attempt's provenance (default: provenance.record() now); the checkpoint
  meta carries every attempt's as ``segments`` (Outcome.segments).

  Raises:
    interrupts.Interrupted: after SIGINT / SIGTERM (or a KeyboardInterrupt), once the last
      finished unit is checkpointed; its message names the checkpoint and the command
      that resumes.
    FloatingPointError: ``finite_key`` became NaN or inf.
  """
  s = schedule
  ckpt = Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep=s.max_to_keep)
  writer = MetricsWriter(workdir, tensorboard=s.tensorboard)
  start, history, elapsed, segments = 0, [], 0.0, []
  restored = ckpt.restore_latest(state)
  if restored is not None:
    start, state, meta = restored
    history, elapsed = list(meta.get('history', [])), float(meta.get('elapsed', 0.0))
    segments = list(meta.get('segments', []))    # checkpoints before 2026-11-24: none
    writer.truncate_after(start)
  segment = {**(prov or provenance.record()), f'from_{s.unit}': start, f'to_{s.unit}': start,
             'seconds': 0.0}
  segments.append(segment)
  if mesh is not None:
    state = parallel.replicate(state, mesh)
  end = s.num_units if s.stop_after is None else min(s.num_units, s.stop_after)
  bar = outputs.progress(range(start, end, s.units_per_call), initial=start, total=s.num_units,
                         desc=s.desc, disable=not s.progress, mininterval=2.0,
                         dynamic_ncols=True)
  t0 = time.perf_counter()
  saved, saved_at = start, t0   # the newest checkpoint: units, perf_counter time
  finished, finished_state = start, state   # the last unit whose bookkeeping is done

  def save(done, st):
    nonlocal saved, saved_at
    segment.update({f'to_{s.unit}': done, 'seconds': round(time.perf_counter() - t0, 1)})
    ckpt.save(done, st, meta={'step': done,
                              'history': [r for r in history if r[s.unit] <= done],
                              'elapsed': elapsed + time.perf_counter() - t0,
                              'segments': segments})
    saved, saved_at = done, time.perf_counter()

  def interrupted(name):
    bar.close()
    if finished > saved and _alive(finished_state):
      save(finished, finished_state)
    ckpt.close()
    writer.close()
    where = (f'checkpoint at {s.unit} {saved} of {s.num_units} in {ckpt.directory}'
             if saved else f'no {s.unit} finished, nothing to resume from')
    return interrupts.Interrupted(name, f'{s.desc}: {where}; {resume_hint()}')

  with _StopRequest(s.unit) as stop:
    try:
      for unit in bar:
        state, scalars = task.train_epoch(state, unit)
        done = unit + s.units_per_call
        if s.units_per_call > 1:
          bar.update(s.units_per_call - 1)
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
        if (s.finite_key is not None and s.finite_key in row
            and not math.isfinite(row[s.finite_key])):
          bar.close()
          raise FloatingPointError(f'{s.desc}: training diverged at {s.unit} {done}.')
        finished, finished_state = done, state
        if (done % s.checkpoint_every == 0 or done == end
            or time.perf_counter() - saved_at >= s.checkpoint_seconds):
          save(done, state)
        if stop.name is not None:
          raise interrupted(stop.name)
    except interrupts.Interrupted:
      raise
    except KeyboardInterrupt as e:
      raise interrupted(str(e) or 'SIGINT') from None
  bar.close()
  elapsed += time.perf_counter() - t0
  segment.update({f'to_{s.unit}': max(start, end), 'seconds': round(time.perf_counter() - t0, 1)})
  ckpt.close()
  writer.close()
  return Outcome(state=state, history=history, elapsed=elapsed, units_done=max(start, end),
                 segments=segments)
