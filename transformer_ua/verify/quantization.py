r"""Lemma 7 checks: the quantization network g_q on real and on exact rational inputs.

Real inputs (float64, the float network with paper-valued params). Samples mix
uniform draws from [-1/4, 5/4] (so a good share lies outside [0, 1)) with points at
and next to every bin edge k/N, k = 0..N (offsets 0, +-1 ulp, +-1e-15, +-1e-12,
+-1e-9, +-1e-6). The reference g_q^ent is computed exactly (``fractions.Fraction`` of
the float's exact value wherever x N is within 1e-6 of an integer). Tolerances:

    EDGE_TOL    a point within 2^-48 (~3.6e-15) of an edge may land in either
                adjacent bin (the float comparison t >= 0 after t = x - k delta);
    VALUE_RTOL  outputs equal the exact value k/N (or -N^(nd)) to 4 ulp relative.

Every other point must be quantized to exactly its bin: a miss is a violation.

Exact rational inputs: x = a / S_q for every integer a in [-S_q, 2 S_q], S_q = 2NQ,
run through the *scaled integer* network (core exact mode), in every coordinate
slot; the output must equal S_q g_q^ent(x) exactly, bin edges included.
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np

from transformer_ua import provenance
from transformer_ua.yun.grid import Grid, out_of_range_value
from transformer_ua.yun.stages import quantize

EDGE_TOL = 2.0 ** -48
VALUE_RTOL = 4 * np.finfo(np.float64).eps
EDGE_OFFSETS = (0.0, 1e-15, -1e-15, 1e-12, -1e-12, 1e-9, -1e-9, 1e-6, -1e-6)
#: Fine-grid factor Q of the exact rational check (inputs a / (2 N Q)).
EXACT_FACTOR = 4


def _exact_index(x: np.ndarray, resolution: int) -> np.ndarray:
  """g_q^ent index of float64 values: k for [k/N, (k+1)/N), -1 outside [0, 1); exact.

  Where x N is within 1e-6 of an integer, floor(x N) is computed on the float's exact
  value x = m 2^e (m, e integers, ``np.frexp``): floor(m N 2^e) = (m N) >> -e (an
  arithmetic shift floors), in Python ints (object arrays), vectorized.
  """
  inside = (x >= 0) & (x < 1)
  xn = np.where(inside, x, 0.0) * resolution
  k = np.floor(xn).astype(np.int64)
  close = inside & (np.abs(xn - np.rint(xn)) < 1e-6)
  frac, exp = np.frexp(x[close])                     # x = frac 2^exp, 0.5 <= |frac| < 1
  mant = (frac * 2.0 ** 53).astype(np.int64).astype(object)   # exact: 53-bit integer
  shift = (53 - exp).astype(object)                  # x = mant 2^-shift
  exact = np.where(shift >= 0, (mant * resolution) >> np.maximum(shift, 0),
                   (mant * resolution) << np.maximum(-shift, 0))
  k[close] = exact.astype(np.int64)
  return np.where(inside, k, -1)


def _samples(n, d, resolution, count, rng):
  half = count // 2
  uniform = rng.uniform(-0.25, 1.25, size=(half, n, d))
  edges = np.arange(resolution + 1) / resolution
  edge_vals = edges[:, None] + np.asarray(EDGE_OFFSETS)[None, :]
  ulp = np.concatenate([np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf)])
  pool = np.concatenate([edge_vals.reshape(-1), ulp])
  near = rng.choice(pool, size=(count - half, n, d))
  return np.concatenate([uniform, near])


def verify_quantization(grid: Grid, *, samples: int = 20000, seed: int = 0,
                        exact_factor: int = EXACT_FACTOR) -> dict:
  """Runs both Lemma 7 checks on g_q of ``grid`` (a ``yun.grid.Grid``); returns counts
  (violations must be 0) and tolerances."""
  d, n, N = grid.d, grid.n, grid.N
  t0 = time.time()
  g_q = quantize.Quantization.build(grid)
  rng = np.random.default_rng(seed)
  x = _samples(n, d, N, samples, rng)
  y = g_q.apply(x)
  expected = _exact_index(x, N)
  edges = np.arange(N + 1) / N
  dist = np.min(np.abs(x[..., None] - edges), axis=-1)
  near = dist <= EDGE_TOL
  out_val = float(out_of_range_value(grid))
  exact_val = np.where(expected < 0, -out_val, expected / N)
  got = g_q.to_indices(y)
  value_ok = np.abs(y - exact_val) <= VALUE_RTOL * np.maximum(1.0, np.abs(exact_val))
  # Near an edge: the neighbouring bin (or out of range at 0 and 1) is also accepted.
  k_edge = np.rint(x * N).astype(np.int64)
  below = np.where(k_edge - 1 < 0, -1, k_edge - 1)
  above = np.where(k_edge >= N, -1, k_edge)
  near_ok = (got == below) | (got == above)
  real_bad = np.where(near, ~near_ok, ~((got == expected) & value_ok))
  # Exact rational check on the scaled integer network.
  s_q = 2 * N * exact_factor
  vals = np.arange(-s_q, 2 * s_q + 1, dtype=np.int64)
  slots = n * d
  inputs = np.stack([np.roll(vals, -t) for t in range(slots)], axis=-1).reshape(len(vals), n, d)
  y_exact = g_q.quantize_exact(inputs, s_q)
  ref = np.vectorize(lambda a: int(quantize.quantize_reference(Fraction(int(a), s_q), grid)
                                   * s_q))(inputs)
  exact_bad = int(np.sum(y_exact != ref))
  return {
      'lemma7_real_inputs': int(np.sum(real_bad)),
      'lemma7_exact_rational': exact_bad,
      'real_samples': int(x.size), 'outside_unit_interval': int(np.sum(expected < 0)),
      'near_edge_entries': int(np.sum(near)),
      'near_edge_other_bin': int(np.sum(near & (got != expected))),
      'edge_tolerance': EDGE_TOL, 'value_rtol': VALUE_RTOL,
      'exact_inputs': int(inputs.size), 'exact_scale': s_q,
      'num_layers': g_q.depth(), 'num_params': g_q.num_params(),
      'seconds': round(time.time() - t0, 3), 'provenance': provenance.record(),
  }
