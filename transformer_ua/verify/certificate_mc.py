r"""An independent, stratified Monte Carlo of d_p(f, g) and of the certificate's terms.

``yun.certify_lp`` proves d_p(f, g) <= d_p(f, f_bar) + d_p(f_bar, g_bar) + d_p(g_bar, g)
with the last term split over two regions (margin m, a fraction of delta = 1/N):

    I = the cube interiors: every entry x_ji in some [k + m, k + 1 - m] / N,
        volume F = (1 - 2m)^{nd}
    W = the windows, [0, 1]^{nd} minus I (where Lemma 6's ramps act), volume 1 - F

This module estimates each sampleable term, with g evaluated by ``transformer_ua.oracle``
(mpmath, the formula as written; no code shared with ``exact.ball``, which the
certificate uses), f by the target, f_bar by Lemma 4's table (``net.f_bar``) and g_bar
by the approximator (``net.apply``).

Sampling, exactly uniform on each region (so each stratum is hit as often as asked,
where a uniform sample of [0, 1]^{nd} lands in W with probability 1 - F only):

    I: every entry independently, k uniform in {0, ..., N - 1}, u uniform in [0, 1):
         x = (k + m + (1 - 2m) u) / N
    W: the first entry (row-major order) lying in an edge strip is entry e with
       probability (1 - 2m)^e 2m / (1 - F) (e = 0, ..., nd - 1); entries before it are
       drawn as in I, entry e as (k + s) / N with s uniform in [0, m) u [1 - m, 1),
       entries after it uniform in [0, 1).

Estimates, for h(X) = sum_ji |a(X)_ji - b(X)_ji|^p (a, b two of f, f_bar, g_bar, g) and
k_I, k_W points per stratum with sample means h_I, h_W and variances s_I^2, s_W^2:

    int_I h ~ F h_I,   int_W h ~ (1 - F) h_W,   int h ~ F h_I + (1 - F) h_W,
    se^2 = F^2 s_I^2 / k_I + (1 - F)^2 s_W^2 / k_W,   95%: estimate +- 1.96 se

clipped at 0, then the 1/p root for the d_p's. F and 1 - F are exact rationals from
the certificate's margin.

Compared with the certificate, term by term (``compare``):

    d_p(f, f_bar)        <= terms['f_fbar']
    d_p(f_bar, g_bar)    <= terms['fbar_gbar']
    int_I |g_bar - g|^p  <= details['gbar_g']['interior_part']   (p-th powers)
    int_W |g_bar - g|^p  <= details['gbar_g']['window_part']
    d_p(g_bar, g)        <= terms['gbar_g']
    d_p(f, g)            <= total

up to the float64 resolution of the sampled values: f, f_bar, g_bar and g are float64
(f_bar evaluates the target at each point's own token order, the certificate's table at
its class's sorted order, a few ulps apart; g is the oracle's value rounded), so each
entry is off by at most ~ 2^-50 V, V = max |value| sampled, and by Minkowski's
inequality a sampled d_p by at most

    s = (n d)^{1/p} 2^-50 V          (the row's 'slack'),

so a row is 'below' when ci_low <= bound + s (d_p's) or ci_low <= (bound^{1/p} + s)^p
(p-th powers). Without it a bound of exactly 0 (d_p(f_bar, g_bar) of a tie-complete
map) would read as violated by 1e-17 of float noise.

Parallelism: g is evaluated on spans of the points of both strata through
``executor.map_spans``: the shipment (g's exact params and the points) goes once to each
worker, which builds its ``oracle.MpNetwork`` once and evaluates the spans it is given
(``workers=``: an int of local processes, a ``concurrent.futures.Executor`` or an
``executor.Workers``; ``executor=`` e.g. Dask's ``Client.get_executor()``). The values do
not depend on where a span runs, so the estimates do not either.

Shapes: points [batch, n, d] token-major; values alike.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np

from transformer_ua import executor as executor_lib
from transformer_ua import oracle
from transformer_ua.yun.grid import Grid

#: Two-sided 95% normal quantile.
Z95 = 1.959963984540054
#: Relative float64 resolution of a sampled value (a few ulps: 2^-50).
VALUE_RESOLUTION = 2.0 ** -50
#: Smallest number of points per stratum ``certificate_mc`` accepts by default.
MIN_POINTS = 1000


def _check_count(name, v, minimum):
  if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
    raise ValueError(f'{name}={v!r}; it must be an integer >= {minimum}.')
  return int(v)


def _check_margin(margin) -> Fraction:
  m = Fraction(margin)
  if not 0 < m < Fraction(1, 2):
    raise ValueError(f'margin={float(m):g}; a cube-interior margin is a fraction of delta '
                     'in (0, 1/2).')
  return m


def weights(margin, d: int, n: int) -> tuple[Fraction, Fraction]:
  """(F, 1 - F): the exact volumes of the interiors and of the windows."""
  interior = (1 - 2 * _check_margin(margin)) ** (d * n)
  return interior, 1 - interior


def sample_interiors(rng, count: int, *, grid: Grid, margin) -> np.ndarray:
  """``count`` points uniform on the cube interiors I [count, n, d] of ``grid`` (a
  ``yun.grid.Grid``; module doc)."""
  d, n, resolution = grid.d, grid.n, grid.N
  m = float(_check_margin(margin))
  k = rng.integers(0, resolution, (count, n, d))
  return (k + m + (1 - 2 * m) * rng.random((count, n, d))) / resolution


def sample_windows(rng, count: int, *, grid: Grid, margin) -> np.ndarray:
  """``count`` points uniform on the windows W [count, n, d] of ``grid`` (a
  ``yun.grid.Grid``; module doc)."""
  d, n, resolution = grid.d, grid.n, grid.N
  m = _check_margin(margin)
  nd = d * n
  stay = 1 - 2 * m
  first = np.asarray([float(stay ** e * 2 * m / (1 - stay ** nd)) for e in range(nd)])
  e = rng.choice(nd, size=count, p=first / first.sum())
  inner = sample_interiors(rng, count, grid=grid, margin=m).reshape(count, nd)
  anywhere = rng.random((count, nd))
  k = rng.integers(0, resolution, count)
  v = float(m) * rng.random(count)
  s = np.where(rng.random(count) < 0.5, v, 1 - float(m) + v)
  edge = (k + s) / resolution
  pos = np.arange(nd)[None, :]
  x = np.where(pos < e[:, None], inner, anywhere)
  x[np.arange(count), e] = edge
  return np.minimum(x, np.nextafter(1.0, 0.0)).reshape(count, n, d)


def _stratified(h_in, h_win, w_in: Fraction, w_win: Fraction, root: float | None) -> dict:
  """{'estimate', 'ci_low', 'ci_high', 'interior', 'window'} of int h (root None) or of
  (int h)^{1/root}; 'interior'/'window' are the strata's shares of int h."""
  parts = {}
  var = 0.0
  for key, h, w in (('interior', h_in, w_in), ('window', h_win, w_win)):
    h = np.asarray(h, np.float64)
    mean = float(np.mean(h)) if h.size else 0.0
    parts[key] = float(w) * mean
    if h.size > 1:
      var += float(w) ** 2 * float(np.var(h, ddof=1)) / h.size
    elif float(w) > 0:
      var = math.inf
  est = parts['interior'] + parts['window']
  se = math.sqrt(var)
  lo, hi = max(est - Z95 * se, 0.0), est + Z95 * se
  f = (lambda t: t) if root is None else (lambda t: t ** (1 / root))  # noqa: E731
  return {'estimate': f(est), 'ci_low': f(lo), 'ci_high': f(hi), **parts}


def _per_point(a, b, p: float) -> np.ndarray:
  return np.sum(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** p, axis=(1, 2))


def _oracle_and_points(segments, params: dict, positional: bool, prec: int, x):
  """What a worker builds once: (the mpmath network, the points [batch, n, d])."""
  return oracle.MpNetwork(segments, params, positional, prec), x


def _evaluate_span(built, start: int, stop: int) -> np.ndarray:
  """g(X) [stop - start, n, d] (float64) on the points start..stop - 1."""
  network, x = built
  return network.values(x[start:stop])


def evaluate_g(g, x, prec: int, workers=None, executor=None) -> tuple[np.ndarray, str, int]:
  """(g(X) [batch, n, d] by the mpmath oracle, where it ran, the slots used): spans of X
  through ``executor.map_spans`` (``workers`` / ``executor`` as ``executor.as_workers``
  takes them)."""
  x = np.asarray(x, np.float64)
  if not len(x):
    return np.zeros_like(x), 'in-process', 1
  shipment = executor_lib.ship(_oracle_and_points, g.segments, g.params, g.positional, prec, x)
  mapped = executor_lib.map_spans(_evaluate_span, shipment, len(x),
                                  executor_lib.as_workers(workers, executor))
  return np.concatenate([values for _, values in mapped.results]), mapped.where, mapped.workers


def certificate_mc(net, g, cert, *, points: int = MIN_POINTS, window_points: int | None = None,
                   seed=0, prec: int | None = None, workers=None,
                   executor=None, min_points: int = MIN_POINTS) -> dict:
  """The stratified Monte Carlo of the certificate's terms (module doc).

  Args:
    net: the approximator (target, f_bar, apply = g_bar, d, n, resolution).
    g: its exact realization (segments, params, positional), as certified.
    cert: the ``yun.Certificate`` of (net, g): its p and margin define the strata.
    points, window_points: points in the interiors and in the windows (default
      ``points`` both), each >= ``min_points``.
    seed: numpy seed.
    prec: the oracle's mpmath precision (default 2 x the certificate's bits).
    workers, executor: where the oracle's spans run (``executor.as_workers``: None the
      default local pool, used only when the work pays for it; 1 in-process; an int of
      processes; an Executor or ``executor.Workers``).
  Returns:
    {'p', 'weights' {'interior', 'window'} (exact Fractions), 'points' {'interior',
    'window'}, 'terms' {'f_fbar', 'fbar_gbar', 'gbar_g', 'total' (d_p's), 'gbar_g_interior',
    'gbar_g_window' (p-th power integrals over I and W)}: each {'estimate', 'ci_low',
    'ci_high', 'interior', 'window'}, 'max_window_gap' (max |g - g_bar| seen in W),
    'max_interior_gap', 'value_scale' (V: max |f|, |f_bar|, |g_bar|, |g| sampled),
    'slack' (s = (n d)^{1/p} 2^-50 V, the float64 resolution of a d_p; module doc),
    'prec', 'seconds', 'where' (where g was evaluated:
    'in-process', 'processes' or the executor's class), 'workers' (slots used)}.
  """
  t0 = time.perf_counter()
  min_points = _check_count('min_points', min_points, 2)
  points = _check_count('points', points, min_points)
  window_points = points if window_points is None else _check_count(
      'window_points', window_points, min_points)
  if g.source is not net:
    raise ValueError('g is not a realization of this net (g.source is another approximator).')
  p = float(cert.p)
  prec = 2 * int(cert.bits) if prec is None else oracle.check_prec(prec)
  margin = Fraction(cert.margin)
  w_in, w_win = weights(margin, net.d, net.n)
  rng = np.random.default_rng(seed)
  shape = {'grid': Grid(net.d, net.n, net.resolution), 'margin': margin}
  xs = {'interior': sample_interiors(rng, points, **shape),
        'window': sample_windows(rng, window_points, **shape)}
  g_both, where, used = evaluate_g(g, np.concatenate([xs['interior'], xs['window']]), prec,
                                  workers, executor)
  g_values = {'interior': g_both[:points], 'window': g_both[points:]}
  h = {}
  gaps = {}
  scale = 0.0
  for key, x in xs.items():
    f, f_bar, g_bar = net.target(x), net.f_bar(x), net.apply(x)
    gx = g_values[key]
    scale = max([scale] + [float(np.max(np.abs(v))) for v in (f, f_bar, g_bar, gx)])
    h[key] = {'f_fbar': _per_point(f, f_bar, p), 'fbar_gbar': _per_point(f_bar, g_bar, p),
              'gbar_g': _per_point(g_bar, gx, p), 'total': _per_point(f, gx, p)}
    gaps[key] = float(np.max(np.abs(gx - g_bar)))
  terms = {name: _stratified(h['interior'][name], h['window'][name], w_in, w_win, p)
           for name in ('f_fbar', 'fbar_gbar', 'gbar_g', 'total')}
  terms['gbar_g_interior'] = _stratified(h['interior']['gbar_g'], [], w_in, Fraction(0), None)
  terms['gbar_g_window'] = _stratified([], h['window']['gbar_g'], Fraction(0), w_win, None)
  return {'p': p, 'weights': {'interior': w_in, 'window': w_win},
          'points': {'interior': points, 'window': window_points}, 'terms': terms,
          'max_interior_gap': gaps['interior'], 'max_window_gap': gaps['window'],
          'value_scale': scale,
          'slack': (net.n * net.d) ** (1 / p) * VALUE_RESOLUTION * scale,
          'prec': prec, 'seconds': time.perf_counter() - t0, 'where': where,
          'workers': used}


def compare(mc: dict, cert) -> list[dict]:
  """Each sampled term against the certificate's bound: rows {'term', 'bound', 'estimate',
  'ci_low', 'ci_high', 'slack', 'below'} where 'below' is ci_low <= the bound plus the
  float64 slack s (module doc; a violation would put the whole 95% interval above the
  proved bound by more than float noise)."""
  g3 = cert.details['gbar_g']
  bounds = {'f_fbar': cert.terms['f_fbar'], 'fbar_gbar': cert.terms['fbar_gbar'],
            'gbar_g_interior': g3['interior_part'], 'gbar_g_window': g3['window_part'],
            'gbar_g': cert.terms['gbar_g'], 'total': cert.total}
  p, slack = float(mc['p']), float(mc['slack'])
  rows = []
  for name, bound in bounds.items():
    t = mc['terms'][name]
    power = name in ('gbar_g_interior', 'gbar_g_window')
    allowed = (float(bound) ** (1 / p) + slack) ** p if power else float(bound) + slack
    rows.append({'term': name, 'bound': float(bound), 'estimate': t['estimate'],
                 'ci_low': t['ci_low'], 'ci_high': t['ci_high'], 'slack': slack,
                 'below': t['ci_low'] <= allowed})
  return rows
