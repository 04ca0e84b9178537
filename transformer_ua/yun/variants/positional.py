"""Theorem 3 (Appendix G): the positional encoding E makes every grid point its own context."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_ua.yun.stages import contextual, contextual_positional, quantize
from transformer_ua.yun.variants.base import EveryCubeContexts
from transformer_ua.yun.variants.staged import StagedVariant


@dataclasses.dataclass(frozen=True, repr=False)
class Positional(EveryCubeContexts, StagedVariant):
  """Theorem 3 (Appendix G): E makes every grid point its own context."""

  name: ClassVar[str] = 'positional'
  summary: ClassVar[str] = 'Theorem 3 (positional encoding E; n N^d + 1 attention layers)'
  COST: ClassVar[tuple] = (10.0, 19e-3, 7.6e-6)
  label: ClassVar[str] = 'Theorem 3 (positional)'
  closed_form_interval: ClassVar[bool] = False

  def quantization_int_params(self, scale: int) -> dict:
    """Appendix G.1's bins at ``scale`` (E is not scaled: it is added before g_q)."""
    return quantize.positional_int_params(self.grid, scale=scale)

  def build_quantization(self) -> quantize.PositionalQuantization:
    """Appendix G.1's g_q: E, then d n/delta bin layers."""
    return quantize.PositionalQuantization.build(self.grid)

  def interval(self):
    return contextual_positional.positional_interval(self.grid)

  def contextual_layers(self) -> int:
    return self.n * self.grid.cells + 1

  def contextual_parameters(self) -> int:
    return contextual.PositionalContextualMapping.count_parameters(self.grid)

  def build_contextual(self, *, scale, arithmetic):
    return contextual.PositionalContextualMapping.build(
        self.grid, scale=scale, arithmetic=arithmetic)

  def attention_layers(self) -> int:
    return self.n * self.grid.cells + 1

