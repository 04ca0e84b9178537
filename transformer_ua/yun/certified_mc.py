r"""Monte Carlo d_p(f, g) with every sample of g bracketed in arb balls.

An independent check of ``yun.certificate``: uniform points X of [0, 1)^{n x d}, g(X)
enclosed by ``Realized.apply_certified`` (mid, rad), so each sample's error lies in
[max(|f - mid| - rad, 0), |f - mid| + rad] entrywise. The 95% interval of d_p takes the
lower ends for its lower end and the upper ends for its upper end.

``enclose(g, x, workers)`` splits the points with ``transformer_ua.executor`` (each
worker builds the ball network once from the exact params; the loop is
``certify.apply_certified``'s).
"""

from __future__ import annotations

import math
import time

import numpy as np

from transformer_ua import executor as executor_lib
from transformer_ua.exact import ball
from transformer_ua.yun import certify

#: Two-sided 95% normal quantile for the Monte Carlo interval.
Z95 = 1.959963984540054


# ---------------------------------------------------------------------------
# Monte Carlo d_p(f, g) with every sample bracketed in arb balls.
# ---------------------------------------------------------------------------

def _mc_work(segments, params, positional, bits, x):
  """What a worker builds once (``executor.ship``): the ball network and the points."""
  with ball.precision(bits):
    net = ball.BallNetwork(segments, params, positional)
  return {'net': net, 'bits': bits, 'x': x}


def enclosure_chunk(work, start: int, stop: int):
  """(mid, rad) [stop - start, n, d] of the points x[start:stop] (the loop of
  ``certify.apply_certified`` on the worker's ball network)."""
  x = work['x'][start:stop]
  mid, rad = np.zeros(x.shape), np.zeros(x.shape)
  with ball.precision(work['bits']):
    for b in range(x.shape[0]):
      mid[b], rad[b] = ball.mid_rad(work['net'].forward(ball.points(x[b])))
  return mid, rad


def enclose(g, x, workers=1):
  """(mid, rad) as ``g.apply_certified(x)`` (the plan's bits), the points split by
  ``transformer_ua.executor`` (``workers``: processes, an Executor or a Workers; each
  worker builds the ball network once from the exact params)."""
  x = certify.check_points(g.source, x)
  bits = certify.resolve_bits(g, None, check_plan=True)
  shipment = executor_lib.ship(_mc_work, g.segments, g.params, g.positional, bits, x)
  out = executor_lib.map_spans(enclosure_chunk, shipment, len(x), workers)
  parts = [r for _, r in out.results]
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


def monte_carlo(net, g, points: int, seed, p: float, workers) -> dict:
  """``mc_interval`` at ``points`` uniform points of [0, 1)^{n x d}, timed (``workers``
  as ``enclose``'s; the record names the worker slots asked for)."""
  x = np.random.default_rng(seed).random((points, net.n, net.d))
  t0 = time.perf_counter()
  mid, rad = enclose(g, x, workers)
  seconds = time.perf_counter() - t0
  out = mc_interval(net.target(x), mid, rad, p)
  out.update(seconds=seconds, seconds_per_point=seconds / points,
             workers=executor_lib.as_workers(workers).slots())
  return out
