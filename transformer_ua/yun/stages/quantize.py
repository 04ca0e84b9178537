r"""Lemma 7: quantization g_q by d/delta + d token-wise feed-forward layers (r = 1, Phi).

Yun et al. 2020, Appendix E.2. Shapes: X, Z [.., n, d] token-major (the paper's
column j is row j); each layer acts on one coordinate i (the paper's row i):

    g_q^ent(t) = k delta       if k delta <= t < (k+1) delta,  k = 0, ..., N-1
                 -delta^(-nd)  otherwise (t < 0 or t >= 1)

For i = 1..d (in order), one clipping layer then N bin layers k = 0..N-1:

    clip:  Z <- Z + e_i phi_c(e_i^T Z),          phi_c(t) = -t - delta^(-nd)  t < 0 or t >= 1
                                                            0                 0 <= t < 1
    bin k: Z <- Z + e_i phi_b(e_i^T Z - k delta), phi_b(t) = -t  0 <= t < delta
                                                            0   otherwise

In ``modules.FeedForward`` terms: W_1 = e_i^T [1, d], b_1 = 0 or -k delta [1],
W_2 = e_i [d, 1], b_2 = 0 [d], and ``phi`` the Phi unit above (breakpoints belong to
the piece on their right: the paper's half-open intervals). d (N + 1) = d/delta + d
layers, each with 3d + 1 weights.

Exact scaled form (inputs on the rational grid (1/S) Z, S a multiple of N): scaling
every value by S moves the breakpoints and intercepts (phi(t) -> S phi(t/S)) and the
bias b_1 by S; weights are unchanged. Then every quantity is an integer and g_q runs
in the core's exact integer mode, quantizing rational inputs *exactly*, bin edges
included (``quantize_exact``). On real (float) inputs the float network is exact
except within a few ulps of a bin edge (``verify.quantization`` states the tolerance).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import construction, layers
from transformer_ua.exact import planner
from transformer_ua.layers import Segment
from transformer_ua.yun.grid import Grid, check_scale, out_of_range_value

#: Hidden width of every quantization layer.
WIDTH = 1


def layer_count(grid: Grid, positional: bool = False) -> int:
  """d/delta + d (Lemma 7); d n/delta when ``positional`` (Theorem 3, Appendix G.1)."""
  d, n, N = grid.d, grid.n, grid.N
  return d * n * N if positional else d * (N + 1)


def parameter_count(grid: Grid, positional: bool = False) -> int:
  """(3d + 1) weights per layer: W_1 [1, d], b_1 [1], W_2 [d, 1], b_2 [d] (+ E [n, d]
  when ``positional``: Theorem 3)."""
  extra = grid.n * grid.d if positional else 0
  return layer_count(grid, positional) * (3 * grid.d + 1) + extra


def quantize_reference(t, grid: Grid):
  """g_q^ent on exact rationals (Fractions / ints / floats, taken exactly): Fractions."""
  t = Fraction(t)
  if t < 0 or t >= 1:
    return Fraction(-out_of_range_value(grid))
  return Fraction(math.floor(t * grid.N), grid.N)


def _feedforward(e_i, b_1, breaks, slopes, intercepts, d, dtype):
  """One g_q layer's params: Z <- Z + e_i phi(e_i^T Z + b_1), phi given by its pieces."""
  return {'W_1': e_i[None, :], 'b_1': b_1[None], 'W_2': e_i[:, None],
          'b_2': jnp.zeros((d,), dtype),
          'phi': {'breaks': breaks[None], 'slopes': slopes[None],
                  'intercepts': intercepts[None],
                  'left_closed': jnp.zeros((1, 2), bool)}}


def _div(dtype, N):
  return (lambda a: a // N) if jnp.issubdtype(dtype, jnp.integer) else (lambda a: a / N)


def _layer(index, d, N, out_value, one, dtype):
  """Params of Lemma 7's quantization layer ``index`` (vmapped): per coordinate i one
  clip then N bins k = 0..N-1."""
  per_coord = N + 1
  i = index // per_coord
  j = index % per_coord
  clip = j == 0
  k = j - 1
  e_i = (jnp.arange(d) == i).astype(dtype)
  zero = jnp.zeros((), dtype)
  # clip: breaks (0, width_1), pieces (-1, -out) | (0, 0) | (-1, -out); width_1 = 1 (scaled S)
  # bin:  breaks (0, step),    pieces (0, 0) | (-1, 0) | (0, 0)
  div = _div(dtype, N)
  step = div(one)
  breaks = jnp.where(clip, jnp.stack([zero, one]), jnp.stack([zero, step]))
  slopes = jnp.where(clip, jnp.asarray([-1, 0, -1], dtype), jnp.asarray([0, -1, 0], dtype))
  intercepts = jnp.where(clip, jnp.stack([-out_value, zero, -out_value]),
                         jnp.stack([zero, zero, zero]))
  b_1 = jnp.where(clip, zero, -div(k * one).astype(dtype))
  return _feedforward(e_i, b_1, breaks, slopes, intercepts, d, dtype)


def _positional_layer(index, d, N, n, one, dtype):
  """Params of Theorem 3's quantization layer ``index`` (Appendix G.1, vmapped): per
  coordinate i, n N bins k = 0..nN-1 (breakpoints k delta cover [0, n)), no clip."""
  per_coord = n * N
  i = index // per_coord
  k = index % per_coord
  e_i = (jnp.arange(d) == i).astype(dtype)
  zero = jnp.zeros((), dtype)
  div = _div(dtype, N)
  return _feedforward(e_i, -div(k * one).astype(dtype), jnp.stack([zero, div(one)]),
                      jnp.asarray([0, -1, 0], dtype), jnp.stack([zero, zero, zero]), d, dtype)


def positional_int_params(grid: Grid, *, scale: int) -> dict:
  """Appendix G.1's bins as one segment's params ({'feedforward': ...}) of scaled int64
  NumPy arrays at ``scale`` (E is not scaled: it is added before g_q)."""
  d, n, N = grid.d, grid.n, grid.N
  with jax.enable_x64(True):
    gen = jax.vmap(lambda i: _positional_layer(i, d, N, n,
                                               jnp.asarray(scale, jnp.int64), jnp.int64))
    seg = gen(jnp.arange(layer_count(grid, positional=True)))
    return {'feedforward': jax.tree_util.tree_map(np.asarray, seg)}


def quantization_segments(grid: Grid, positional: bool = False) -> tuple[Segment]:
  return (Segment('feedforward', layer_count(grid, positional), width=WIDTH,
                  activation='phi', name='quantization'),)


def positional_encoding(d: int, n: int, dtype=np.float64) -> np.ndarray:
  """Appendix G's E [n, d] (token-major): row j (0-based) is j in every coordinate."""
  return np.repeat(np.arange(n, dtype=dtype)[:, None], d, axis=1)


def positional_quantization_params(grid: Grid):
  """(segments, params) of Theorem 3's g_q (Appendix G.1) with E, float64.

  For i = 1..d and k = 0..nN-1 (in order): Z <- Z + e_i phi_b(e_i^T Z - k delta),
  phi_b(t) = -t on [0, delta), 0 elsewhere: an entry of X + E in [k delta, k delta +
  delta) becomes k delta. d n/delta layers; params include ``E`` (``positional_encoding``).
  """
  d, n, N = grid.d, grid.n, grid.N
  with jax.enable_x64(True):
    gen = jax.jit(jax.vmap(lambda i: _positional_layer(i, d, N, n,
                                                       jnp.asarray(1.0, jnp.float64),
                                                       jnp.float64)))
    seg = gen(jnp.arange(layer_count(grid, positional=True)))
  return (quantization_segments(grid, positional=True),
          {'E': jnp.asarray(positional_encoding(d, n)), 'segment_0': {'feedforward': seg}})


def quantization_params(grid: Grid, *, scale: int | None = None,
                        dtype: str = 'float64'):
  """(segments, params) of g_q for ``modules.Network``.

  Args:
    grid: the grid G_delta, Grid(d, n, N) with N = 1/delta.
    scale: for dtype 'int64': inputs are integers standing for x = value / scale;
      a positive multiple of N (default 2N, the contextual mapping's scale).
    dtype: 'float64' / 'float32' (paper values) or 'int64' (scaled integers).
  """
  d, N = grid.d, grid.N
  out = out_of_range_value(grid)
  segments = quantization_segments(grid)
  idx = np.arange(layer_count(grid))
  with jax.enable_x64(True):
    if dtype in ('float64', 'float32'):
      jdt = jnp.float64 if dtype == 'float64' else jnp.float32
      gen = jax.jit(jax.vmap(lambda i: _layer(i, d, N, jnp.asarray(float(out), jdt),
                                              jnp.asarray(1.0, jdt), jdt)))
    elif dtype == 'int64':
      scale = check_scale(scale, N)
      if out * scale >= 2 ** 62:
        raise ValueError(f'the scaled out-of-range value {out * scale} does not fit int64.')
      gen = jax.jit(jax.vmap(lambda i: _layer(i, d, N, jnp.asarray(out * scale, jnp.int64),
                                              jnp.asarray(scale, jnp.int64), jnp.int64)))
    else:
      raise ValueError(f"dtype={dtype!r}; allowed: 'float64', 'float32', 'int64'.")
    seg = gen(jnp.asarray(idx))
  return segments, {'segment_0': {'feedforward': seg}}


def quantization_bound(grid: Grid, scale: int, input_bound: int) -> int:
  """Bound on every scaled intermediate of g_q for scaled inputs |x| <= input_bound.

  A clip layer forms -x - S N^(nd) and adds it to x; a bin layer forms x - k S/N and
  -(x - k S/N) with 0 <= x - k S/N < S/N; products with e_i are the entries.
  """
  out = out_of_range_value(grid) * scale
  return int(input_bound) + out + scale


@dataclasses.dataclass(frozen=True, eq=False)
class Quantization:
  """g_q of Lemma 7: float params (paper values) and exact scaled evaluation.

  Theorem 3's g_q (Appendix G.1) is ``PositionalQuantization``; ``positional`` says
  which (read-only).
  """

  d: int
  n: int
  resolution: int
  segments: tuple
  params: dict
  positional: bool = False

  #: Appended to the repr ('' for Lemma 7).
  repr_suffix: ClassVar[str] = ''

  @property
  def grid(self) -> Grid:
    """Grid(d, n, N)."""
    return Grid(self.d, self.n, self.resolution)

  @classmethod
  def build(cls, grid: Grid) -> Quantization:
    """Lemma 7's g_q: d/delta + d feed-forward layers (r = 1) with Phi activations."""
    segments, params = quantization_params(grid, dtype='float64')
    return cls(d=grid.d, n=grid.n, resolution=grid.N, segments=segments, params=params)

  def __repr__(self) -> str:
    return (f'Quantization(Lemma 7: d={self.d}, n={self.n}, N={self.resolution}, '
            f'{self.depth()} layers{self.repr_suffix})')

  @property
  def unit_input_bound(self) -> int:
    """Bound on |t| entering g_q's units that ``plan`` takes for the realized layers'
    cancellation: 2 for inputs in [0, 1) (Lemma 7)."""
    return 2

  # -- the construction contract (``transformer_ua.construction``) ----------

  def depth(self) -> int:
    return sum(s.depth for s in self.segments)

  def layer_counts(self) -> dict:
    """{'quantization': {'feedforward': d(N + 1)}} (Theorem 3: d n N)."""
    return construction.segment_counts(self.segments, 'quantization')

  def num_params(self) -> int:
    return layers.count_params(self.params)

  def network(self):
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    return modules.Network(self.segments, param_dtype=jnp.float64,
                          positional=self.positional, num_tokens=self.n)

  def float_params(self) -> dict:
    """The paper-valued float64 params (``params``; with ``E`` when positional)."""
    return self.params

  def apply_exact(self, x) -> np.ndarray:
    """g_q^ent entry-wise on X [.., n, d] taken exactly (floats as rationals): Fractions.

    Lemma 7: k/N on [k/N, (k+1)/N), -N^(nd) outside [0, 1). Theorem 3 (positional): the
    entry of X + E (token j offset by j, 0-based) in [k delta, k delta + delta), k < nN,
    becomes k delta; entries outside [0, n) pass unchanged (no clip layer).
    """
    x = np.asarray(x)
    if x.shape[-2:] != (self.n, self.d):
      raise ValueError(f'input must have shape [..., {self.n}, {self.d}], got {x.shape}.')
    xs = construction.to_fractions(x)
    return self._quantize_fractions(xs) if xs.size else xs

  def _quantize_fractions(self, xs) -> np.ndarray:
    """g_q^ent on a non-empty object array of Fractions [.., n, d] (Lemma 7)."""
    return np.vectorize(lambda t: quantize_reference(t, self.grid),
                        otypes=[object])(xs)

  def apply(self, x):
    """The literal float network on real inputs X [.., n, d] (float64, under x64): g_q
    up to a few ulps of a bin edge (``verify.quantization`` states the tolerance), the
    evaluation ``pipeline.GBar.select`` uses; ``apply_exact`` is exact everywhere."""
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    x = np.asarray(x, np.float64)
    if x.shape[-2:] != (self.n, self.d):
      raise ValueError(f'input must have shape [..., {self.n}, {self.d}], got {x.shape}.')
    with jax.enable_x64(True):
      return np.asarray(modules.jit_apply(self.network())(self.params, jnp.asarray(x)))

  def to_indices(self, y) -> np.ndarray:
    """Quantized float outputs -> grid indices (k for k/N, -1 for -N^(nd)).

    Theorem 3 (``PositionalQuantization``): outputs are (j + k/N) for token j (0-based);
    the offset is removed.
    """
    y = np.asarray(y, np.float64)
    out = out_of_range_value(self.grid)
    return np.where(y < -out / 2, -1, np.rint(y * self.resolution)).astype(np.int64)

  def quantize_exact(self, x_scaled, scale: int, arithmetic: str = 'int64'):
    """Runs the scaled integer network on inputs x = x_scaled / scale, exactly.

    Args:
      x_scaled: integer array [.., n, d].
      scale: positive multiple of N.
      arithmetic: 'int64' or 'auto' (only int64 is implemented for g_q; refused if the
        planned bits do not fit).
    Returns:
      int64 array of scaled outputs (k scale/N or -scale N^(nd)).
    """
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    x_scaled = np.asarray(x_scaled)
    if not np.issubdtype(x_scaled.dtype, np.integer):
      raise ValueError('quantize_exact takes integer (scaled) inputs.')
    bound = quantization_bound(self.grid, scale,
                               int(np.max(np.abs(x_scaled.astype(object)))) if x_scaled.size else 0)
    arith = planner.plan(bound, arithmetic)
    if arith.kind != 'int64':
      raise ValueError(f'exact quantization needs {arith.bits_required} bits; only int64 '
                       'is implemented for g_q.')
    segments, params = quantization_params(self.grid,
                                           scale=scale, dtype='int64')
    with jax.enable_x64(True):
      y = modules.exact_apply(modules.Network(segments), params, jnp.asarray(x_scaled, jnp.int64))
    return np.asarray(y)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class PositionalQuantization(Quantization):
  """g_q of Theorem 3 (Appendix G.1): E, then d n/delta bin layers and no clip; its
  outputs are j + k/N for token j (0-based), entries of X + E outside [0, n) pass."""

  positional: bool = dataclasses.field(default=True, init=False)

  repr_suffix: ClassVar[str] = ', positional'

  @property
  def unit_input_bound(self) -> int:
    """2 + n: E offsets token j by j < n."""
    return 2 + self.n

  @classmethod
  def build(cls, grid: Grid) -> PositionalQuantization:
    """Appendix G.1's g_q: E and d n/delta feed-forward layers (r = 1), Phi activations."""
    segments, params = positional_quantization_params(grid)
    return cls(d=grid.d, n=grid.n, resolution=grid.N, segments=segments, params=params)

  def _quantize_fractions(self, xs) -> np.ndarray:
    """The entry of X + E in [k delta, k delta + delta), k < nN, becomes k delta."""
    N, n = self.resolution, self.n
    shifted = xs + positional_encoding(self.d, n, np.int64).astype(object)

    def one(t):
      return Fraction(math.floor(t * N), N) if 0 <= t < n else t
    return np.vectorize(one, otypes=[object])(shifted)

  def to_indices(self, y) -> np.ndarray:
    y = np.asarray(y, np.float64)
    return np.rint((y - positional_encoding(self.d, self.n)) * self.resolution).astype(np.int64)
