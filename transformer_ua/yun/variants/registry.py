"""The variants by name, and the one place public keyword arguments become a variant."""

from __future__ import annotations

from transformer_ua.yun import grid
from transformer_ua.yun.stages import contextual_ties
from transformer_ua.yun.variants.base import CONTEXTUALS, Variant
from transformer_ua.yun.variants.one_layer import OneLayer
from transformer_ua.yun.variants.paper import Paper
from transformer_ua.yun.variants.positional import Positional
from transformer_ua.yun.variants.ties_complete import TiesComplete


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


def of(obj) -> Variant:
  """The variant of an object: its ``variant`` if it has one, else from its ``d``, ``n``,
  ``resolution`` and ``positional`` / ``ties`` flags (a built ``ContextualMapping``)."""
  if isinstance(getattr(obj, 'variant', None), Variant):
    return obj.variant
  return choose(obj.d, obj.n, obj.resolution, positional=bool(obj.positional),
                ties=getattr(obj, 'ties', 'paper'))
