"""Theorem 2 with integer ids: exact and IEEE arithmetic agree on cube interiors.

    g = [clamp] o value (width 2(P - 1)) o attention + snap o code (width M + 1) o snap
          o quantize (width 2(N - 1)d + d)   on d + 2 coordinates
    blocks = 5 + ceil(d / 2);  P = M C(M + n - 2, n - 1) ids, M = N^d

(``single_attention.integer_ids``: B_n-coded cells summed by one head whose scores are all
0, integer ids, a staircase value map; float certificates in binary64 and binary32).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_ua.yun.single_attention import integer_ids
from transformer_ua.yun.variants.base import MultisetContexts, Variant, as_float


def integer_ids_seconds(size: dict, classes: int) -> float:
  """Seconds of one build + realize + certify: fixed 1 s + 5e-4 s per id (table, parameters,
  exact checks) + 2e-5 s per class. Calibrated on ``approximate('token_times_mean', eps,
  d=1, n=3)`` on this project's 2-core machine (1-minute load about 1): N = 9, 22, 43
  (405, 5,566, 40,678 ids) took 0.2, 2 and 20 s."""
  return 1.0 + 5e-4 * as_float(size['ids']) + 2e-5 * as_float(classes)


@dataclasses.dataclass(frozen=True, repr=False)
class IntegerIds(MultisetContexts, Variant):
  """Theorem 2 with integer ids (module docstring)."""

  name: ClassVar[str] = 'integer_ids'
  summary: ClassVar[str] = ('Theorem 2 with integer ids: B_n-coded cells summed by one head, a '
                            'staircase value map; the same network in exact, binary64 and '
                            'binary32 arithmetic (5 + ceil(d / 2) blocks)')
  label: ClassVar[str] = 'Theorem 2, integer ids'
  contextual: ClassVar[str] = 'integer_ids'
  #: The arithmetics whose certificate this construction has (``transformer_ua.rounding``).
  arithmetics: ClassVar[tuple] = ('exact', 'float64', 'float32')

  def size(self) -> dict:
    return integer_ids.predicted_size(self.d, self.n, self.N, positional=self.positional)

  def seconds(self, size: dict, classes: int) -> float:
    return integer_ids_seconds(size, classes)

  def build(self, target, *, number_format: str = 'float64'):
    return integer_ids.build(target, self, number_format=number_format)
