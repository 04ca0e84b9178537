r"""Lemma 9: function value mapping g_v by token-wise feed-forward layers (r = 1, Phi).

Yun et al. 2020, Appendix E.4. Input: Z = g_c(L) from ``yun.stages.contextual``. Shapes
(token-major): Z [.., n, d]; the target is given on the C = C(N^d, n) Category-1
permutation classes, ``A [C, n, d]`` (class c's representative has its columns sorted
by column index; its output column j is A[c, j]); equivariance defines A_L elsewhere.

    kill:       Z <- Z - (M + 1) 1_d phi_k(u^T Z),  phi_k = 0 on [t_l, t_r], 1 outside
    clean i:    Z <- Z + e_i phi_c(e_i^T Z),        phi_c(t) = -t (t < 0), 0 (t >= 0)
                                                     i = 1, ..., d
    bump (c,j): Z <- Z + (A[c,j] - g_c(L_c)_j) phi_b(u^T Z - q_cj),
                phi_b = 1 on [-delta/2, delta/2), 0 outside
                one per distinct value q_cj = u^T g_c(L_c)_j: n C(N^d, n) layers

1 + d + n C(delta^-d, n) layers, each W_1 [1, d], b_1 [1], W_2 [d, 1], b_2 [d] plus a
Phi unit (3d + 1 weights). (The paper writes 1_n in the kill layer; the shift applies
to all d rows.) M is any number >= every entry of g_c(G+): we take the proven bound
of ``contextual_mapping_bound`` (over S), so the kill makes every entry of a column
with u^T Z outside [t_l, t_r] strictly negative and the d clean-up layers zero it.

Theorem 3 (``cm.positional``, Appendix G.3): no permutation reduction, so the classes
are all N^(dn) grid points (``contextual_positional.positional_grid`` order) and there are
n N^(dn) bump layers; kill and clean-up are kept (they never fire on L + E).

Trap the paper does not mention: after bump (c, j) fires, the column holds A[c, j];
a *later* bump must not fire on it. Bump windows are [q - delta/2, q + delta/2) with
q >= t_l, so the builder checks |u^T A[c, j]| < t_l - delta/2 for every target column
and refuses otherwise. Windows of distinct q (at least delta apart: Property 8.2)
are disjoint, so each column fires at most one bump.

Exact evaluation
----------------
Scaled by S, phi_k and phi_b (constant pieces) keep their values and move their
breakpoints by S, and W_2 is multiplied by S; phi_c (slope -1) moves its
breakpoint and intercept. So the literal network is integer when S A is: targets
are rationals ``numerators / denominator`` with ``denominator | S``.

``ValueMapping.apply_compact`` is a compact equivalent of the literal network
(equal to it on every input, given the trap check): kill and clean-up exactly, then
a binary search for the (unique) bump window containing u^T Z, whose target it
returns (``ValueMapping.select`` also returns the *index* of that bump). Reused with
any payload (e.g. float target values) the output is the payload of the selected bump *exactly*: no
rounding enters the selection, and the payload never passes through the integer
arithmetic. Tests prove compact == literal on whole grids.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import construction, layers
from transformer_ua.exact import limb_layers, limbs, planner
from transformer_ua.exact.ops import ExactOps
from transformer_ua.layers import Segment
from transformer_ua.yun.stages import contextual
from transformer_ua.yun.stages import gc_kernels

#: Hidden width of every value-mapping layer.
WIDTH = 1
#: Classes per jit call when running g_c on the representatives.
REP_CHUNK = 1 << 14


def segments_for(variant) -> tuple[Segment, ...]:
  """(kill and clean-up, bumps) of the variant's g_v; without the bumps when G~ is
  empty (n > N^d)."""
  kill = Segment('feedforward', variant.d + 1, width=WIDTH, activation='phi',
                 name='kill_and_clean')
  bumps = variant.num_bump_layers()
  if not bumps:
    return (kill,)
  return (kill, Segment('feedforward', bumps, width=WIDTH, activation='phi', name='bumps'))


def round_targets(values, denominator: int):
  """Real targets -> (integer numerators with values ~ numerators / denominator, max error).

  The rounding error is at most 1 / (2 denominator) per entry; the returned max is exact
  for the float64 inputs.
  """
  values = np.asarray(values, np.float64)
  num = np.rint(values * denominator)
  err = float(np.max(np.abs(values - num / denominator))) if values.size else 0.0
  return num.astype(np.int64), err


def random_targets(variant, *, seed: int = 0, magnitude: int = 8) -> np.ndarray:
  """A random target on ``variant``'s value-map classes: integer numerators [C, n, d]
  in [-m, m]."""
  rng = np.random.default_rng(seed)
  return rng.integers(-magnitude, magnitude + 1,
                      size=(variant.num_classes(), variant.n, variant.d)).astype(np.int64)


def kill_clean_params(d, t_l, t_r, m_plus_1, u, one):
  """Kill + d clean-up layers (object arrays of Python ints, or floats when one=1.0).

  ``one`` is the scale S (exact) or 1.0 (paper values): breakpoints scale by S, the
  kill's W_2 = -S (M + 1), constant-piece intercepts stay 0/1.
  """
  obj = not isinstance(one, float)
  dt = object if obj else np.float64
  L = d + 1
  w1 = np.zeros((L, 1, d), dt)
  w1[0, 0] = u
  for i in range(d):
    w1[i + 1, 0, i] = 1
  w2 = np.zeros((L, d, 1), dt)
  w2[0, :, 0] = -m_plus_1 * one
  for i in range(d):
    w2[i + 1, i, 0] = 1
  breaks = np.zeros((L, 1, 2), dt)
  breaks[0, 0] = (t_l * one, t_r * one)
  slopes = np.zeros((L, 1, 3), dt)
  slopes[1:, 0, 0] = -1
  intercepts = np.zeros((L, 1, 3), dt)
  intercepts[0, 0] = (1, 0, 1)
  left_closed = np.zeros((L, 1, 2), bool)
  left_closed[0, 0, 1] = True  # t_r belongs to the middle piece: [t_l, t_r] closed
  zeros = lambda *s: np.zeros(s, dt)  # noqa: E731
  if obj:
    fix = lambda a: np.vectorize(  # noqa: E731  ints stay ints, rationals stay exact
        lambda v: int(v) if Fraction(v).denominator == 1 else Fraction(v), otypes=[object])(a)
    w1, w2, breaks, slopes, intercepts = map(fix, (w1, w2, breaks, slopes, intercepts))
  return {'W_1': w1, 'b_1': zeros(L, 1) if not obj else np.full((L, 1), 0, object),
          'W_2': w2, 'b_2': zeros(L, d) if not obj else np.full((L, d), 0, object),
          'phi': {'breaks': breaks, 'slopes': slopes, 'intercepts': intercepts,
                  'left_closed': left_closed}}


@dataclasses.dataclass(frozen=True, eq=False)
class ValueMapping:
  """g_v of Lemma 9 for a contextual mapping ``cm`` and a target on its classes.

  Attributes:
    cm: the ``ContextualMapping``.
    variant: the construction's ``Variant`` (classes, bumps, counts).
    numerators, denominator: the target A = numerators / denominator, [C, n, d].
    kill_bound: the kill constant M (>= every entry of g_c(G+), unscaled); not the head
      size m.
    centers: sorted scaled bump centers S q_cj, [P] (int64) or [P, K] (limbs).
    center_owner: [P] flat index c * n + j of each sorted center.
    rep_z: g_c outputs of the representatives (scaled), [C, n, d(, K)].
    targets_scaled: S A as values of the arithmetic, [C, n, d(, K)].
    literal_arithmetic: planned arithmetic of the literal network.
    literal_bound: proven bound on its intermediates.
  """

  cm: contextual.ContextualMapping
  numerators: np.ndarray
  denominator: int
  kill_bound: int
  centers: jax.Array
  center_owner: jax.Array
  rep_z: jax.Array
  targets_scaled: jax.Array
  literal_arithmetic: planner.Arithmetic
  literal_bound: int
  variant: object = None

  @property
  def d(self):
    return self.cm.d

  @property
  def n(self):
    return self.cm.n

  @property
  def num_classes(self) -> int:
    return self.numerators.shape[0]

  @property
  def segments(self):
    return segments_for(self.variant)

  def __repr__(self) -> str:
    cm = self.cm
    return (f'ValueMapping(Lemma 9: d={cm.d}, n={cm.n}, N={cm.resolution}, '
            f'{int(self.center_owner.shape[0])} bumps, {self.depth()} layers, values in '
            f'multiples of 1/{self.denominator})')

  def depth(self) -> int:
    return sum(s.depth for s in self.segments)

  def num_params(self) -> int:
    return self.variant.value_parameters()

  # -- the construction contract (``transformer_ua.construction``) ------------

  def layer_counts(self) -> dict:
    """{'value': {'feedforward': d + 1 + bumps}} (kill, d clean-ups, one per bump)."""
    return construction.segment_counts(self.segments, 'value')

  def network(self):
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    return modules.Network(self.segments, param_dtype=jnp.float64)

  def float_params(self) -> dict:
    """The literal g_v's paper-valued float64 params (``params('float64')``)."""
    return self.params('float64')[1]

  def apply_exact(self, z) -> np.ndarray:
    """g_v(Z) for Z [B, n, d] in real units (e.g. ``cm.apply_exact`` of G+ points:
    Fractions; floats are taken exactly) as Fractions, by the compact g_v (equal to the
    literal layers on every input, module docstring). Z S must be integer."""
    cm = self.cm
    zs = construction.to_fractions(z) * cm.scale
    if zs.size and any(v.denominator != 1 for v in zs.flat):
      raise ValueError(f'g_v evaluates inputs on the grid (1/S) Z, S = {cm.scale}.')
    ints = np.vectorize(int, otypes=[object])(zs) if zs.size else zs
    with jax.enable_x64(True):
      out = self.apply_compact(jnp.asarray(cm.ops.constants(ints)))
    return cm.to_fractions(out)

  def apply(self, z) -> np.ndarray:
    """g_v(Z) as float64 (``apply_exact`` rounded; the literal float network is
    ``network().apply({'params': float_params()}, z)``)."""
    return np.asarray(self.apply_exact(z), np.float64)

  # -- compact equivalent ------------------------------------------------------

  def select_fn(self):
    """Pure ``f(z) -> (out, bump, killed)`` on g_c outputs z [.., n, d] (cm arithmetic).

    out: scaled g_v(z) [.., n, d]; bump: index c * n + j of the bump that fired, or
    -1 [.., n]; killed: the kill layer fired [.., n]. Call under ``enable_x64``.
    """
    cm, ops = self.cm, self.cm.ops
    s = cm.scale
    half = s // (2 * cm.resolution)
    t_l, t_r = ops.constant(int(cm.t_l * s)), ops.constant(int(cm.t_r * s))
    shift = ops.constant(s * (self.kill_bound + 1))
    h = ops.constant(half)
    centers, owner = self.centers, self.center_owner
    flat_targets = self.targets_scaled.reshape((-1, cm.d) + self.targets_scaled.shape[3:])
    p = owner.shape[0]

    def f(z):
      ids = ops.dot_const(z, cm.u)                       # u^T Z   [.., n]
      killed = (ops.cmp(ids, t_l) < 0) | (ops.cmp(ids, t_r) > 0)
      z1 = ops.where(killed[..., None], ops.sub(z, shift), z)   # kill (all d rows)
      z2 = ops.relu(z1)                                   # d clean-up layers
      x = ops.dot_const(z2, cm.u)
      if p == 0:  # G~ is empty (n > N^d): no bump layers
        return z2, jnp.full(killed.shape, -1, jnp.int64), killed
      pos = ops.searchsorted_right(centers, ops.sub(x, h))  # first center > x - h
      cand = jnp.minimum(pos, p - 1)
      fired = (pos < p) & (ops.cmp(centers[cand], ops.add(x, h)) <= 0)  # c <= x + h
      bump = jnp.where(fired, owner[cand], -1)
      out = ops.where(fired[..., None], flat_targets[jnp.maximum(bump, 0)], z2)
      return out, bump, killed

    return f

  def compact_fn(self):
    """Pure ``f(z) -> out``: the compact g_v, z [.., n, d] -> scaled g_v(z) [.., n, d]
    (cm arithmetic), for use inside jit; the out of ``select_fn``."""
    select = self.select_fn()
    return lambda z: select(z)[0]

  @functools.cached_property
  def _jit_select(self):
    return jax.jit(self.select_fn())

  def select(self, z):
    """(out, bump, killed) of ``select_fn`` on z [B, n, d], jitted, exact."""
    with jax.enable_x64(True):
      return self._jit_select(z)

  def apply_compact(self, z):
    """The compact g_v on z [B, n, d] (cm arithmetic): scaled g_v(z) [B, n, d]."""
    return self.select(z)[0]

  def payload(self, bump, values) -> np.ndarray:
    """Outputs from bump indices and any payload ``values`` [C, n, d] (e.g. floats).

    Columns where no bump fired get 0 (for g_c(G+) inputs those are exactly the
    killed columns: Lemma 8, verified).
    """
    values = np.asarray(values)
    flat = values.reshape(-1, values.shape[-1])
    bump = np.asarray(bump)
    if not flat.shape[0]:  # G~ empty (n > N^d): no bump can fire
      return np.zeros(bump.shape + values.shape[-1:], values.dtype)
    return np.where((bump >= 0)[..., None], flat[np.maximum(bump, 0)], 0)

  # -- literal network ---------------------------------------------------------

  def params(self, dtype: str = 'float64', values=None):
    """(segments, params) of the literal g_v.

    dtype: 'float64' (paper values), or 'exact' (scaled, in ``literal_arithmetic``:
    int64 arrays, or digit constants for limbs).
    values: float64 only: real target values [C, n, d] replacing numerators /
      denominator in the bump weights W_2 = A[c, j] - g_c(L_c)_j (e.g. f(C_L) of
      Lemma 4 unrounded); the bump *selection* does not depend on them.
    """
    if values is not None and dtype != 'float64':
      raise ValueError("values= is only meaningful for dtype='float64'.")
    cm = self.cm
    s = cm.scale
    u = list(cm.u)
    with jax.enable_x64(True):
      if dtype == 'float64':
        kc = kill_clean_params(cm.d, float(cm.t_l), float(cm.t_r),
                                float(self.kill_bound + 1),
                                [float(v) for v in u], 1.0)
        kc = jax.tree_util.tree_map(jnp.asarray, kc)
        ops = cm.ops
        centers = ops.to_float(self.centers) / s
        if values is None:
          w2 = (ops.to_float(self.targets_scaled) - ops.to_float(self.rep_z)) / s
        else:
          values = jnp.asarray(np.asarray(values, np.float64))
          if values.shape != self.targets_scaled.shape[:3]:
            raise ValueError(f'values must have shape {self.targets_scaled.shape[:3]}, '
                             f'got {values.shape}.')
          w2 = values - ops.to_float(self.rep_z) / s
        half = 0.5 / cm.resolution
        bumps = self._bump_tree(centers, w2, jnp.asarray(u, jnp.float64), half, jnp.float64)
      elif dtype == 'exact':
        ar = self.literal_arithmetic
        kc = kill_clean_params(cm.d, int(cm.t_l), int(cm.t_r), self.kill_bound + 1, u, s)
        centers, targets, rep_z = map(self.to_literal,
                                      (self.centers, self.targets_scaled, self.rep_z))
        half = s // (2 * cm.resolution)
        if ar.kind == 'limbs':
          lit = ExactOps(ar.spec)
          w2 = lit.sub(targets, rep_z)
          kc = limbs.params_to_digits(kc, ar.limb_bits)
          digits = lambda v: jnp.asarray(limbs.digits_from_python(  # noqa: E731
              np.asarray(v, dtype=object), ar.limb_bits))
          bumps = self._bump_tree(lit.digits(centers), lit.digits(w2), digits(u),
                                  digits(half), jnp.int64, digits=True)
        else:
          w2 = targets - rep_z
          kc = jax.tree_util.tree_map(
              lambda a: jnp.asarray(a.astype(np.int64) if a.dtype == object else a), kc)
          bumps = self._bump_tree(centers, w2, jnp.asarray(u, jnp.int64), half, jnp.int64)
      else:
        raise ValueError(f"dtype={dtype!r}; allowed: 'float64', 'exact'.")
    params = {'segment_0': {'feedforward': kc}}
    if len(self.segments) > 1:
      params['segment_1'] = {'feedforward': bumps}
    return self.segments, params

  def _bump_tree(self, centers, w2_by_owner, u, half, dtype, digits=False):
    """Stacked bump params, layer order = sorted centers (vectorized, no layer loop)."""
    if not self.center_owner.shape[0]:
      return None
    d = self.cm.d
    owner = self.center_owner
    p = owner.shape[0]
    w2 = w2_by_owner.reshape((-1, d) + w2_by_owner.shape[3:])[owner]  # [P, d(, K)]
    if digits:
      kc_u = u.shape[-1]
      kc_h = half.shape[-1]
      one = jnp.ones((1,), jnp.int64)
      zero = jnp.zeros((1,), jnp.int64)
      breaks = jnp.stack([-half, half])  # [2, Kh]
      return {'W_1': jnp.broadcast_to(u[None, None], (p, 1, d, kc_u)),
              'b_1': (-centers)[:, None],
              'W_2': w2[:, :, None],
              'b_2': jnp.zeros((p, d, 1), jnp.int64),
              'phi': {'breaks': jnp.broadcast_to(breaks, (p, 1, 2, kc_h)),
                      'slopes': jnp.zeros((p, 1, 3, 1), jnp.int64),
                      'intercepts': jnp.broadcast_to(jnp.stack([zero, one, zero]),
                                                     (p, 1, 3, 1)),
                      'left_closed': jnp.zeros((p, 1, 2), bool)}}
    return {'W_1': jnp.broadcast_to(u.astype(dtype), (p, 1, d)),
            'b_1': (-centers).astype(dtype)[:, None],
            'W_2': w2.astype(dtype)[:, :, None],
            'b_2': jnp.zeros((p, d), dtype),
            'phi': {'breaks': jnp.broadcast_to(jnp.asarray([-half, half], dtype), (p, 1, 2)),
                    'slopes': jnp.zeros((p, 1, 3), dtype),
                    'intercepts': jnp.broadcast_to(jnp.asarray([0, 1, 0], dtype), (p, 1, 3)),
                    'left_closed': jnp.zeros((p, 1, 2), bool)}}

  def literal_fn(self):
    """Pure ``f(z) -> out``: the literal g_v with its exact params, z [.., n, d] -> g_v(z)
    [.., n, d], both scaled in the literal arithmetic (``to_literal``), for use inside
    jit. Call under ``enable_x64``."""
    ar = self.literal_arithmetic
    segments = self.segments
    _, params = self.params('exact')

    def f(z):
      y = z
      for i, seg in enumerate(segments):
        if ar.kind == 'limbs':
          y, _, _ = limb_layers.limb_apply_segment(seg, params[f'segment_{i}'], y, ar.spec)
        else:
          y, _, _ = layers.apply_segment(seg, params[f'segment_{i}'], y)
      return y

    return f

  def to_literal(self, z):
    """Values of the cm arithmetic -> values of the literal network's arithmetic."""
    ar = self.literal_arithmetic
    if ar.kind == 'int64':
      return z
    if not self.cm.limbs:
      return limbs.from_int64(z, ar.spec)
    return limbs.resize(z, self.cm.arithmetic.spec, ar.spec)


def value_mapping_bound(cm, max_abs_target_scaled: int) -> int:
  """Proven bound on every scaled intermediate of the literal g_v (see module doc).

  With E = ``cm.bound`` (entries and u^T partial sums of g_c outputs), R = sum u,
  T = max |S A|: kill: W_2 phi <= S(M+1) <= E + 2S, entries after it >= -(2E + 2S);
  clean-up: entries in [0, E] after; bumps: u^T Z <= R max(E, T), minus a center
  (<= E), W_2 <= T + E.
  """
  e, s = cm.bound, cm.scale
  r = sum(cm.u)
  t = int(max_abs_target_scaled)
  return max(2 * e + 2 * s, r * max(e, t) + e, t + e)


def _distinct_centers(ops, flat, order, targets, variant):
  """Keeps one bump per distinct id (ties='complete': repeated tokens of a multiset
  share their id), checks that tokens sharing an id share their target, and that the
  number of distinct ids is the variant's bump count (ties='complete': N^d C(N^d + n -
  2, n - 1); else the map is not one-to-one). Paper and Theorem 3 ids are distinct
  (Lemma 8.1, 8.2): nothing is dropped."""
  d = variant.d
  same = ops.host_equal_adjacent(flat[order])          # [C n - 1]: equal to previous
  tgt = targets.reshape(-1, d).astype(object)[order]
  if np.any(same & np.any(tgt[1:] != tgt[:-1], axis=-1)):
    raise ValueError('ties=complete: equal tokens of a multiset have different targets; '
                     'the target must be permutation equivariant.')
  keep = order[np.concatenate([[True], ~same])]
  if len(keep) != variant.num_bump_layers():
    raise ValueError(f'{len(keep)} distinct ids, expected '
                     f'{variant.num_bump_layers()}: the contextual mapping '
                     'is not one-to-one on (multiset, token) (contradicts its proof).')
  return keep


def build_value_mapping(cm, targets, *, variant, denominator: int = 1,
                        literal_arithmetic: str = 'auto', chunk_size: int = REP_CHUNK,
                        kernel: str = 'fast') -> ValueMapping:
  """Builds Lemma 9's g_v for ``cm`` and a target given on the Category-1 classes.

  Args:
    cm: a ``contextual.ContextualMapping`` (its scale S must be a multiple of ``denominator``).
    variant: the ``yun.variants`` object ``cm`` was built for (classes, bumps, counts).
    targets: integer numerators [C, n, d], C = C(N^d, n) (ties=complete:
      C(N^d + n - 1, n)), in the order of ``representatives`` (columns of each
      representative sorted by column index).
    denominator: the target is A = targets / denominator.
    literal_arithmetic: arithmetic for the literal network ('auto', 'int64', 'limbs').
    chunk_size: classes per jit call when running g_c on the representatives.
    kernel: g_c kernel for the representatives ('sweep', 'fast' or 'core', same
      integers; ``gc_kernels.kernel_fn``).
  Raises:
    ValueError: wrong target shape/dtype, denominator not dividing S, or the trap
      check |u^T A_j| < t_l - delta/2 fails.
  """
  d, n, N = cm.d, cm.n, cm.resolution
  s = cm.scale
  c = variant.num_classes()
  targets = np.asarray(targets)
  if targets.shape != (c, n, d):
    what = variant.classes_label
    raise ValueError(f'targets must have shape [{what}, n, d] = [{c}, {n}, {d}], got '
                     f'{targets.shape}.')
  if targets.dtype != object and not np.issubdtype(targets.dtype, np.integer):
    raise ValueError('targets must be integer numerators (use round_targets for reals).')
  if not isinstance(denominator, (int, np.integer)) or denominator < 1 or s % denominator:
    raise ValueError(f'denominator={denominator!r} must be a positive integer dividing the '
                     f'scale S={s}; build the contextual mapping with '
                     f'scale=lcm(2N, denominator) = {math.lcm(2 * N, int(max(denominator, 1)))}.')
  factor = s // denominator
  tmax = int(np.max(np.abs(targets.astype(object)))) * factor if targets.size else 0
  # Trap check (exact): |u^T (S A_j)| < S t_l - S/(2N) for every target column.
  limit = int(cm.t_l * s) - s // (2 * N)
  u_obj = np.asarray(cm.u, dtype=object)
  col_ids = (targets.astype(object) * factor) @ u_obj if targets.size else np.zeros(0, object)
  worst = int(np.max(np.abs(col_ids))) if col_ids.size else 0
  if worst >= limit:
    raise ValueError(
        f'value-mapping trap: a target column has |u^T A| = {Fraction(worst, s)} >= '
        f't_l - delta/2 = {Fraction(limit, s)}; a later bump layer would fire on it. '
        'Use smaller target values.')
  ops = cm.ops
  if tmax * 2 + cm.bound + s >= (1 << (cm.arithmetic.capacity_bits - 1)):
    raise ValueError(f'targets too large for the {cm.arithmetic.describe()} arithmetic.')
  m = -(-cm.bound // s)  # M >= every entry of g_c(G+) (cm.bound bounds them, scaled)
  decode = variant.class_decoder()
  forward = gc_kernels.kernel_fn(cm, kernel)

  def run(params, start):
    rank = start + jnp.arange(chunk_size, dtype=jnp.int64)
    k = decode(jnp.minimum(rank, c - 1))
    out = forward(params, k)
    return out['ids'], out['z'], out['inexact']

  with jax.enable_x64(True):
    run = jax.jit(run)
    ids, zs = [], []
    if c == 0:  # G~ empty: no classes, no bumps
      q, z, _ = run(cm.exact_params, jnp.int64(0))
      ids, zs = [q[:0]], [z[:0]]
    for start in range(0, c, chunk_size):
      q, z, inexact = run(cm.exact_params, jnp.int64(start))
      if int(inexact):
        raise ValueError('inexact tie average in g_c on a representative.')
      take = min(chunk_size, c - start)
      ids.append(q[:take])
      zs.append(z[:take])
    ids = jnp.concatenate(ids)          # [C, n(, K)]
    rep_z = jnp.concatenate(zs)         # [C, n, d(, K)]
    flat = ids.reshape((c * n,) + ids.shape[2:])
    order = ops.sort_keys(np.asarray(flat))
    if variant.num_bump_layers() != c * n:   # repeated tokens share ids (ties='complete')
      order = _distinct_centers(ops, np.asarray(flat), order, targets, variant)
    centers = flat[jnp.asarray(order)]
    targets_scaled = jnp.asarray(ops.constants(targets.astype(object) * factor))
    center_owner = jnp.asarray(order, jnp.int64)
  bound = value_mapping_bound(cm, tmax)
  literal = planner.plan(bound, literal_arithmetic)
  if cm.limbs and literal.kind == 'int64':
    literal = planner.plan(bound, 'limbs')  # g_c outputs are limbs already
  if cm.limbs and literal.limb_bits != cm.arithmetic.limb_bits:
    w = cm.arithmetic.limb_bits
    literal = planner.plan(bound, f'limbs:{-(-literal.bits_required // w)}:{w}')
  return ValueMapping(cm=cm, numerators=targets, denominator=int(denominator),
                      kill_bound=int(m),
                      centers=centers, center_owner=center_owner,
                      rep_z=rep_z, targets_scaled=targets_scaled,
                      literal_arithmetic=literal, literal_bound=bound, variant=variant)
