"""Theorem 2 shallow and wide: the one-layer map with one wide bump layer.

    g = clamp o (value FF of width 4 P) o (one softmax head) o (quantization FF of width 2Nd)
    blocks = 2 + ceil(d / 2) for every N;  P = M C(M + n - 2, n - 1) ids, M = N^d

(``single_attention.one_layer_wide``: sizes in closed form, certification cost
independent of the width).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_ua.yun.single_attention import one_layer_wide
from transformer_ua.yun.variants.base import as_float
from transformer_ua.yun.variants.one_layer import OneLayer


def wide_seconds(size: dict, classes: int) -> float:
  """Seconds of one build + realize + certify: build ~ ids (exact id enclosures),
  certify ~ classes (attention + a bisection each): fixed 2 s + 1.3e-3 s / id + 6e-3 s
  / class, measured for token_times_mean, d = 1, n = 3, N = 8, 16, 24 (0.3 / 2.3 / 9.2
  s build, 0.6 / 4.6 / 13.5 s certify_lp at 1-min load ~8 on 2 shared cores).

  It assumes that load: on a near-idle machine (load ~2) the same attempts take about
  5x less (N = 9: estimated 3.5 s, took 0.65 s; N = 22: 21.4 s, took 4.8 s), and at
  load 5 to 10 up to 1.8x more (N = 12, d = 2, n = 2: 91.6 s, took 163 s). A budget
  check good to a factor of about 5, not a prediction (``search`` module doc)."""
  return 2.0 + 1.3e-3 * as_float(size['ids']) + 6e-3 * as_float(classes)


@dataclasses.dataclass(frozen=True, repr=False)
class OneLayerWide(OneLayer):
  """The one-layer map realized shallow and wide (module docstring)."""

  name: ClassVar[str] = 'one_layer_wide'
  summary: ClassVar[str] = ('Theorem 2 shallow and wide: one softmax attention layer, one '
                            'bump feed-forward layer of width 4 x ids, the clamp (2 + '
                            'ceil(d / 2) blocks)')
  label: ClassVar[str] = 'Theorem 2, one softmax attention layer, shallow and wide'

  def size(self) -> dict:
    return one_layer_wide.predicted_size(self.d, self.n, self.N)

  def seconds(self, size: dict, classes: int) -> float:
    return wide_seconds(size, classes)

  def build(self, target, *, lam=None, id_bits: int | None = None):
    return one_layer_wide.build(target, self, lam=lam)
