"""exact.planner: the bit planner."""

import pytest

from transformer_ua.exact import planner


def test_planner_chooses_and_refuses():
  assert planner.plan(2 ** 61).kind == 'int64'           # 62 + sign = 63 bits
  big = planner.plan(2 ** 62)                            # 64 bits: limbs
  assert big.kind == 'limbs' and big.capacity_bits >= 64 and big.bits_required == 64
  with pytest.raises(ValueError, match='needs 64 bits'):
    planner.plan(2 ** 62, 'int64')
  with pytest.raises(ValueError, match='needs 92 bits'):
    planner.plan(2 ** 90, 'limbs:3:30')
  assert planner.plan(2 ** 90, 'limbs:4:30').num_limbs == 4
  with pytest.raises(ValueError, match='allowed'):
    planner.plan(10, 'float64')
  with pytest.raises(ValueError, match='not allowed'):
    planner.plan(10, 'limbs:9:30')  # more than 7 limbs of 30 bits could overflow products
  k, w = planner.limb_layout(1000)
  assert k * w >= 1000 and k <= dict(planner.LIMB_WIDTHS)[w]
