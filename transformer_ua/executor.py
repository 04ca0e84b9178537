r"""One executor for every parallel certification: a pure chunk function over [0, count).

Certification splits over items (cube classes, Monte Carlo points, ids): the work is a
pure function of a span of item indices and of data every worker needs once (the exact
network, the cubes, the points). With

    shipment = ship(build, *args)          # build(*args) -> obj, once per worker
    out      = map_spans(fn, shipment, count, workers)

this module evaluates

    out.results = [((s_0, e_0), fn(obj, s_0, e_0)), ..., ((s_K, e_K), fn(obj, s_K, e_K))]
    0 = s_0 < e_0 = s_1 < ... < e_K = count          (spans in order, covering [0, count))

wherever ``workers`` says, and the caller reduces the results (certify: the max over
spans, first index on ties, so the answer does not depend on how [0, count) was cut).

Contract for a new chunk function (a new realization's interiors, another Monte Carlo):
  * ``build`` and ``fn`` are module-level functions (pickled by reference); ``args``
    pickle (exact rationals, numpy arrays). ``fn(obj, start, stop)`` reads ``obj`` and
    returns a picklable result; for a resumable run (``identity=``) the result must be
    JSON (dicts, lists, floats, ints, strings: floats round-trip exactly).
  * ``fn`` is pure: the same span gives the same result wherever it runs. It may not
    keep state between calls, nor set process-wide state it does not restore (the arb
    precision is process-wide: chunks in one process run one at a time, see ``_run``).

Where the chunks run (``Workers``; ``as_workers`` decodes ``workers=`` / ``executor=``):
  * in-process: 1 process, or a local estimate below ``MIN_POOL_SECONDS`` (the
    crossover below which a pool does not pay; measured in
    results/benchmarks/certify_executor.json, ``benchmarks/certify_executor.py``);
  * ``processes=k``: a local ``concurrent.futures.ProcessPoolExecutor`` started with
    'spawn' (never fork: JAX's threads do not survive a fork). The shipment goes once
    per worker, as the pool's initializer argument; each worker ignores SIGINT (Ctrl-C
    is the parent's) and exits within ``WATCHDOG_SECONDS`` of its parent's death
    (SIGKILL included: a watchdog thread polls ``os.getppid()``);
  * ``executor=``: any ``concurrent.futures.Executor``. Dask distributed's
    ``Client.get_executor()`` runs on a cluster: the shipment is scattered once to every
    worker (``Client.scatter(broadcast=True)``) and each worker builds it once (a
    per-process cache keyed by the shipment's SHA-256). A generic executor has no
    per-worker hook: the shipment travels with each chunk, still built once per
    process.

Resumable (``Workers(state_dir=...)`` and a caller's ``identity``): the k-th resumable
map of a ``Workers`` keeps ``state_dir/certification_k/``: ``identity.json`` (what is
computed: e.g. the params' SHA-256, bits, margin, cubes) and one JSON file per finished
chunk (the identity, the span, the result). A rerun with the same arguments computes
only the spans no file covers, and returns the same results; a state whose identity
differs is refused in one line (``ValueError``). Ctrl-C (KeyboardInterrupt) keeps the
finished chunks, stops the local workers, cancels what an executor has not started, and
re-raises; a binary declares the directory with ``cli.resumable`` (``cli.executor_from_flags``), so
its interrupt line says how to resume.

Nothing from outside the process is trusted silently: chunks read from a state directory
and chunks computed by a caller's executor (Dask included) are re-run here on a random
sample, at least ``RECHECK_MIN`` of them or ``Workers(recheck=)`` (a fraction, up to 1:
all), and compared exactly with what came back; any difference is refused in one line
(``ValueError``). ``Mapped`` says how many chunks were resumed, computed elsewhere and
re-checked (the certificate line prints it). A state's identity also names the code
(``code_version``: the package version and the SHA-256 of the source of the module that
builds the work, where its chunk function lives) and everything the workers build
(``work_sha256``, ``tree_sha256`` of the shipment's arguments: the segments, params,
bits, margin, cubes), so a foreign or stale state is refused in one line.

Every chunk file is signed, under a key outside the state directory (``executor_state``).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import json
import math
import multiprocessing
import os
import pickle
import random
import signal
import sys
import threading
import time
from typing import Callable

import numpy as np

from transformer_ua import executor_state

#: Estimated in-process seconds below which a local pool does not pay: spawning the
#: workers, importing the package and building the shipment in each, and the per-chunk
#: round trips cost more than a second idle core saves. Measured crossover 30.3 s for 2
#: processes (results/benchmarks/certify_executor.json: 15.1 s to start 2 workers and
#: build a 4247-layer network in each, 0.3 ms per chunk); it replaces a hand-set 512
#: cubes (8.5 s of work at 4247 layers, 0.1 s at 55: no count of cubes fits every depth).
MIN_POOL_SECONDS = 30.0
#: Chunks per worker slot (load balance against the per-chunk round trip).
CHUNKS_PER_WORKER = 8
#: A local worker exits this soon after its parent dies.
WATCHDOG_SECONDS = 0.5
#: Seconds to wait for a Dask scheduler before refusing its address.
CONNECT_SECONDS = 10.0
#: Chunks from a state directory or a caller's executor re-run here at least (all when
#: there are fewer), whatever ``Workers(recheck=)`` asks.
RECHECK_MIN = 3


# ---------------------------------------------------------------------------
# What runs where.
# ---------------------------------------------------------------------------


class Workers:
  """Where ``map_spans`` runs chunks, and where it keeps their results.

  Args:
    processes: local spawned processes (default min(2, CPUs)); 1 runs in-process.
    executor: any ``concurrent.futures.Executor`` instead (e.g. Dask's
      ``Client.get_executor()``); not with ``processes``.
    state_dir: keep each finished chunk of a resumable map here (module doc).
    min_pool_seconds: in-process below this estimated work (local processes only;
      0 always starts the pool).
    recheck: the fraction (0 to 1) of the chunks read from ``state_dir`` or computed by
      ``executor`` that are re-run here and compared exactly (at least ``RECHECK_MIN``
      of them whatever the fraction; 1: all).
  """

  def __init__(self, processes: int | None = None, executor: cf.Executor | None = None,
               state_dir: str | None = None, min_pool_seconds: float = MIN_POOL_SECONDS,
               recheck: float = 0.0):
    if executor is not None and processes is not None:
      raise ValueError('give processes (a local pool) or executor, not both.')
    if executor is not None and not isinstance(executor, cf.Executor):
      raise ValueError(f'executor must be a concurrent.futures.Executor (e.g. Dask '
                       f"Client.get_executor()), got {type(executor).__name__}.")
    context = getattr(executor, '_mp_context', None)
    if context is not None and context.get_start_method() != 'spawn':
      raise ValueError(f'a process pool started with {context.get_start_method()!r}; use '
                       "mp_context=multiprocessing.get_context('spawn') (a fork of a "
                       'process running JAX can hang), or workers=<int>.')
    if processes is not None and (isinstance(processes, bool) or
                                  not isinstance(processes, (int, np.integer)) or processes < 1):
      raise ValueError(f'workers={processes!r}; it must be an integer >= 1 (processes), a '
                       'concurrent.futures.Executor or an executor.Workers.')
    if state_dir is not None and (not isinstance(state_dir, (str, os.PathLike))
                                  or not str(state_dir)):
      raise ValueError(f'state_dir={state_dir!r}; it must be a directory path.')
    if state_dir is not None and os.path.exists(state_dir) and not os.path.isdir(state_dir):
      raise ValueError(f'state_dir={os.fspath(state_dir)!r} is a file, not a directory; give '
                       'a directory (made if absent) for the resumable chunks.')
    if not (isinstance(min_pool_seconds, (int, float)) and min_pool_seconds >= 0):
      raise ValueError(f'min_pool_seconds={min_pool_seconds!r}; it must be a number >= 0.')
    if isinstance(recheck, bool) or not isinstance(recheck, (int, float, np.integer,
                                                             np.floating)) \
        or not 0 <= recheck <= 1:
      raise ValueError(f'recheck={recheck!r}; it must be a fraction in [0, 1] of the chunks '
                       f'from a state or an executor to re-run here (at least {RECHECK_MIN}).')
    self.recheck = float(recheck)
    self.processes = int(processes) if processes is not None else (
        None if executor is not None else min(2, os.cpu_count() or 1))
    self.executor = executor
    self.state_dir = os.fspath(state_dir) if state_dir is not None else None
    self.min_pool_seconds = float(min_pool_seconds)
    self._resumable_maps = 0      # how many resumable maps this Workers has started

  def next_state_dir(self) -> str:
    """state_dir/certification_k for the k-th resumable map of this Workers (k from 0):
    a command that runs several certifications keeps each in its own, in order."""
    k, self._resumable_maps = self._resumable_maps, self._resumable_maps + 1
    return os.path.join(self.state_dir, f'certification_{k}')

  def slots(self) -> int:
    """Chunks that can run at once: processes, or the executor's workers (Dask: the
    cluster's threads; a pool: its max_workers; else 1)."""
    if self.executor is None:
      return self.processes
    client = _dask_client(self.executor)
    if client is not None:
      return max(1, sum(client.nthreads().values()))
    return int(getattr(self.executor, '_max_workers', 1) or 1)

  def __repr__(self) -> str:
    where = (f'executor={type(self.executor).__name__}' if self.executor is not None
             else f'processes={self.processes}')
    return f'Workers({where}, state_dir={self.state_dir!r}, recheck={self.recheck:g})'


def as_workers(workers=None, executor: cf.Executor | None = None,
               state_dir: str | None = None) -> Workers:
  """``workers=`` as the library takes it: None (default local pool), an int (processes),
  a ``concurrent.futures.Executor``, or a ``Workers``; ``executor`` / ``state_dir`` add
  to an int or None."""
  if isinstance(workers, Workers):
    if executor is not None or state_dir is not None:
      raise ValueError('workers is a Workers already: give executor and state_dir to it.')
    return workers
  if isinstance(workers, cf.Executor):
    if executor is not None:
      raise ValueError('give one executor (workers= or executor=), not two.')
    workers, executor = None, workers
  return Workers(workers, executor, state_dir)


def dask_executor(address: str, timeout: float = CONNECT_SECONDS) -> cf.Executor:
  """``Client(address).get_executor()`` of a running Dask scheduler, or one ValueError line
  (dask not installed, a scheduler that does not answer within ``timeout`` seconds)."""
  if not isinstance(address, str) or not address.strip():
    raise ValueError(f'dask scheduler address {address!r}; expected e.g. tcp://host:8786.')
  try:
    from distributed import Client  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ValueError('a Dask scheduler needs dask.distributed: pip install '
                     "'transformer_ua[cluster]' (or dask[distributed]).") from None
  try:
    client = Client(address, timeout=timeout)
  except (OSError, TimeoutError, ValueError) as e:
    reason = ' '.join(str(e).split())[:160] or type(e).__name__
    raise ValueError(f'no Dask scheduler answered at {address} within {timeout:g} s '
                     f'({reason}); start one with `dask scheduler` and workers with '
                     '`dask worker ADDRESS --nthreads 1` (docs/performance.md).') from None
  return client.get_executor()


def _dask_client(executor):
  """The Dask client behind ``Client.get_executor()``, or None for another executor."""
  if type(executor).__module__.startswith('distributed.'):
    return getattr(executor, '_client', None)
  return None


# ---------------------------------------------------------------------------
# The shipment, and the per-process cache of what it builds.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Shipment:
  """``build(*args)`` pickled once: ``blob`` travels to each worker, ``key`` (its
  SHA-256) names what it builds there."""

  blob: bytes
  key: str


def ship(build: Callable, *args) -> Shipment:
  """What every worker builds once: ``build(*args)`` (module-level ``build``)."""
  blob = pickle.dumps((build, args), protocol=pickle.HIGHEST_PROTOCOL)
  return Shipment(blob, hashlib.sha256(blob).hexdigest())


_BUILT: dict = {}            # key -> obj, this process's shipments (the newest few)
_BUILT_KEEP = 2
_BUILD_LOCK = threading.Lock()
#: One chunk at a time per process: python-flint's working precision is process-wide.
_RUN_LOCK = threading.Lock()


def _obtain(key: str, blob):
  with _BUILD_LOCK:
    if key not in _BUILT:
      if blob is None:
        raise RuntimeError(f'this worker has no shipment {key[:12]} (started without it).')
      build, args = pickle.loads(blob)
      _BUILT[key] = build(*args)
      while len(_BUILT) > _BUILT_KEEP:
        del _BUILT[next(iter(_BUILT))]
    return _BUILT[key]


def _run(fn, key: str, blob, start: int, stop: int):
  """One chunk on a worker (or in-process): ``fn(obj, start, stop)``."""
  obj = _obtain(key, blob)
  with _RUN_LOCK:
    return fn(obj, start, stop)


def empty_chunk(obj, start: int, stop: int) -> float:
  """A chunk that computes nothing and returns when it ran (``time.time()``):
  ``benchmarks/certify_executor.py`` times the round trip and the workers' start."""
  del obj, start, stop
  return time.time()


def _watch_parent(parent: int) -> None:
  while True:
    time.sleep(WATCHDOG_SECONDS)
    if os.getppid() != parent:
      os._exit(1)    # pylint: disable=protected-access


def _init_local(parent: int, key: str, blob: bytes) -> None:
  """A local worker: Ctrl-C is the parent's; exit with the parent; build the shipment."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  threading.Thread(target=_watch_parent, args=(parent,), name='parent-watchdog',
                   daemon=True).start()
  _obtain(key, blob)


class _SpawnWithoutMain:
  """Starts spawned workers without re-running ``__main__``: a spawned child imports the
  parent's main script (to find functions defined there); these workers need only the
  package, and a user's script without an ``if __name__ == '__main__'`` guard would run
  again in every worker. While workers start, ``__main__`` shows no file or spec."""

  def __enter__(self):
    self.main = sys.modules.get('__main__')
    d = self.main.__dict__ if self.main is not None else {}
    self.saved = {k: d[k] for k in ('__file__', '__spec__') if k in d}
    d.pop('__file__', None)
    if '__spec__' in d:
      d['__spec__'] = None
    return self

  def __exit__(self, *exc):
    if self.main is not None:
      self.main.__dict__.update(self.saved)


def _local_pool(processes: int, shipment: Shipment) -> cf.ProcessPoolExecutor:
  return cf.ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context('spawn'),
                                initializer=_init_local,
                                initargs=(os.getpid(), shipment.key, shipment.blob))


def _stop_local(pool: cf.ProcessPoolExecutor) -> None:
  """Cancel what has not started and end the workers now (their chunks are lost)."""
  procs = list((getattr(pool, '_processes', None) or {}).values())
  pool.shutdown(wait=False, cancel_futures=True)
  for p in procs:
    if p.is_alive():
      p.terminate()
  for p in procs:
    p.join(5)


# ---------------------------------------------------------------------------
# Resumable state: the spans no kept chunk covers (the files: executor_state.py).
# ---------------------------------------------------------------------------


def _missing(done, count: int) -> list:
  """The ranges of [0, count) that no kept span covers, in order."""
  out, at = [], 0
  for s, e in sorted(done):
    if s > at:
      out.append((at, s))
    at = max(at, e)
  if at < count:
    out.append((at, count))
  return out


def _split(ranges, step: int) -> list:
  return [(s, min(e, s + step)) for a, e in ranges for s in range(a, e, step)]


# ---------------------------------------------------------------------------
# map_spans.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Mapped:
  """``map_spans``'s answer: results [((start, stop), result)] in order covering
  [0, count); workers: the slots used (1 in-process); resumed: chunks read from state;
  where: 'in-process', 'processes' or the executor's class name; elsewhere: chunks
  computed by a caller's executor; rechecked: chunks of the resumed and the elsewhere
  re-run here and found equal; chunks: all chunks."""

  results: list
  workers: int
  resumed: int
  where: str
  elsewhere: int = 0
  rechecked: int = 0
  chunks: int = 0

  def describe(self) -> str:
    """One phrase: what came from outside the process and how much was re-checked
    ('' when every chunk was computed here or by this process's own workers)."""
    if not (self.resumed or self.elsewhere):
      return ''
    said = []
    if self.resumed:
      said.append(f'{self.resumed} of {self.chunks} chunks resumed from a state directory '
                  f'(each HMAC-SHA256 signed, key {executor_state.state_key_path()})')
    if self.elsewhere:
      said.append(f'{self.elsewhere} of {self.chunks} computed by {self.where}')
    return ', '.join(said) + f', {self.rechecked} of them re-run here and equal'


def map_spans(fn: Callable, shipment: Shipment, count: int, workers=None, *,
              identity: dict | None = None,
              chunks_per_worker: int = CHUNKS_PER_WORKER) -> Mapped:
  """``fn(obj, start, stop)`` over spans covering [0, count), obj = the shipment built
  once per process; see the module doc. ``identity``: what the results are (JSON), for a
  resumable run when ``workers.state_dir`` is set. Spans hold ceil(count /
  (chunks_per_worker * slots)) items (the last fewer). Spans read from the state or
  computed by ``workers.executor`` are re-run here on a random sample and compared
  exactly (``recheck``: one ValueError line on a difference)."""
  workers = as_workers(workers)
  state = None
  if identity is not None and workers.state_dir is not None:
    build = pickle.loads(shipment.blob)[0]
    state = executor_state.State(workers.next_state_dir(), {
        **identity, 'count': count, 'code_version': executor_state.code_version(build),
        'work_sha256': executor_state.work_sha256(shipment)})
  done = state.load() if state is not None else {}
  todo = _missing(done, count)
  slots = workers.slots()
  step = max(1, math.ceil(count / (chunks_per_worker * slots)))
  spans = _split(todo, step)
  results = dict(done)

  def finished(span, result):
    results[span] = result
    if state is not None:
      state.keep(span, result)

  where, used, elsewhere = 'in-process', 1, []
  if spans and workers.executor is not None:
    where, used = type(workers.executor).__name__, slots
    elsewhere = list(spans)
    _on_executor(workers.executor, fn, shipment, spans, finished)
  elif spans and workers.processes > 1:
    pool_pays = workers.min_pool_seconds == 0
    if not pool_pays:     # time one item here; the pool pays above min_pool_seconds
      s = spans[0][0]
      _obtain(shipment.key, shipment.blob)     # built here first: not part of the item
      t0 = time.perf_counter()
      finished((s, s + 1), _run(fn, shipment.key, shipment.blob, s, s + 1))
      rest = _missing(results, count)
      pool_pays = (time.perf_counter() - t0) * sum(e - a for a, e in rest) \
          >= workers.min_pool_seconds
      spans = _split(rest, step)
    if pool_pays and spans:
      where, used = 'processes', workers.processes
      with _SpawnWithoutMain():   # the workers start at the first submits
        pool = _local_pool(workers.processes, shipment)
        futures = {pool.submit(_run, fn, shipment.key, None, s, e): (s, e) for s, e in spans}
      _collect(futures, finished, lambda: _stop_local(pool))
      pool.shutdown(wait=True)
    else:
      _in_process(fn, shipment, spans, finished)
  else:
    _in_process(fn, shipment, spans, finished)
  rechecked = recheck(fn, shipment, results, list(done) + elsewhere, workers.recheck,
                      {**{s: f'the state directory {state.directory if state else ""}'
                          for s in done},
                       **{s: f'the executor {where}' for s in elsewhere}})
  return Mapped(results=sorted(results.items()), workers=used, resumed=len(done),
                where=where, elsewhere=len(elsewhere), rechecked=rechecked,
                chunks=len(results))


def recheck(fn, shipment, results: dict, outside: list, fraction: float, source: dict) -> int:
  """Re-runs a random sample of the ``outside`` spans here (at least ``RECHECK_MIN``, or
  ``fraction`` of them, up to all) and compares each result exactly with ``results``;
  returns how many were re-run, or raises one ValueError line on a difference. The
  sample comes from the operating system's randomness, so whoever wrote the chunks
  cannot know which are re-run."""
  if not outside:
    return 0
  k = min(len(outside), max(RECHECK_MIN, math.ceil(fraction * len(outside))))
  for span in sorted(random.SystemRandom().sample(sorted(outside), k)):
    here = _run(fn, shipment.key, shipment.blob, *span)
    if not same_result(here, results[span]):
      raise ValueError(f'chunk {list(span)} from {source[span]} differs from its re-run '
                       f'here ({_brief(results[span])} there, {_brief(here)} here); it is '
                       'not trusted: rerun without it (an empty state directory, or '
                       'in-process).')
  return k


def same_result(a, b) -> bool:
  """Exact equality of two chunk results (dicts, lists, numbers, arrays; a JSON round
  trip of either side: tuples as lists, floats exactly); NaN equals nothing."""
  if isinstance(a, dict) and isinstance(b, dict):
    return set(a) == set(b) and all(same_result(a[k], b[k]) for k in a)
  if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype.kind == b.dtype.kind and bool(np.all(a == b))
  if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
    return len(a) == len(b) and all(same_result(x, y) for x, y in zip(a, b))
  if isinstance(a, (bool, np.bool_)) or isinstance(b, (bool, np.bool_)):
    return isinstance(a, (bool, np.bool_)) and isinstance(b, (bool, np.bool_)) \
        and bool(a) == bool(b)
  if isinstance(a, (int, float, np.integer, np.floating)) and \
      isinstance(b, (int, float, np.integer, np.floating)):
    return bool(a == b)
  return type(a) is type(b) and a == b


def _brief(result) -> str:
  text = json.dumps(result, default=repr) if not isinstance(result, np.ndarray) else \
      np.array2string(result, threshold=4)
  text = ' '.join(text.split())
  return text if len(text) <= 80 else text[:77] + '...'


def _in_process(fn, shipment, spans, finished) -> None:
  for s, e in spans:
    finished((s, e), _run(fn, shipment.key, shipment.blob, s, e))


def _on_executor(executor, fn, shipment, spans, finished) -> None:
  client = _dask_client(executor)
  if client is not None:     # once per Dask worker: a broadcast future, resolved there
    blob = client.scatter(shipment.blob, broadcast=True, hash=True)
  else:
    blob = shipment.blob
  futures = {executor.submit(_run, fn, shipment.key, blob, s, e): (s, e) for s, e in spans}

  def stop():
    for f in futures:
      f.cancel()
  _collect(futures, finished, stop)


def _collect(futures: dict, finished, stop) -> None:
  """Each result as it comes (kept at once); on Ctrl-C or a failed chunk, ``stop``."""
  try:
    for f in cf.as_completed(futures):
      finished(futures[f], f.result())
  except BaseException:
    stop()
    raise
