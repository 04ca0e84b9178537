r"""A tie-complete contextual mapping: Lemma 8 without the bad set (``ties='complete'``).

Lemma 8's g_c sees the *set* of distinct column ids, not their multiplicities: on
inputs with repeated columns the ids clash (12 of the 16 repeated multisets at N=4,
d=1, n=3), which is why Theorem 2 needs a bad set. The map built here gives every
pair (multiset context, token value) its own id, repeated tokens included, with the
same layer classes (hardmax attention, heads of size m = 1; Phi feed-forward, r = 1)
and at most 2 heads per layer. Shapes as in ``yun.stages.contextual`` (token-major):

    K [.., n, d] grid indices in {-1, 0, ..., N-1}     Z [.., n, d]     ids [.., n]

Notation. delta = 1/N, V = N^d, Omega = N^(nd), R = sum_i u_i, u = (1, N, .., N^(d-1)).
All ids below are in *ticks* (units of delta: tick = N u^T Z); every quantity is an
integer number of ticks. G = {0, .., 1-delta}^{d x n} (in range, repeats allowed:
Categories 1 and 2); Category 3 = some entry is -Omega.

Construction (V + 3 layers; the paper's g_c has V + 1)
------------------------------------------------------

    offset   Z <- Z + delta e_1 phi_1(0 . Z)          1 FF layer, phi_1 = 1 at 0
    sweep    for l = 1, 2, .., V  (ticks, increasing)  V attention layers, h = 2
               Z <- Z + lam Psi(Z; l - 1/2, l + 1/2)      lam = V + 2n  (paper: V)
    min      Z <- Z + C3 e_1 min_k u^T Z_k             1 attention layer, h = 1
    max+sum  Z <- Z + e_1 (C1 max_k u^T Z_k            1 attention layer, h = 2
                          + n C2 mean_k u^T Z_k)

Psi is Lemma 8's selective shift (``yun.stages.contextual``). The three new heads have
W_Q = 0, so their query is the bias b_Q alone: b_Q = -1 makes every query negative
(hardmax picks the smallest key: min), b_Q = +1 picks the largest (max), b_Q = 0 ties
every score (weight 1/n each: the mean, which *counts multiplicities*). W_K = W_V = u^T.

Why the offset: an attention-only network maps Z = 0 to 0, so the all-zero input would
get id 0, below every useful t_l. The offset makes every in-range id v = a + 1 in
[1, V] (a = N u^T L in [0, V-1]).

Sweep on G. Let v_1 < .. < v_m be the distinct ids (m <= min(n, V)), with
multiplicities c_1, .., c_m >= 1, sum c_i = n; gaps g_k = v_{k+1} - v_k >= 1,
D = v_m - v_1. At step l = v_i every copy of v_i has the same query, so all copies get
the same shift lam (max - min), min = v_i (the smallest unshifted id), max = v_m for
i = 1 and l~_{i-1} for i >= 2 (shifts are >= lam >= V + 1 ticks, so a shifted column
leaves the sweep range and is never shifted again). Hence, as in the paper but with lam,

    l~_1 = v_1 + lam D,   l~_i = v_i + lam (l~_{i-1} - v_i)   (m >= 2;  m = 1: l~_1 = v_1)
    l~_i = lam^i D - sum_{k<i} g_k lam^(i-k) + v_i                                  (1)

and l~_i - l~_{i-1} = (lam - 1)(l~_{i-1} - v_i) > 0: l~_1 < .. < l~_m. Bounds:

    1 <= l~_i <= L* := (V - 1)(lam^m* - lam) + V,   m* = min(n, V)             (2)
    l~_1 >= lam + 1 when m >= 2.

Claim A (the max identifies the set). M = l~_m. Range: by (1), M = sum_k g_k
(lam^m - lam^(m-k)) + v_m, so lam^(m-1)(lam - 1) <= M <= (V - 1)(lam^m - lam) + V <
lam^m (lam - 1): the ranges for m = 1, 2, .. are disjoint. Within one m, every "digit"
is < lam (v_m <= V < lam, 1 <= g_k < V): M mod lam = v_m; then
(M - v_m)/lam = lam^(m-1) D - sum_k g_k lam^(m-1-k) = -g_{m-1} (mod lam) gives g_{m-1},
and so on down to g_1 and D. So M determines (m, v_m, g) and the set.

Claim B (the sum identifies the multiplicities). Fix the set; Sigma = sum_j l~_j =
sum_i c_i l~_i. Let c != c' (both compositions of n), Delta = c - c', sum Delta = 0,
|Delta|_1 <= 2(n - m) < 2n, k = max{i: Delta_i != 0} >= 2. Then

    |sum Delta_i l~_i| = |sum_{i<=k} Delta_i (l~_i - l~_1)|
                      >= (l~_k - l~_1) - (2n - 1)(l~_{k-1} - l~_1) > 0,

because l~_k >= lam l~_{k-1} - (lam - 1) V and (lam - 2n + 1) l~_{k-1} + (2n - 2) l~_1
>= V (lam + 1) > (lam - 1) V when lam >= V + 2n - 1. (So lam = V + 2n suffices; it is not
necessary: max(V + 1, 2n - 1) does too, docs/proofs/ties_complete.md.)

Final ids. With mu = min_k l~_k = l~_1 and the min layer first,
r_j = l~_j + C3 mu, then q_j = r_j + C1 max r + C2 sum r:

    q_j = l~_j + C2 Sigma + C1 M + K mu,     K = C3 (1 + C1 + n C2),           (3)
    C2 = L* + 1,   C1 = n C2 L* + L* + 1,   C3 = max(L* + 1, floor(U3 / P) + 1).

On G every term is a nonnegative integer and l~_j < C2, C2 Sigma + l~_j < C1,
C1 M + C2 Sigma + l~_j < K (K >= C1 (L* + 1)): q_j is a mixed-radix number with digits
(mu, M, Sigma, l~_j). M gives the set (A), Sigma the multiplicities (B), l~_j the token
(the l~_i are distinct). So

    (T1) (multiset, token value) -> q is one-to-one on G; distinct ids differ by >= 1
         tick (delta): repeated tokens share an id, nothing else does;
    (T2) q in [t_l, t_r] on G,  t_l = 1 + n C2 + C1 + K  (attained by L = 0),
         t_r = L* (1 + n C2 + C1 + K)   (divide by N for real units).

Category 3 (kill). An out-of-range column has id <= -N Omega + V =: -P < 0 and
>= -N Omega R; it is never shifted, so mu <= -P. In-range columns are shifted at most
once, each time by <= lam (M - m_0) with m_0 >= -N Omega R: every sweep id is at most
U3 = iterate(M <- V + lam (M + N Omega R), n - 1 times, from V) in absolute value
(or N Omega R). Since C3 P > U3, after the min layer every r_j <= U3 - C3 P < 0, so
max r < 0 and sum r < 0, and q_j < 0 < t_l:

    (T3) on Category 3 every q_j lies outside [t_l, t_r].

Equivariance: every layer is a Transformer layer (Claim 1 of the paper).

Exact arithmetic and bit bound
------------------------------
Scale S: a multiple of N lcm(2, n) (default), so ids are multiples of S/N >= 2 of n:
thresholds (l -+ 1/2) S/N are integers, the mean head's tie average (sum of n
multiples of n, divided by n) is exact, and every value is an integer. With
U = max(L*, U3, N Omega R) bounding |u^T Z| in the sweep (ticks), every intermediate
is at most S/N times

    (1 + C3) U (1 + C1 + n C2) + n (1 + C3) U + 2 lam U + 2 N Omega R + 2

(final ids; the mean head's tie numerator; the sweep's head outputs; the entries
Z_i, i >= 2, and partial sums of u^T Z). ``exact.planner.plan`` picks the arithmetic from it.
Orders: L* ~ V lam^n, so q ~ L*^4 n^2: about (4n + 4) d log2 N bits, against
(3n + 1) d log2 N + log2(2N) for the paper's g_c.

Layers and weights: V + 3 layers (1 FF, V + 2 attention; the paper: V + 1 attention);
weights: V two-head sweep layers + 3 new heads of 4md + m and one Phi unit of 3d + 1.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua.exact import limbs, planner, reference
from transformer_ua.exact.ops import ExactOps
from transformer_ua.layers import Segment
from transformer_ua.yun import enumeration
from transformer_ua.yun.grid import Grid, check_scale, out_of_range_value, u_vector
from transformer_ua.yun.stages import contextual, contextual_params

#: Heads of the min layer and of the max+sum layer.
MIN_HEADS, MAX_SUM_HEADS = 1, 2
#: Allowed values of ``ties`` (``'paper'``: Lemma 8 as published, ``yun.stages.contextual``).
TIES = ('paper', 'complete')


def check_ties(ties) -> str:
  if ties not in TIES:
    raise ValueError(f'ties={ties!r}; allowed: {TIES} (paper: Lemma 8, repeated columns '
                     'are the bad set; complete: every multiset gets its own ids).')
  return ties


# ---------------------------------------------------------------------------
# Closed forms (Python ints, ticks).
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Coefficients:
  """The constants of the module docstring, in ticks (Python ints)."""

  V: int        # N^d in-range column values
  lam: int      # sweep shift V + 2n
  L: int        # L*: max sweep id on G
  C1: int
  C2: int
  C3: int
  K: int        # C3 (1 + C1 + n C2)
  U3: int       # bound on sweep ids on Category 3
  P: int        # out-of-range ids are <= -P
  U: int        # bound on |u^T Z| in the sweep (all of G+)
  n: int

  @property
  def t_l(self) -> int:
    return 1 + self.n * self.C2 + self.C1 + self.K

  @property
  def t_r(self) -> int:
    return self.L * self.t_l


@functools.lru_cache(maxsize=64)
def coefficients(grid: Grid) -> Coefficients:
  d, n, N = grid.d, grid.n, grid.N
  V = N ** d
  lam = V + 2 * n
  m_star = min(n, V)
  L = (V - 1) * (lam ** m_star - lam) + V
  C2 = L + 1
  C1 = n * C2 * L + L + 1
  omega = out_of_range_value(grid)
  R = sum(u_vector(d, N))
  P = N * omega - V
  m3 = V
  for _ in range(n - 1):
    m3 = V + lam * (m3 + N * omega * R)
  U3 = max(m3, N * omega * R)
  C3 = max(L + 1, U3 // P + 1)
  K = C3 * (1 + C1 + n * C2)
  return Coefficients(V=V, lam=lam, L=L, C1=C1, C2=C2, C3=C3, K=K, U3=U3, P=P,
                      U=max(L, U3, N * omega * R), n=n)


def default_scale(resolution: int, n: int) -> int:
  """N lcm(2, n): the smallest scale with integer thresholds and exact means."""
  return resolution * math.lcm(2, n)


def _check_scale(scale, resolution: int, n: int) -> int:
  """S: default N lcm(2, n); otherwise a positive multiple of it."""
  return check_scale(scale, resolution, (default_scale(resolution, n), 'N lcm(2, n)'),
                            'ties=complete: integer thresholds and exact tie averages of '
                            'the counting head')


def bound(grid: Grid, scale: int | None = None) -> int:
  """Proven bound on every scaled intermediate (module docstring)."""
  d, n, N = grid.d, grid.n, grid.N
  c = coefficients(grid)
  S = _check_scale(scale, N, n)
  omega = out_of_range_value(grid)
  R = sum(u_vector(d, N))
  ticks = ((1 + c.C3) * c.U * (1 + c.C1 + n * c.C2) + n * (1 + c.C3) * c.U
           + 2 * c.lam * c.U + 2 * N * omega * R + 2)
  return ticks * (S // N)


def interval(grid: Grid) -> tuple[Fraction, Fraction]:
  """(t_l, t_r) of (T2), real units."""
  c = coefficients(grid)
  return Fraction(c.t_l, grid.N), Fraction(c.t_r, grid.N)


def num_ids(grid: Grid) -> int:
  """Distinct ids on G: pairs (multiset, value in it) = V C(V + n - 2, n - 1)."""
  d, n, N = grid.d, grid.n, grid.N
  V = N ** d
  return V * math.comb(V + n - 2, n - 1)


def layer_count(d: int, resolution: int) -> int:
  """V + 3 (1 offset FF layer, V sweeps, min, max+sum); the paper: V + 1."""
  return resolution ** d + 3


def parameter_count(grid: Grid) -> int:
  d, N = grid.d, grid.N
  per_head = 4 * contextual_params.HEAD_SIZE * d + contextual_params.HEAD_SIZE
  offset = 3 * d + 1  # W_1 [1, d], b_1, W_2 [d, 1], b_2 [d] (Phi descriptors are not weights)
  return (N ** d * contextual_params.SWEEP_HEADS + MIN_HEADS + MAX_SUM_HEADS) * per_head \
      + offset


def reference_ids(ticks, grid: Grid):
  """Independent pure-Python g_c on one point: column ids in ticks (a in [0, V) in
  range, or <= -P out of range) -> (sweep ids l~, final ids q), lists of Fractions.

  Literal hardmax per head (ties split evenly), no scaling: the prototype the layers
  are tested against.
  """
  c = coefficients(grid)

  def head(vals, query):
    if query > 0:
      return Fraction(max(vals))
    if query < 0:
      return Fraction(min(vals))
    return Fraction(sum(vals), len(vals))

  z = [Fraction(int(t)) + 1 for t in ticks]
  for l in range(1, c.V + 1):
    lo = [head(z, zj - (l - Fraction(1, 2))) for zj in z]
    hi = [head(z, zj - (l + Fraction(1, 2))) for zj in z]
    z = [zj + c.lam * (a - b) for zj, a, b in zip(z, lo, hi)]
  swept = list(z)
  z = [zj + c.C3 * head(z, -1) for zj in z]
  mx, mean = head(z, 1), head(z, 0)
  z = [zj + c.C1 * mx + grid.n * c.C2 * mean for zj in z]
  return swept, z


# ---------------------------------------------------------------------------
# Classes of G: multisets of n in-range columns (repeats allowed).
# ---------------------------------------------------------------------------


def num_classes(grid: Grid) -> int:
  """C(V + n - 1, n) multisets of n columns from the V in-range ones."""
  d, n, N = grid.d, grid.n, grid.N
  return math.comb(N ** d + n - 1, n)


def make_class_codec(grid: Grid):
  """Multisets r_1 <= .. <= r_n of in-range column indices r = sum_i K[i] N^i in [0, V),
  ranked colexicographically through b_i = r_i + i - 1 (strictly increasing):
  rank = sum_i C(b_i, i). Returns jnp ``decode(rank [B]) -> K [B, n, d]`` (columns
  non-decreasing) and ``rank(K sorted)``. Call under ``jax.enable_x64``."""
  d, n, N = grid.d, grid.n, grid.N
  v = N ** d
  if num_classes(grid) >= 2 ** 62:
    raise ValueError(f'C({v + n - 1}, {n}) classes cannot be enumerated with int64 ranks.')
  binom = np.asarray([[math.comb(x, i) for x in range(v + n)] for i in range(n + 1)],
                     dtype=np.int64)

  def decode(rank):
    idx = enumeration.unrank_colex(binom, rank, n) - jnp.arange(n)
    return enumeration.column_digits(idx, d, N)

  def rank(k_sorted):
    return enumeration.rank_colex(binom, enumeration.column_number(k_sorted, N) + jnp.arange(n))

  return {'decode': decode, 'rank': rank}


def representatives(grid: Grid) -> np.ndarray:
  """Grid indices [C, n, d] of every multiset of G (columns non-decreasing), rank order."""
  with jax.enable_x64(True):
    decode = make_class_codec(grid)['decode']
    return np.asarray(decode(jnp.arange(num_classes(grid), dtype=jnp.int64)))


# ---------------------------------------------------------------------------
# Params.
# ---------------------------------------------------------------------------


def segments(d: int, resolution: int) -> tuple[Segment, ...]:
  return (Segment('feedforward', 1, width=1, activation='phi', name='offset'),
          Segment('attention', resolution ** d, num_heads=contextual_params.SWEEP_HEADS,
                  head_size=contextual_params.HEAD_SIZE, normalizer='hardmax', name='selective_shift_sweep'),
          Segment('attention', 1, num_heads=MIN_HEADS, head_size=contextual_params.HEAD_SIZE,
                  normalizer='hardmax', name='global_min'),
          Segment('attention', 1, num_heads=MAX_SUM_HEADS, head_size=contextual_params.HEAD_SIZE,
                  normalizer='hardmax', name='global_max_and_count'))


def _offset_params(d, delta, dt):
  """Z <- Z + delta e_1 phi_1(0): W_1 = 0, phi_1 = 1 on [-1, 1), W_2 = delta e_1."""
  w2 = np.zeros((1, d, 1), dt)
  w2[0, 0, 0] = delta
  z = lambda *s: np.zeros(s, dt)  # noqa: E731
  return {'W_1': z(1, 1, d), 'b_1': z(1, 1), 'W_2': w2, 'b_2': z(1, d),
          'phi': {'breaks': np.asarray([[[-1, 1]]], dt), 'slopes': z(1, 1, 3),
                  'intercepts': np.asarray([[[0, 1, 0]]], dt),
                  'left_closed': np.zeros((1, 1, 2), bool)}}


def _global_params(u, queries, scales, dt):
  """One attention layer whose heads have W_Q = 0, b_Q = query (+1 max, -1 min, 0 mean),
  W_K = W_V = u^T, W_O = scale e_1."""
  d, h = len(u), len(queries)
  w = np.zeros((1, h, 1, d), dt)
  w[:] = np.asarray(u, dtype=dt)
  w_o = np.zeros((1, h, d, 1), dt)
  for i, s in enumerate(scales):
    w_o[0, i, 0, 0] = s
  return {'W_Q': np.zeros((1, h, 1, d), dt), 'b_Q': np.asarray(queries, dt).reshape(1, h, 1),
          'W_K': w, 'W_V': w.copy(), 'W_O': w_o}


def params(grid: Grid, *, scale: int | None = None,
           dtype: str = 'float64') -> dict:
  """Params of the four segments: 'float64' (paper units) or 'object' (scaled Python ints).

  Scaled: inputs and thresholds carry S, so the offset's W_2 is S/N, the query biases
  of the new heads are -S, S, 0; W_O weights (lam, C1, C3, n C2) are unscaled.
  """
  d, n, N = grid.d, grid.n, grid.N
  c = coefficients(grid)
  u = u_vector(d, N)
  sweep_ids = np.arange(1, c.V + 1, dtype=np.int64)
  if dtype == 'float64':
    dt, one, unit = np.float64, 1.0, Fraction(1, N)
    sweep = contextual_params.sweep_params(
        np.asarray(sweep_ids, np.float64), np.asarray(u, np.float64), 1.0 / N, 0.5 / N,
        float(c.lam))
    offset = _offset_params(d, float(unit), dt)
    scales = [float(c.C3)], [float(c.C1), float(n * c.C2)]
  elif dtype == 'object':
    S = _check_scale(scale, N, n)
    dt, one = object, S
    sweep = reference.as_object(contextual_params.sweep_params(
        np.asarray(sweep_ids, np.int64), np.asarray(u, np.int64), np.int64(S // N),
        np.int64(S // (2 * N)), np.int64(c.lam)))
    offset = _offset_params(d, S // N, dt)
    offset['phi']['breaks'] = np.asarray([[[-S, S]]], object)
    scales = [c.C3], [c.C1, n * c.C2]
  else:
    raise ValueError(f"dtype={dtype!r}; allowed: 'float64', 'object'.")
  return {'segment_0': {'feedforward': offset}, 'segment_1': {'attention': sweep},
          'segment_2': {'attention': _global_params(u, [-one], scales[0], dt)},
          'segment_3': {'attention': _global_params(u, [one, 0 * one], scales[1], dt)}}


def _to_int64(tree):
  def conv(a):
    a = np.asarray(a)
    if a.dtype == bool:
      return jnp.asarray(a)
    if a.dtype == object:
      if a.size and int(np.max(np.abs(a))) >= 2 ** 62:
        raise ValueError('a weight does not fit int64.')
      a = a.astype(np.int64)
    return jnp.asarray(a)
  return jax.tree_util.tree_map(conv, tree)


# ---------------------------------------------------------------------------
# The built map.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class TiesContextualMapping(contextual.ContextualMapping):
  """The tie-complete g_c; the ``ContextualMapping`` interface with four segments.

  t_l, t_r: (T2) in real units; id_lower/id_upper: the bounds 1/N and L*/N on the
  sweep ids over G; final_scale: C1; coefficients: the constants (ticks).
  """

  coefficients: Coefficients | None = None
  ties: str = 'complete'

  @property
  def sweep_index(self) -> int:
    return 1  # after the offset layer

  @property
  def id_sweep(self) -> bool:
    """No: an offset layer, a sweep and two global layers; the id-only kernel runs only
    Lemma 8's sweep + shift (``ContextualMapping.id_sweep``)."""
    return False

  def describe(self) -> str:
    return (f'g_c (ties=complete): d={self.d}, n={self.n}, N={self.resolution}: '
            f'{self.depth()} layers (1 offset FF, {self.num_sweep_layers} selective '
            f'shifts, global min, global max+count), {self.num_params()} weights; '
            f't_l={self.t_l}, t_r={self.t_r}; arithmetic {self.arithmetic.describe()}')


def build(grid: Grid, *, scale: int | None = None,
          arithmetic: str = 'auto') -> TiesContextualMapping:
  """Builds the tie-complete g_c and plans its arithmetic.

  Args:
    grid: the grid G_delta, Grid(d, n, N) with N = 1/delta.
    scale: S, a multiple of N lcm(2, n) (default N lcm(2, n)).
    arithmetic: 'auto', 'int64' (refused when too narrow), 'limbs', 'limbs:K[:w]'.
  """
  d, n, N = grid.d, grid.n, grid.N
  S = _check_scale(scale, N, n)
  c = coefficients(grid)
  b = bound(grid, S)
  arith = planner.plan(b, arithmetic)
  exact = params(grid, scale=S, dtype='object')
  with jax.enable_x64(True):
    if arith.kind == 'int64':
      exact = _to_int64(exact)
    else:
      exact = limbs.params_to_digits(exact, arith.limb_bits)
    flt = jax.tree_util.tree_map(jnp.asarray, params(grid, dtype='float64'))
  t_l, t_r = interval(grid)
  return TiesContextualMapping(
      d=d, n=n, resolution=N, scale=S, u=u_vector(d, N), t_l=t_l, t_r=t_r,
      id_lower=Fraction(1, N), id_upper=Fraction(c.L, N),
      sweep_ids=np.arange(1, c.V + 1, dtype=np.int64), final_scale=c.C1,
      segments=segments(d, N), params=flt, exact_params=exact, arithmetic=arith,
      ops=ExactOps(arith.spec if arith.kind == 'limbs' else None), bound=b,
      positional=False, coefficients=c)
