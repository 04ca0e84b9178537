r"""The realized one-layer network g (``yun.single_attention.one_layer``): T^{2,1,4} blocks, certified.

``OneLayerApproximator.realize`` builds it: Lemma 6 turns every Phi unit into 4 ReLUs
(ramp widths per stage) and ``realize.as_blocks`` packs the layers into blocks of two
heads of size 1 and ReLU width 4, exactly one of them with its attention writing.
'exact' params (rationals) are evaluated and certified in arb balls
(``exact.ball``): ``apply_certified`` encloses g(X) [batch, n, d], and
``certify_interiors`` bounds max |g - g_bar| over every cube interior (one cube per
context, by equivariance; cubes shrunk by margin delta per side). 'float64' params
(the same rationals rounded) run in the JAX network.
"""

from __future__ import annotations

import dataclasses
import time
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import construction, layers, realize
from transformer_ua.exact import ball
from transformer_ua.yun.realization import certified_eval
from transformer_ua.yun import grid

#: Default cube-interior margin (fraction of delta per side), as ``yun.realization.plan``.
DEFAULT_MARGIN = Fraction(1, 4)


def _checked_input(x, n: int, d: int) -> np.ndarray:
  """X as float64 [batch, n, d] in [0, 1)^{n x d}, or ValueError (as ``yun.approximator.Approximator``)."""
  return grid.check_domain(grid.check_input(x, n, d))


def _as_float64(tree) -> dict:
  """A params pytree with rational (or float) leaves as float64 (bool leaves kept)."""
  return jax.tree_util.tree_map(
      lambda a: np.asarray(a, bool if np.asarray(a).dtype == bool else np.float64), tree)


def interior_margin_and_bits(g, margin, bits, tolerance: float, check_plan: bool):
  """(margin as a Fraction in [0, 1/2), the working bits) of a one-layer realization's
  ``certify_interiors``: ``bits`` None is the plan's (``g.bits(tolerance)``); with
  ``check_plan`` an explicit ``bits`` below the plan's is refused."""
  margin = Fraction(margin)
  if not 0 <= margin < Fraction(1, 2):
    raise ValueError(f'margin must be in [0, 1/2), got {float(margin):g}.')
  need = g.bits(tolerance)
  bits = need if bits is None else ball.check_bits(bits)
  if check_plan and bits < need:
    raise ValueError(f'bits={bits} is below the {need} bits the plan needs for this '
                     'realization.')
  return margin, bits


@dataclasses.dataclass(frozen=True, eq=False)
class OneLayerRealized(grid.OfSource):
  """The realized g: T^{2,1,4} blocks; 'exact' params (rationals) are evaluated and
  certified in arb balls, 'float64' params (the same rationals rounded) by the JAX network.

  Attributes: segments, params; epsilon (the smallest ramp width) and epsilons (per
  stage: 'quantization', 'value'); source (the ``OneLayerApproximator``); dtype; clamp:
  None, or (lo, hi): the last blocks clamp output coordinate i to the range of g_bar
  (``realize.output_clamp``; exact rationals for 'exact').

  With 'exact' params it carries what ``yun.certify_lp`` needs of a realization (the
  same as ``yun.approximator.Realized``): segments, params, positional, dtype, source, clamp,
  epsilon, quantization_epsilon, lam, ``exact_params()``, ``planned_bits(margin)``,
  ``ball_network(bits)`` and ``certify_interiors(margin, bits, workers=, check_plan=)``.
  """

  segments: tuple
  params: dict
  epsilon: Fraction
  source: object    # the ``one_layer.OneLayerApproximator``
  dtype: str = 'exact'
  epsilons: dict | None = None
  clamp: tuple | None = None

  @property
  def quantization_epsilon(self) -> Fraction:
    """Ramp width of the quantization's ReLUs (Lemma 7 edges)."""
    return self.epsilons['quantization']

  def planned_bits(self, margin=DEFAULT_MARGIN, tolerance: float = 1e-6) -> int:
    """The ball precision the planner gives this realization (``plan_bits``; the ramps'
    widths, and so the margin, are fixed at ``realize``)."""
    del margin
    return self.bits(tolerance)

  # -- the construction contract (``transformer_ua.construction``) ----------

  def depth(self) -> int:
    """Blocks of T^{2,1,4} (the output clamp's included)."""
    return sum(s.depth for s in self.segments)

  def layer_counts(self) -> dict:
    """{stage: {'block': blocks}} (the source's stages, then 'clamp')."""
    stages = self.source.stage_names()
    out = {}
    for i, seg in enumerate(self.segments):
      out = construction.merge_counts(
          out, {stages[i] if i < len(stages) else 'clamp': {seg.kind: seg.depth}})
    return out

  def network(self):
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    return modules.Network(self.segments, positional=False, num_tokens=self.source.n,
                          param_dtype=jnp.float64)

  def float_params(self) -> dict:
    """The params as float64 (the exact rationals rounded for 'exact')."""
    return _as_float64(self.params)

  def apply_exact(self, x) -> np.ndarray:
    """'float64': the exact values of what the float network computes; 'exact': the
    rational midpoint of the certified enclosure (softmax makes g(X) transcendental).
    Fractions [batch, n, d]."""
    return construction.to_fractions(self.apply(x))

  def block_counts(self) -> dict:
    """Blocks, and how many have their attention / feed-forward switched on."""
    att_on = ff_on = 0
    for i in range(len(self.segments)):
      p = self.params[f'segment_{i}']
      for a in np.asarray(p['attention']['W_O']).reshape(self.segments[i].depth, -1):
        att_on += int(any(v != 0 for v in a))
      ff = p['feedforward']
      w2 = np.asarray(ff['W_2']).reshape(self.segments[i].depth, -1)
      b2 = np.asarray(ff['b_2']).reshape(self.segments[i].depth, -1)
      for a, b in zip(w2, b2):
        ff_on += int(any(v != 0 for v in a) or any(v != 0 for v in b))
    return {'blocks': sum(s.depth for s in self.segments), 'attention_on': att_on,
            'feedforward_on': ff_on, 'heads': realize.BLOCK_HEADS,
            'head_size': realize.BLOCK_HEAD_SIZE, 'width': realize.BLOCK_WIDTH}

  def num_params(self) -> int:
    return layers.count_params(self.params)

  def bits(self, tolerance: float = 1e-6) -> int:
    return self.source.plan_bits(tolerance)

  def ball_network(self, bits: int) -> ball.BallNetwork:
    key = ('_ball', bits)
    cache = self.__dict__.setdefault('_cache', {})
    if key not in cache:
      with ball.precision(bits):
        cache[key] = ball.BallNetwork(self.segments, self.params)
    return cache[key]

  def apply_certified(self, x, bits: int | None = None):
    """(mid, rad) float64 [batch, n, d]: the exact g(X) lies in [mid - rad, mid + rad]."""
    self._check_exact()
    src = self.source
    x = _checked_input(x, src.n, src.d)
    bits = self.bits() if bits is None else ball.check_bits(bits)
    return certified_eval.enclose_points(self.ball_network(bits), x, bits)

  def _check_exact(self):
    if self.dtype != 'exact':
      raise ValueError(f"certified evaluation needs dtype='exact' (this one is {self.dtype}).")

  def exact_params(self) -> dict:
    """The params pytree with exact rational leaves (dtype 'exact' only; what
    ``export_onnx`` and the oracle read)."""
    self._check_exact()
    return self.params

  def apply(self, x) -> np.ndarray:
    """g(X) [batch, n, d] float64: the certified midpoint ('exact') or the float64 JAX
    network ('float64')."""
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    if self.dtype == 'exact':
      return self.apply_certified(x)[0]
    x = _checked_input(x, self.source.n, self.source.d)
    with jax.enable_x64(True):
      return np.asarray(modules.jit_apply(self.network())(self.params,
                                                         jnp.asarray(x, jnp.float64)))

  def sampled_error(self, samples: int = 512, seed: int = 0, margin: float = 0.25) -> float:
    """max |g - g_bar| on ``samples`` uniform cube-interior points (a measurement, not a
    certificate; for the float64 realization)."""
    src = self.source
    rng = np.random.default_rng(seed)
    k = rng.integers(0, src.resolution, size=(samples, src.n, src.d))
    x = (k + margin + (1 - 2 * margin) * rng.random(k.shape)) / src.resolution
    return float(np.max(np.abs(self.apply(x) - src.apply(x))))

  def certify_interiors(self, margin=DEFAULT_MARGIN, bits: int | None = None, *,
                        tolerance: float = 1e-6, workers=None, executor=None,
                        state_dir: str | None = None, check_plan: bool = False) -> dict:
    """Certified max |g - g_bar| over every point of every cube interior (each cube
    shrunk by margin delta per side; one cube per context, by equivariance), by arb box
    propagation (``certified_eval.certify_boxes``: ``workers`` / ``executor`` / ``state_dir`` as
    ``certified_eval.certify_interiors``'s). ``check_plan``: refuse an explicit ``bits`` below
    the plan's. Returns dict as ``certified_eval.certify_interiors``."""
    self._check_exact()
    src = self.source
    margin, bits = interior_margin_and_bits(self, margin, bits, tolerance, check_plan)
    t0 = time.perf_counter()
    N = src.resolution
    cells = src.variant.grid_classes()                      # [C, n, d]: the multisets
    targets = src.apply((cells + 0.5) / N)
    out = certified_eval.certify_boxes(self.segments, self.params, False, bits, cells, targets, N,
                                margin, tolerance=tolerance, workers=workers,
                                executor=executor, state_dir=state_dir)
    return {**out, 'seconds': time.perf_counter() - t0, 'margin': float(margin),
            'lam': float(self.lam), 'epsilon': float(self.epsilon)}

