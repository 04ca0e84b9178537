"""Theorem 2 with one softmax attention layer as g_c, realized deep (Lemma 6).

    g_c = one softmax head (lam planned, ids certified distinct) + a bias-only shift
    g_v = one certified bump per id (``single_attention.one_layer``)

No bad set; the ids are irrational (certified enclosures), so there is no [t_l, t_r]
and no stage-by-stage builder: ``single_attention.one_layer.build`` builds g_bar whole.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from transformer_ua.yun.single_attention import one_layer, one_layer_ids
from transformer_ua.yun.stages import quantize
from transformer_ua.yun.variants.base import DeepVariant, MultisetContexts, ff_weights


@dataclasses.dataclass(frozen=True, repr=False)
class OneLayer(MultisetContexts, DeepVariant):
  """Theorem 2 with one softmax attention layer as g_c (module docstring)."""

  name: ClassVar[str] = 'one_layer'
  summary: ClassVar[str] = ('Theorem 2 with one softmax attention layer, realized deep (one '
                            'block per id)')
  label: ClassVar[str] = 'Theorem 2, one softmax attention layer'
  contextual: ClassVar[str] = 'one_layer'
  #: g_c: the attention layer and the shift layer.
  CONTEXTUAL_LAYERS: ClassVar[int] = 2
  #: (fixed s, s per block, s per class and block) of one attempt (``search``).
  COST: ClassVar[tuple] = (2.0, 2.5e-3, 1.6e-6)

  def layer_counts(self) -> dict:
    """g_q as Lemma 7; g_c the attention and shift layers; g_v one bump per id (no kill
    or clean-up layers)."""
    return {'quantization': quantize.layer_count(self.grid),
            'contextual': self.CONTEXTUAL_LAYERS,
            'value': self.num_bump_layers()}

  def parameter_counts(self) -> dict:
    """g_q as Lemma 7; g_v 3d + 1 per layer; g_c: the head (W_Q, b_Q, W_K, W_V: head size 1;
    W_O [d, 1]) and the shift (W_1 [1, d], b_1 [1], W_2 [d, 1], b_2 [d])."""
    c = self.layer_counts()
    return {'quantization': quantize.parameter_count(self.grid),
            'contextual': (4 * self.d + 1) + ff_weights(1, self.d),
            'value': ff_weights(c['value'], self.d)}

  def attention_layers(self) -> int:
    return 1

  def check(self) -> None:
    """ValueError past the plan's range (``one_layer_ids.plan``)."""
    one_layer_ids.plan(self.grid)

  def build(self, target, *, lam=None, id_bits: int | None = None):
    """``single_attention.one_layer.build``: g_bar with certified ids."""
    return one_layer.build(target, self, lam=lam, id_bits=id_bits)
