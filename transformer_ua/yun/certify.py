r"""Certified evaluation of a realized g (Lemma 6, exact params) in arb ball arithmetic.

A realization built with ``dtype='exact'`` is a real-number network: its params are the
construction's rationals. ``exact.ball`` encloses its output on a point or on a box (a
ball per input entry), so every number here is a rigorous bound, not a sample:

    apply_certified(g, X)      (mid, rad): g(X) in [mid - rad, mid + rad] entrywise
    certify_interiors(g, m)    max over cubes S_L of sup |g - g_bar| on S_L shrunk by
                               m delta per side (g_bar = A_L there, a constant):
                               the box prod_ij [(k_ij + m)/N, (k_ij + 1 - m)/N]
                               pushed through g once per cube
    certify_domain_sup(g)      sup |g| over the whole unit cube (one box [0, 1]^{n x d})

Cubes: Theorem 2 needs one cube per multiset of cells (g and g_bar are permutation
equivariant); Theorem 3 every cube (``plan.grid_classes``).

Workers: the cubes are split over a process pool started with 'spawn' (never a fork
of a process running JAX); each worker rebuilds the ball network once from the exact
params and ignores SIGINT, so Ctrl-C reaches only the parent, which stops the pool.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import signal
import sys
import time
from fractions import Fraction

import numpy as np

from transformer_ua.exact import ball
from transformer_ua.yun import common, plan as plan_lib

#: Default cube-interior margin (fraction of delta kept off each cell edge).
DEFAULT_MARGIN = plan_lib.DEFAULT_MARGIN
#: Below this many cubes the work runs in-process: a spawned worker re-imports the
#: package and rebuilds the ball network, seconds that only large grids repay (measured
#: in results/benchmarks/certify_scaling: on 2 loaded cores the pool lost at 220 cubes).
MIN_CUBES_FOR_POOL = 512
#: Chunks per worker (load balance against per-task overhead).
CHUNKS_PER_WORKER = 8


def check_exact(g) -> None:
  """ValueError unless ``g`` is a realization with exact params and a source."""
  if getattr(g, 'dtype', None) != 'exact' or getattr(g, 'source', None) is None:
    raise ValueError("certified evaluation needs a realization built with dtype='exact' "
                     f"(got {getattr(g, 'dtype', type(g).__name__)}).")


def resolve_bits(g, bits, check_plan: bool, margin: float = DEFAULT_MARGIN) -> int:
  """The working precision: the plan's for g's (lam, epsilon) by default; an explicit
  ``bits`` below it is refused unless ``check_plan`` is False."""
  need = plan_lib.plan_realization(g.source, margin=margin).bits_for(epsilon=g.epsilon,
                                                                     lam=g.lam)
  if bits is None:
    return need
  bits = ball.check_bits(bits)
  if check_plan and bits < need:
    raise ValueError(f'bits={bits} is below the {need} bits the plan needs for this '
                     f'realization (lam={float(g.lam):g}, epsilon={float(g.epsilon):g}).')
  return bits


@functools.lru_cache(maxsize=8)
def ball_network(g, bits: int) -> ball.BallNetwork:
  """A realization's exact params as an ``exact.ball.BallNetwork`` at ``bits``."""
  with ball.precision(bits):
    return ball.BallNetwork(g.segments, g.params, g.positional)


def check_points(net, x) -> np.ndarray:
  """X as float64 [batch, n, d] in [0, 1)^{n x d}, or ValueError saying what is wrong."""
  return common.check_domain(common.check_input(x, net.n, net.d))


def apply_certified(g, x, bits: int | None = None, check_plan: bool = True):
  """(mid, rad) float64 [batch, n, d]: the exact real g(X) lies in [mid - rad, mid + rad].

  Args:
    g: a realization with dtype 'exact'.
    x: X [batch, n, d] in [0, 1)^{n x d} (the domain the plan covers).
    bits: arb working precision (default and minimum: the plan's for g's lam, epsilon;
      ``check_plan=False`` allows fewer, e.g. to search for the smallest that certifies).
      ``certificate.certify_lp(bits=)`` takes fewer without asking: its answer is one
      total, still a proof at any precision and visibly looser, while an enclosure here
      below the plan is a point value too wide to use.
  """
  check_exact(g)
  x = check_points(g.source, x)
  bits = resolve_bits(g, bits, check_plan)
  bn = ball_network(g, bits)
  mid, rad = np.zeros(x.shape), np.zeros(x.shape)
  with ball.precision(bits):
    for b in range(x.shape[0]):
      mid[b], rad[b] = ball.mid_rad(bn.forward(ball.points(x[b])))
  return mid, rad


def cube_box(k, N: int, margin: Fraction):
  """Balls containing the cube interior [(k + margin)/N, (k + 1 - margin)/N] entrywise."""
  return [[ball.interval(Fraction(int(v)) / N + margin / N, Fraction(int(v) + 1) / N - margin / N)
           for v in row] for row in k]


# -- the pool ----------------------------------------------------------------

_WORKER = {}


def _init_worker(segments, params, positional, bits, work):
  signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
  with ball.precision(bits):
    _WORKER['net'] = ball.BallNetwork(segments, params, positional)
  _WORKER.update(work, bits=bits)


def _chunk(work, span):
  start, stop = span
  bn, bits, N, margin = work['net'], work['bits'], work['resolution'], work['margin']
  classes, targets, stop_above = work['classes'], work['targets'], work['stop_above']
  worst, where = 0.0, None
  with ball.precision(bits):
    for c in range(start, stop):
      out = bn.forward(cube_box(classes[c], N, margin))
      err = ball.abs_error_bound(out, targets[c])
      if err > worst or where is None:
        worst, where = err, c
      if stop_above is not None and worst > stop_above:
        break
  return worst, where


def _pool_chunk(span):
  return _chunk(_WORKER, span)


@contextlib.contextmanager
def workers_skip_main():
  """Starts spawned workers without re-running ``__main__``.

  A spawned child normally imports the parent's main script (to find functions defined
  there); the workers here need only ``transformer_ua``, and a user's script without
  an ``if __name__ == '__main__'`` guard would otherwise run again in every worker.
  While the pool starts, ``__main__`` shows no file or spec to the spawn machinery.
  """
  main = sys.modules.get('__main__')
  saved = {k: main.__dict__[k] for k in ('__file__', '__spec__') if k in main.__dict__} \
      if main is not None else {}
  try:
    for k in saved:
      if k == '__file__':
        del main.__dict__[k]
      else:
        main.__dict__[k] = None
    yield
  finally:
    if main is not None:
      main.__dict__.update(saved)


def certify_interiors(g, margin: float = DEFAULT_MARGIN, bits: int | None = None, *,
                      check_plan: bool = True, workers: int | None = None,
                      tolerance: float = 1e-6, stop_early: bool = False) -> dict:
  """Certified max |g - g_bar| over every point of every cube interior.

  Each cube S_L (Theorem 2: one per multiset of cells, by permutation equivariance;
  Theorem 3: every cube) is shrunk by ``margin`` delta per side and pushed through g
  as one box in arb ball arithmetic (``exact.ball``); g_bar is the constant A_L (0 on
  the paper's bad set) there. No sampling.

  ``stop_early``: stop a chunk at its first cube above ``tolerance`` (for searches;
  max_abs_error is then a lower bound of the full maximum, still > tolerance).

  Returns dict: max_abs_error (rigorous bound), certified (bound <= tolerance),
  tolerance, cubes, bits, seconds, margin, worst_cube (grid indices), lam, epsilon,
  workers.
  """
  check_exact(g)
  margin = plan_lib.check_margin(margin)
  tolerance = plan_lib.check_tolerance(tolerance)
  bits = resolve_bits(g, bits, check_plan, margin)
  net = g.source
  t0 = time.perf_counter()
  classes = plan_lib.grid_classes(net)
  targets = net.apply((classes + 0.5) / net.resolution)
  work = {'resolution': net.resolution, 'margin': Fraction(margin), 'classes': classes,
          'targets': targets, 'stop_above': tolerance if stop_early else None}
  workers = workers or min(2, os.cpu_count() or 1)
  c = len(classes)
  if workers > 1 and c >= MIN_CUBES_FOR_POOL:
    step = max(1, -(-c // (CHUNKS_PER_WORKER * workers)))
    chunks = [(s, min(c, s + step)) for s in range(0, c, step)]
    ctx = multiprocessing.get_context('spawn')
    with workers_skip_main():
      pool = ctx.Pool(workers, initializer=_init_worker,
                      initargs=(g.segments, g.params, g.positional, bits, work))
    with pool:
      results = pool.map(_pool_chunk, chunks)
  else:
    workers = 1
    results = [_chunk({**work, 'net': ball_network(g, bits), 'bits': bits}, (0, c))]
  worst, where = max(results, key=lambda r: r[0])
  return {'max_abs_error': worst, 'certified': bool(worst <= tolerance),
          'tolerance': tolerance, 'cubes': c, 'bits': bits,
          'seconds': time.perf_counter() - t0, 'margin': margin,
          'worst_cube': classes[where].tolist(), 'lam': float(g.lam),
          'epsilon': float(g.epsilon), 'workers': workers}


def certify_domain_sup(g, bits: int | None = None) -> dict:
  """A certified upper bound on sup |g(X)| entrywise over the whole unit cube.

  One box, every entry [0, 1], pushed through g in arb balls (``exact.ball``: Phi
  units that the box straddles are evaluated as one piecewise-linear function of
  their pre-activation). Rigorous but coarse: it is the bound used in the ramp
  windows of a network without the output clamp.

  Returns dict: sup_abs (float, rounded up; inf if the enclosure is unbounded), bits,
  seconds.
  """
  check_exact(g)
  net = g.source
  bits = resolve_bits(g, bits, check_plan=False)
  t0 = time.perf_counter()
  bn = ball_network(g, bits)
  box = [[ball.interval(0, 1) for _ in range(net.d)] for _ in range(net.n)]
  with ball.precision(bits):
    out = bn.forward(box)
    sup = ball.abs_error_bound(out, np.zeros((net.n, net.d)))
  return {'sup_abs': sup, 'bits': bits, 'seconds': time.perf_counter() - t0}


def min_certifying_bits(g, margin: float = DEFAULT_MARGIN, tolerance: float = 1e-6,
                        low: int = ball.MIN_BITS, high: int | None = None,
                        workers: int | None = None) -> dict:
  """Smallest working precision at which ``certify_interiors`` still certifies, by
  bisection on [low, high] (default high: the plan's bits; certification is monotone
  in practice, not by proof, so the answer is the bisection's). Returns
  {'bits': b or None, 'tried': {bits: certified}}."""
  high = high or plan_lib.plan_realization(g.source, tolerance, margin).bits_for(
      g.epsilon, g.lam)
  tried = {}

  def ok(b):
    if b not in tried:
      tried[b] = certify_interiors(g, margin, b, check_plan=False, workers=workers,
                                   tolerance=tolerance, stop_early=True)['certified']
    return tried[b]

  if not ok(high):
    return {'bits': None, 'tried': tried}
  lo, hi = low, high        # invariant: ok(hi); not ok(b) for b < lo tested
  while lo < hi:
    mid = (lo + hi) // 2
    if ok(mid):
      hi = mid
    else:
      lo = mid + 1
  return {'bits': hi, 'tried': tried}
