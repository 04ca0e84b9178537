r"""Where a verification run's seconds go: since the process started, and compiling.

``process_seconds()``: wall seconds since this process started (interpreter start-up and
imports included; from /proc/self/stat, Linux), so a binary can report its import time.

JAX reports three spans for every program it builds (``jax.monitoring`` time-span
events):

    trace     Python function -> jaxpr           (/jax/core/compile/jaxpr_trace_duration)
    lower     jaxpr -> MLIR module                (.../jaxpr_to_mlir_module_duration)
    compile   MLIR -> executable: XLA's compile, or with a warm persistent compilation
              cache the executable read from it (.../backend_compile_duration)

and counts the persistent cache's hits and misses. ``CompileClock`` collects the spans
while it is open and gives, per kind, the seconds covered by the union of its spans
(a trace nested in another, or programs built by two threads at once, count once):

    seconds[kind] = |U spans of kind|,     seconds['total'] = |U spans of every kind|

so ``total`` is the wall time during which some thread was compiling; with
``this_thread=True`` only the spans of the thread that opened the clock count (the
grid check's own compiling, not that of Lemma 7's thread beside it).
"""

from __future__ import annotations

import os
import threading

import jax

#: JAX's event names (jax._src.dispatch) -> the kinds above.
EVENTS = {'/jax/core/compile/jaxpr_trace_duration': 'trace',
          '/jax/core/compile/jaxpr_to_mlir_module_duration': 'lower',
          '/jax/core/compile/backend_compile_duration': 'compile'}
CACHE_EVENTS = {'/jax/compilation_cache/cache_hits': 'cache_hits',
                '/jax/compilation_cache/cache_misses': 'cache_misses'}


def process_seconds() -> float | None:
  """Wall seconds since this process started (None where /proc is not there)."""
  try:
    with open('/proc/self/stat') as f:
      start_ticks = int(f.read().rsplit(')', 1)[1].split()[19])   # field 22: starttime
    with open('/proc/uptime') as f:
      uptime = float(f.read().split()[0])
  except (OSError, ValueError, IndexError):
    return None
  return uptime - start_ticks / os.sysconf('SC_CLK_TCK')


def union_seconds(spans: list[tuple[float, float]]) -> float:
  """Length of the union of intervals [start, end]."""
  total, reach = 0.0, float('-inf')
  for start, end in sorted(spans):
    if end > reach:
      total += end - max(start, reach)
      reach = end
  return total


class CompileClock:
  """Context manager: the compile spans and cache events of everything JAX builds
  inside it, in any thread. ``seconds()``: {trace, lower, compile, total} (union
  seconds); ``counts()``: {programs, cache_hits, cache_misses}."""

  def __init__(self, this_thread: bool = False):
    self._thread = threading.get_ident() if this_thread else None
    self._spans = {kind: [] for kind in EVENTS.values()}
    self._counts = {name: 0 for name in CACHE_EVENTS.values()}
    self._lock = threading.Lock()

  def _span(self, event: str, start: float, end: float, **_):
    kind = EVENTS.get(event)
    if kind is not None and self._thread in (None, threading.get_ident()):
      with self._lock:
        self._spans[kind].append((start, end))

  def _event(self, event: str, **_):
    name = CACHE_EVENTS.get(event)
    if name is not None and self._thread in (None, threading.get_ident()):
      with self._lock:
        self._counts[name] += 1

  def __enter__(self) -> CompileClock:
    jax.monitoring.register_event_time_span_listener(self._span)
    jax.monitoring.register_event_listener(self._event)
    return self

  def __exit__(self, *exc):
    jax.monitoring.unregister_event_time_span_listener(self._span)
    jax.monitoring.unregister_event_listener(self._event)
    return False

  def seconds(self) -> dict:
    with self._lock:
      out = {kind: union_seconds(s) for kind, s in self._spans.items()}
      out['total'] = union_seconds([x for s in self._spans.values() for x in s])
    return out

  def counts(self) -> dict:
    with self._lock:
      return {'programs': len(self._spans['compile']), **self._counts}
