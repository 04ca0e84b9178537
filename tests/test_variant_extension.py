"""Adding a variant is one file (tests/variant_example.py) and one registry entry:
``approximate`` and ``build_approximator``'s registry then build, realize and certify it
with nothing else changed."""

import pytest

from transformer_ua import yun
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.single_attention import one_layer_ids
from transformer_ua.yun.variants import registry

from variant_example import OneLayerSearchedLam


@pytest.fixture
def registered(monkeypatch):
  monkeypatch.setitem(registry.VARIANTS, OneLayerSearchedLam.name, OneLayerSearchedLam)  # the line


def test_a_new_variant_is_named_by_approximate(registered):
  with pytest.raises(ValueError) as e:
    yun.approximate('token_times_mean', 0.45, d=1, n=2, construction='no_such_variant')
  assert repr(OneLayerSearchedLam.name) in str(e.value)


def test_a_new_variant_is_built_realized_and_certified(registered):
  res = yun.approximate('token_times_mean', 0.2, arithmetic='exact', d=1, n=3, construction=OneLayerSearchedLam.name,
                        workers=1)
  assert res.construction == 'one_layer_searched_lam'
  assert type(res.net.variant) is OneLayerSearchedLam
  N = res.net.resolution
  # built at the searched lam (above the plan's here), and the certificate holds
  assert res.net.lam == one_layer_ids.search_lam(Grid(1, 3, N))['lam'] > one_layer_ids.plan(Grid(1, 3, N)).lam
  assert res.net.resolution >= 3 and res.certificate.total <= 0.2
  # its size before building is the deep one-layer network's, and it is what was built
  assert OneLayerSearchedLam(Grid(1, 3, N)).size()['blocks'] == res.g.depth()
