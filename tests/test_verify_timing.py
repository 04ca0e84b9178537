"""verify.timing: the union of time spans, the compile clock (threads), process age."""

from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import pytest

from transformer_ua.verify import timing


@pytest.mark.parametrize('spans, expected', [
    ([], 0.0),
    ([(0.0, 1.0)], 1.0),
    ([(0.0, 1.0), (2.0, 3.5)], 2.5),                 # disjoint
    ([(0.0, 2.0), (1.0, 3.0)], 3.0),                 # overlapping
    ([(0.0, 4.0), (1.0, 2.0), (3.0, 5.0)], 5.0),     # nested, then overlapping
    ([(2.0, 3.0), (0.0, 1.0), (0.5, 2.5)], 3.0)])    # unsorted, chained
def test_union_seconds(spans, expected):
  assert timing.union_seconds(spans) == pytest.approx(expected)


def _compile_new_program(scale: float):
  # A fresh function each call: nothing cached in memory, so JAX traces, lowers and
  # compiles (or loads) it.
  return jax.jit(lambda x: x * scale + 1.0)(jnp.ones(3)).block_until_ready()


def test_compile_clock_counts_programs_and_threads():
  with timing.CompileClock() as every, timing.CompileClock(this_thread=True) as mine:
    _compile_new_program(2.0)
    worker = threading.Thread(target=_compile_new_program, args=(3.0,))
    worker.start()
    worker.join()
  all_s, mine_s = every.seconds(), mine.seconds()
  assert every.counts()['programs'] > mine.counts()['programs'] >= 1
  for kind in ('trace', 'lower', 'compile'):
    assert all_s[kind] > 0 and mine_s[kind] > 0
  assert all_s['total'] > mine_s['total']
  assert all_s['total'] <= all_s['trace'] + all_s['lower'] + all_s['compile'] + 1e-9
  # Closed: later programs are not counted.
  before = every.counts()['programs']
  _compile_new_program(4.0)
  assert every.counts()['programs'] == before


def test_process_seconds_is_the_age_of_this_process():
  age = timing.process_seconds()
  assert age is not None and 0 < age < time.time() - 0  # positive
  time.sleep(0.05)
  assert timing.process_seconds() >= age
