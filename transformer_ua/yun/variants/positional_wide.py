"""Theorem 3 shallow and wide: positional E, one softmax attention layer, one wide
bump layer, the clamp (``single_attention.one_layer_positional`` and ``one_layer_wide``).

    E_j = j e_(d-1);  M' = n N^d cells;  P = n N^(dn) ids (one per (X, j));
    blocks = 2 + ceil(d / 2) for every N

No bad set: every cube is its own context.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_ua.yun.single_attention import one_layer_wide
from transformer_ua.yun.variants.base import EveryCubeContexts, Variant
from transformer_ua.yun.variants.one_layer_wide import wide_seconds


@dataclasses.dataclass(frozen=True, repr=False)
class PositionalWide(EveryCubeContexts, Variant):
  """Theorem 3 with one softmax attention layer, shallow and wide (module docstring)."""

  name: ClassVar[str] = 'positional_wide'
  summary: ClassVar[str] = ('Theorem 3 shallow and wide: positional E, one softmax attention '
                            'layer, one bump feed-forward layer, the clamp')
  label: ClassVar[str] = 'Theorem 3, one softmax attention layer, shallow and wide'

  def size(self) -> dict:
    return one_layer_wide.predicted_size(self.d, self.n, self.N, positional=True)

  def seconds(self, size: dict, classes: int) -> float:
    return wide_seconds(size, classes)

  def build(self, target, **options):
    """``one_layer_wide.build`` on ``one_layer_positional``'s g_bar (any target)."""
    return one_layer_wide.build(target, self, **options)
