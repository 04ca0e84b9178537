r"""The grid G_delta and the variants of the construction, each an object chosen once.

Yun et al. 2020 build g_bar = g_v o g_c o g_q on the grid (Appendix E)

    Grid(d, n, N):  delta = 1/N,  G_delta = {0, delta, ..., 1 - delta}^{d x n}

and the variants differ in what g_c separates and so in what g_v is indexed by:

    variant        theorem                    g_q layers   g_c layers        g_v classes C
    Paper          Theorem 2 (Lemmas 7-9)     d(N + 1)     N^d + 1           C(N^d, n)
    Positional     Theorem 3 (Appendix G)     d n N        n N^d + 1         N^(dn)
    TiesComplete   Theorem 2, no bad set      d(N + 1)     N^d + 3           C(N^d + n - 1, n)
    OneLayer       Theorem 2, one softmax     d(N + 1)     1 attn + 1 shift  C(N^d + n - 1, n)
                   layer (``yun.one_layer``)

g_v has one bump per distinct id (n C for Paper and Positional; N^d C(N^d + n - 2, n - 1)
for TiesComplete and OneLayer, whose repeated tokens share an id) plus d + 1 kill and
clean-up layers (none for OneLayer: its bumps are certified, ``yun.one_layer``); every
g_q / g_v layer has 3d + 1 weights. Paper alone has a bad set (repeated columns:
g_bar = 0 there).

``choose(d, n, resolution, positional=, ties=, contextual=)`` validates the public
keyword arguments (the messages callers rely on) and returns the variant; the builders
(``pipeline.build_g_bar``, ``approximator.build_approximator``) call it once and pass the
object down. Everything that differs between variants is a method here: the id interval
[t_l, t_r], the layer and parameter counts per stage, the value map's classes and their
representatives, the grid classes Lemma 6 and the certification run over, the exact
scale, the g_q and g_c builders (Theorem 3's: ``quantize.PositionalQuantization``,
``contextual.PositionalContextualMapping``), the label.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua.yun import common, contextual, contextual_ties, grids, quantize

#: Allowed values of ``contextual`` (``'one_layer'``: ``yun.one_layer``).
CONTEXTUALS = ('paper', 'one_layer')

#: Weights of one g_q / g_v feed-forward layer per unit of d: W_1 [1, d], b_1 [1],
#: W_2 [d, 1], b_2 [d] -> 3d + 1.
FF_WEIGHTS_PER_D, FF_WEIGHTS_EXTRA = 3, 1


@dataclasses.dataclass(frozen=True)
class Grid:
  """(d, n, N): embedding size d >= 1, tokens n >= 2, N = 1/delta >= 2 (``common.check_config``)."""

  d: int
  n: int
  N: int

  def __post_init__(self):
    d, n, N = common.check_config(self.d, self.n, self.N)
    object.__setattr__(self, 'd', d)
    object.__setattr__(self, 'n', n)
    object.__setattr__(self, 'N', N)

  @property
  def resolution(self) -> int:
    return self.N

  @property
  def cells(self) -> int:
    """N^d in-range columns."""
    return self.N ** self.d


def _ff_weights(layers_: int, d: int) -> int:
  return layers_ * (FF_WEIGHTS_PER_D * d + FF_WEIGHTS_EXTRA)


@dataclasses.dataclass(frozen=True)
class Variant:
  """One variant of the construction on a ``Grid`` (module docstring).

  Class attributes: ``name``; ``theorem`` and ``label`` (short and long, for reprs and
  ``describe``); the public flags ``positional``, ``ties``, ``contextual`` it stands for;
  ``has_bad_set`` (repeated columns map to 0); ``equivariant`` (Theorem 2: f must be
  permutation equivariant, classes are multisets); ``exact_by_construction`` (g_bar =
  f_bar on every cube without enumerating the grid: Theorem 3); ``closed_form_interval``
  (t_r is a closed form, cheap at any N; Theorem 3's is an exhaustive sweep);
  ``classes_label`` (the formula for the value map's class count).
  """

  grid: Grid

  name: ClassVar[str] = ''
  theorem: ClassVar[str] = 'Theorem 2'
  label: ClassVar[str] = ''
  positional: ClassVar[bool] = False
  ties: ClassVar[str] = 'paper'
  contextual: ClassVar[str] = 'paper'
  has_bad_set: ClassVar[bool] = False
  equivariant: ClassVar[bool] = True
  exact_by_construction: ClassVar[bool] = False
  closed_form_interval: ClassVar[bool] = True
  classes_label: ClassVar[str] = ''

  def at(self, resolution: int) -> Variant:
    """The same variant on the grid (d, n, ``resolution``)."""
    return type(self)(Grid(self.d, self.n, resolution))

  @property
  def d(self) -> int:
    return self.grid.d

  @property
  def n(self) -> int:
    return self.grid.n

  @property
  def N(self) -> int:  # pylint: disable=invalid-name
    return self.grid.N

  # -- g_q ------------------------------------------------------------------

  def quantization_tokens(self) -> int | None:
    """``n`` argument of ``quantize.layer_count``: None (Lemma 7) or n (Appendix G.1)."""
    return None

  def quantization_layers(self) -> int:
    return quantize.layer_count(self.d, self.N, self.quantization_tokens())

  def quantization_parameters(self) -> int:
    return quantize.parameter_count(self.d, self.N, self.quantization_tokens())

  def quantization_int_params(self, scale: int) -> dict:
    """g_q's segment params ({'feedforward': ...}, one segment) as scaled int64 NumPy
    arrays at ``scale``."""
    _, scaled = quantize.quantization_params(d=self.d, n=self.n, resolution=self.N,
                                             scale=scale, dtype='int64')
    return jax.tree_util.tree_map(np.asarray, scaled['segment_0'])

  def build_quantization(self) -> quantize.Quantization:
    """Lemma 7's g_q (d/delta + d feed-forward layers)."""
    return quantize.Quantization.build(d=self.d, n=self.n, resolution=self.N)

  # -- g_c ------------------------------------------------------------------

  def interval(self) -> tuple[Fraction, Fraction]:
    """[t_l, t_r]: every id q(L) of a point with a value lies in it."""
    raise NotImplementedError

  def contextual_layers(self) -> int:
    raise NotImplementedError

  def contextual_parameters(self) -> int:
    raise NotImplementedError

  def scale(self, denominator) -> int | None:
    """The exact scale S for targets numerators / ``denominator``: lcm(2N, denominator)
    (None for a non-integer denominator: the builder's default)."""
    if isinstance(denominator, (int, np.integer)):
      return int(np.lcm(2 * self.N, int(denominator)))
    return None

  def build_contextual(self, *, scale: int | None, arithmetic: str):
    """g_c with exact scale S = ``scale`` in the planned ``arithmetic``."""
    raise NotImplementedError

  def contextual_object_params(self, cm) -> dict:
    """The built g_c ``cm``'s params as scaled Python ints (object arrays), one entry
    ``segment_<i>`` per segment."""
    _, scaled = contextual.contextual_mapping_params(
        d=cm.d, n=cm.n, resolution=cm.resolution, sweep_ids=cm.sweep_ids,
        final_scale=cm.final_scale, scale=cm.scale, dtype='object')
    return scaled

  # -- g_v ------------------------------------------------------------------

  def num_classes(self) -> int:
    """Classes the value map is indexed by (module docstring)."""
    raise NotImplementedError

  def num_bump_layers(self) -> int:
    """One bump per distinct id: n per class (Paper, Positional)."""
    return self.n * self.num_classes()

  def value_layers(self) -> int:
    """Bumps + d clean-ups + 1 kill (Lemma 9)."""
    return self.num_bump_layers() + self.d + 1

  def value_parameters(self) -> int:
    return _ff_weights(self.value_layers(), self.d)

  def class_decoder(self):
    """jnp ``decode(rank [B]) -> K [B, n, d]``: the classes in rank order."""
    raise NotImplementedError

  def representatives(self) -> np.ndarray:
    """Grid indices [C, n, d] of the classes, in rank order."""
    decode = self.class_decoder()
    with jax.enable_x64(True):
      return np.asarray(decode(jnp.arange(self.num_classes(), dtype=jnp.int64)))

  def grid_classes(self) -> np.ndarray:
    """Grid indices K [C, n, d] of every cube up to what the theorem needs (Lemma 6's
    and the certification's domain, ``yun.ids.grid_classes``): one representative per
    multiset of n cells (columns sorted by cell), repeated cells included (g and g_bar
    are permutation equivariant)."""
    d, n, N = self.d, self.n, self.N
    cells = N ** d
    digits = grids.column_digits(np.arange(cells, dtype=np.int64), d, N)   # [N^d, d]
    combos = np.asarray(list(itertools.combinations_with_replacement(range(cells), n)),
                        np.int64)
    return digits[combos]

  # -- totals -----------------------------------------------------------------

  def layer_counts(self) -> dict:
    """{'quantization', 'contextual', 'value'} -> layers, from the paper's formulas."""
    return {'quantization': self.quantization_layers(),
            'contextual': self.contextual_layers(), 'value': self.value_layers()}

  def parameter_counts(self) -> dict:
    return {'quantization': self.quantization_parameters(),
            'contextual': self.contextual_parameters(), 'value': self.value_parameters()}

  def depth(self) -> int:
    return sum(self.layer_counts().values())

  def __repr__(self) -> str:
    return f'{type(self).__name__}({self.label}: d={self.d}, n={self.n}, N={self.N})'


@dataclasses.dataclass(frozen=True, repr=False)
class Paper(Variant):
  """Theorem 2 as published: Lemma 8's g_c; repeated columns are the bad set."""

  name: ClassVar[str] = 'paper'
  label: ClassVar[str] = 'Theorem 2'
  has_bad_set: ClassVar[bool] = True
  classes_label: ClassVar[str] = 'C(N^d, n)'

  def interval(self):
    return contextual.interval(self.d, self.n, self.N)

  def contextual_layers(self) -> int:
    return self.grid.cells + 1

  def contextual_parameters(self) -> int:
    return contextual.ContextualMapping.count_parameters(self.d, self.n, self.N)

  def build_contextual(self, *, scale, arithmetic):
    return contextual.ContextualMapping.build(d=self.d, n=self.n, resolution=self.N,
                                              scale=scale, arithmetic=arithmetic)

  def num_classes(self) -> int:
    return math.comb(self.grid.cells, self.n)

  def class_decoder(self):
    return grids.make_class_codec(self.d, self.n, self.N)['decode']


@dataclasses.dataclass(frozen=True, repr=False)
class Positional(Variant):
  """Theorem 3 (Appendix G): E makes every grid point its own context."""

  name: ClassVar[str] = 'positional'
  theorem: ClassVar[str] = 'Theorem 3'
  label: ClassVar[str] = 'Theorem 3 (positional)'
  positional: ClassVar[bool] = True
  equivariant: ClassVar[bool] = False
  exact_by_construction: ClassVar[bool] = True
  closed_form_interval: ClassVar[bool] = False
  classes_label: ClassVar[str] = 'N^(dn)'

  def quantization_tokens(self) -> int:
    return self.n

  def quantization_int_params(self, scale: int) -> dict:
    """Appendix G.1's bins at ``scale`` (E is not scaled: it is added before g_q)."""
    return quantize.positional_int_params(d=self.d, n=self.n, resolution=self.N, scale=scale)

  def build_quantization(self) -> quantize.PositionalQuantization:
    """Appendix G.1's g_q: E, then d n/delta bin layers."""
    return quantize.PositionalQuantization.build(d=self.d, n=self.n, resolution=self.N)

  def interval(self):
    return contextual.positional_interval(self.d, self.n, self.N)

  def contextual_layers(self) -> int:
    return self.n * self.grid.cells + 1

  def contextual_parameters(self) -> int:
    return contextual.PositionalContextualMapping.count_parameters(self.d, self.n, self.N)

  def build_contextual(self, *, scale, arithmetic):
    return contextual.PositionalContextualMapping.build(
        d=self.d, n=self.n, resolution=self.N, scale=scale, arithmetic=arithmetic)

  def num_classes(self) -> int:
    return self.N ** (self.d * self.n)

  def class_decoder(self):
    d, n, N = self.d, self.n, self.N
    return lambda rank: common.decode_grid(rank, d, n, N)

  def grid_classes(self) -> np.ndarray:
    """Every one of the N^(dn) cubes (no permutation reduction)."""
    d, n, N = self.d, self.n, self.N
    return common.decode_grid(np.arange(N ** (d * n), dtype=np.int64), d, n, N)


@dataclasses.dataclass(frozen=True, repr=False)
class TiesComplete(Variant):
  """Theorem 2 with the tie-complete g_c (``yun.contextual_ties``): no bad set."""

  name: ClassVar[str] = 'ties-complete'
  label: ClassVar[str] = 'Theorem 2, ties=complete (no bad set)'
  ties: ClassVar[str] = 'complete'
  classes_label: ClassVar[str] = 'C(N^d + n - 1, n)'

  def interval(self):
    return contextual_ties.interval(self.d, self.n, self.N)

  def contextual_layers(self) -> int:
    return contextual_ties.layer_count(self.d, self.N)

  def contextual_parameters(self) -> int:
    return contextual_ties.parameter_count(self.d, self.n, self.N)

  def scale(self, denominator) -> int:
    """lcm(N lcm(2, n), denominator): integer thresholds and exact counting means."""
    return int(np.lcm(contextual_ties.default_scale(self.N, self.n), int(denominator)))

  def build_contextual(self, *, scale, arithmetic):
    return contextual_ties.build(d=self.d, n=self.n, resolution=self.N, scale=scale,
                                 arithmetic=arithmetic)

  def contextual_object_params(self, cm) -> dict:
    return contextual_ties.params(d=cm.d, n=cm.n, resolution=cm.resolution, scale=cm.scale,
                                  dtype='object')

  def num_classes(self) -> int:
    return contextual_ties.num_classes(self.d, self.n, self.N)

  def num_bump_layers(self) -> int:
    """One per (multiset, value in it): repeated tokens share their id and bump."""
    return contextual_ties.num_ids(self.d, self.n, self.N)

  def class_decoder(self):
    return contextual_ties.make_class_codec(self.d, self.n, self.N)['decode']


@dataclasses.dataclass(frozen=True, repr=False)
class OneLayer(Variant):
  """Theorem 2 with one softmax attention layer as g_c (``yun.one_layer``): no bad set;
  g_c is the attention layer and a bias-only shift, g_v one certified bump per id. Its
  ids are irrational (certified enclosures, no [t_l, t_r]) and ``yun.one_layer.build``
  builds it whole: ``interval`` and the stage builders do not apply."""

  name: ClassVar[str] = 'one-layer'
  label: ClassVar[str] = 'Theorem 2, one softmax attention layer'
  contextual: ClassVar[str] = 'one_layer'
  classes_label: ClassVar[str] = 'C(N^d + n - 1, n)'
  #: g_c: the attention layer and the shift layer.
  CONTEXTUAL_LAYERS: ClassVar[int] = 2

  def contextual_layers(self) -> int:
    return self.CONTEXTUAL_LAYERS

  def contextual_parameters(self) -> int:
    """The head (W_Q, b_Q, W_K, W_V: head size 1; W_O [d, 1]) and the shift
    (W_1 [1, d], b_1 [1], W_2 [d, 1], b_2 [d])."""
    return (4 * self.d + 1) + _ff_weights(1, self.d)

  def num_classes(self) -> int:
    """Contexts: multisets of n cells (as ``TiesComplete``)."""
    return contextual_ties.num_classes(self.d, self.n, self.N)

  def num_bump_layers(self) -> int:
    """One per (context, token) pair (as ``TiesComplete``'s ids)."""
    return contextual_ties.num_ids(self.d, self.n, self.N)

  def value_layers(self) -> int:
    """One bump per id (no kill or clean-up layers)."""
    return self.num_bump_layers()

  def class_decoder(self):
    """Contexts are multisets of n cells (as ``TiesComplete``)."""
    return contextual_ties.make_class_codec(self.d, self.n, self.N)['decode']


#: The variants by name.
VARIANTS = {v.name: v for v in (Paper, Positional, TiesComplete, OneLayer)}


def check_contextual(contextual) -> str:
  # pylint: disable=redefined-outer-name
  if contextual not in CONTEXTUALS:
    raise ValueError(f'contextual={contextual!r}; allowed values: '
                     f'{", ".join(repr(c) for c in CONTEXTUALS)}.')
  return contextual


def choose(d, n, resolution, *, positional=False, ties='paper', contextual='paper',
           arithmetic: str = 'auto', theorem3_ignores_ties: bool = False) -> Variant:
  """The variant for the public keyword arguments of ``build_approximator`` /
  ``build_g_bar`` (``contextual`` / ``arithmetic``: ``build_approximator`` only).
  ``theorem3_ignores_ties``: a truthy ``positional`` takes ``ties`` as 'paper' (for
  a caller whose ties default is 'complete').

  Raises:
    ValueError: an unknown ``contextual`` or ``ties``, a ``positional`` that is not a
      bool, a bad (d, n, N), or a combination no variant has (messages as before the
      variants were objects).
  """
  # pylint: disable=redefined-outer-name
  if theorem3_ignores_ties and positional:
    ties = 'paper'
  if contextual != 'paper':
    check_contextual(contextual)
    if positional is not False or ties != 'paper' or arithmetic != 'auto':
      raise ValueError("contextual='one_layer' is Theorem 2 without a bad set: it takes "
                       "positional=False, ties='paper' and arithmetic='auto' only.")
    return OneLayer(Grid(d, n, resolution))
  grid = Grid(d, n, resolution)
  if not isinstance(positional, bool):
    raise ValueError(f'positional must be True or False, got {positional!r}.')
  ties = contextual_ties.check_ties(ties)
  if ties == 'complete' and positional:
    raise ValueError("ties='complete' is a Theorem 2 variant; positional=True (Theorem 3) "
                     'has no ties to resolve.')
  if positional:
    return Positional(grid)
  return TiesComplete(grid) if ties == 'complete' else Paper(grid)


def of(obj) -> Variant:
  """The variant of an object: its ``variant`` if it has one, else from its ``d``, ``n``,
  ``resolution`` and ``positional`` / ``ties`` flags (a built ``ContextualMapping``)."""
  if isinstance(getattr(obj, 'variant', None), Variant):
    return obj.variant
  return choose(obj.d, obj.n, obj.resolution, positional=bool(obj.positional),
                ties=getattr(obj, 'ties', 'paper'))
