r"""Theorems 2 and 3 shallow and wide: one attention layer between wide ReLU layers.

Kajitsuka & Sato's shape (ICLR 2024) on the project's one-layer contextual map
(``yun.single_attention.one_layer``): the depth is a constant and the *width* grows with N. Token-major
shapes: X, Z [.., n, d]; M = N^d cells, w = (N, N^2, .., N^d), P = M C(M + n - 2, n - 1)
(context, token) ids. Four parts, each one Transformer layer with its residual:

    quantize   z_l <- z_l + sum_{k=1}^{N-1} (1/N) step_k(z_l) - ReLU(z_l) + ReLU(-z_l),
               step_k(x) = [ReLU(x - k/N + eps_q) - ReLU(x - k/N)] / eps_q
               (0 for x <= k/N - eps_q, 1 for x >= k/N): z_l -> floor(N z_l) / N on
               [0, 1), Lemma 7's thresholds side by side; width 2N per coordinate.
               eps_q < margin delta keeps every ramp off the shrunk cube interiors.
    attention  the one softmax head of ``one_layer`` (its exact W_Q = lam w^T,
               b_Q = lam (M - 1), W_K = W_V = w^T, W_O = c' e_1), so that token j of
               context S gets the id  t_j = w^T z_j = m_j + mean_{beta_{m_j}}(S) / (2(M-1)),
               certified disjoint (``one_layer_ids``).
    value      one feed-forward layer of width 4P, every id's bump side by side:
                 z <- z + sum_i c_i bump_i(w^T z),   c_i = A_i - r_i,
                 bump_i(t) = [ReLU(t - a_i) - ReLU(t - a_i - r) - ReLU(t - b_i + r)
                              + ReLU(t - b_i)] / r,
               [a_i, b_i] = [e_i, e_(i+1)] the certified edges of ``one_layer`` (moved by
               -O: no bump fires twice in one layer, so the deep network's shift is not
               needed), r < the smallest id-to-edge clearance (the ramps lie in the
               certified id gaps; adjacent bumps meet only at their common edge, where
               both are 0), A_i = f(C_S)_t the value, r_i the token's state (dyadic,
               within the id enclosure's radius of the exact state).
    clamp      ``realize.output_clamp``: 2 ReLUs per output coordinate to the range of
               g_bar (|g - g_bar| <= that range in the ramp windows).

Blocks (attention + feed-forward, ``layers.Segment('block')``): [quantize], [attention +
value], then ceil(d / 2) clamp blocks; 2 + ceil(d / 2) blocks for every N, one attention
layer that writes; widths 2Nd (Theorem 3: 2N(d - 1 + n)) and 4P (``predicted_size``, a
closed form). Usage:

    net = build('token_times_mean', d=1, n=3, resolution=40)
    g = net.realize(margin=m)                   # exact rationals, clamped
    yun.certify_lp(net, g, p=2, margin=m)       # d_p(f, g) <= total, certified

Certification (``WideRealized.certify_interiors``): per cube class the box passes the
quantization as a point (bisection on the sorted kinks proves every unit constant on
the box, and the staircase's affine piece is exactly constant), the attention gives a
ball around the id, and bisection on the sorted bump edges finds the units whose kinks
the ball meets (none on a cube interior: the ball is inside one bump's flat top); every
other unit is proved off or exactly linear by the sort (``exact.wide_ball``). A class
costs O(attention + log width); nothing is proportional to the width but the one-time
sort and prefix sums.

Float64 (``dtype='float64'``, the JAX network): every bump below a token's id has its four
ReLUs on and cancels to 0 only in exact arithmetic; in float64 each leaves ~ ulp(M) / r,
summed over the P bumps. The float network is a convenience, not certified; the exact
one is.

Theorem 3 (a positional variant, ``yun.single_attention.one_layer_positional``): E_j = j e_(d-1)
moves token j's last coordinate to [j, j + 1); its staircase spans [0, n) (width 2nN),
so the quantized tokens are n distinct cells of M' = nM, one per block, and the same
head (lam planned for M') gives every (X, position) pair its own certified id: n M^n
bumps, one per cube and position, values f(C_X)_j. Same depth, same certificate.

Other contextual maps. The wide value map needs only ids on one direction with
certified disjoint enclosures, so it would fit the paper's g_c and ties='complete' too
(ids from Lemma 8's selective shifts), but there g_c keeps its N^d + 1 attention layers:
the depth stays ~ N^d and only the value map's ~ n C(N^d, n) blocks would become one
layer. It is not built for them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import executor as executor_lib, layers, realize
from transformer_ua.exact import ball, tree_hash, wide_ball
from transformer_ua.layers import Segment
from transformer_ua.yun.realization import certified_eval
from transformer_ua.yun import grid
from transformer_ua.yun.realization import plan as plan_lib
from transformer_ua.yun.single_attention import one_layer, one_layer_ids, one_layer_positional
from transformer_ua.yun.single_attention import one_layer_realized

#: dtypes of ``WideApproximator.realize``.
REALIZATION_DTYPES = ('exact', 'float64')
#: Stage names of the blocks, in order (the clamp's blocks last).
STAGES = ('quantization', 'contextual+value', 'clamp')


def _checked_input(x, n: int, d: int) -> np.ndarray:
  return grid.check_domain(grid.check_input(x, n, d))


def _as_float64(tree) -> dict:
  return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), tree)


def _attention_params(d: int, n_heads: int = 1) -> dict:
  """Switched-off attention of one block: every weight 0 (exact ints)."""
  z = lambda *s: np.full((1,) + s, 0, object)  # noqa: E731
  return {'W_Q': z(n_heads, 1, d), 'b_Q': z(n_heads, 1), 'W_K': z(n_heads, 1, d),
          'W_V': z(n_heads, 1, d), 'W_O': z(n_heads, d, 1)}


def _attention_count(d: int, heads: int) -> int:
  return heads * (4 * d + 1)


def predicted_size(d: int, n: int, resolution: int, *, clamp: bool = True,
                   positional: bool = False) -> dict:
  """Sizes of the realized wide network, in closed form (nothing is built).

  With P ids: M C(M + n - 2, n - 1) (Theorem 2, ``one_layer_ids.num_ids``) or n M^n
  (Theorem 3, ``one_layer_positional.num_ids``), M = N^d, and the quantization width
  q = 2Nd (Theorem 2) or 2N(d - 1 + n) (Theorem 3: the last coordinate spans [0, n)):

    positional E        n d (Theorem 3 only)
    quantization block  attention off (1 head: 4d + 1 weights); feed-forward width q:
                        W_1 q d, b_1 q, W_2 d q, b_2 d
    attention + value   the head (4d + 1); feed-forward width 4P: W_1 4P d, b_1 4P,
                        W_2 d 4P, b_2 d
    clamp               ceil(d / 2) blocks of ``realize.output_clamp`` (2 heads of size
                        1 switched off, width 4): 2 (4d + 1) + 4d + 4 + 4d + d each

  Returns {'blocks', 'attention_layers' (that write), 'max_width', 'params', 'ids'}.
  """
  d, n, N = grid.check_config(d, n, resolution)
  for name, flag in (('clamp', clamp), ('positional', positional)):
    if not isinstance(flag, bool):
      raise ValueError(f'{name} must be True or False, got {flag!r}.')
  P = (one_layer_positional.num_ids(d, n, N) if positional
       else one_layer_ids.num_ids(grid.Grid(d, n, N)))
  wq = 2 * N * (d - 1 + n) if positional else 2 * N * d
  quant = _attention_count(d, 1) + wq * d + wq + d * wq + d + (n * d if positional else 0)
  value = _attention_count(d, 1) + 4 * P * d + 4 * P + d * 4 * P + d
  width = realize.BLOCK_WIDTH
  clamp_blocks = -(-d // realize.CLAMP_COORDS_PER_BLOCK) if clamp else 0
  per_clamp = _attention_count(d, realize.BLOCK_HEADS) + width * d + width + d * width + d
  return {'blocks': 2 + clamp_blocks, 'attention_layers': 1, 'max_width': max(wq, 4 * P),
          'params': quant + value + clamp_blocks * per_clamp, 'ids': P}


@dataclasses.dataclass(frozen=True, eq=False)
class WideApproximator(grid.OnVariant):
  """g_bar of Theorem 2 with one attention layer, to be realized shallow and wide.

  g_bar is ``one_layer``'s (composition: ``one_layer`` holds the plan, the certified ids
  and the value table); this object adds the value map's bump edges and token states
  in id space without the deep network's offset O:

  Attributes:
    base: the ``one_layer.OneLayerApproximator`` (Theorem 2) or the
      ``one_layer_positional.PositionalOneLayer`` (Theorem 3).
    edges: P + 1 dyadic Fractions e_i - O (bump i is [edges[i], edges[i + 1]]).
    states: P exact d-vectors r_i - (O / N) e_1 (token state approximations).
    build_seconds: wall time of ``build``.
  """

  base: one_layer.OneLayerApproximator | one_layer_positional.PositionalOneLayer
  edges: tuple
  states: tuple
  build_seconds: float

  # -- g_bar, as one_layer's -------------------------------------------------

  @property
  def target(self):
    return self.base.target

  @property
  def f_bar(self):
    return self.base.f_bar

  @property
  def values(self) -> np.ndarray:
    return self.base.values

  @property
  def lam(self) -> Fraction:
    return self.base.lam

  @property
  def variant(self):
    return self.base.variant

  @property
  def num_ids(self) -> int:
    return len(self.base.table)

  def apply(self, x) -> np.ndarray:
    """g_bar(X) [batch, n, d] (``one_layer.OneLayerApproximator.apply``)."""
    return self.base.apply(x)

  def apply_exact(self, x) -> np.ndarray:
    return self.base.apply_exact(x)

  def output_range(self) -> tuple[list, list]:
    return self.base.output_range()

  def predicted_size(self, clamp: bool = True) -> dict:
    return predicted_size(self.d, self.n, self.resolution, clamp=clamp,
                          positional=self.positional)

  # -- the realization ------------------------------------------------------

  def plan_epsilon(self, margin=one_layer_realized.DEFAULT_MARGIN) -> dict:
    """Ramp widths: 'quantization' (inside the margin) and 'value' (below the smallest
    id-to-edge clearance), as ``one_layer.OneLayerApproximator.plan_epsilon``."""
    return self.base.plan_epsilon(margin)

  def _quantization_width(self) -> int:
    N, d = self.resolution, self.d
    return 2 * N * (d - 1 + self.n) if self.positional else 2 * N * d

  def _quantization_ff(self, eps: Fraction) -> dict:
    """Staircases: coordinate l on [0, 1) (N - 1 steps), the last on [0, n) with
    Theorem 3's E (nN - 1 steps), and -z_l."""
    d, N = self.d, self.resolution
    q = self._quantization_width()
    w1 = np.full((1, q, d), 0, object)
    b1 = np.full((1, q), 0, object)
    w2 = np.full((1, d, q), 0, object)
    s = 0
    for l in range(d):
      top = self.n * N if self.positional and l == d - 1 else N
      for k in range(1, top):    # step_k = [ReLU(x - k/N + eps) - ReLU(x - k/N)] / eps
        for shift, sign in ((eps, 1), (Fraction(0), -1)):
          w1[0, s, l], b1[0, s] = 1, -Fraction(k, N) + shift
          w2[0, l, s] = sign / (N * eps)
          s += 1
      for sign in (1, -1):        # -x = -ReLU(x) + ReLU(-x)
        w1[0, s, l], b1[0, s], w2[0, l, s] = sign, 0, -sign
        s += 1
    return {'W_1': w1, 'b_1': b1, 'W_2': w2, 'b_2': np.full((1, d), 0, object)}

  def _value_ff(self, r: Fraction) -> dict:
    d, P = self.d, self.num_ids
    w = [Fraction(v) for v in self.base.plan.w]
    e = self.edges
    w1 = np.empty((1, 4 * P, d), object)
    b1 = np.empty((1, 4 * P), object)
    w2 = np.empty((1, d, 4 * P), object)
    w1[0] = [w] * (4 * P)
    for i in range(P):
      c = [(Fraction(float(self.values[i, a])) - self.states[i][a]) / r for a in range(d)]
      for u, (bias, sign) in enumerate(((e[i], 1), (e[i] + r, -1), (e[i + 1] - r, -1),
                                        (e[i + 1], 1))):
        b1[0, 4 * i + u] = -bias
        for a in range(d):
          w2[0, a, 4 * i + u] = sign * c[a]
    return {'W_1': w1, 'b_1': b1, 'W_2': w2, 'b_2': np.full((1, d), 0, object)}

  def plan_bits(self, tolerance: float = plan_lib.DEFAULT_TOLERANCE) -> int:
    """Ball precision: as the base map's (``plan_bits``)."""
    return self.base.plan_bits(tolerance)

  @property
  def min_edge_clearance(self) -> Fraction:
    return self.base.min_edge_clearance

  def realization_plan(self, tolerance: float, margin: float) -> plan_lib.Plan:
    """``plan.plan_realization``'s answer for this net (``plan.ramp_plan``)."""
    return plan_lib.ramp_plan(self, tolerance, margin)

  def realize(self, *, lam=None, epsilon=None, margin=one_layer_realized.DEFAULT_MARGIN,
              tolerance: float = plan_lib.DEFAULT_TOLERANCE, dtype: str = 'exact',
              clamp: bool = True) -> 'WideRealized':
    """The standard Transformer g: 2 + ceil(d / 2) blocks (module docstring).

    The signature every approximator's ``realize`` shares (``variants.base``); the
    shallow-wide network ends in the clamp by default.

    Args:
      lam: None or the base map's own lam (``one_layer.check_own_lam``).
      epsilon: one ramp width for both stages (exact rational), or None: the planned
        widths ``plan_epsilon(margin)``.
      tolerance: unused, as ``OneLayerApproximator.realize``'s.
      margin: the cube-interior margin (fraction of delta per side) the quantization
        ramps keep clear of; certify with a margin at least this.
      dtype: 'exact' (rational params; certified ball evaluation) or 'float64' (the
        same rationals rounded; the JAX network, not certified).
      clamp: end with ``realize.output_clamp`` to the range of g_bar.
    """
    if dtype not in REALIZATION_DTYPES:
      raise ValueError(f'dtype={dtype!r}; allowed: {", ".join(map(repr, REALIZATION_DTYPES))}.')
    if not isinstance(clamp, bool):
      raise ValueError(f'clamp must be True or False, got {clamp!r}.')
    one_layer.check_own_lam(lam, self.lam)
    del tolerance
    if epsilon is None:
      margin = Fraction(margin)
      if not 0 < margin < Fraction(1, 2):
        raise ValueError(f'margin must be in (0, 1/2), got {float(margin):g}.')
      eps = self.plan_epsilon(margin)
    else:
      if isinstance(epsilon, bool) or not isinstance(epsilon, (int, Fraction, float)) \
          or not math.isfinite(float(epsilon)) or epsilon <= 0:
        raise ValueError(f'epsilon must be a positive finite number, got {epsilon!r}.')
      eps = {'quantization': Fraction(epsilon), 'value': Fraction(epsilon)}
    d, P = self.d, self.num_ids
    if self.positional:
      att = self.base.attention_params()
    else:
      att = self.base.exact_params()['segment_1']['attention']
    params = {'segment_0': {'attention': _attention_params(d),
                            'feedforward': self._quantization_ff(eps['quantization'])},
              'segment_1': {'attention': {k: np.asarray(v) for k, v in att.items()},
                            'feedforward': self._value_ff(eps['value'])}}
    block = functools.partial(Segment, 'block', 1, num_heads=1, head_size=1,
                              normalizer='softmax', lam=1.0, activation='relu')
    segments = (block(width=self._quantization_width(), name='quantization'),
                block(width=4 * P, name='one_layer_value'))
    if self.positional:
      params['E'] = np.asarray(self.base.positional_encoding(), object)
    bounds = None
    if clamp:
      lo, hi = self.output_range()
      segs, cp = realize.output_clamp(lo, hi, exact=True)
      params['segment_2'] = cp['segment_0']
      segments = segments + segs
      bounds = (tuple(lo), tuple(hi))
    return WideRealized(segments=segments, exact=params,
                        params=params if dtype == 'exact' else _as_float64(params),
                        epsilons=eps, source=self, dtype=dtype, clamp=bounds)

  def describe(self) -> str:
    s = self.predicted_size()
    return (f'Theorem {3 if self.positional else 2}, shallow and wide (one softmax '
            f'attention layer): target {self.target.name}, d={self.d}, n={self.n}, N={self.resolution}; {s["blocks"]} '
            f'blocks, {s["ids"]:,} ids, max width {s["max_width"]:,}, {s["params"]:,} params')


def build(target, variant, *, lam=None) -> WideApproximator:
  """Compiles a target into the wide one-attention-layer g_bar.

  Args:
    target: a built-in target name or a callable (``yun.stages.targets``).
    variant: the ``yun.variants`` object on its grid (n >= 2, N >= 2): Theorem 2
      (f permutation equivariant; ``one_layer``) or, with ``variant.positional``,
      Theorem 3 (any f; ``one_layer_positional``).
    lam: softmax scale, as ``one_layer.build`` (None: the plan's; 'search'); Theorem 3
      takes only the plan's (None).
  Raises:
    ValueError: as ``one_layer.build`` / ``one_layer_positional.build`` (bad grid,
      non-equivariant target for Theorem 2, overlapping ids).
  """
  t0 = time.perf_counter()
  if variant.positional:
    if lam is not None:
      raise ValueError(f'lam={lam!r}: Theorem 3 (positional=True) uses the planned lam '
                       '(lam=None).')
    base = one_layer_positional.build(target, variant)
  else:
    base = one_layer.build(target, variant, lam=lam)
  off = base.offset
  edges = tuple(e - off for e in base.edges)
  shift = Fraction(off, base.resolution)
  states = tuple((r[0] - shift,) + tuple(r[1:]) for r in base.states)
  return WideApproximator(base=base, edges=edges, states=states,
                          build_seconds=time.perf_counter() - t0)


@dataclasses.dataclass(frozen=True, eq=False)
class WideRealized(grid.OfSource):
  """The realized wide g: blocks whose feed-forwards are wide (module docstring).

  Attributes: segments; params (exact rationals for 'exact', float64 for 'float64');
  exact (the exact rationals, always); epsilons ('quantization', 'value' ramp widths);
  source (the ``WideApproximator``); dtype; clamp: None or (lo, hi) exact.

  Carries what ``yun.certify_lp`` reads of a realization: segments, params, positional,
  dtype, source, clamp, lam, epsilon, quantization_epsilon, ``planned_bits(margin)``,
  ``ball_network(bits)`` and ``certify_interiors(margin, bits, workers=, check_plan=)``.
  """

  segments: tuple
  params: dict
  exact: dict
  epsilons: dict
  source: WideApproximator
  dtype: str = 'exact'
  clamp: tuple | None = None

  @property
  def epsilon(self) -> Fraction:
    return min(self.epsilons.values())

  @property
  def quantization_epsilon(self) -> Fraction:
    return self.epsilons['quantization']

  # -- sizes -----------------------------------------------------------------

  def depth(self) -> int:
    """Blocks (the clamp's included)."""
    return sum(s.depth for s in self.segments)

  def layer_counts(self) -> dict:
    """{'quantization': {'block': 1}, 'contextual+value': {'block': 1}, 'clamp':
    {'block': ceil(d / 2)}} (no 'clamp' without it)."""
    out = {}
    for i, seg in enumerate(self.segments):
      stage = STAGES[min(i, 2)]
      out.setdefault(stage, {}).setdefault(seg.kind, 0)
      out[stage][seg.kind] += seg.depth
    return out

  def attention_layers(self) -> int:
    """Attention layers that write (a non-zero W_O)."""
    return sum(int(any(v != 0 for v in np.ravel(self.exact[f'segment_{i}']['attention']
                                                ['W_O'][layer])))
               for i, seg in enumerate(self.segments) for layer in range(seg.depth))

  def max_width(self) -> int:
    return max(s.width for s in self.segments)

  def num_params(self) -> int:
    return layers.count_params(self.params)

  def size(self) -> dict:
    """As ``predicted_size``, counted on the built network."""
    return {'blocks': self.depth(), 'attention_layers': self.attention_layers(),
            'max_width': self.max_width(), 'params': self.num_params(),
            'ids': self.source.num_ids}

  # -- evaluation --------------------------------------------------------------

  def network(self):
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    return modules.Network(self.segments, positional=self.positional, num_tokens=self.n,
                          param_dtype=jnp.float64)

  def float_params(self) -> dict:
    return _as_float64(self.exact)

  def exact_params(self) -> dict:
    """The params as exact rationals (object arrays of ints / Fractions)."""
    return self.exact

  def bits(self, tolerance: float = 1e-6) -> int:
    """Ball precision: ``one_layer``'s plan (ids resolved well below the clearance)."""
    return self.source.base.plan_bits(tolerance)

  def planned_bits(self, margin=one_layer_realized.DEFAULT_MARGIN, tolerance: float = 1e-6) -> int:
    del margin   # the ramps, and so the margin they keep, are fixed at ``realize``
    return self.bits(tolerance)

  def ball_network(self, bits: int) -> wide_ball.WideBallNetwork:
    key = ('_ball', bits)
    cache = self.__dict__.setdefault('_cache', {})
    if key not in cache:
      with ball.precision(bits):
        cache[key] = wide_ball.WideBallNetwork(self.segments, self.exact,
                                               positional=self.positional)
    return cache[key]

  def __repr__(self) -> str:
    return (f'WideRealized({self.source.variant.name}, d={self.d}, n={self.n}, '
            f'N={self.source.resolution}, dtype={self.dtype!r}: {self.depth()} blocks, '
            f'max width {self.max_width()}, {self.num_params()} params, '
            f'{"clamped" if self.clamp is not None else "no clamp"})')

  def _check_exact(self):
    if self.dtype != 'exact':
      raise ValueError(f"certified evaluation needs dtype='exact' (this one is {self.dtype}).")

  def apply_certified(self, x, bits: int | None = None):
    """(mid, rad) float64 [batch, n, d]: the exact g(X) lies in [mid - rad, mid + rad]."""
    self._check_exact()
    x = _checked_input(x, self.n, self.d)
    bits = self.bits() if bits is None else ball.check_bits(bits)
    return certified_eval.enclose_points(self.ball_network(bits), x, bits)

  def apply(self, x) -> np.ndarray:
    """g(X) [batch, n, d] float64: the certified midpoint ('exact') or the float64 JAX
    network ('float64')."""
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    if self.dtype == 'exact':
      return self.apply_certified(x)[0]
    x = _checked_input(x, self.n, self.d)
    with jax.enable_x64(True):
      return np.asarray(modules.jit_apply(self.network())(self.params,
                                                         jnp.asarray(x, jnp.float64)))

  def apply_exact(self, x) -> np.ndarray:
    """The rational midpoint of ``apply`` (softmax makes g(X) transcendental)."""
    return np.vectorize(Fraction, otypes=[object])(self.apply(x))

  def certify_interiors(self, margin=one_layer_realized.DEFAULT_MARGIN, bits: int | None = None, *,
                        tolerance: float = 1e-6, workers=None, check_plan: bool = False,
                        executor=None, state_dir: str | None = None) -> dict:
    """Certified max |g - g_bar| over every cube interior (shrunk by margin delta per
    side; Theorem 2: one cube per context, by equivariance; Theorem 3: every cube),
    class by class in O(log width) (``interiors_chunk``), over ``transformer_ua.executor``
    (the network shipped once per worker).

    Args:
      margin, bits, tolerance, check_plan: as ``one_layer_realized.OneLayerRealized``.
      workers, executor, state_dir: where the chunks run and where a resumable run keeps
        them (``executor.as_workers``; ``yun.realization.certified_eval.certify_boxes``).
    """
    self._check_exact()
    src = self.source
    margin, bits = one_layer_realized.interior_margin_and_bits(self, margin, bits, tolerance,
                                                               check_plan)
    t0 = time.perf_counter()
    workers = executor_lib.as_workers(workers, executor, state_dir)
    N = src.resolution
    cells = src.variant.grid_classes()       # [C, n, d]: multisets (Thm 2), all (Thm 3)
    targets = src.apply((cells + 0.5) / N)
    shipment = executor_lib.ship(interior_work, self.segments, self.exact, self.positional,
                                 bits, N, margin, cells, targets)
    identity = None
    if workers.state_dir is not None:
      identity = {'what': 'wide cube interiors, max |g - g_bar| in arb balls',
                  'params_sha256': tree_hash.tree_sha256(self.params),
                  'cubes_sha256': tree_hash.tree_sha256(cells, targets),
                  'bits': int(bits), 'margin': str(margin), 'resolution': int(N)}
    out = certified_eval.map_interiors(interiors_chunk, shipment, len(cells), workers, identity,
                                tolerance=tolerance, bits=bits)
    return {**out, 'seconds': time.perf_counter() - t0, 'margin': float(margin),
            'lam': float(self.lam), 'epsilon': float(self.epsilon)}


def interior_work(segments, exact: dict, positional: bool, bits: int, resolution: int,
                  margin: Fraction, cells, targets) -> dict:
  """What a worker builds once (``executor.ship``): g's ball network (``exact.wide_ball``)
  and the cubes: cells [C, n, d] int, targets [C, n, d] g_bar at the centres."""
  with ball.precision(bits):
    bn = wide_ball.WideBallNetwork(segments, exact, positional=positional)
  return {'net': bn, 'bits': bits, 'resolution': resolution, 'margin': margin,
          'cells': cells, 'targets': targets}


def interiors_chunk(work: dict, start: int, stop: int) -> dict:
  """max |g - g_bar| over the cube interiors of classes [start, stop) (first class on
  ties): {'worst' (rounded up), 'index', 'cube' [n][d]}. Pure (reads only ``work``)."""
  bn, N, margin = work['net'], work['resolution'], work['margin']
  cells, targets = work['cells'], work['targets']
  worst, where = 0.0, start
  with ball.precision(work['bits']):
    for c in range(start, stop):
      err = ball.abs_error_bound(bn.forward(certified_eval.cube_box(cells[c], N, margin)),
                                 targets[c])
      if err > worst:
        worst, where = err, c
  return {'worst': worst, 'index': int(where), 'cube': np.asarray(cells[where]).tolist()}
