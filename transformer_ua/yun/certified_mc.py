r"""Monte Carlo d_p(f, g) with every sample of g bracketed in arb balls.

An independent check of ``yun.certificate``: uniform points X of [0, 1)^{n x d}, g(X)
enclosed by ``Realized.apply_certified`` (mid, rad), so each sample's error lies in
[max(|f - mid| - rad, 0), |f - mid| + rad] entrywise. The 95% interval of d_p takes the
lower ends for its lower end and the upper ends for its upper end.

``enclose(g, x, workers)`` splits the points over spawned processes (each builds the
ball network once from the exact params; the loop is ``certify.apply_certified``'s).
"""

from __future__ import annotations

import math
import multiprocessing
import time

import numpy as np

from transformer_ua.exact import ball
from transformer_ua.yun import certify

#: Two-sided 95% normal quantile for the Monte Carlo interval.
Z95 = 1.959963984540054
#: Monte Carlo chunks per worker (load balance against per-task overhead).
MC_CHUNKS_PER_WORKER = 4


# ---------------------------------------------------------------------------
# Monte Carlo d_p(f, g) with every sample bracketed in arb balls.
# ---------------------------------------------------------------------------

_MC = {}


def _mc_init(segments, params, positional, bits):
  import signal  # pylint: disable=import-outside-toplevel
  signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's
  with ball.precision(bits):
    _MC['net'] = ball.BallNetwork(segments, params, positional)
  _MC['bits'] = bits


def _mc_chunk(x):
  """The loop of ``certify.apply_certified`` on the worker's ball network."""
  mid, rad = np.zeros(x.shape), np.zeros(x.shape)
  with ball.precision(_MC['bits']):
    for b in range(x.shape[0]):
      mid[b], rad[b] = ball.mid_rad(_MC['net'].forward(ball.points(x[b])))
  return mid, rad


def enclose(g, x, workers: int = 1):
  """(mid, rad) as ``g.apply_certified(x)`` (the plan's bits), split over ``workers``
  spawned processes when > 1 (each builds the ball network once from the exact params)."""
  if workers <= 1 or len(x) < 2 * workers:
    return g.apply_certified(x)
  x = certify.check_points(g.source, x)
  bits = certify.resolve_bits(g, None, check_plan=True)
  chunks = np.array_split(x, MC_CHUNKS_PER_WORKER * workers)
  ctx = multiprocessing.get_context('spawn')
  with certify.workers_skip_main():
    pool = ctx.Pool(workers, initializer=_mc_init,
                    initargs=(g.segments, g.params, g.positional, bits))
  with pool:
    parts = pool.map(_mc_chunk, chunks)
  return np.concatenate([m for m, _ in parts]), np.concatenate([r for _, r in parts])


def mc_interval(f_values, mid, rad, p: float) -> dict:
  """Monte Carlo d_p(f, g) from samples where g in [mid - rad, mid + rad] entrywise.

  Per sample e = sum_ji |f - g|^p is bracketed by e_lo (|f - mid| - rad clipped at 0)
  and e_hi (|f - mid| + rad); d_p = (E e)^{1/p}. Returns {'estimate' (from |f - mid|),
  'ci_low', 'ci_high' (95%: mean(e_lo) - z se, mean(e_hi) + z se, then the root),
  'points', 'max_rad'}.
  """
  diff = np.abs(np.asarray(f_values, np.float64) - mid)
  axes = tuple(range(1, diff.ndim))
  e_mid = np.sum(diff ** p, axis=axes)
  e_lo = np.sum(np.maximum(diff - rad, 0) ** p, axis=axes)
  e_hi = np.sum((diff + rad) ** p, axis=axes)
  k = len(e_mid)
  se = lambda e: float(np.std(e, ddof=1) / math.sqrt(k)) if k > 1 else math.inf  # noqa: E731
  lo = max(float(np.mean(e_lo)) - Z95 * se(e_lo), 0.0)
  hi = float(np.mean(e_hi)) + Z95 * se(e_hi)
  return {'estimate': float(np.mean(e_mid)) ** (1 / p), 'ci_low': lo ** (1 / p),
          'ci_high': hi ** (1 / p), 'points': int(k), 'max_rad': float(np.max(rad))}


def monte_carlo(net, g, points: int, seed, p: float, workers: int) -> dict:
  """``mc_interval`` at ``points`` uniform points of [0, 1)^{n x d}, timed."""
  x = np.random.default_rng(seed).random((points, net.n, net.d))
  t0 = time.perf_counter()
  mid, rad = enclose(g, x, workers)
  seconds = time.perf_counter() - t0
  out = mc_interval(net.target(x), mid, rad, p)
  out.update(seconds=seconds, seconds_per_point=seconds / points, workers=workers)
  return out
