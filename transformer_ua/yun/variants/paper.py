"""Theorem 2 as published (Lemmas 7-9): Lemma 8's g_c, repeated columns the bad set."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar


from transformer_ua.yun import enumeration
from transformer_ua.yun.stages import contextual

from transformer_ua.yun.variants.staged import StagedVariant
from transformer_ua.yun.stages import contextual_params


@dataclasses.dataclass(frozen=True, repr=False)
class Paper(StagedVariant):
  """Theorem 2 as published: Lemma 8's g_c; repeated columns are the bad set."""

  name: ClassVar[str] = 'paper'
  summary: ClassVar[str] = ("Theorem 2 as published (Lemma 8's N^d + 1 attention layers; "
                            'bad set)')
  label: ClassVar[str] = 'Theorem 2'
  has_bad_set: ClassVar[bool] = True
  classes_label: ClassVar[str] = 'C(N^d, n)'

  def interval(self):
    return contextual_params.interval(self.grid)

  def contextual_layers(self) -> int:
    return self.grid.cells + 1

  def contextual_parameters(self) -> int:
    return contextual.ContextualMapping.count_parameters(self.grid)

  def build_contextual(self, *, scale, arithmetic):
    return contextual.ContextualMapping.build(self.grid,
                                              scale=scale, arithmetic=arithmetic)

  def attention_layers(self) -> int:
    return self.grid.cells + 1

  def num_classes(self) -> int:
    return math.comb(self.grid.cells, self.n)

  def class_decoder(self):
    return enumeration.make_class_codec(self.grid)['decode']
