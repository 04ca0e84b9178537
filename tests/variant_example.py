"""A variant added the way the registry says: this one file and one entry in
``registry.VARIANTS`` (the test puts the entry in with ``monkeypatch.setitem``).

The one-softmax-layer map at the power-of-two lam >= the plan's whose certified smallest
id gap is largest (``one_layer_ids.search_lam``) instead of the plan's closed-form lam:
the same g_bar classes, wider certified gaps between the ids.
"""

import dataclasses
from typing import ClassVar

from transformer_ua.yun.single_attention import one_layer
from transformer_ua.yun.variants.one_layer import OneLayer


@dataclasses.dataclass(frozen=True, repr=False)
class OneLayerSearchedLam(OneLayer):
  """``OneLayer`` built at ``lam='search'``."""

  name: ClassVar[str] = 'one_layer_searched_lam'
  summary: ClassVar[str] = ('Theorem 2, one softmax attention layer at the lam whose certified '
                            'id gaps are widest')
  label: ClassVar[str] = 'Theorem 2, one softmax attention layer, searched lam'

  def build(self, target, **options):
    return one_layer.build(target, self, lam='search')
