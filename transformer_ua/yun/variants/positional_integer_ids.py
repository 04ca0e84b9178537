"""Theorem 3 with integer ids: positional digits instead of a B_n code.

    E_j = j N^d e_(a_1);  phi(j M + m) = m M^j,  H = j M^n:  t = j M^n + the cube's index
    blocks = 5 + ceil(d / 2);  P = n M^n ids (one per (cube, position)), M = N^d

(``single_attention.integer_ids``; no bad set: every cube is its own context).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_ua.yun.single_attention import integer_ids
from transformer_ua.yun.variants.base import EveryCubeContexts, Variant
from transformer_ua.yun.variants.integer_ids import integer_ids_seconds


@dataclasses.dataclass(frozen=True, repr=False)
class PositionalIntegerIds(EveryCubeContexts, Variant):
  """Theorem 3 with integer ids (module docstring)."""

  name: ClassVar[str] = 'positional_integer_ids'
  summary: ClassVar[str] = ('Theorem 3 with integer ids: positional digits summed by one head, '
                            'a staircase value map; exact, binary64 and binary32 certificates')
  label: ClassVar[str] = 'Theorem 3, integer ids'
  arithmetics: ClassVar[tuple] = ('exact', 'float64', 'float32')

  def size(self) -> dict:
    return integer_ids.predicted_size(self.d, self.n, self.N, positional=True)

  def seconds(self, size: dict, classes: int) -> float:
    return integer_ids_seconds(size, classes)

  def build(self, target, *, number_format: str = 'float64'):
    return integer_ids.build(target, self, number_format=number_format)
