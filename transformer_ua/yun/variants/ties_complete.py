"""Theorem 2 with the tie-complete g_c (``stages.contextual_ties``): no bad set."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from transformer_ua.yun.stages import contextual_ties

from transformer_ua.yun.variants.base import MultisetContexts
from transformer_ua.yun.variants.staged import StagedVariant


@dataclasses.dataclass(frozen=True, repr=False)
class TiesComplete(MultisetContexts, StagedVariant):
  """Theorem 2 with the tie-complete g_c (``yun.stages.contextual_ties``): no bad set."""

  name: ClassVar[str] = 'ties_complete'
  summary: ClassVar[str] = ('Theorem 2 with the tie-complete contextual map (N^d + 2 '
                            'attention layers; no bad set)')
  label: ClassVar[str] = 'Theorem 2, ties=complete (no bad set)'
  ties: ClassVar[str] = 'complete'

  def interval(self):
    return contextual_ties.interval(self.grid)

  def contextual_layers(self) -> int:
    return contextual_ties.layer_count(self.d, self.N)

  def contextual_parameters(self) -> int:
    return contextual_ties.parameter_count(self.grid)

  def scale(self, denominator) -> int:
    """lcm(N lcm(2, n), denominator): integer thresholds and exact counting means."""
    return int(np.lcm(contextual_ties.default_scale(self.N, self.n), int(denominator)))

  def build_contextual(self, *, scale, arithmetic):
    return contextual_ties.build(self.grid, scale=scale,
                                 arithmetic=arithmetic)

  def contextual_object_params(self, cm) -> dict:
    return contextual_ties.params(cm.grid, scale=cm.scale,
                                  dtype='object')

  def attention_layers(self) -> int:
    return self.grid.cells + 2

