r"""The Lemma 7-9 approximator: a target f -> f_bar -> g_bar -> g (Theorems 2 and 3).

Yun et al. 2020, Appendix C (Theorem 2) and Appendix G (Theorem 3):

    f      a continuous target on [0, 1]^{d x n}            (``targets``)
    f_bar  Lemma 4: f(C_L) on each cube S_L, C_L its centre   (``targets.piecewise_constant``)
    g_bar  Proposition 5 / Appendix G: the modified Transformer
           g_v o g_c o g_q in T-bar^{2,1,1}                  (``pipeline.build_g_bar``)
    g      Lemma 6: hardmax -> softmax(lam .), Phi -> 4 ReLUs with ramp width epsilon,
           packed into T^{2,1,4} blocks                      (``realize``)

    d_p(f, g) <= d_p(f, f_bar) + d_p(f_bar, g_bar) + d_p(g_bar, g)

Theorem 2 (``positional=False``) needs a permutation-equivariant f: the value map is
indexed by the C(N^d, n) permutation classes, and d_p(f_bar, g_bar) is the mass of f_bar
on the bad set (repeated columns), O(delta^(d/p)). Theorem 3 (``positional=True``) adds
E (token j offset by j - 1), so every grid point is its own context: n N^(dn) bump
layers, and g_bar = f_bar on every cube.

Evaluation of g_bar (``Approximator.apply``): the float g_q quantizes X (exact away from
a few ulps of the bin edges: ``verify.quantization``), g_c runs in exact integer
arithmetic (int64 or limbs, as planned), g_v selects its bump exactly (compact path,
proved equal to the literal layers on whole grids), and the output is the real value
A_L = f(C_L) of the selected bump (0 where none fires). The literal integer network
carries A rounded to multiples of 1/(2N) (``VALUE_DENOMINATOR_PER_N``) and is used only
to cross-check the selection; the float64 literal network and its realization use the
real values in W_2.

``build(variant, target)`` builds it for a ``yun.variants.staged`` variant (the variants
decide Theorem 2 or 3 and the g_c; ``variants.registry.build_approximator`` turns the
public flags into one); the error decomposition is ``yun.bounds.decomposition``.

Shapes: X, outputs [batch, n, d] (token-major; the paper's column j is row j).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import construction, layers, realize
from transformer_ua.exact import planner
from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun import grid
from transformer_ua.yun.realization import certified_eval, plan, rational
from transformer_ua.yun.stages import pipeline, value

#: The integer literal network carries A rounded to multiples of 1/(this * N).
VALUE_DENOMINATOR_PER_N = 2
#: Largest total depth built (g_v has one layer per bump: n C(N^d, n) or n N^(dn)).
MAX_LAYERS = 2_000_000

#: dtypes a realization can be built in ('exact': Fraction / int params, evaluated in
#: certified ball arithmetic).
REALIZATION_DTYPES = ('float64', 'float32', 'exact')
#: Lemma 6's ramps [c - epsilon, c + epsilon] of a *float* realization are built in
#: float64: epsilon must span at least this many float64 ulps of the largest breakpoint c
#: (Lemma 8's t_r), or the ramp collapses (c + epsilon == c) and the 4-ReLU slopes divide
#: by zero. dtype='exact' carries epsilon as a Fraction (no ulps): the check does not apply
#: there, and the plan's epsilon (``yun.realization.plan``) is exact by construction.
RAMP_ULPS = 4


#: Most bits g_c's exact integer arithmetic holds: its widest limb layout
#: (``exact.planner.LIMB_WIDTHS``). The ids of every contextual map here need more than n
#: bits (Lemma 8: t_r = delta^(-(2n+1)d+1) (delta^-d - 1) >= 2^(2n)), so n above this is
#: refused before anything is computed.
MAX_ARITHMETIC_BITS = max(k * w for w, k in planner.LIMB_WIDTHS)


def _log2(x) -> float:
  """log2 of a positive int or Fraction of any size (no float overflow)."""
  x = Fraction(x)
  return math.log2(x.numerator) - math.log2(x.denominator) if x > 0 else -math.inf


def about(x) -> str:
  """A size for a message: the number itself below 1e12, else 'about 5.8e+17' (Python
  refuses to print ints of more than 4300 digits, and nobody reads them)."""
  x = Fraction(x)
  if abs(x) < 10 ** 12:
    return f'{int(x)}' if x.denominator == 1 else f'{float(x):.4g}'
  exponent = _log2(abs(x)) * math.log10(2)
  k = math.floor(exponent)
  return f'about {"-" if x < 0 else ""}{10 ** (exponent - k):.2g}e+{k}'


def check_size(variant) -> None:
  """ValueError, naming the size and the limit, when g_bar of ``variant`` cannot be built:
  more than ``MAX_LAYERS`` layers, or contextual ids t_r wider than
  ``MAX_ARITHMETIC_BITS`` (checked before anything of that size is computed)."""
  d, n, N = variant.d, variant.n, variant.N
  where = f'd={d}, n={n}, resolution={N}'
  if n > MAX_ARITHMETIC_BITS:
    raise ValueError(
        f'{where}: n={n} tokens is too many: the contextual ids need more than n bits and '
        f"g_c's exact integer arithmetic holds at most {MAX_ARITHMETIC_BITS} bits "
        '(exact.planner.LIMB_WIDTHS); choose a smaller n.')
  depth = variant.depth()
  if depth > MAX_LAYERS:
    raise ValueError(f'{where} needs {about(depth)} layers (positional={variant.positional}); '
                     f'at most {MAX_LAYERS} are built. Choose a smaller resolution or n.')
  if variant.closed_form_interval:  # (Theorem 3's t_r is a sweep; its grid is capped)
    bits = _log2(variant.interval()[1])
    if bits > MAX_ARITHMETIC_BITS:
      raise ValueError(
          f'{where}: the contextual ids reach t_r = {about(variant.interval()[1])} ({bits:.0f} bits), more than the '
          f"{MAX_ARITHMETIC_BITS} bits g_c's exact integer arithmetic holds "
          '(exact.planner.LIMB_WIDTHS); choose a smaller n, d or resolution.')


def min_epsilon(variant) -> float:
  """Smallest ReLU ramp width a float realization of ``variant`` (a Lemma 7-9 variant)
  can represent: ``RAMP_ULPS`` float64 ulps of t_r, the largest Phi breakpoint of g_bar
  (closed form).

  Raises:
    ValueError: an unbuildable variant (``check_size``), or a t_r beyond float64's range
      (no float realization at all).
  """
  check_size(variant)
  return _min_epsilon(variant)


def _min_epsilon(variant) -> float:
  t_r = variant.interval()[1]
  if _log2(t_r) >= 1024:
    raise ValueError(
        f'd={variant.d}, n={variant.n}, resolution={variant.N}: the largest contextual id '
        f't_r = {about(t_r)} exceeds the largest float64 (about 1.8e+308), so no '
        "float realization exists; dtype='exact' (yun.certify_lp) has no such limit.")
  return RAMP_ULPS * float(np.spacing(float(t_r)))


def check_epsilon(epsilon: float, variant) -> None:
  """ValueError (saying what is allowed) when ``epsilon`` is below ``min_epsilon``
  (float realizations; see ``RAMP_ULPS``)."""
  low = _min_epsilon(variant)
  if epsilon >= low:
    return
  hint = ''
  if variant.closed_form_interval:  # (Theorem 3's t_r is an exhaustive sweep per N)
    largest = None  # min_epsilon grows with N: walk up to the first that fails
    while _min_epsilon(variant.at((largest or 1) + 1)) <= epsilon:
      largest = (largest or 1) + 1
    hint = (f'; at epsilon={epsilon:g} the largest resolution is N={largest}' if largest
            else '')
  d, n, resolution = variant.d, variant.n, variant.N
  t_r = float(variant.interval()[1])
  raise ValueError(
      f'epsilon={epsilon:g} is below what float64 resolves at d={d}, n={n}, '
      f'resolution={resolution}: the largest breakpoint t_r = {t_r:.3g} has float64 '
      f'spacing {np.spacing(t_r):.3g}, so the Lemma 6 ramps [t_r -/+ epsilon] collapse; '
      f"allowed: epsilon >= {low:.3g} ({RAMP_ULPS} ulps of t_r){hint}, or dtype='exact' "
      '(no ulps).')


def realized_counts(segments, source) -> dict:
  """{stage: {'block': blocks}} of a realization's block segments: realization keeps
  one segment per segment of g_bar (``source.stage_names()``, in order); the segments
  after those are the output clamp's. Without a source every block is 'realized'."""
  stages = tuple(source.stage_names()) if source is not None else None
  out = {}
  for i, seg in enumerate(segments):
    stage = ('realized' if stages is None else stages[i] if i < len(stages) else 'clamp')
    out = construction.merge_counts(out, {stage: {seg.kind: seg.depth}})
  return out


@dataclasses.dataclass(frozen=True, eq=False)
class Realized:
  """Lemma 6's standard Transformer g in T^{2,1,4}: an ordinary ``modules.Network``.

  Attributes:
    segments, params: ``block`` segments (softmax, 2 heads of size 1, ReLU width 4)
      and their params (``E`` too when positional), in ``dtype``; for 'exact' NumPy
      object arrays of Python ints / ``fractions.Fraction`` (``exact_params``).
    lam, epsilon: the softmax scale folded into W_Q, b_Q and the ReLU ramp width
      (Fractions for 'exact').
    dtype: 'float64', 'float32' or 'exact'.
    source: the ``Approximator`` it realizes (for the certified methods).
    clamp: None (the paper's network), or (lo, hi): the last blocks clamp output
      coordinate i to [lo_i, hi_i] = [min(0, min A_i), max(0, max A_i)], the range of
      g_bar (``realize.output_clamp``); exact rationals for 'exact'.
  """

  segments: tuple
  params: dict
  lam: float
  epsilon: float
  dtype: str
  positional: bool
  n: int
  source: object = None
  clamp: tuple | None = None

  def exact_params(self) -> dict:
    """The params pytree with exact rational leaves (dtype 'exact' only)."""
    if self.dtype != 'exact':
      raise ValueError(f"exact_params needs a realization built with dtype='exact', this "
                       f'one is {self.dtype}.')
    return self.params

  def apply_certified(self, x, bits: int | None = None):
    """(mid, rad) float64 [batch, n, d] enclosing the exact real output g(X).

    Exact params, exact softmax and ReLU; evaluated in arb ball arithmetic at ``bits``
    (default: the plan's). See ``yun.realization.certified_eval.apply_certified``.
    """
    return certified_eval.apply_certified(self, x, bits=bits)

  def certify_interiors(self, margin: float = plan.DEFAULT_MARGIN, bits: int | None = None,
                        **kw) -> dict:
    """Certified max |g - g_bar| over every cube interior (``yun.realization.certified_eval``)."""
    return certified_eval.certify_interiors(self, margin=margin, bits=bits, **kw)

  # (with the fields above: what ``yun.certify_lp`` needs of a realization, shared with
  # ``yun.single_attention.one_layer_realized.OneLayerRealized``)

  @property
  def quantization_epsilon(self):
    """Ramp width of the quantization's ReLUs (one width for every stage here)."""
    return self.epsilon

  def planned_bits(self, margin: float = plan.DEFAULT_MARGIN) -> int:
    """The plan's ball precision for this (lam, epsilon) on cubes shrunk by margin."""
    return certified_eval.resolve_bits(self, None, check_plan=False, margin=float(margin))

  def ball_network(self, bits: int):
    """The exact params as an ``exact.ball.BallNetwork`` at ``bits`` (cached)."""
    return certified_eval.ball_network(self, bits)

  @property
  def d(self) -> int:
    """Embedding dimension, read off the first block's weights ([..., d] last axis)."""
    seg = self.params['segment_0']
    part = seg['attention']['W_Q'] if 'attention' in seg else seg['feedforward']['W_1']
    return int(np.shape(part)[-1])

  def network(self):
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    return modules.Network(self.segments, positional=self.positional, num_tokens=self.n,
                          param_dtype=jnp.float64 if self.dtype == 'float64' else jnp.float32)

  def __repr__(self) -> str:
    return (f'Realized(Lemma 6, T^(2,1,4): {sum(s.depth for s in self.segments)} blocks, '
            f'lam={float(self.lam):g}, epsilon={float(self.epsilon):g}, {self.dtype}'
            f'{"".join(tag for tag, on in self._repr_flags() if on)})')

  def _repr_flags(self):
    """(tag, shown) of the repr's flags: fields of the realized network, not variants
    (a realization without a source has no variant)."""
    return ((', positional', self.positional), (', output clamp', self.clamp is not None))

  def apply(self, x) -> np.ndarray:
    """g(X) for X [batch, n, d]; computed in ``dtype``, returned as float64 ('exact':
    the midpoint of the certified enclosure, ``apply_certified``).

    Raises:
      ValueError: as ``Approximator.apply`` (shape, finiteness, domain [0, 1)).
    """
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    x = grid.check_domain(grid.check_input(x, self.n, self.d))
    if self.dtype == 'exact':
      return self.apply_certified(x)[0]
    fn = modules.jit_apply(self.network())
    with jax.enable_x64(self.dtype == 'float64'):
      jdt = jnp.float64 if self.dtype == 'float64' else jnp.float32
      return np.asarray(fn(self.params, jnp.asarray(x, jdt)), np.float64)

  # -- the construction contract (``transformer_ua.construction``) ----------

  def depth(self) -> int:
    """Blocks of T^{2,1,4} (the output clamp's included)."""
    return sum(s.depth for s in self.segments)

  def layer_counts(self) -> dict:
    """{stage: {'block': blocks}}: the stages of g_bar (each Lemma 6 realized and
    packed into blocks, one block per layer), and 'clamp' when clamped."""
    return realized_counts(self.segments, self.source)

  def float_params(self) -> dict:
    """The params as float64 (the exact rationals rounded for dtype='exact')."""
    return jax.tree_util.tree_map(
        lambda a: np.asarray(a, bool if np.asarray(a).dtype == bool else np.float64),
        self.params)

  def apply_exact(self, x) -> np.ndarray:
    """Float dtypes: the exact values of what the float network computes (``apply``);
    'exact': the rational midpoint of the certified enclosure (``apply_certified``;
    softmax makes g(X) itself transcendental). Fractions [batch, n, d]."""
    return construction.to_fractions(self.apply(x))

  def block_counts(self) -> dict:
    """Blocks, and how many have their attention / feed-forward switched on."""
    att_on = ff_on = 0
    for i in range(len(self.segments)):
      p = self.params[f'segment_{i}']
      att_on += int(np.sum(np.any(np.asarray(p['attention']['W_O']) != 0, axis=(1, 2, 3))))
      ff_on += int(np.sum(np.any(np.asarray(p['feedforward']['W_2']) != 0, axis=(1, 2))))
    blocks = sum(s.depth for s in self.segments)
    return {'blocks': blocks, 'attention_on': att_on, 'feedforward_on': ff_on,
            'heads': realize.BLOCK_HEADS, 'head_size': realize.BLOCK_HEAD_SIZE,
            'width': realize.BLOCK_WIDTH}

  def num_params(self) -> int:
    return layers.count_params(self.params)


@dataclasses.dataclass(frozen=True, eq=False)
class Approximator(grid.OnVariant):
  """g_bar for a target (Theorem 2 or 3), with f, f_bar and the realization.

  Attributes:
    target: f; f_bar: Lemma 4's piecewise-constant f_bar.
    variant: the ``Variant`` (its grid gives d, n, resolution N = 1/delta; its
      flags positional and ties).
    g_bar: the ``pipeline.GBar`` network.
    values: A_L = f(C_L) [C, n, d] float64 on the value map's classes (Theorem 2: the
      C(N^d, n) class representatives; Theorem 3: all N^(dn) grid points).
  """

  target: targets_lib.Target
  f_bar: targets_lib.Target
  variant: object   # the Lemma 7-9 variant (``yun.variants.staged``)
  g_bar: pipeline.GBar
  values: np.ndarray

  @property
  def ties(self) -> str:
    return self.variant.ties

  # -- g_bar ----------------------------------------------------------------

  def apply(self, x) -> np.ndarray:
    """g_bar(X) for X [batch, n, d] (float64; exact bump selection, see module doc).

    Raises:
      ValueError: wrong shape, non-finite input, or entries outside [0, 1) (Theorems 2
        and 3 alike; see ``grid.check_domain``).
    """
    x = grid.check_domain(grid.check_input(x, self.n, self.d))
    if not x.shape[0]:
      return np.zeros_like(x)
    _, bump = self.g_bar.select(x)
    return self.g_bar.value.payload(np.asarray(bump), self.values).astype(np.float64)

  def network(self):
    """The literal float64 g_bar (paper values) as a ``modules.Network``."""
    return self.g_bar.network()

  def float_params(self) -> dict:
    """The literal network's float64 params, with the real values A_L in W_2."""
    return self.g_bar.float_params(values=self.values)

  def apply_literal(self, x) -> np.ndarray:
    """The literal network: ``network().apply({'params': float_params()}, x)`` in
    float64 (breaks down once values outgrow float64)."""
    x = grid.check_input(x, self.n, self.d)
    with jax.enable_x64(True):
      return np.asarray(self.network().apply({'params': self.float_params()}, jnp.asarray(x)))

  def apply_exact(self, x) -> np.ndarray:
    """g_bar(X) as Fractions [batch, n, d]: the selected bump's value A_L taken exactly
    (A_L = f(C_L) is the float64 ``values`` entry, a dyadic rational), 0 where none
    fires."""
    return construction.to_fractions(self.apply(x))

  # -- the construction contract: counts -------------------------------------

  def depth(self) -> int:
    """Layers of g_bar (every stage)."""
    return self.g_bar.depth()

  def layer_counts(self) -> dict:
    """Layers by stage and kind (``GBar.layer_counts``)."""
    return self.g_bar.layer_counts()

  def paper_layer_counts(self) -> dict:
    """{stage: layers} from the paper's formulas (``Variant.layer_counts``);
    equals ``construction.stage_counts(layer_counts())``."""
    return self.variant.layer_counts()

  def num_params(self) -> int:
    return self.g_bar.num_params()

  def stage_names(self) -> tuple:
    """The stage of each segment of ``network()`` (``GBar.stage_names``)."""
    return self.g_bar.stage_names()

  # -- Lemma 6 ----------------------------------------------------------------

  def output_range(self) -> tuple[list, list]:
    """(lo, hi) [d]: lo_i = min(0, min_L A_L[:, i]), hi_i = max(0, max_L A_L[:, i]),
    exact rationals of the float64 values: the range of g_bar in coordinate i (g_bar
    takes the values A_L, and 0 on the paper's bad set)."""
    vals = self.values.reshape(-1, self.d)
    # (a list, not varargs: with no value at all, e.g. the paper's map at N < n where
    # every cube is bad, the range is [0, 0])
    lo = [min([Fraction(0), *(Fraction(float(v)) for v in vals[:, i])]) for i in range(self.d)]
    hi = [max([Fraction(0), *(Fraction(float(v)) for v in vals[:, i])]) for i in range(self.d)]
    return lo, hi

  def realization_plan(self, tolerance: float, margin: float) -> plan.Plan:
    """``plan.plan_realization``'s answer for this net (``plan.deep_plan``)."""
    return plan.deep_plan(self, tolerance, margin)

  def realize(self, *, lam=None, epsilon=None, margin=plan.DEFAULT_MARGIN,
              tolerance: float = plan.DEFAULT_TOLERANCE, dtype: str = 'float64',
              clamp: bool = False) -> Realized:
    """The standard Transformer g in T^{2,1,4} (Lemma 6).

    The signature every approximator's ``realize`` shares (``variants.base``); the
    defaults say the construction: the paper's network is float64 and unclamped.

    Args:
      lam: softmax scale (> 0): every hardmax head becomes softmax(lam * scores); None:
        the plan's (``plan.plan_realization(self, tolerance, margin)``).
      epsilon: ReLU ramp width (> 0): every Phi unit becomes 4 ReLUs; None: the plan's.
      margin, tolerance: what the plan aims at when lam or epsilon is None (cube
        interiors shrunk by margin delta; max |g - g_bar| there).
      dtype: 'float64', 'float32' or 'exact' (lam, epsilon taken as exact rationals;
        params are the construction's rationals, ``Realized.exact_params``).
      clamp: append ``realize.output_clamp`` blocks clamping each output coordinate to
        the range of g_bar (``output_range``): the same function on cube interiors up
        to the realization error (clamping cannot move g away from g_bar there), and
        |g - g_bar| <= hi - lo everywhere, the ramp windows included.
    A float dtype is checked against the plan (``yun.realization.plan.plan_realization``): when it
    carries fewer significand bits than a literal evaluation at this (lam, epsilon)
    needs, a ``FloatRealizationWarning`` says so (its outputs are then not g_bar's).
    """
    if dtype not in REALIZATION_DTYPES:
      raise ValueError(f'dtype={dtype!r}; allowed: {REALIZATION_DTYPES}.')
    if lam is None or epsilon is None:
      planned = plan.plan_realization(self, tolerance=tolerance, margin=float(margin))
      lam = planned.lam if lam is None else lam
      epsilon = planned.epsilon if epsilon is None else epsilon
    for name, v in (('lam', lam), ('epsilon', epsilon)):
      if isinstance(v, bool) or not isinstance(v, numbers.Real) \
          or not math.isfinite(float(v)) or v <= 0:
        raise ValueError(f'{name} must be a positive finite number, got {v!r}.')
    if dtype == 'exact':  # exact arithmetic: no ulps, so no check_epsilon
      lam, epsilon = Fraction(lam), Fraction(epsilon)
      params = rational.exact_params(self.g_bar, self.values)
      segments = self.g_bar.segments
      segments, params = realize.softmax_realization(segments, params, lam)
      segments, params = realize.relu_realization(segments, params, epsilon)
      segments, params = realize.as_blocks(segments, params)
      segments, params, bounds = self._with_clamp(segments, params, clamp, exact=True)
      return Realized(segments=segments, params=params, lam=lam, epsilon=epsilon,
                      dtype=dtype, positional=self.positional, n=self.n, source=self,
                      clamp=bounds)
    check_epsilon(float(epsilon), self.variant)
    plan.check_float_dtype(self, dtype, lam=lam, epsilon=epsilon)
    with jax.enable_x64(True):
      params = self.float_params()
      segments = self.g_bar.segments
      segments, params = realize.softmax_realization(segments, params, float(lam))
      segments, params = realize.relu_realization(segments, params, float(epsilon))
      segments, params = realize.as_blocks(segments, params)
      segments, params, bounds = self._with_clamp(segments, params, clamp, exact=False)
      cast = np.float64 if dtype == 'float64' else np.float32
      params = jax.tree_util.tree_map(lambda a: np.asarray(a, cast), params)
    return Realized(segments=segments, params=params, lam=float(lam),
                    epsilon=float(epsilon), dtype=dtype, positional=self.positional, n=self.n,
                    source=self, clamp=bounds)

  def _with_clamp(self, segments, params, clamp, *, exact: bool):
    """(segments, params, bounds) with the output clamp appended when ``clamp``."""
    if not isinstance(clamp, bool):
      raise ValueError(f'clamp must be True or False, got {clamp!r}.')
    if not clamp:
      return segments, params, None
    lo, hi = self.output_range()
    segs, p = realize.output_clamp(lo, hi, exact=exact)
    params = {**params, f'segment_{len(segments)}': p['segment_0']}
    bounds = (tuple(lo), tuple(hi)) if exact else (tuple(map(float, lo)),
                                                   tuple(map(float, hi)))
    return tuple(segments) + segs, params, bounds

  def __repr__(self) -> str:
    return (f'Approximator({self.variant.theorem}: target {self.target.name}, d={self.d}, n={self.n}, '
            f'N={self.resolution}, {self.depth()} layers)')

  def describe(self) -> str:
    dep = {**construction.stage_counts(self.layer_counts()), 'total': self.depth()}
    return (f'{self.variant.label}: target {self.target.name}, d={self.d}, n={self.n}, N={self.resolution}; '
            f'g_bar has {dep["total"]} layers ({dep["quantization"]} quantization, '
            f'{dep["contextual"]} attention, {dep["value"]} value), {self.num_params()} '
            f'weights; g_c arithmetic {self.g_bar.contextual.arithmetic.describe()}')


def build(variant, target, *, arithmetic: str = 'auto') -> Approximator:
  """Compiles a target into the modified Transformer g_bar of a Lemma 7-9 ``variant``
  (``yun.variants.staged``): f -> f_bar (Lemma 4) -> g_bar = g_v o g_c o g_q.

  Args:
    variant: the variant on its grid (Theorem 2 or 3, its g_c).
    target: a built-in name (``targets.BUILTIN_TARGETS``), a ``targets.Target`` or a
      callable [batch, n, d] -> [batch, n, d] (checked for shape and finiteness).
    arithmetic: for g_c's exact evaluation ('auto', 'int64', 'limbs').
  Raises:
    ValueError: a target with the wrong shape / non-finite values / not equivariant
      (Theorem 2), or a network too large to build (``check_size``: ``MAX_LAYERS``,
      ``MAX_ARITHMETIC_BITS``).
  """
  d, n, N = variant.d, variant.n, variant.N
  check_size(variant)
  f = targets_lib.get_target(target, d=d, n=n)
  if variant.equivariant:
    targets_lib.check_equivariant(f, d, n)
  reps = variant.representatives()
  values = targets_lib.grid_values(f, reps, N) if reps.size else np.zeros(reps.shape)
  den = VALUE_DENOMINATOR_PER_N * N
  numerators, _ = value.round_targets(values, den)
  g_bar = pipeline.build_g_bar(variant, numerators, denominator=den, arithmetic=arithmetic)
  return Approximator(target=f, f_bar=targets_lib.piecewise_constant(f, N), variant=variant,
                      g_bar=g_bar, values=np.asarray(values, np.float64))
