"""verify.quantization: the float quantization network on real inputs (Lemma 7)."""

from transformer_ua.verify import quantization as vq
from transformer_ua.yun.grid import Grid


def test_float_network_on_real_inputs_within_stated_tolerance():
  r = vq.verify_quantization(Grid(2, 2, 3), samples=4000, seed=1)
  assert r['lemma7_real_inputs'] == 0 and r['lemma7_exact_rational'] == 0
  assert r['outside_unit_interval'] > 0 and r['near_edge_entries'] > 0
