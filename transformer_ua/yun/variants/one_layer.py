"""Theorem 2 with one softmax attention layer as g_c (``single_attention.one_layer``)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar


from transformer_ua.yun.stages import contextual_ties

from transformer_ua.yun.variants.base import Variant, _ff_weights


@dataclasses.dataclass(frozen=True, repr=False)
class OneLayer(Variant):
  """Theorem 2 with one softmax attention layer as g_c (``yun.single_attention.one_layer``): no bad set;
  g_c is the attention layer and a bias-only shift, g_v one certified bump per id. Its
  ids are irrational (certified enclosures, no [t_l, t_r]) and ``yun.single_attention.one_layer.build``
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
    return contextual_ties.num_classes(self.grid)

  def num_bump_layers(self) -> int:
    """One per (context, token) pair (as ``TiesComplete``'s ids)."""
    return contextual_ties.num_ids(self.grid)

  def value_layers(self) -> int:
    """One bump per id (no kill or clean-up layers)."""
    return self.num_bump_layers()

  def class_decoder(self):
    """Contexts are multisets of n cells (as ``TiesComplete``)."""
    return contextual_ties.make_class_codec(self.grid)['decode']
