r"""Lemma 8 (and Lemma 10): contextual mapping by selective-shift hardmax attention.

Yun et al. 2020, Appendix E.3. Shapes (token-major; the paper's column j is row j):

    K  [.., n, d]  grid indices in {-1, 0, ..., N-1}   (-1: the value -delta^(-nd))
    Z  [.., n, d]  layer input/output                  u [d] = (1, N, ..., N^(d-1))
    ids [.., n]    column ids u^T Z_j                  q(L) = u^T g_c(L)

Selective shift head (m = 1, hardmax), with ``b`` a query threshold:

    psi(Z; b)_{1,j} = max_k u^T Z_k   if u^T Z_j > b
                      min_k u^T Z_k   if u^T Z_j < b          (other rows 0)

as an attention head of ``modules.Attention``: W_Q = W_K = W_V = u^T, query bias
b_Q = -b (the core adds b_Q to the query), W_O = e_1. Two heads give

    Psi(Z; l - delta/2, l + delta/2) = psi(Z; l - delta/2) - psi(Z; l + delta/2)

which shifts the first coordinate of every column whose id equals l by
max_k id_k - min_k id_k and leaves all else untouched. The network g_c is

    for l in [0 : delta : delta^(-d+1) - delta], increasing     (N^d layers, h = 2)
        Z <- Z + delta^(-d) Psi(Z; l - delta/2, l + delta/2)
    Z <- Z + delta^(-(n+1)d) psi(Z; 0)                          (1 layer, h = 1)

i.e. ``delta^-d + 1`` attention layers. With l_1 < ... < l_n the ids of a point of
Category 1 (G~_delta: distinct in-range columns), the sweep produces

    l~_j = l_j + sum_{k=1}^{j-1} delta^(-kd) (l_{j-k} - l_{j-k+1}) + delta^(-jd) (l_n - l_1)

and q(L)_j = l~_j + delta^(-(n+1)d) l~_n. Lemma 8's properties, with
t_l = delta^(-2nd+1) (delta^-d - 1) and t_r = delta^(-(2n+1)d+1) (delta^-d - 1):

    8.1  L in G~: the entries of q(L) are distinct;
    8.2  L, L' in G~ not permutations of each other: q(L), q(L') share no entry;
    8.3  L in G~: q(L) in [t_l, t_r];
    8.4  L in G+ \ G~: q(L) outside [t_l, t_r];

and Lemma 10: delta^(-(n-1)d+1)(delta^-d - 1) <= l~_n
<= delta^(-nd+1)(delta^-d - 1) - delta(delta^-d - 1)^2, and L -> l~_n is one-to-one.

Theorem 3 (Appendix G.2): inputs L + E, n N^d sweep layers; the
map is ``PositionalContextualMapping`` (a ``ContextualMapping`` whose overrides carry
what differs), its closed forms (sweep ids, final scale, the exhaustive [t_l, t_r] and
bit bound) are ``yun.stages.contextual_positional``.

Exact arithmetic
----------------
Every value is scaled by S (a multiple of 2N, default 2N): inputs k/N -> kS/N,
-N^(nd) -> -S N^(nd); query biases -S(l -+ delta/2) are integers; the weights u,
+-N^d e_1, N^((n+1)d) e_1 are integers and are *not* scaled (hardmax is invariant
under the positive factor S^2 on the scores, values scale by S). All ids are even
multiples of S/(2N) while thresholds are odd ones, so no query is ever zero in the
sweep; in the final layer a zero query needs every id 0, where the tie average is 0.
Hence every tie average is exact and the network runs in exact integer arithmetic:
int64 (the core's exact mode) or limbs (``exact.limbs``), as the bit planner decides.

Bit bound: ``contextual_params.contextual_mapping_bound`` (proved in its module).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import construction, layers
from transformer_ua.exact import limbs, planner
from transformer_ua.exact.ops import ExactOps
from transformer_ua.yun import enumeration
from transformer_ua.yun.grid import Grid, check_scale, out_of_range_value, u_vector
from transformer_ua.yun.stages import gc_kernels
from transformer_ua.yun.stages.contextual_positional import (
    positional_bound, positional_grid, positional_interval,
    positional_sweep_max, theorem3_final_scale, theorem3_sweep_ids)
from transformer_ua.yun.stages.contextual_params import (
    interval, lemma10_bounds, theorem2_sweep_ids, theorem2_final_scale,
    contextual_mapping_bound, sweep_bound, parameter_count_of,
    final_params, contextual_mapping_params)


@dataclasses.dataclass(frozen=True, eq=False)
class ContextualMapping:
  """g_c of Lemma 8 for one configuration, with params and exact evaluation.

  Attributes:
    d, n, resolution, scale: configuration; N = resolution = 1/delta, S = scale.
    u: (1, N, ..., N^(d-1)).
    t_l, t_r: Lemma 8's interval (Fractions).
    id_lower, id_upper: bounds on the swept ids l~_n (Lemma 10's; Fractions).
    sweep_ids: swept ids in units of delta; final_scale: W_O of the global shift.
    segments: (sweep segment, global-shift segment).
    params: paper-valued float64 params (``modules.Network(segments)`` pytree).
    exact_params: scaled-integer params in the chosen arithmetic: int64 arrays (the
      core's exact integer mode), or digit constants (``exact.limbs``).
    arithmetic: the planner's choice (``planner.Arithmetic``).
    ops: comparisons, selections and arithmetic on values of that arithmetic.
    bound: proven bound on every scaled intermediate (``contextual_mapping_bound``).
    positional: False here; ``PositionalContextualMapping`` (Theorem 3, Appendix G.2:
      inputs L + E) is True (read-only, for callers of the bool builder).
    ties: 'paper' (this map); ``yun.stages.contextual_ties`` builds the 'complete' one.

  What Theorem 3 changes is ``PositionalContextualMapping``'s overrides: the closed
  forms (``closed_forms``), the encoding of grid indices (+ E), their range (no -1),
  the id-only sweep's bound and the points g_c takes.
  """

  d: int
  n: int
  resolution: int
  scale: int
  u: tuple
  t_l: Fraction
  t_r: Fraction
  id_lower: Fraction
  id_upper: Fraction
  sweep_ids: np.ndarray
  final_scale: int
  segments: tuple
  params: dict
  exact_params: dict
  arithmetic: planner.Arithmetic
  ops: ExactOps
  bound: int
  positional: bool = False
  ties: str = 'paper'

  #: The repr's construction name.
  repr_kind: ClassVar[str] = 'Lemma 8'
  #: Smallest grid index (-1: the out-of-range value -N^(nd)).
  min_index: ClassVar[int] = -1

  # -- the closed forms (the builder's inputs) --------------------------------

  @property
  def grid(self) -> Grid:
    """Grid(d, n, N)."""
    return Grid(self.d, self.n, self.resolution)

  @classmethod
  def sweep_layers(cls, grid: Grid) -> int:
    """N^d selective shifts (Theorem 2)."""
    return grid.N ** grid.d

  @classmethod
  def count_parameters(cls, grid: Grid) -> int:
    """Weights of g_c: ``sweep_layers`` two-head layers of h(4md + m) weights each, and
    one single-head layer."""
    return parameter_count_of(cls.sweep_layers(grid), grid.d)

  @classmethod
  def closed_forms(cls, grid: Grid, scale: int) -> dict:
    """Lemma 8's bit bound, sweep ids, final scale and [t_l, t_r], and Lemma 10's
    bounds on the swept ids: the fields ``build`` fills in."""
    bound = contextual_mapping_bound(grid, scale)
    t_l, t_r = interval(grid)
    lo, hi = lemma10_bounds(grid)
    return {'bound': bound, 'sweep_ids': theorem2_sweep_ids(grid.d, grid.N),
            'final_scale': theorem2_final_scale(grid), 't_l': t_l, 't_r': t_r,
            'id_lower': lo, 'id_upper': hi}

  @classmethod
  def build(cls, grid: Grid, *, scale: int | None = None,
            arithmetic: str = 'auto') -> ContextualMapping:
    """Builds this class's g_c (``closed_forms``) and plans its arithmetic
    (``yun.stages.contextual_ties`` has its own builder)."""
    S = check_scale(scale, grid.N)
    return _build(cls, grid, S=S, arithmetic=arithmetic)

  # -- metadata -------------------------------------------------------------

  @property
  def bits_required(self) -> int:
    return self.arithmetic.bits_required

  def __repr__(self) -> str:
    return (f'ContextualMapping({self.repr_kind}: d={self.d}, n={self.n}, N={self.resolution}, '
            f'{self.depth()} layers, t_l={float(self.t_l):.4g}, t_r={float(self.t_r):.4g}, '
            f'{self.arithmetic.describe()})')

  def depth(self) -> int:
    return sum(s.depth for s in self.segments)

  @property
  def sweep_index(self) -> int:
    """Index of the selective-shift sweep among ``segments``."""
    return 0

  @property
  def num_sweep_layers(self) -> int:
    return self.segments[self.sweep_index].depth

  def num_params(self) -> int:
    return layers.count_params(self.params)

  @property
  def out_of_range(self) -> int:
    """delta^(-nd)."""
    return out_of_range_value(self.grid)

  @property
  def limbs(self) -> bool:
    return self.arithmetic.kind == 'limbs'

  def network(self):
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    return modules.Network(self.segments, param_dtype=jnp.float64)

  # -- the construction contract (``transformer_ua.construction``) ----------

  def layer_counts(self) -> dict:
    """{'contextual': {'attention': ..(, 'feedforward': ..)}}: Lemma 8's N^d + 1
    attention layers (ties='complete': one offset feed-forward layer too)."""
    return construction.segment_counts(self.segments, 'contextual')

  def float_params(self) -> dict:
    """The paper-valued float64 params (``params``), on real inputs."""
    return self.params

  def grid_indices(self, x) -> np.ndarray:
    """Points of G+ (what g_q outputs: k/N, or -N^(nd); Theorem 3: j + k/N for token j,
    0-based) [.., n, d] -> grid indices (k, or -1 for -N^(nd))."""
    x = np.asarray(x, np.float64)
    return np.where(x < -self.out_of_range / 2, -1,
                    np.rint(x * self.resolution)).astype(np.int64)

  def apply_exact(self, x) -> np.ndarray:
    """g_c(X) for X [B, n, d] on G+ (``grid_indices``) as Fractions [B, n, d], by the
    exact integer network (``forward``)."""
    out = self.forward(self.grid_indices(x))
    if int(out['inexact']):
      raise ValueError('an inexact hardmax tie average occurred (contradicts the '
                       'construction).')
    return self.to_fractions(out['z'])

  def apply(self, x) -> np.ndarray:
    """g_c(X) as float64 (``apply_exact`` rounded; the literal float network is
    ``network().apply({'params': float_params()}, x)``)."""
    return np.asarray(self.apply_exact(x), np.float64)

  # -- exact evaluation -----------------------------------------------------

  def check_indices(self, k) -> np.ndarray:
    """Validates grid indices [.., n, d] in {-1, ..., N-1}; returns an int64 array."""
    k = np.asarray(k)
    if k.ndim < 2 or k.shape[-2:] != (self.n, self.d):
      raise ValueError(f'grid indices must have shape [..., n={self.n}, d={self.d}], '
                       f'got {k.shape}.')
    if not np.issubdtype(k.dtype, np.integer):
      raise ValueError(f'grid indices must be integers, got dtype {k.dtype}.')
    if k.size and (k.min() < self.min_index or k.max() >= self.resolution):
      raise ValueError(f'grid indices must lie in {self.allowed_indices()}.')
    return k.astype(np.int64)

  def allowed_indices(self) -> str:
    """The grid indices' range, in words (``check_indices``' message)."""
    return f'{{-1, 0, ..., {self.resolution - 1}}} (-1 = out of range)'

  def scaled_in_range(self, k):
    """In-range grid indices -> scaled values k S/N: int64 for a jnp ``k`` (call under
    x64), Python ints for a NumPy object array ``k``."""
    return k * (self.scale // self.resolution)

  def encode(self, k):
    """Grid indices -> scaled integers in the arithmetic (jnp; call under x64)."""
    k = jnp.asarray(k, jnp.int64)
    inside = self.scaled_in_range(k)
    outside = self.ops.constant(-self.scale * self.out_of_range)
    return self.ops.where(k < 0, outside, self.ops.from_int64(inside))

  def encode_python(self, k) -> np.ndarray:
    """``encode`` on the host: the same integers as Python ints (an object array), and
    no device program (a verifier's start-up tables)."""
    k = np.asarray(k, np.int64)
    return np.where(k < 0, -self.scale * self.out_of_range,
                    self.scaled_in_range(k.astype(object)))

  @property
  def id_sweep(self) -> bool:
    """g_c is one selective-shift sweep then one global shift (Lemma 8, Theorem 3):
    what the id-only kernel (``yun.stages.sweep``, 'sweep') runs."""
    return self.sweep_index == 0 and len(self.segments) == 2

  @property
  def id_sweep_bound(self) -> int:
    """Bound on |every integer| of the id-only sweep (``sweep_bound``)."""
    return sweep_bound(self.grid, self.scale)

  def grid_points(self, limit: int) -> np.ndarray | None:
    """Grid indices [P, n, d] of every ordered point of G+ (entries -1..N-1), the
    inputs g_c takes; None when there are more than ``limit``."""
    d, n, N = self.d, self.n, self.resolution
    total = (N + 1) ** (d * n)
    if total > limit:
      return None
    with jax.enable_x64(True):
      return np.asarray(enumeration.make_codec(self.grid)['decode_full'](jnp.arange(total)))

  def forward_fn(self, kernel: str = gc_kernels.DEFAULT):
    """Pure ``f(exact_params, k) -> dict`` (jit/vmap-able), call under ``enable_x64``.

    Args:
      kernel: a g_c kernel of ``yun.stages.gc_kernels`` ('core': the core's layers; 'fast':
        the shared-projection identity; 'sweep': column ids alone). All compute the
        same integers (tested on whole grids).
    Output dict: ``sweep_ids`` (u^T of the sweep output: l~), ``ids`` (q = u^T g_c),
    ``z`` (g_c output, scaled) and ``inexact`` (inexact tie averages, must be 0).
    Arrays are int64 ``[.., n]`` or limbs ``[.., n, K]`` (``gc_kernels.GcResult``).
    """
    f = gc_kernels.kernel_fn(self, kernel)
    return lambda params, k: f(params, k).as_dict()

  def forward(self, k) -> dict:
    """Runs g_c exactly on grid indices [B, n, d] (kernel 'core'); see ``forward_fn``."""
    return gc_kernels.evaluate(self, k).as_dict()

  def column_ids_batch(self, k):
    """Scaled q(L) = S u^T g_c(L) for a batch: int64 [B, n] or limbs [B, n, K]."""
    out = self.forward(k)
    if int(out['inexact']):
      raise ValueError('an inexact hardmax tie average occurred; the exact output is not '
                       'an integer (this contradicts the construction).')
    return out['ids']

  def to_fractions(self, values) -> np.ndarray:
    """Scaled arithmetic values -> object array of exact Fractions (divided by S)."""
    ints = self.ops.to_python(values)
    return np.vectorize(lambda v: Fraction(int(v), self.scale), otypes=[object])(ints)

  def column_ids(self, k) -> list[Fraction]:
    """u^T g_c(L) for one point K [n, d] as n exact Fractions (runs the attention layers)."""
    k = self.check_indices(k)
    if k.shape != (self.n, self.d):
      raise ValueError(f'column_ids takes one point of shape (n, d) = ({self.n}, {self.d}); '
                       f'use column_ids_batch for batches, got {k.shape}.')
    return list(self.to_fractions(self.column_ids_batch(k[None]))[0])

  def describe(self) -> str:
    return (f'g_c: d={self.d}, n={self.n}, N={self.resolution}: {self.depth()} attention '
            f'layers ({self.num_sweep_layers} selective shifts + 1 global shift), '
            f'{self.num_params()} weights; t_l={self.t_l}, t_r={self.t_r}; arithmetic '
            f'{self.arithmetic.describe()}')


def _build(cls, grid: Grid, *, S: int, arithmetic: str) -> ContextualMapping:
  """``cls``'s g_c from its ``closed_forms``, with the arithmetic planned (checked args)."""
  d, n, N = grid.d, grid.n, grid.N
  forms = cls.closed_forms(grid, S)
  sweep_ids, final_scale = forms['sweep_ids'], forms['final_scale']
  arith = planner.plan(forms['bound'], arithmetic)
  segments, params = contextual_mapping_params(grid, sweep_ids=sweep_ids,
                                               final_scale=final_scale, dtype='float64')
  if arith.kind == 'int64':
    _, exact = contextual_mapping_params(grid, scale=S, dtype='int64',
                                         sweep_ids=sweep_ids, final_scale=final_scale)
  else:
    # The sweep's weights are small (int64, converted on device); only the global
    # shift's W_O may exceed int64 (Python ints -> digits).
    _, exact = contextual_mapping_params(grid, scale=S, dtype='int64',
                                         sweep_ids=sweep_ids, final_scale=1)
    exact['segment_1']['attention'] = final_params(u_vector(d, N), final_scale, object)
    with jax.enable_x64(True):
      exact = limbs.params_to_digits(exact, arith.limb_bits)
  return cls(
      d=d, n=n, resolution=N, scale=S, u=u_vector(d, N), segments=segments,
      params=params, exact_params=exact, arithmetic=arith,
      ops=ExactOps(arith.spec if arith.kind == 'limbs' else None), **forms)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class PositionalContextualMapping(ContextualMapping):
  """g_c of Theorem 3 (Appendix G.2): inputs L + E (token j, 0-based, offset by j in
  every coordinate), n N^d sweep layers over ``theorem3_sweep_ids`` and the global shift
  scaled by n delta^(-(n+1)d-1); t_l, t_r are ``positional_interval`` and
  id_lower/id_upper bound the sweep ids ((n - 1) R and the exhaustive max) instead of
  Lemma 10's; grid indices are in range (no -1). Closed forms:
  ``yun.stages.contextual_positional``."""

  positional: bool = dataclasses.field(default=True, init=False)

  repr_kind: ClassVar[str] = 'Theorem 3, positional'
  min_index: ClassVar[int] = 0

  @classmethod
  def sweep_layers(cls, grid: Grid) -> int:
    """n N^d selective shifts (Theorem 3)."""
    return grid.N ** grid.d * grid.n

  @classmethod
  def closed_forms(cls, grid: Grid, scale: int) -> dict:
    """Theorem 3's bit bound, sweep ids, final scale, [t_l, t_r] and sweep-id bounds
    (``yun.stages.contextual_positional``)."""
    bound = positional_bound(grid, scale)
    sweep_ids = theorem3_sweep_ids(grid)
    final_scale = theorem3_final_scale(grid)
    t_l, t_r = positional_interval(grid)
    lo = Fraction((grid.n - 1) * sum(u_vector(grid.d, grid.N)))
    return {'bound': bound, 'sweep_ids': sweep_ids, 'final_scale': final_scale,
            't_l': t_l, 't_r': t_r, 'id_lower': lo, 'id_upper': positional_sweep_max(grid)}

  def grid_indices(self, x) -> np.ndarray:
    """Outputs of Theorem 3's g_q (j + k/N for token j, 0-based) [.., n, d] -> k."""
    x = np.asarray(x, np.float64)
    return np.rint((x - np.arange(self.n)[:, None]) * self.resolution).astype(np.int64)

  def allowed_indices(self) -> str:
    return (f'{{0, ..., {self.resolution - 1}}} (the positional construction has no '
            'out-of-range value)')

  def scaled_in_range(self, k):
    """+ E: token j (0-based) is offset by j S in every coordinate."""
    offsets = self.scale * np.arange(self.n, dtype=object)[:, None]    # Python ints
    return super().scaled_in_range(k) + (offsets if k.dtype == object
                                         else offsets.astype(np.int64))

  @property
  def id_sweep_bound(self) -> int:
    """The map's own bound (``positional_bound``: its ids come from an exhaustive sweep)."""
    return self.bound

  def grid_points(self, limit: int) -> np.ndarray:
    """The N^(dn) grid points (``positional_grid``; no out-of-range value), whatever
    ``limit``."""
    del limit
    return positional_grid(self.grid)
