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
equivariant); Theorem 3 every cube (``ids.grid_classes``).

Workers: the cubes are split by ``transformer_ua.executor`` (``interiors_chunk`` over
spans of cube classes): in-process, a local pool started with 'spawn', or any
``concurrent.futures.Executor`` (Dask for a cluster); each worker builds the ball
network once from the exact params; ``state_dir`` keeps finished chunks to resume from.
Chunks read from a state or computed by a caller's executor are re-run here on a random
sample and compared exactly (``executor.recheck``; ``Workers(recheck=)`` raises the
fraction up to all): a certificate never rests on an unchecked result from outside the
process, and its line says how many came from outside and how many were re-run.
"""

from __future__ import annotations

import functools
import time
from fractions import Fraction

import numpy as np
from flint import arb

from transformer_ua import executor as executor_lib
from transformer_ua.exact import ball, tree_hash
from transformer_ua.yun import grid
from transformer_ua.yun.realization import plan as plan_lib
from transformer_ua.yun.realization import ids



def check_exact(g) -> None:
  """ValueError unless ``g`` is a realization with exact params and a source."""
  if getattr(g, 'dtype', None) != 'exact' or getattr(g, 'source', None) is None:
    raise ValueError("certified evaluation needs a realization built with dtype='exact' "
                     f"(got {getattr(g, 'dtype', type(g).__name__)}).")


def resolve_bits(g, bits, check_plan: bool, margin: float = plan_lib.DEFAULT_MARGIN) -> int:
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
  return grid.check_domain(grid.check_input(x, net.n, net.d))


def enclose_points(network, x, bits: int) -> tuple[np.ndarray, np.ndarray]:
  """(mid, rad) float64 [batch, n, d]: the exact value of ``network`` (an
  ``exact.ball.BallNetwork``, built at ``bits``) at each point of x [batch, n, d] lies in
  [mid - rad, mid + rad]."""
  mid, rad = np.zeros(x.shape), np.zeros(x.shape)
  with ball.precision(bits):
    for b in range(x.shape[0]):
      mid[b], rad[b] = ball.mid_rad(network.forward(ball.points(x[b])))
  return mid, rad


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
  return enclose_points(ball_network(g, bits), x, bits)


def cube_half_width(N: int, margin: Fraction) -> arb:
  """The ball [-h, h], h >= (1 - 2 margin) / (2N) (a float rounded up)."""
  h = Fraction(1 - 2 * Fraction(margin), 2 * N)
  up = float(h)
  if Fraction(up) < h:
    up = float(np.nextafter(up, np.inf))
  return arb(0, up)


def cube_box(k, N: int, margin: Fraction):
  """Balls containing the cube interior [(k + margin)/N, (k + 1 - margin)/N] entrywise, at
  the current arb precision: the centre (2k + 1) / (2N) plus ``cube_half_width`` (a sum
  widens the radius by ~2^-30 of itself; ``ball.interval``'s union of the two ends would
  widen the box by ~2^-28 delta, into the quantization ramps at margin 2^-28)."""
  half = cube_half_width(N, margin)
  return [[ball.to_arb(Fraction(2 * int(v) + 1, 2 * N)) + half for v in row] for row in k]


# -- the cube interiors, over the executor ------------------------------------

def interior_work(segments, params, positional, bits, resolution, margin, classes, targets,
                   stop_above):
  """What a worker builds once (``executor.ship``): the ball network and the cubes."""
  with ball.precision(bits):
    net = ball.BallNetwork(segments, params, positional)
  return {'net': net, 'bits': bits, 'resolution': resolution, 'margin': margin,
          'classes': classes, 'targets': targets, 'stop_above': stop_above}


def interiors_chunk(work, start: int, stop: int) -> dict:
  """max over cubes c in [start, stop) of the enclosure's |g - A_c| (first c on ties):
  {'worst': float (rounded up), 'index': c, 'cube': its grid indices [n][d]}. With
  ``stop_above`` it stops at the first cube above it."""
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
  return {'worst': worst, 'index': where, 'cube': np.asarray(classes[where]).tolist()}


def certify_boxes(segments, params, positional: bool, bits: int, classes, targets,
                  resolution: int, margin, *, tolerance: float, stop_early: bool = False,
                  workers=None, executor=None, state_dir=None) -> dict:
  """max over cubes c of sup |g - A_c| on the box prod_ij [(k_ij + m)/N, (k_ij + 1 - m)/N]
  (k = classes[c] [C, n, d], A_c = targets[c] [C, n, d], m = margin) in arb balls, over
  ``transformer_ua.executor`` (``workers=``: processes, an Executor or a Workers;
  ``executor=``; ``state_dir=``: resumable, unless ``stop_early``).

  Returns dict: max_abs_error, certified, tolerance, cubes, bits, worst_cube, workers,
  resumed_chunks, remote_chunks, rechecked_chunks, chunks, outside (``map_interiors``).
  """
  workers = executor_lib.as_workers(workers, executor, state_dir)
  margin = Fraction(margin)
  classes = np.asarray(classes)
  shipment = executor_lib.ship(interior_work, segments, params, positional, bits,
                               resolution, margin, classes, targets,
                               tolerance if stop_early else None)
  identity = None
  if workers.state_dir is not None and not stop_early:
    identity = {'what': 'cube interiors, max |g - g_bar| in arb balls',
                'params_sha256': tree_hash.tree_sha256(repr(segments), positional, params),
                'cubes_sha256': tree_hash.tree_sha256(classes, targets),
                'bits': int(bits), 'margin': str(margin), 'resolution': int(resolution)}
  return map_interiors(interiors_chunk, shipment, len(classes), workers, identity,
                       tolerance=tolerance, bits=bits)


def map_interiors(chunk, shipment, count: int, workers, identity, *, tolerance: float,
                  bits: int) -> dict:
  """``chunk`` (work, start, stop) -> {'worst', 'index', 'cube'} over [0, count) on the
  executor, reduced to the worst cube (first on ties): max_abs_error, certified,
  tolerance, cubes, bits, worst_cube, workers, resumed_chunks (read from the state),
  remote_chunks (computed by a caller's executor), rechecked_chunks (of those, re-run
  here and equal; a difference is refused by ``executor.recheck``), chunks, outside
  (``executor.Mapped.describe``: one phrase, '' when nothing came from outside)."""
  out = executor_lib.map_spans(chunk, shipment, count, workers, identity=identity)
  worst = max((r for _, r in out.results), key=lambda r: r['worst'])  # first on ties
  return {'max_abs_error': worst['worst'], 'certified': bool(worst['worst'] <= tolerance),
          'tolerance': tolerance, 'cubes': count, 'bits': bits,
          'worst_cube': worst['cube'], 'workers': out.workers,
          'resumed_chunks': out.resumed, 'remote_chunks': out.elsewhere,
          'rechecked_chunks': out.rechecked, 'chunks': out.chunks,
          'outside': out.describe()}


def certify_interiors(g, margin: float = plan_lib.DEFAULT_MARGIN, bits: int | None = None, *,
                      check_plan: bool = True, workers=None, executor=None,
                      state_dir: str | None = None, tolerance: float = 1e-6,
                      stop_early: bool = False) -> dict:
  """Certified max |g - g_bar| over every point of every cube interior.

  Each cube S_L (Theorem 2: one per multiset of cells, by permutation equivariance;
  Theorem 3: every cube) is shrunk by ``margin`` delta per side and pushed through g
  as one box in arb ball arithmetic (``exact.ball``); g_bar is the constant A_L (0 on
  the paper's bad set) there. No sampling.

  ``workers``: processes (default min(2, CPUs); in-process below
  ``executor.MIN_POOL_SECONDS`` of estimated work), a ``concurrent.futures.Executor``
  (Dask: ``Client.get_executor()``) or an ``executor.Workers``; ``executor``: the same
  as an Executor; ``state_dir``: keep each finished chunk there and resume from it.
  ``stop_early``: stop a chunk at its first cube above ``tolerance`` (for searches;
  max_abs_error is then a lower bound of the full maximum, still > tolerance; no state).

  Returns dict: max_abs_error (rigorous bound), certified (bound <= tolerance),
  tolerance, cubes, bits, seconds, margin, worst_cube (grid indices), lam, epsilon,
  workers, resumed_chunks, remote_chunks, rechecked_chunks, chunks, outside
  (``map_interiors``).
  """
  check_exact(g)
  margin = plan_lib.check_margin(margin)
  tolerance = plan_lib.check_tolerance(tolerance)
  bits = resolve_bits(g, bits, check_plan, margin)
  net = g.source
  t0 = time.perf_counter()
  classes = ids.grid_classes(net)
  targets = net.apply((classes + 0.5) / net.resolution)
  out = certify_boxes(g.segments, g.params, g.positional, bits, classes, targets,
                      net.resolution, Fraction(margin), tolerance=tolerance,
                      stop_early=stop_early, workers=workers, executor=executor,
                      state_dir=state_dir)
  return {**out, 'seconds': time.perf_counter() - t0, 'margin': margin,
          'lam': float(g.lam), 'epsilon': float(g.epsilon)}


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


def min_certifying_bits(g, margin: float = plan_lib.DEFAULT_MARGIN, tolerance: float = 1e-6,
                        low: int = ball.MIN_BITS, high: int | None = None,
                        workers=None) -> dict:
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
