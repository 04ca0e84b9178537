"""Theorem 3 (Appendix G): the positional encoding E makes every grid point its own context."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from transformer_ua.yun import grid
from transformer_ua.yun.stages import contextual, quantize

from transformer_ua.yun.variants.base import Variant


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
    return quantize.positional_int_params(self.grid, scale=scale)

  def build_quantization(self) -> quantize.PositionalQuantization:
    """Appendix G.1's g_q: E, then d n/delta bin layers."""
    return quantize.PositionalQuantization.build(self.grid)

  def interval(self):
    return contextual.positional_interval(self.grid)

  def contextual_layers(self) -> int:
    return self.n * self.grid.cells + 1

  def contextual_parameters(self) -> int:
    return contextual.PositionalContextualMapping.count_parameters(self.grid)

  def build_contextual(self, *, scale, arithmetic):
    return contextual.PositionalContextualMapping.build(
        self.grid, scale=scale, arithmetic=arithmetic)

  def num_classes(self) -> int:
    return self.N ** (self.d * self.n)

  def class_decoder(self):
    return lambda rank: grid.decode_grid(rank, self.grid)

  def grid_classes(self) -> np.ndarray:
    """Every one of the N^(dn) cubes (no permutation reduction)."""
    d, n, N = self.d, self.n, self.N
    return grid.decode_grid(np.arange(N ** (d * n), dtype=np.int64), self.grid)
