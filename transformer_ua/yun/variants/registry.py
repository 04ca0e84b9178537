"""The variants by name, and the one place public keyword arguments become a variant.

Adding a variant is one file in this package (a ``base.Variant`` subclass) and one entry
in ``VARIANTS``; ``yun.approximate`` and ``build_approximator`` then build it by name.
"""

from __future__ import annotations

from transformer_ua.yun import grid
from transformer_ua.yun.stages import contextual_ties
from transformer_ua.yun.variants.base import CONTEXTUALS, Variant
from transformer_ua.yun.variants.integer_ids import IntegerIds
from transformer_ua.yun.variants.one_layer import OneLayer
from transformer_ua.yun.variants.one_layer_wide import OneLayerWide
from transformer_ua.yun.variants.paper import Paper
from transformer_ua.yun.variants.positional import Positional
from transformer_ua.yun.variants.positional_integer_ids import PositionalIntegerIds
from transformer_ua.yun.variants.positional_wide import PositionalWide
from transformer_ua.yun.variants.ties_complete import TiesComplete


#: The variants by name, in the order ``yun.approximate`` lists them.
VARIANTS = {v.name: v for v in (
    Paper,
    TiesComplete,
    Positional,
    OneLayer,
    OneLayerWide,
    PositionalWide,
    IntegerIds,
    PositionalIntegerIds,
)}


def check_contextual(contextual) -> str:
  # pylint: disable=redefined-outer-name
  if contextual not in CONTEXTUALS:
    raise ValueError(f'contextual={contextual!r}; allowed values: '
                     f'{", ".join(repr(c) for c in CONTEXTUALS)}.')
  return contextual


def choose(d, n, resolution, *, positional=False, ties='paper', contextual='paper',
           arithmetic: str = 'auto') -> Variant:
  """The variant for the public keyword arguments of ``build_approximator`` /
  ``verify`` binaries (``contextual`` / ``arithmetic``: ``build_approximator`` only).

  Raises:
    ValueError: an unknown ``contextual`` or ``ties``, a ``positional`` that is not a
      bool, a bad (d, n, N), or a combination no variant has (messages as before the
      variants were objects).
  """
  # pylint: disable=redefined-outer-name
  if contextual != 'paper':
    check_contextual(contextual)
    if positional is not False or ties != 'paper' or arithmetic != 'auto':
      raise ValueError("contextual='one_layer' is Theorem 2 without a bad set: it takes "
                       "positional=False, ties='paper' and arithmetic='auto' only.")
    return OneLayer(grid.Grid(d, n, resolution))
  on = grid.Grid(d, n, resolution)
  if not isinstance(positional, bool):
    raise ValueError(f'positional must be True or False, got {positional!r}.')
  ties = contextual_ties.check_ties(ties)
  if ties == 'complete' and positional:
    raise ValueError("ties='complete' is a Theorem 2 variant; positional=True (Theorem 3) "
                     'has no ties to resolve.')
  if positional:
    return Positional(on)
  return TiesComplete(on) if ties == 'complete' else Paper(on)


def build_approximator(target, *, d: int, n: int, resolution: int, positional: bool = False,
                       arithmetic: str = 'auto', ties: str = 'paper',
                       contextual: str = 'paper'):
  """Compiles a target into the modified Transformer g_bar of Theorem 2 or 3.

  Args:
    target: a built-in name (``targets.BUILTIN_TARGETS``), a ``targets.Target`` or a
      callable [batch, n, d] -> [batch, n, d] (checked for shape and finiteness).
    d, n, resolution: embedding size (>= 1), tokens (>= 2), N = 1/delta (>= 2).
    positional: False: Theorem 2 (f must be permutation equivariant); True: Theorem 3.
    arithmetic: for g_c's exact evaluation ('auto', 'int64', 'limbs').
    ties: 'paper' (Lemma 8; repeated columns are the bad set, g_bar = 0 there) or
      'complete' (``yun.stages.contextual_ties``: every multiset has its own ids and bumps, so
      g_bar = f_bar on every cube); Theorem 2 only. The default is 'paper' because this
      builds the network as published; ``yun.approximate`` takes no ``ties``: it builds
      the constructions 'paper' and 'ties_complete' by name, and by default the smallest
      network that certifies (``yun.search``).
    contextual: 'paper' (Lemma 8's N^d + 1 hardmax layers) or 'one_layer' (one softmax
      attention layer, ``yun.single_attention.one_layer``: Theorem 2 with no bad set; returns a
      ``yun.single_attention.one_layer.OneLayerApproximator``).
  Raises:
    ValueError: bad configuration, a target with the wrong shape / non-finite values /
      not equivariant (Theorem 2), or a network too large to build (``check_size``:
      ``MAX_LAYERS``, ``MAX_ARITHMETIC_BITS``); d, n, resolution must be Python or NumPy
      integers (a string or a float is refused, naming the allowed type).
  """
  variant = choose(d, n, resolution, positional=positional, ties=ties, contextual=contextual,
                   arithmetic=arithmetic)
  return variant.build(target, **({} if arithmetic == 'auto' else {'arithmetic': arithmetic}))
