"""Resumable, logged loops over a grid pass: progress with an ETA, state saved and loaded.

The whole-grid checks of Lemma 8 / 10 (Yun et al. 2020, Appendix E.3; ``grid_pass``)
run for hours at scale (N=3, d=3, n=5: (N+1)^(nd) = 4^15 ~ 1.1e9 points); this loop
lets them stop and continue.

A pass is ``num_items`` items (blocks of points, or points) run ``stride`` at a time by
``step(t) -> (counts, max_abs)``: violation counts (Python ints) and the largest
|value| seen in items t .. t + stride - 1. ``run`` sums them and shows a tqdm bar of
points with rate and ETA (stderr, refreshed at most every ``log_every`` seconds); with a
``state_path`` it saves, every ``save_every`` seconds and at the end,

    {config, completed_blocks: [[0, t]], next_block: t, num_blocks, counts, max_abs,
     seconds, cpu_seconds, resumed_from}       (items are blocks in the full-grid pass;
                                                seconds, CPU seconds: this run's)

as JSON (also when the loop is interrupted: Ctrl-C, SIGTERM, an error; t counts only
completed items) (atomically, ``outputs.atomic_json``), so that ``resume=True``
continues at item t of a run with the same ``config`` (anything else is refused).
"""

from __future__ import annotations

import json
import sys
import time

from transformer_ua import outputs

#: Seconds between progress refreshes / state saves.
LOG_EVERY, SAVE_EVERY = 30.0, 60.0
#: The progress line (tqdm): points done of all, percent, rate, elapsed and ETA.
BAR_FORMAT = ('{desc} {n:,} / {total:,} points ({percentage:.1f}%), {rate_fmt}, '
              'elapsed {elapsed}, ETA {remaining}')
STATE_VERSION = 1


def load_state(path: str, key: dict) -> dict:
  """The saved state at ``path`` for config ``key``, or ValueError (missing, unreadable,
  or for another config)."""
  try:
    with open(path) as fh:
      state = json.load(fh)
  except (OSError, ValueError) as e:
    raise ValueError(f'cannot resume: state file {path!r} is missing or unreadable ({e}).') \
        from None
  if state.get('config') != key:
    raise ValueError(f'cannot resume: state file {path!r} is for {state.get("config")}, '
                     f'this run is {key}.')
  return state


def save_state(path: str, key: dict, next_item: int, num_items: int, counts: dict,
               max_abs: int, seconds: float, cpu_seconds: float | None = None,
               resumed_from: int = 0) -> None:
  state = {'config': key, 'completed_blocks': [[0, next_item]], 'next_block': next_item,
           'num_blocks': num_items, 'counts': counts, 'max_abs': str(max_abs),
           'seconds': round(seconds, 1), 'resumed_from': resumed_from}
  if cpu_seconds is not None:
    state['cpu_seconds'] = round(cpu_seconds, 1)
  outputs.atomic_json(path, state, indent=1)


def run(step, num_items: int, stride: int, *, key: dict, points_per_item: int = 1,
        max_abs: int = 0, state_path: str | None = None, resume: bool = False,
        progress: bool = True, label: str = 'full grid', log_every: float = LOG_EVERY,
        save_every: float = SAVE_EVERY, max_seconds: float | None = None) -> dict:
  """Runs ``step(t)`` for t = start, start + stride, ... < ``num_items``, one call ahead:
  call t + stride is launched before call t's results are read, so the devices do not
  wait for the host between calls (JAX dispatches asynchronously).

  Args:
    step: ``step(t) -> resolve`` for items t .. min(t + stride, num_items) - 1, where
      ``resolve() -> (counts: dict of ints, max_abs: int)`` waits for the results.
    key: the run's config, saved with the state and compared on resume.
    points_per_item: grid points per item (for the progress line).
    max_abs: initial largest |value| (e.g. of the inputs).
    state_path, resume: save the state here; continue from it.
    max_seconds: stop after this many seconds (state saved; ``complete`` False).
  Returns:
    dict: ``counts`` (summed, resumed items included), ``max_abs``, ``complete``,
    ``items_done``, ``resumed_from``, ``cpu_seconds`` (this process's CPU time in this
    run's loop, every thread: the rate a loaded machine does not distort).
  """
  counts: dict = {}
  start = 0
  if resume:
    if not state_path:
      raise ValueError('resume needs a state file (--state_file or --output_dir).')
    state = load_state(state_path, key)
    start, counts = int(state['next_block']), {k: int(c) for k, c in state['counts'].items()}
    max_abs = max(max_abs, int(state['max_abs']))
  t_begin, cpu_begin = time.time(), time.process_time()
  last_save = t_begin
  t = start
  bar = outputs.progress(total=num_items * points_per_item, initial=start * points_per_item,
                         desc=f'[{label}]', unit=' points', unit_scale=True,
                         mininterval=log_every, file=sys.stderr, disable=not progress,
                         bar_format=BAR_FORMAT)
  launched, stop = start, False
  in_flight: list = []   # (end, resolve) of the calls launched and not yet read
  try:
    with bar:
      while in_flight or (launched < num_items and not stop):
        while len(in_flight) < 2 and launched < num_items and not stop:
          end = min(launched + stride, num_items)
          in_flight.append((end, step(launched)))
          launched = end
        end, resolve = in_flight.pop(0)
        c, m = resolve()
        for k, val in c.items():
          counts[k] = counts.get(k, 0) + int(val)
        max_abs = max(max_abs, int(m))
        bar.update((end - t) * points_per_item)
        t = end
        now = time.time()
        if state_path and now - last_save >= save_every:
          save_state(state_path, key, t, num_items, counts, max_abs, now - t_begin,
                     time.process_time() - cpu_begin, start)
          last_save = now
        if max_seconds is not None and now - t_begin >= max_seconds:
          stop = True
  finally:  # at the end, and when interrupted: the items completed so far (t) are kept
    if state_path:
      save_state(state_path, key, t, num_items, counts, max_abs, time.time() - t_begin,
                 time.process_time() - cpu_begin, start)
  return {'counts': counts, 'max_abs': max_abs, 'complete': t >= num_items,
          'items_done': t, 'resumed_from': start, 'cpu_seconds': time.process_time() - cpu_begin}
