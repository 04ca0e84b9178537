r"""The grid G_delta and the variants of the construction, each an object chosen once.

Yun et al. 2020 build g_bar = g_v o g_c o g_q on the grid (Appendix E)

    Grid(d, n, N):  delta = 1/N,  G_delta = {0, delta, ..., 1 - delta}^{d x n}

and the variants differ in what g_c separates and so in what g_v is indexed by:

    variant        theorem                    g_q layers   g_c layers        g_v classes C
    Paper          Theorem 2 (Lemmas 7-9)     d(N + 1)     N^d + 1           C(N^d, n)
    Positional     Theorem 3 (Appendix G)     d n N        n N^d + 1         N^(dn)
    TiesComplete   Theorem 2, no bad set      d(N + 1)     N^d + 3           C(N^d + n - 1, n)
    OneLayer       Theorem 2, one softmax     d(N + 1)     1 attn + 1 shift  C(N^d + n - 1, n)
                   layer (``yun.single_attention.one_layer``)

g_v has one bump per distinct id (n C for Paper and Positional; N^d C(N^d + n - 2, n - 1)
for TiesComplete and OneLayer, whose repeated tokens share an id) plus d + 1 kill and
clean-up layers (none for OneLayer: its bumps are certified, ``yun.single_attention.one_layer``); every
g_q / g_v layer has 3d + 1 weights. Paper alone has a bad set (repeated columns:
g_bar = 0 there).

``registry.choose(grid, positional=, ties=, contextual=)`` validates the public
keyword arguments (the messages callers rely on) and returns the variant; the builders
(``pipeline.build_g_bar``, ``approximator.build_approximator``) call it once and pass the
object down. Everything that differs between variants is a method here: the id interval
[t_l, t_r], the layer and parameter counts per stage, the value map's classes and their
representatives, the grid classes Lemma 6 and the certification run over, the exact
scale, the g_q and g_c builders (Theorem 3's: ``quantize.PositionalQuantization``,
``contextual.PositionalContextualMapping``), the label.
"""

from __future__ import annotations

from __future__ import annotations

import dataclasses
import itertools
from fractions import Fraction
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua.yun import enumeration, grid
from transformer_ua.yun.stages import contextual, quantize

#: Allowed values of ``contextual`` (``'one_layer'``: ``yun.single_attention.one_layer``).
CONTEXTUALS = ('paper', 'one_layer')

#: Weights of one g_q / g_v feed-forward layer per unit of d: W_1 [1, d], b_1 [1],
#: W_2 [d, 1], b_2 [d] -> 3d + 1.
FF_WEIGHTS_PER_D, FF_WEIGHTS_EXTRA = 3, 1


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

  grid: grid.Grid

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
    return type(self)(grid.Grid(self.d, self.n, resolution))

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
    _, scaled = quantize.quantization_params(self.grid,
                                             scale=scale, dtype='int64')
    return jax.tree_util.tree_map(np.asarray, scaled['segment_0'])

  def build_quantization(self) -> quantize.Quantization:
    """Lemma 7's g_q (d/delta + d feed-forward layers)."""
    return quantize.Quantization.build(self.grid)

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
        cm.grid, sweep_ids=cm.sweep_ids,
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
    and the certification's domain, ``yun.realization.ids.grid_classes``): one representative per
    multiset of n cells (columns sorted by cell), repeated cells included (g and g_bar
    are permutation equivariant)."""
    d, n, N = self.d, self.n, self.N
    cells = N ** d
    digits = enumeration.column_digits(np.arange(cells, dtype=np.int64), d, N)   # [N^d, d]
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
