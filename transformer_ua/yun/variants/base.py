r"""The Variant contract: one construction of Theorem 2 or 3 on a Grid, decided once.

Yun et al. 2020 build g_bar = g_v o g_c o g_q on the grid (Appendix E) and realize it
as a standard Transformer g (Lemma 6). A variant is everything that differs between the
constructions, as one object on a ``grid.Grid``:

    variant          theorem                  g_c                      g realized
    paper            Theorem 2 (Lemmas 7-9)   N^d + 1 hardmax layers   deep, T^{2,1,4}
    ties_complete    Theorem 2, no bad set    N^d + 3 layers           deep, T^{2,1,4}
    positional       Theorem 3 (Appendix G)   n N^d + 1 layers         deep, T^{2,1,4}
    one_layer        Theorem 2                one softmax layer        deep, T^{2,1,4}
    one_layer_wide   Theorem 2                one softmax layer        3 blocks, wide FF
    positional_wide  Theorem 3                one softmax layer        3 blocks, wide FF
    integer_ids      Theorem 2                one head, integer ids    5 blocks, wide FF
    positional_integer_ids  Theorem 3         one head, integer ids    5 blocks, wide FF

Only the integer-id variants have float certificates (``arithmetics``): their g computes
the same in exact, binary64 and binary32 arithmetic where the certificate says so.

Every variant answers (``Variant``): its class counts and class decoder (the value map's
index), the cube classes the certificate evaluates, the closed-form size of g (blocks,
attention layers, width, parameters, nothing built), the estimated seconds of one
attempt, a ``check`` that a plan exists at N, and ``build(target)``: the approximator
(f, f_bar, g_bar) whose ``realize`` gives g. The Lemma 7-9 variants share the stage
methods of ``staged.StagedVariant``. ``registry.py`` lists the variants by name and is
the one place public keyword arguments become a variant (``registry.choose``).

Size of a deep realization (``realize.as_blocks``: one T^{2,1,4} block per layer of
g_bar, + ceil(d / 2) clamp blocks; E [n, d] for Theorem 3):

    params = blocks (h s (4d + 1) + 2 w d + w + d) + n d [positional]
             (h = 2 heads of size s = 1, width w = 4)
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import realize as realize_lib
from transformer_ua.yun import enumeration, grid
from transformer_ua.yun.stages import contextual_ties

#: Allowed values of ``contextual`` (``'one_layer'``: ``yun.single_attention.one_layer``).
CONTEXTUALS = ('paper', 'one_layer')

#: Weights of one g_q / g_v feed-forward layer per unit of d: W_1 [1, d], b_1 [1],
#: W_2 [d, 1], b_2 [d] -> 3d + 1.
FF_WEIGHTS_PER_D, FF_WEIGHTS_EXTRA = 3, 1


def ff_weights(layers_: int, d: int) -> int:
  """Weights of ``layers_`` g_q / g_v feed-forward layers."""
  return layers_ * (FF_WEIGHTS_PER_D * d + FF_WEIGHTS_EXTRA)


def block_params(d: int) -> int:
  """Weights of one T^{2,1,4} block: attention 2 heads of size 1 (W_Q, b_Q, W_K, W_V,
  W_O: 8d + 2) and the width-4 feed-forward (W_1, b_1, W_2, b_2: 9d + 4)."""
  h, s, w = realize_lib.BLOCK_HEADS, realize_lib.BLOCK_HEAD_SIZE, realize_lib.BLOCK_WIDTH
  return h * s * (4 * d + 1) + (2 * w * d + w + d)


def as_float(x) -> float:
  """float(x), or inf for an int past float64's range (sizes of huge grids)."""
  try:
    return float(x)
  except OverflowError:
    return math.inf


def clamp_blocks(d: int) -> int:
  """Blocks of the output clamp (``realize.output_clamp``)."""
  return -(-d // realize_lib.CLAMP_COORDS_PER_BLOCK)


@dataclasses.dataclass(frozen=True)
class Variant(abc.ABC):
  """One variant of the construction on a ``Grid`` (module docstring).

  Class attributes: ``name`` (the registry key), ``summary`` (one line); ``theorem``
  and ``label`` (short and long, for reprs and ``describe``); the public flags
  ``positional``, ``ties``, ``contextual`` it stands for;
  ``has_bad_set`` (repeated columns map to 0); ``equivariant`` (Theorem 2: f must be
  permutation equivariant, classes are multisets); ``exact_by_construction`` (g_bar =
  f_bar on every cube without enumerating the grid: Theorem 3); ``closed_form_interval``
  (t_r is a closed form, cheap at any N; Theorem 3's is an exhaustive sweep);
  ``classes_label`` (the formula for the value map's class count); ``arithmetics`` (the
  arithmetics of g the certificate covers).
  """

  grid: grid.Grid

  name: ClassVar[str] = ''
  summary: ClassVar[str] = ''
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
  #: The arithmetics of g its certificate covers (``transformer_ua.rounding``): the
  #: exact real network only, unless the construction proves its float runs.
  arithmetics: ClassVar[tuple] = ('exact',)

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

  @classmethod
  def applies(cls, positional: bool) -> bool:
    """Theorem 3's variants approximate every f; Theorem 2's need an equivariant f."""
    return not cls.equivariant or not positional

  # -- the value map's classes -------------------------------------------------

  @abc.abstractmethod
  def num_classes(self) -> int:
    """Classes the value map is indexed by (module docstring)."""

  @abc.abstractmethod
  def class_decoder(self):
    """jnp ``decode(rank [B]) -> K [B, n, d]``: the classes in rank order."""

  def representatives(self) -> np.ndarray:
    """Grid indices [C, n, d] of the classes, in rank order."""
    decode = self.class_decoder()
    with jax.enable_x64(True):
      return np.asarray(decode(jnp.arange(self.num_classes(), dtype=jnp.int64)))

  def grid_classes(self) -> np.ndarray:
    """Grid indices K [C, n, d] of every cube up to what the theorem needs (Lemma 6's
    and the certification's domain, ``yun.realization.ids.grid_classes``): Theorem 2
    (g and g_bar permutation equivariant): one representative per multiset of n cells
    (columns sorted by cell), repeated cells included; Theorem 3: every one of the
    N^(dn) cubes."""
    return enumeration.cube_classes(self.grid, self.equivariant)

  def cube_classes(self) -> int:
    """Cube classes the certificate evaluates: multisets of n cells (Theorem 2) or
    every cube (Theorem 3)."""
    if self.equivariant:
      return math.comb(self.grid.cells + self.n - 1, self.n)
    return self.N ** (self.d * self.n)

  # -- sizes -------------------------------------------------------------------

  @abc.abstractmethod
  def size(self) -> dict:
    """{'blocks', 'attention_layers', 'max_width', 'params'} of g with the output clamp,
    in closed form (Python ints; nothing is built)."""

  @abc.abstractmethod
  def seconds(self, size: dict, classes: int) -> float:
    """Estimated seconds of one build + realize + certify at this size."""

  def check(self) -> None:
    """None, or ValueError where the construction has no plan at this grid."""

  # -- the construction -------------------------------------------------------

  @abc.abstractmethod
  def build(self, target, **options):
    """The approximator (f, f_bar, g_bar) of ``target`` on this grid; its ``realize``
    gives g."""

  def __repr__(self) -> str:
    return f'{type(self).__name__}({self.label}: d={self.d}, n={self.n}, N={self.N})'


@dataclasses.dataclass(frozen=True, repr=False)
class DeepVariant(Variant):
  """A variant whose g_bar has the paper's layers by stage, realized deep: one
  T^{2,1,4} block per layer of g_bar (module docstring). ``COST``: (fixed s, s per
  block, s per class and block) of one attempt, measured (``search``)."""

  COST: ClassVar[tuple] = (10.0, 8e-3, 2.5e-6)

  @abc.abstractmethod
  def layer_counts(self) -> dict:
    """{'quantization', 'contextual', 'value'} -> layers of g_bar, from the formulas."""

  @abc.abstractmethod
  def parameter_counts(self) -> dict:
    """The same stages -> weights."""

  def depth(self) -> int:
    return sum(self.layer_counts().values())

  @abc.abstractmethod
  def attention_layers(self) -> int:
    """Attention layers of g (the softmax layers Lemma 6 realizes)."""

  def size(self) -> dict:
    """{'blocks', 'attention_layers', 'max_width', 'params'} of g realized deep with the
    output clamp (module docstring)."""
    blocks = self.depth() + clamp_blocks(self.d)
    return {'blocks': blocks, 'attention_layers': self.attention_layers(),
            'max_width': realize_lib.BLOCK_WIDTH,
            'params': blocks * block_params(self.d) + (self.n * self.d if self.positional else 0)}

  def seconds(self, size: dict, classes: int) -> float:
    """fixed + per_block blocks + per_class_block classes blocks (``COST``).

    The constants were measured on 2 shared cores at 1-minute load 2 to 4 (``search``
    module doc); the load moves the real seconds by up to a factor of about 5 either
    way (0.5x to 5.6x in the size law at load 5 to 10), so this is a budget check
    before building, not a prediction."""
    fixed, per_block, per_class_block = self.COST
    b = as_float(size['blocks'])
    return fixed + per_block * b + per_class_block * as_float(classes) * b


class MultisetContexts:
  """Value-map classes that are the multisets of n cells, repeated cells included
  (``TiesComplete``, ``OneLayer``): C(N^d + n - 1, n) classes, one id and one bump per
  (multiset, value in it) -- repeated tokens share their id and bump
  (``stages.contextual_ties``)."""

  classes_label: ClassVar[str] = 'C(N^d + n - 1, n)'

  def num_classes(self) -> int:
    return contextual_ties.num_classes(self.grid)

  def num_bump_layers(self) -> int:
    return contextual_ties.num_ids(self.grid)

  def class_decoder(self):
    return contextual_ties.make_class_codec(self.grid)['decode']


class EveryCubeContexts:
  """Value-map classes that are every cube of the grid (Theorem 3's variants: the
  positional encoding makes each cube its own context, f need not be equivariant):
  N^(dn) classes, decoded by ``grid.decode_grid``; no bad set, g_bar = f_bar on every
  cube by construction."""

  theorem: ClassVar[str] = 'Theorem 3'
  positional: ClassVar[bool] = True
  equivariant: ClassVar[bool] = False
  exact_by_construction: ClassVar[bool] = True
  classes_label: ClassVar[str] = 'N^(dn)'

  def num_classes(self) -> int:
    return self.N ** (self.d * self.n)

  def class_decoder(self):
    return lambda rank: grid.decode_grid(rank, self.grid)
