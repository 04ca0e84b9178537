"""certify_network's stopping rules, its per-round record, its progress bar, and the cost model
projected from that record (expected values come from separate runs, never from the fit)."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from transformer_ua.certify import network_certificate as nc
from transformer_ua.networks import network_dict


def small_net(seed: int = 7, scale: float = 0.3):
  rng = np.random.default_rng(seed)
  h, m, D, r = 1, 2, 3, 4
  return network_dict.check({'blocks': [{
      'W_Q': rng.normal(size=(h, m, D)) * scale, 'b_Q': rng.normal(size=(h, m)) * scale,
      'W_K': rng.normal(size=(h, m, D)) * scale, 'W_V': rng.normal(size=(h, m, D)) * scale,
      'W_O': rng.normal(size=(h, D, m)) * scale / 2,
      'W_1': rng.normal(size=(r, D)) * scale, 'b_1': rng.normal(size=r) * scale,
      'W_2': rng.normal(size=(D, r)) * scale / 2, 'b_2': rng.normal(size=D) * scale}]},
      d=1, n=3)


def run(net, **kwargs):
  args = dict(d=1, n=3, p=2, arithmetic='float32', max_minutes=5.0, progress=False)
  args.update(kwargs)
  return nc.certify_network('token_times_mean', net, **args)


def test_max_rounds_and_max_boxes_stop_at_the_same_boxes():
  net = small_net()
  a = run(net, max_rounds=5)
  b = run(net, max_rounds=5)
  assert a.rounds == 5 and len(a.history) == 5
  assert (a.total, a.boxes) == (b.total, b.boxes)
  assert 'max_rounds=5 reached' in a.line()
  boxes = [h[0] for h in a.history]
  assert boxes == sorted(boxes) and boxes[-1] == a.boxes
  assert all(h1[1] >= h0[1] for h0, h1 in zip(a.history, a.history[1:]))
  # the round's recorded total bounds the certificate's exact total from above, closely
  assert float(a.total) <= a.history[-1][2] <= float(a.total) * (1 + 1e-9)
  # a box limit equal to the 5th round's count stops after that round, at the same boxes
  c = run(net, max_boxes=a.boxes)
  assert (c.total, c.boxes, c.rounds) == (a.total, a.boxes, a.rounds)
  assert 'max_boxes=' in c.stopped
  # one more round's boxes than allowed: the run stops before it
  d = run(net, max_boxes=a.boxes - 1)
  assert d.boxes < a.boxes and d.rounds == a.rounds - 1


@pytest.mark.parametrize('kwargs,match', [(dict(max_boxes=0), 'max_boxes'),
                                          (dict(max_rounds=1.5), 'max_rounds'),
                                          (dict(max_boxes=True), 'max_boxes')])
def test_bad_limits_one_line(kwargs, match):
  with pytest.raises(ValueError, match=match) as err:
    run(small_net(), **kwargs)
  assert '\n' not in str(err.value)


def test_progress_bar_on_request_and_off_outside_a_terminal(capsys):
  net = small_net()
  run(net, max_rounds=3, progress=None)
  assert capsys.readouterr().err == ''        # pytest's stderr is not a terminal
  cert = run(net, max_rounds=3, progress=True)
  err = capsys.readouterr().err
  assert 'certify_network' in err and f'{cert.boxes:,} boxes' in err and 'total <=' in err
