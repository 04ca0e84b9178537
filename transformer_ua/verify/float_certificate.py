r"""The float certificate checked from outside: the runtimes' own runs on stratified samples.

A float certificate (``yun.certify_lp(arithmetic='float64' | 'float32')``) proves, for the
network g as an IEEE runtime executes it,

    sup over cube interiors I of |fl(g) - g_bar| <= cert.interior_sup
    sup over the windows W    of |fl(g) - g_bar| <= cert.window_sup
    d_p(f, fl(g)) <= cert.total

This module runs g where people run it, JAX (``g.apply``) and onnxruntime (the file
``export_onnx`` writes), on samples exactly uniform on I and on W
(``certificate_mc.sample_interiors`` / ``sample_windows``), at least ``MIN_POINTS`` each,
and checks all three. Nothing here comes from the certificate's code: g_bar is recomputed
from f at the cell centres (tokens sorted by cell as the table's classes are, f evaluated,
rounded to the table's b fraction bits) and compared with both runtimes; d_p(f, fl(g)) is
the stratified estimate F mean_I + (1 - F) mean_W with its 95% interval (F = (1 - 2m)^{nd},
exact), and a bound is contradicted only if the whole interval lies above it.

Large networks are run in batches (``batch`` points at a time: the widest hidden layer of
the integer-id network at N = 43 has 81,354 units, [batch, n, width] floats per call).
"""

from __future__ import annotations

import os
import tempfile
import time
from fractions import Fraction

import numpy as np

from transformer_ua.networks.export_onnx import export_onnx
from transformer_ua.verify import certificate_mc
from transformer_ua.yun.grid import Grid

#: Fewest points per stratum.
MIN_POINTS = 10_000
#: Hidden floats per runtime call (batch x n x widest layer).
CALL_FLOATS = 2 ** 25


def g_bar_by_hand(net, x: np.ndarray) -> np.ndarray:
  """g_bar(X) without the network or its ids: each token's cell floor(N x), the cube's
  tokens sorted by cell index (as the table's multiset classes are; Theorem 3 keeps the
  order), f at the centres, rounded to the table's ``value_bits``."""
  N, d = net.resolution, net.d
  cells = np.minimum(np.floor(x * N).astype(np.int64), N - 1)
  if not net.positional:
    index = np.tensordot(cells, N ** np.arange(d), axes=([-1], [0]))
    order = np.argsort(index, axis=1, kind='stable')
    sorted_cells = np.take_along_axis(cells, order[..., None], axis=1)
    y_sorted = net.target((sorted_cells + 0.5) / N)
    y = np.empty_like(y_sorted)
    np.put_along_axis(y, order[..., None], y_sorted, axis=1)
  else:
    y = net.target((cells + 0.5) / N)
  b = net.value_bits
  return np.ldexp(np.round(np.ldexp(y, b)), -b)


def batched(fn, x: np.ndarray, g) -> np.ndarray:
  """fn(x) in batches of points whose hidden layers hold about ``CALL_FLOATS`` floats
  (batch x n x g's widest layer)."""
  batch = max(1, CALL_FLOATS // (g.n * g.max_width()))
  return np.concatenate([fn(x[i:i + batch]) for i in range(0, len(x), batch)])


def check(net, g, cert, *, points: int = MIN_POINTS, seed: int = 0,
          onnx_path: str | None = None) -> dict:
  """Runs fl(g) in JAX and onnxruntime on ``points`` samples of I and of W and compares
  with the certificate (module doc).

  Returns {'arithmetic', 'points', 'runtimes': {'jax' | 'onnxruntime': {'max_interior_gap',
  'max_window_gap' (max |fl(g) - g_bar|), 'dp' {'estimate', 'ci_low', 'ci_high'},
  'within': bool}}, 'jax_equals_onnxruntime', 'seconds'}; 'within' is True when both gaps
  are <= the certified sups and the d_p interval does not lie wholly above the total.
  Raises ValueError for an exact certificate (nothing float to check) or too few points.
  """
  if cert.arithmetic == 'exact':
    raise ValueError('check needs a float certificate (arithmetic float64 or float32).')
  if points < MIN_POINTS:
    raise ValueError(f'points={points}; at least {MIN_POINTS} per stratum.')
  t0 = time.perf_counter()
  rng = np.random.default_rng(seed)
  margin = Fraction(cert.margin)
  grid = Grid(net.d, net.n, net.resolution)
  xs = {'interior': certificate_mc.sample_interiors(rng, points, grid=grid, margin=margin),
        'window': certificate_mc.sample_windows(rng, points, grid=grid, margin=margin)}
  dt = np.dtype(cert.arithmetic)
  below_one = np.nextafter(dt.type(1), dt.type(0))      # inputs of that format, still < 1
  xs = {k: np.minimum(v.astype(dt), below_one).astype(np.float64) for k, v in xs.items()}
  w_in, w_win = certificate_mc.weights(margin, net.d, net.n)
  with tempfile.TemporaryDirectory() as tmp:
    path = onnx_path or os.path.join(tmp, 'g.onnx')
    if onnx_path is None or not os.path.exists(path):
      export_onnx(g, path)
    import onnxruntime as ort  # pylint: disable=import-outside-toplevel
    sess = ort.InferenceSession(path)
    runners = {'jax': g.apply,
               'onnxruntime': lambda x: sess.run(None, {'X': x.astype(dt)})[0].astype(np.float64)}
    outs = {name: {k: batched(fn, x, g) for k, x in xs.items()}
            for name, fn in runners.items()}
  p = float(cert.p)
  result = {'arithmetic': cert.arithmetic, 'points': {k: len(v) for k, v in xs.items()},
            'runtimes': {}}
  for name, out in outs.items():
    gaps, h = {}, {}
    for k, x in xs.items():
      gaps[k] = float(np.max(np.abs(out[k] - g_bar_by_hand(net, x))))
      h[k] = np.sum(np.abs(net.target(x) - out[k]) ** p, axis=(1, 2))
    dp = certificate_mc._stratified(h['interior'], h['window'], w_in, w_win, p)  # pylint: disable=protected-access
    within = (gaps['interior'] <= cert.interior_sup and gaps['window'] <= cert.window_sup
              and dp['ci_low'] <= cert.total)
    result['runtimes'][name] = {'max_interior_gap': gaps['interior'],
                                'max_window_gap': gaps['window'],
                                'dp': {k: dp[k] for k in ('estimate', 'ci_low', 'ci_high')},
                                'within': bool(within)}
  result['jax_equals_onnxruntime'] = bool(all(
      np.array_equal(outs['jax'][k], outs['onnxruntime'][k]) for k in xs))
  result['seconds'] = time.perf_counter() - t0
  return result
