r"""Lemma 8's closed forms and its (segments, params) builders.

Yun et al. 2020, Appendix E.3; the construction is written out in ``yun.stages.contextual``.
Everything here is a pure function of (d, n, N) and the exact scale S: the interval
[t_l, t_r], Lemma 10's bounds, the sweep ids l = 0, delta, ..., the final scale
delta^(-(n+1)d), the proven bit bound, and the params pytree ``modules.Network`` runs.

Bit bound (``contextual_mapping_bound``), in unscaled units, with
A = N^(d-1) - delta the largest in-range id, Omega = N^(nd), R = sum_i u_i:

* every original id lies in [-Omega R, A]; shifts are >= 0, so the minimum id never
  decreases and negative ids are never shifted;
* a positive shift is >= N^d delta = N^(d-1) > A + delta/2, so a shifted column
  leaves the sweep range and each column is shifted at most once: at most n
  shifts, and at most n - 1 when some id is negative (Category 3);
* a shift of a column with id l <= A makes it l + N^d (M - m) with M the current
  maximum and m >= m_0 the minimum, so M' <= A + N^d (M - m_0): iterate from
  M_0 = A, n times with m_0 = 0 (Categories 1, 2) and n - 1 times with
  m_0 = -Omega R (Category 3); U_s = max(both, Omega R) bounds |id| in the sweep;
* the final layer adds N^((n+1)d) times an id: U_f = U_s (1 + N^((n+1)d));
* entries differ from ids by at most Omega (R - 1); partial sums of u^T Z by twice
  that; tie numerators are at most n U_s; head outputs 2 N^d U_s.

So every intermediate is at most S max(n U_s, 2 N^d U_s, U_f + 2 Omega R + A + 1).
Category 3 dominates: about ((3n+1)d - 1) log2 N + log2(2N) bits, more than the
(2n+2) d log2 N of Categories 1 and 2 (tests check the bound against brute force).
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import numpy as np

from transformer_ua.exact import reference
from transformer_ua.layers import Segment
from transformer_ua.yun.grid import Grid, check_scale, out_of_range_value, u_vector

#: Heads of a selective-shift sweep layer (Psi) and of the final global shift (psi).
SWEEP_HEADS, FINAL_HEADS = 2, 1
#: Head size of every contextual-mapping head (rank-one scores).
HEAD_SIZE = 1


# ---------------------------------------------------------------------------
# Closed forms (Python ints / Fractions, from the paper).
# ---------------------------------------------------------------------------


def interval(grid: Grid) -> tuple[Fraction, Fraction]:
  """(t_l, t_r) of Lemma 8, exact."""
  d, n, N = grid.d, grid.n, grid.N
  return (Fraction(N ** (2 * n * d - 1) * (N ** d - 1)),
          Fraction(N ** ((2 * n + 1) * d - 1) * (N ** d - 1)))


def lemma10_bounds(grid: Grid) -> tuple[Fraction, Fraction]:
  """Lemma 10's lower and upper bound on l~_n, exact."""
  d, n, N = grid.d, grid.n, grid.N
  lo = Fraction(N ** ((n - 1) * d - 1) * (N ** d - 1))
  hi = Fraction(N ** (n * d - 1) * (N ** d - 1)) - Fraction((N ** d - 1) ** 2, N)
  return lo, hi


def theorem2_sweep_ids(d: int, resolution: int) -> np.ndarray:
  """Sweep list of Theorem 2 in units of delta: l/delta for l in [0 : delta : N^(d-1) - delta]."""
  return np.arange(resolution ** d, dtype=np.int64)


def theorem2_final_scale(grid: Grid) -> int:
  """delta^(-(n+1)d), the W_O scale of the final global shift (Theorem 2)."""
  return grid.N ** ((grid.n + 1) * grid.d)


def sweep_id_max(grid: Grid) -> Fraction:
  """U_s: bound on |every column id| during the sweep, unscaled (module docstring)."""
  d, n, N = grid.d, grid.n, grid.N
  a = Fraction(N ** d - 1, N)
  omega = out_of_range_value(grid)
  r = sum(u_vector(d, N))
  nd = N ** d
  m12 = a
  for _ in range(n):
    m12 = a + nd * m12
  m3 = a
  for _ in range(n - 1):
    m3 = a + nd * (m3 + omega * r)
  return max(m12, m3, Fraction(omega * r))


def contextual_mapping_bound(grid: Grid, scale: int | None = None) -> int:
  """Proven bound on |every intermediate integer| of the scaled g_c (module docstring)."""
  d, n, N = grid.d, grid.n, grid.N
  S = check_scale(scale, N)
  a = Fraction(N ** d - 1, N)
  omega = out_of_range_value(grid)
  r = sum(u_vector(d, N))
  nd = N ** d
  u_s = sweep_id_max(grid)
  u_f = u_s * (1 + N ** ((n + 1) * d))
  bound = max(n * u_s, 2 * nd * u_s, u_f + 2 * omega * r + a + 1)
  return math.ceil(S * bound)


def sweep_bound(grid: Grid, scale: int | None = None) -> int:
  """Proven bound on |every integer| of the sweep computed on column ids alone
  (``yun.stages.sweep``; Lemma 8's g_c).

  The id-only sweep forms ids (|id| <= U_s, ``sweep_id_max``), thresholds (< A + 1),
  spreads max - min (<= 2 U_s), shifts N^d (max - min) (<= 2 N^d U_s) and, for the
  global shift's tie average, the sum of the n ids (<= n U_s); scaled by S.
  """
  d, n, N = grid.d, grid.n, grid.N
  S = check_scale(scale, N)
  u_s = sweep_id_max(grid)
  return math.ceil(S * max(2 * N ** d * u_s, n * u_s, u_s + N ** d))



def parameter_count_of(sweeps: int, d: int) -> int:
  """``sweeps`` two-head layers and one single-head layer of h(4md + m) weights each."""
  per_head = 4 * HEAD_SIZE * d + HEAD_SIZE  # W_Q, W_K, W_V (m x d), b_Q (m), W_O (d x m)
  return sweeps * SWEEP_HEADS * per_head + FINAL_HEADS * per_head


# ---------------------------------------------------------------------------
# Params.
# ---------------------------------------------------------------------------


def sweep_params(sweep_ids, u, step, half, shift):
  """The Psi layers for the column ids ``sweep_ids * step``, stacked [L, ...]: host
  NumPy arrays of the dtype of ``sweep_ids`` and ``u`` (``step``, ``half``, ``shift``
  scalars of it). Layer l: W_Q = W_K = W_V = u^T in both heads, b_Q = -(c_l - half),
  -(c_l + half) with c_l = sweep_ids[l] step, W_O = (shift e_1, -shift e_1)."""
  sweep_ids, u = np.asarray(sweep_ids), np.asarray(u)
  num, d = sweep_ids.shape[0], u.shape[0]
  center = sweep_ids * step
  w = np.broadcast_to(u, (num, SWEEP_HEADS, HEAD_SIZE, d)).copy()
  b_q = -np.stack([center - half, center + half], axis=1).reshape(num, SWEEP_HEADS, HEAD_SIZE)
  w_o = np.zeros((num, SWEEP_HEADS, d, HEAD_SIZE), u.dtype)
  w_o[:, 0, 0, 0], w_o[:, 1, 0, 0] = shift, -shift
  return {'W_Q': w, 'b_Q': b_q.astype(u.dtype), 'W_K': w.copy(), 'W_V': w.copy(), 'W_O': w_o}


def final_params(u, final_scale, dtype):
  d = len(u)
  w = np.asarray(u, dtype=dtype).reshape(1, 1, 1, d)  # [L=1, h=1, m=1, d]
  w_o = np.zeros((1, 1, d, 1), dtype=dtype)
  w_o[0, 0, 0, 0] = final_scale
  return {'W_Q': w, 'b_Q': np.zeros((1, 1, 1), dtype=dtype), 'W_K': w.copy(),
          'W_V': w.copy(), 'W_O': w_o}


def contextual_mapping_segments(num_sweep_layers: int) -> tuple[Segment, Segment]:
  """The two segments of g_c: the selective-shift sweep and the global shift."""
  return (Segment('attention', num_sweep_layers, num_heads=SWEEP_HEADS, head_size=HEAD_SIZE,
                  normalizer='hardmax', name='selective_shift_sweep'),
          Segment('attention', 1, num_heads=FINAL_HEADS, head_size=HEAD_SIZE,
                  normalizer='hardmax', name='global_shift'))


def contextual_mapping_params(grid: Grid, *, sweep_ids=None,
                              final_scale: int | None = None, scale: int | None = None,
                              dtype: str = 'float64'):
  """(segments, params) of g_c for ``modules.Network`` -- the pytree ``init`` gives.

  Args:
    grid: the grid G_delta, Grid(d, n, N) with N = 1/delta.
    sweep_ids: increasing column ids to sweep, in units of delta (default: Theorem 2,
      ``theorem2_sweep_ids``; Theorem 3 passes ``theorem3_sweep_ids``).
    final_scale: W_O scale of the global shift (default delta^(-(n+1)d)).
    scale: S for the exact params (default 2N); ignored for float dtypes.
    dtype: 'float64' / 'float32' (paper values: inputs k/N, thresholds l -+ delta/2)
      or 'int64' / 'object' (scaled integers: thresholds S l -+ S/(2N); 'object'
      holds Python ints, for values beyond int64).
  Returns:
    (segments, {'segment_0': {'attention': ...}, 'segment_1': {'attention': ...}}).
  """
  d, N = grid.d, grid.N
  S = check_scale(scale, N)
  sweep_ids = theorem2_sweep_ids(d, N) if sweep_ids is None else np.asarray(sweep_ids)
  if sweep_ids.ndim != 1 or sweep_ids.size < 1 or np.any(np.diff(sweep_ids) <= 0):
    raise ValueError('sweep_ids must be a non-empty strictly increasing 1-D integer array.')
  final_scale = theorem2_final_scale(grid) if final_scale is None else int(final_scale)
  u = u_vector(d, N)
  segments = contextual_mapping_segments(len(sweep_ids))
  shift = N ** d
  with jax.enable_x64(True):
    if dtype in ('float64', 'float32'):
      ndt = np.dtype(dtype)
      sweep = jax.device_put(sweep_params(np.asarray(sweep_ids, ndt), np.asarray(u, ndt),
                                          ndt.type(1.0 / N), ndt.type(0.5 / N),
                                          ndt.type(float(shift))))
      final = jax.device_put(final_params(u, float(final_scale), ndt))
    elif dtype in ('int64', 'object'):
      if max(u[-1], shift, int(sweep_ids[-1]) * (S // N) + S) >= 2 ** 62:
        raise ValueError('the sweep weights do not fit int64; this configuration is '
                         'beyond what can be built.')
      sweep = sweep_params(np.asarray(sweep_ids, np.int64), np.asarray(u, np.int64),
                           np.int64(S // N), np.int64(S // (2 * N)), np.int64(shift))
      if dtype == 'int64':
        if final_scale >= 2 ** 63:
          raise ValueError(f'final scale {final_scale} does not fit int64; use '
                           "dtype='object'.")
        sweep = jax.device_put(sweep)
        final = jax.device_put(final_params(u, final_scale, np.int64))
      else:
        sweep = reference.as_object(sweep)
        final = final_params(u, final_scale, object)
    else:
      raise ValueError(f"dtype={dtype!r}; allowed: 'float64', 'float32', 'int64', 'object'.")
  return segments, {'segment_0': {'attention': sweep}, 'segment_1': {'attention': final}}


# ---------------------------------------------------------------------------
# The built contextual mapping.
# ---------------------------------------------------------------------------
