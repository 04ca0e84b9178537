"""Split by measured gain (box_bound.SPLIT_CANDIDATES > 1): from the same boxes, the
children kept are never worse than the mean-value choice's, and the total stays above the
network's closed-form error (certify/hand_built.py)."""

from __future__ import annotations

import math

import pytest

from transformer_ua.certify import box_bound, hand_built
from transformer_ua.certify import network_certificate as nc


@pytest.mark.parametrize('p', [2, 'inf'])
def test_measured_split_no_worse_after_one_round_and_sound(monkeypatch, p):
  hb = hand_built.hand_built_product_network(4, n=3)
  true = math.sqrt(hb.l2_error_squared) if p == 2 else float(hb.sup_error)
  args = dict(d=1, n=3, p=p, arithmetic='float64', max_minutes=2.0, progress=False)
  one = nc.certify_network('token_times_mean', hb.net, max_rounds=2, **args)
  monkeypatch.setattr(box_bound, 'SPLIT_CANDIDATES', 3)
  three = nc.certify_network('token_times_mean', hb.net, max_rounds=2, **args)
  # round 2 bisects the same boxes (round 1 is the same partition); the mean-value axis is
  # one of the 3 candidates, so the measured choice's children sum (or max) no higher
  assert (three.history[0][0], three.history[0][2]) == (one.history[0][0], one.history[0][2])
  assert three.total <= one.total
  longer = nc.certify_network('token_times_mean', hb.net, max_rounds=8, **args)
  assert float(longer.total) >= true
