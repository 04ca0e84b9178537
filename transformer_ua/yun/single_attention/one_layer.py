r"""One softmax attention layer as the contextual mapping: Theorem 2 with one attention layer.

After Kajitsuka & Sato (ICLR 2024): one single-head softmax self-attention layer with
rank-1 W_K W_Q^T (head size 1) is a contextual mapping; with token-wise feed-forward
layers around it, it approximates any continuous permutation-equivariant f. This module
builds one such network on Yun et al.'s grid and proves (and, on whole grids, certifies)
that it separates every context. Shapes are token-major: X, Z [.., n, d]; the paper's
X is d x n and its column j is our row j.

Pipeline (each stage a plain Transformer layer, residual included):

    g_q    Lemma 7, unchanged (``quantize``): X in the cube S_L  ->  L, L_j = k_j / N
    attn   one head, head size 1, softmax (no hardmax limit: the layer is exact):
             w      = (N, N^2, ..., N^d)            so m_j = w^T L_j in {0, .., M-1},
                                                    M = N^d, a bijection of cells
             key    k_k = w^T z_k = m_k             W_K = w^T
             query  q_j = lam (w^T z_j + T)         W_Q = lam w^T, b_Q = lam T, T = M - 1
             value  v_k = m_k                       W_V = w^T
             out    z_j <- z_j + c' e_1 sum_k softmax_k(q_j k_k) v_k,   W_O = c' e_1,
                    c' = 1 / (2 N (M - 1))
    shift  one token-wise feed-forward layer (bias only): z <- z + (O / N) e_1
    g_v    one bump layer per id (Lemma 9 with certified edges), see below.

The ids, the separation theorem and its proof, the plan of lam and the certified id
enclosures are in ``yun.single_attention.one_layer_ids``; the realized network g and its certification in
``yun.single_attention.one_layer_realized``.

Value map (token-wise, Lemma 9 with certified edges). Sort the ids; between consecutive
enclosures [lo_i, hi_i] < [lo_{i+1}, hi_{i+1}] put a dyadic rational edge e_i in the
certified gap; bump i is the Phi unit 1_[e_(i-1), e_i)(w^T z), writing A_i - r_i with
A_i = f(C_S)_t the target at the cube centre and r_i a dyadic approximation of token
t's exact state (|z - r_i| below the enclosure radius), so the token becomes A_i up to
that radius. The shift O = 2^ceil(log2(|w|_1 max|A| + 2)) keeps every written value
(|w^T A| <= O - 2) below every bump, so no bump fires twice (Lemma 9's trap gap).

Domain. The certificate covers X in [0, 1)^{n x d} (``apply`` refuses anything else):
Lemma 7 sends an entry outside [0, 1) to -N^(nd), and no claim is made there.

Lemma 6: the Phi units become 4 ReLUs with ramps of width 2^floor(log2(c / 2)) per stage,
c = margin delta for the quantization and c = min_i (e_i - hi_i, lo_(i+1) - e_i) for the
bumps (every cube interior and every id stays outside every ramp window); the attention
is already softmax. The realized network is T^{2,1,4} blocks (``realize.as_blocks``) with
exactly one attention layer that writes to the residual stream.

Whole domain. ``realize(clamp=True)`` appends ``realize.output_clamp`` (2 ReLUs per output
coordinate, clamping to the range of g_bar, ``output_range``), so |g - g_bar| <= that
range in the ramp windows too, and ``yun.certify_lp(net, g)`` bounds d_p(f, g) over the
whole unit cube (d_p(f_bar, g_bar) = 0 here: no bad set).
"""

from __future__ import annotations

import dataclasses
import math
import time
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import construction, layers, realize
from transformer_ua.layers import Segment
from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.realization import plan as plan_lib
from transformer_ua.yun.stages import quantize
from transformer_ua.yun.single_attention.one_layer_ids import (
    ID_GUARD_BITS, IdTable, OneLayerPlan, _log2, gaps, mean_enclosures, plan, ramp_below, search_lam)
from transformer_ua.yun.single_attention.one_layer_ids import cells_of as _cells
from transformer_ua.yun.single_attention.one_layer_realized import (
    DEFAULT_MARGIN, OneLayerRealized, _as_float64, _checked_input)

#: dtypes of ``OneLayerApproximator.realize``.
REALIZATION_DTYPES = ('exact', 'float64')
#: Extra bits of the id enclosures a construction is built from (beyond the plan's): the
#: state approximations r_i are their midpoints, so |g - g_bar| on the cubes is ~ their
#: radius (~ 2^-(plan bits + this)).
STATE_EXTRA_BITS = 64


# ---------------------------------------------------------------------------
# The construction.
# ---------------------------------------------------------------------------


def _exact(a) -> np.ndarray:
  return np.asarray(a, dtype=object)


def _unscale(tree, scale: int):
  """Lemma 7's scaled-integer params -> exact rationals (biases, breakpoints,
  intercepts scale with the input; weights do not)."""
  scaled = ('b_1', 'b_2', 'breaks', 'intercepts')

  def fix(path, leaf):
    leaf = np.asarray(leaf)
    if leaf.dtype == bool:
      return leaf
    name = getattr(path[-1], 'key', None)
    conv = (lambda v: Fraction(int(v), scale)) if name in scaled else int  # noqa: E731
    return np.vectorize(conv, otypes=[object])(leaf) if leaf.size else leaf.astype(object)
  return jax.tree_util.tree_map_with_path(fix, tree)


@dataclasses.dataclass(frozen=True, eq=False)
class OneLayerApproximator:
  """g_bar of Theorem 2 with one softmax attention layer (module docstring).

  Attributes:
    target, f_bar; d, n, resolution; plan (``OneLayerPlan``); table (``IdTable``);
    classes [C, n] int: every context as sorted token integers; values [P, d] float64:
    A for each id row of ``table``; edges: P + 1 dyadic Fractions (bump i is [e_i,
    e_(i+1)) in id space); states: P exact d-vectors r_i (token state approximations);
    offset: O; min_edge_clearance: min distance of an id enclosure to its edges;
    variant: the ``yun.variants`` object it was built for (``OneLayer`` or a subclass).
  """

  target: targets_lib.Target
  f_bar: targets_lib.Target
  d: int
  n: int
  resolution: int
  plan: OneLayerPlan
  table: IdTable
  values: np.ndarray
  edges: tuple
  states: tuple
  offset: int
  min_edge_clearance: Fraction
  index: dict
  build_seconds: float
  variant: object

  @property
  def lam(self) -> Fraction:
    return self.table.lam

  @property
  def positional(self) -> bool:
    """Theorem 2 (permutation equivariant f, no positional encoding): always False."""
    return self.variant.positional

  # -- g_bar ---------------------------------------------------------------

  def apply(self, x) -> np.ndarray:
    """g_bar(X) for X [batch, n, d] in [0, 1)^{n x d}: each token's bump selected by
    its (context, token) pair (the certified separation makes this the literal bump
    layers' selection), its value A returned (float64)."""
    x = _checked_input(x, self.n, self.d)
    k = np.floor(x * self.resolution).astype(np.int64)
    m = np.sum(k * (self.resolution ** np.arange(self.d)), axis=-1)   # [batch, n]
    out = np.zeros(x.shape)
    for b in range(x.shape[0]):
      for j in range(self.n):
        rest = list(m[b])
        rest.remove(m[b, j])
        out[b, j] = self.values[self.index[(int(m[b, j]), tuple(sorted(int(v) for v in rest)))]]
    return out

  # -- counts -------------------------------------------------------------

  def apply_exact(self, x) -> np.ndarray:
    """g_bar(X) as Fractions [batch, n, d]: the selected bump's A (a float64 value,
    taken exactly)."""
    return construction.to_fractions(self.apply(x))

  # -- the construction contract: network and counts -------------------------

  def layer_counts(self) -> dict:
    """{'quantization': {'feedforward': d(N + 1)}, 'contextual': {'attention': 1,
    'feedforward': 1} (the softmax layer and the shift), 'value': {'feedforward': one
    per id}}."""
    return construction.merge_counts(*(
        construction.segment_counts((seg,), stage)
        for seg, stage in zip(self._modified()[0], self.stage_names())))

  def stage_names(self) -> tuple:
    """The stage of each segment of ``network()``."""
    return ('quantization', 'contextual', 'contextual', 'value')

  def depth(self) -> int:
    return sum(s.depth for s in self._modified()[0])

  def num_params(self) -> int:
    return layers.count_params(self._modified()[1])

  def network(self):
    """The literal g_bar (Phi feed-forwards, one softmax attention layer)."""
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    return modules.Network(self._modified()[0], param_dtype=jnp.float64)

  def exact_params(self) -> dict:
    """The literal network's params as exact rationals."""
    return self._modified()[1]

  def float_params(self) -> dict:
    """``exact_params`` rounded to float64."""
    return _as_float64(self._modified()[1])

  # -- the modified network (Phi units) and its realization ----------------

  def _modified(self):
    """(segments, exact params) of g_bar: Phi feed-forwards, one softmax attention
    (built once per object; treat as read-only)."""
    cache = self.__dict__.setdefault('_cache', {})
    if 'modified' not in cache:
      cache['modified'] = self._build_modified()
    return cache['modified']

  def _build_modified(self):
    d, N, M = self.d, self.resolution, self.plan.M
    q_segments, qp = quantize.quantization_params(Grid(d, self.n, N), scale=2 * N,
                                                  dtype='int64')
    q = _unscale(jax.tree_util.tree_map(np.asarray, qp['segment_0']), 2 * N)
    w = [Fraction(v) for v in self.plan.w]
    lam, T = self.lam, self.plan.T
    c_out = Fraction(1, 2 * N * (M - 1))
    z = lambda *s: np.full(s, 0, object)  # noqa: E731
    att = {'W_Q': _exact([[[lam * v for v in w]]]), 'b_Q': _exact([[lam * T]]),
           'W_K': _exact([[w]]), 'W_V': _exact([[w]]),
           'W_O': _exact([[[c_out if i == 0 else 0] for i in range(d)]])}
    att = {k: v[None] for k, v in att.items()}           # [L=1, h=1, ...]
    shift = {'W_1': z(1, 1, d), 'b_1': z(1, 1), 'W_2': z(1, d, 1),
             'b_2': _exact([[Fraction(self.offset, N) if i == 0 else 0 for i in range(d)]])}
    P = len(self.table)
    e = self.edges
    # Bumps in *decreasing* id order: a token passes the bumps above its id (every ReLU
    # off: the layer is exactly the identity, even in floating point), then its own turns
    # it into A (below every bump, so off from there on). In increasing order it would
    # first cross every bump below its id with all four ReLUs on, cancelling terms of
    # size |w^T z| / epsilon: exact in rationals, but float64 drifts past the id gaps.
    order = range(P - 1, -1, -1)
    bumps = {
        'W_1': _exact([[w] for _ in order]),
        'b_1': _exact([[-e[i]] for i in order]),
        'W_2': _exact([[[Fraction(float(self.values[i, a])) - self.states[i][a]]
                        for a in range(d)] for i in order]),
        'b_2': z(P, d),
        'phi': {'breaks': _exact([[[Fraction(0), e[i + 1] - e[i]]] for i in order]),
                'slopes': _exact([[[0, 0, 0]] for _ in range(P)]),
                'intercepts': _exact([[[0, 1, 0]] for _ in range(P)]),
                'left_closed': np.zeros((P, 1, 2), bool)}}
    segments = (q_segments[0],
                Segment('attention', 1, num_heads=1, head_size=1, normalizer='softmax',
                        lam=1.0, name='one_layer'),
                Segment('feedforward', 1, width=1, activation='relu', name='shift'),
                Segment('feedforward', P, width=1, activation='phi', name='value'))
    params = {'segment_0': q, 'segment_1': {'attention': att},
              'segment_2': {'feedforward': shift}, 'segment_3': {'feedforward': bumps}}
    return segments, params

  def plan_epsilon(self, margin=DEFAULT_MARGIN) -> dict:
    """Lemma 6 ramp widths per stage, 2^floor(log2(clearance / 2)): 'quantization'
    (clearance margin delta: cube interiors stay off Lemma 7's breakpoints) and 'value'
    (clearance: the smallest distance of an id enclosure to its bump edges). Separate
    widths keep the quantization's ramps, and so its weights, at the scale of delta."""
    return {'quantization': ramp_below(Fraction(margin) / self.resolution),
            'value': ramp_below(self.min_edge_clearance)}

  def plan_bits(self, tolerance: float = 1e-6) -> int:
    """Working precision of the ball evaluation: ids resolved well below the edge
    clearance, outputs below ``tolerance``."""
    top = self.offset + self.plan.M
    return (math.ceil(_log2(Fraction(top) / self.min_edge_clearance))
            + math.ceil(-math.log2(tolerance)) + ID_GUARD_BITS)

  def output_range(self) -> tuple[list, list]:
    """(lo, hi) [d]: lo_i = min A_i, hi_i = max A_i over the value table, exact
    rationals of the float64 values: the range of g_bar in coordinate i (g_bar takes
    exactly the values A on [0, 1)^{n x d}; there is no bad set, so no 0)."""
    vals = self.values.reshape(-1, self.d)
    lo = [min(Fraction(float(v)) for v in vals[:, i]) for i in range(self.d)]
    hi = [max(Fraction(float(v)) for v in vals[:, i]) for i in range(self.d)]
    return lo, hi

  def realization_plan(self, tolerance: float, margin: float) -> plan_lib.Plan:
    """``plan.plan_realization``'s answer for this net (``plan.ramp_plan``)."""
    return plan_lib.ramp_plan(self, tolerance, margin)

  def realize(self, *, lam=None, epsilon=None, margin=DEFAULT_MARGIN,
              tolerance: float = plan_lib.DEFAULT_TOLERANCE, dtype: str = 'exact',
              clamp: bool = False):
    """The standard Transformer g in T^{2,1,4}: Phi -> 4 ReLUs (Lemma 6), blocks.

    The signature every approximator's ``realize`` shares (``variants.base``).

    Args:
      lam: None or this map's own lam (it is built into the ids, certified distinct at
        build time: another lam is refused; ``build(lam=)`` builds at another).
      epsilon: one ramp width for every Phi unit (exact rational), or None: the
        per-stage widths of ``plan_epsilon(margin)``.
      tolerance: unused: the interior error is the id enclosures' radius (~2^-(plan
        bits + STATE_EXTRA_BITS)), below any tolerance ``certify_interiors`` proves.
      dtype: 'exact' (params are exact rationals; evaluation is certified) or 'float64'
        (the same rationals rounded; evaluated by the JAX network, not certified).
      margin: the cube-interior margin (fraction of delta per side) the quantization
        ramps keep clear of (``plan_epsilon``); certify with the same margin.
      clamp: append ``realize.output_clamp`` blocks clamping each output coordinate to
        the range of g_bar (``output_range``): |g - g_bar| <= hi - lo everywhere, the
        ramp windows included, and no change where g is within the range already.
    """
    if dtype not in REALIZATION_DTYPES:
      raise ValueError(f'dtype={dtype!r}; allowed: {", ".join(map(repr, REALIZATION_DTYPES))}.')
    if not isinstance(clamp, bool):
      raise ValueError(f'clamp must be True or False, got {clamp!r}.')
    check_own_lam(lam, self.lam)
    del tolerance
    if epsilon is None:
      eps = self.plan_epsilon(margin)
    else:
      if Fraction(epsilon) <= 0:
        raise ValueError(f'epsilon must be positive, got {epsilon!r}.')
      eps = {'quantization': Fraction(epsilon), 'value': Fraction(epsilon)}
    modified, mparams = self._modified()
    segments, params = [], {}
    for i, seg in enumerate(modified):   # Lemma 6 stage by stage, each with its width
      one, p1 = realize.relu_realization((seg,), {'segment_0': mparams[f'segment_{i}']},
                                         eps.get(seg.name, eps['value']))
      segments.append(one[0])
      params[f'segment_{i}'] = p1['segment_0']
    segments, params = realize.as_blocks(tuple(segments), params)
    bounds = None
    if clamp:
      lo, hi = self.output_range()
      segs, cp = realize.output_clamp(lo, hi, exact=True)
      params = {**params, f'segment_{len(segments)}': cp['segment_0']}
      segments = tuple(segments) + segs
      bounds = (tuple(lo), tuple(hi)) if dtype == 'exact' else (tuple(map(float, lo)),
                                                                tuple(map(float, hi)))
    if dtype == 'float64':
      params = _as_float64(params)
    return OneLayerRealized(segments=segments, params=params, epsilon=min(eps.values()),
                            epsilons=eps, source=self, dtype=dtype, clamp=bounds)

  def describe(self) -> str:
    c = construction.stage_counts(self.layer_counts())
    return (f'Theorem 2, one softmax attention layer: target {self.target.name}, d={self.d}, '
            f'n={self.n}, N={self.resolution}; {self.depth()} layers ({c["quantization"]} '
            f'quantization, 1 attention, 1 shift, {c["value"]} value), lam=2^'
            f'{_log2(self.lam):.0f}, certified min id gap {float(self.min_gap):.3g}')

  @property
  def min_gap(self) -> Fraction:
    """Certified smallest distance between two distinct ids (id space)."""
    return gaps(self.table)['min_gap'] * self.plan.id_scale


def _dyadic_between(a: Fraction, b: Fraction) -> Fraction:
  """The dyadic rational with the smallest denominator in the open interval (a, b)."""
  k = 0
  while True:
    s = Fraction(2) ** k
    v = Fraction(math.floor(a * s) + 1) / s
    if v < b:
      return v
    k += 1


def bump_edges(ids_lo: list, ids_hi: list) -> tuple[list, Fraction]:
  """(edges, clearance) of sorted, pairwise disjoint id enclosures [lo_i, hi_i] (exact):
  P + 1 dyadic edges, bump i being [e_i, e_(i+1)) -- 1/4 outside the first and last
  enclosure, and a dyadic point in the middle half of each gap -- and the smallest
  distance of an enclosure to its edges."""
  P = len(ids_lo)
  edges = [ids_lo[0] - Fraction(1, 4)]
  for i in range(P - 1):
    edges.append(_dyadic_between(ids_hi[i] + (ids_lo[i + 1] - ids_hi[i]) / 4,
                                 ids_lo[i + 1] - (ids_lo[i + 1] - ids_hi[i]) / 4))
  edges.append(ids_hi[-1] + Fraction(1, 4))
  clearance = min(min(e_hi - hi, lo - e_lo) for lo, hi, e_lo, e_hi in
                  zip(ids_lo, ids_hi, edges[:-1], edges[1:]))
  return edges, clearance


def check_own_lam(lam, own) -> None:
  """ValueError unless ``lam`` is None or ``own``: a one-layer map's lam is part of its
  certified ids."""
  if lam is not None and Fraction(lam) != own:
    raise ValueError(f'lam={lam!r}: this map was built (its ids certified distinct) at '
                     f'lam = 2^{_log2(own):.0f}; realize takes lam=None or that one (build '
                     'with lam= for another).')


def build(target, variant, *, lam=None, id_bits: int | None = None) -> OneLayerApproximator:
  """Compiles a permutation-equivariant target into the one-attention-layer g_bar.

  Args:
    target: as ``yun.build_approximator``.
    variant: the ``yun.variants`` object (``OneLayer`` or a subclass) on its grid
      (n >= 2, N >= 2).
    lam: softmax scale (default: the plan's proved one; 'search': ``search_lam``'s);
      the construction is built only if the certified enclosures of its ids are
      pairwise disjoint.
    id_bits: precision of the id enclosures (default: the plan's + STATE_EXTRA_BITS).
  Raises:
    ValueError: bad configuration, a target that is not equivariant, a grid past the
      plan (``plan``), or ids whose certified enclosures overlap at this lam.
  """
  t0 = time.perf_counter()
  p = plan(variant.grid)
  d, n, N, M = p.d, p.n, p.resolution, p.M
  f = targets_lib.get_target(target, d=d, n=n)
  targets_lib.check_equivariant(f, d, n)
  if isinstance(lam, str):
    if lam != 'search':
      raise ValueError(f"lam={lam!r}; allowed: a positive rational, None or 'search'.")
    lam = search_lam(variant.grid)['lam']
  lam = p.lam if lam is None else Fraction(lam)
  if lam <= 0:
    raise ValueError(f'lam must be positive, got {lam}.')
  table = mean_enclosures(M, n, lam, T=p.T, bits=id_bits or p.bits + STATE_EXTRA_BITS)
  g = gaps(table)
  if g['min_gap'] is not None and g['min_gap'] <= 0:
    i = g['argmin']
    raise ValueError(f'lam={float(lam):g}: the certified id enclosures of rows {i} and '
                     f'{i + 1} overlap (token {table.tokens[i]}); increase the precision '
                     'or use the planned lam.')
  # targets: one row per id (token t of context R + {t}), A = f(centres)[position of t]
  classes = np.sort(np.concatenate([table.tokens[:, None], table.rests], axis=1), axis=1)
  x = (_cells(classes, d, N) + 0.5) / N
  fx = targets_lib.check_output(f.name, f(x), x.shape)
  pos = np.argmax(classes == table.tokens[:, None], axis=1)
  values = fx[np.arange(len(pos)), pos]
  amax = float(np.max(np.abs(values))) if values.size else 0.0
  wsum = sum(p.w)
  offset = 2 ** math.ceil(math.log2(wsum * amax + 2))
  # id-space enclosures and the edges between them
  s = Fraction(2) ** table.scale
  ids_lo = [offset + int(t) + p.id_scale * Fraction(a) / s for t, a in zip(table.tokens,
                                                                          table.lo)]
  ids_hi = [offset + int(t) + p.id_scale * Fraction(b) / s for t, b in zip(table.tokens,
                                                                          table.hi)]
  P = len(ids_lo)
  edges, clearance = bump_edges(ids_lo, ids_hi)
  # r_i: token t's exact state is L_t + (O / N + c' mean) e_1; mean by its enclosure mid
  cells = _cells(table.tokens, d, N)
  c_out = Fraction(1, 2 * N * (M - 1))
  states = []
  for i in range(P):
    mid = Fraction(table.lo[i] + table.hi[i], 2) / s
    r = [Fraction(int(k), N) for k in cells[i]]
    r[0] += Fraction(offset, N) + c_out * mid
    states.append(tuple(r))
  index = {(int(t), tuple(int(v) for v in r)): i
           for i, (t, r) in enumerate(zip(table.tokens, table.rests))}
  return OneLayerApproximator(
      target=f, f_bar=targets_lib.piecewise_constant(f, N), d=d, n=n, resolution=N, plan=p,
      table=table, values=np.asarray(values, np.float64), edges=tuple(edges),
      states=tuple(states), offset=offset, min_edge_clearance=clearance, index=index,
      build_seconds=time.perf_counter() - t0, variant=variant)
