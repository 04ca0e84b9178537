"""The certifier's D on random dyadic boxes against every emulated run at points inside them
(``low_precision_runs``): the check tests/test_relu_reduction.py and
tests/test_signed_reduction.py share.

    boxes:   [lo, hi] = [i / k, (i + 1) / k] per entry, k = 2^s with s drawn from ``levels``
    points:  ``per_box`` float32 points in each box, the first two at lo and at hi
    check:   |run(x) - g_mode(x)| <= D_mode(box)   for every way of ``ways(arithmetic)``
             in that mode, g_mode the net with its weights reduced in the mode (exact)
"""

from __future__ import annotations

import numpy as np

import low_precision_runs
from transformer_ua import rounding
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import network_enclosure
from transformer_ua.certify.box_bound import reduced_networks
from transformer_ua.networks import network_apply


def dyadic_boxes(rng, count: int, shape: tuple, levels: tuple, per_box: int):
  """(lo, hi [count, *shape], x [per_box * count, *shape]) as the module docstring says."""
  k = 2 ** rng.integers(*levels, size=(count,) + shape)
  i = np.floor(rng.random((count,) + shape) * k)
  lo, hi = i / k, (i + 1) / k
  t = rng.random((per_box, count) + shape)
  t[0], t[1] = 0.0, 1.0
  x = np.clip((lo + t * (hi - lo)).astype(np.float32).astype(np.float64), lo, hi)
  return lo, hi, x.reshape((-1,) + shape)


def check_runs(net, arithmetic: str, lo, hi, x):
  """Asserts every emulated run within D (module docstring); returns (the model with its
  weights reduced, the two networks nearest and truncate, their D [count, n, d], and the
  largest run error / D seen)."""
  model = rounding.MATMUL_MODELS[arithmetic]
  nets = reduced_networks(net, model)
  model = model.with_weights_reduced()
  per_box = len(x) // len(lo)
  worst, devs = 0.0, []
  for mode, variant in zip(('nearest', 'truncate'), nets):
    _, dev = network_enclosure.enclose(variant, iv.box(lo, hi), model)
    devs.append(dev)
    dev = np.tile(dev, (per_box, 1, 1))
    exact = network_apply.apply(variant, x, np.float64)
    for way in low_precision_runs.ways(arithmetic):
      if way[0] != mode:
        continue
      y = low_precision_runs.run(net, x, arithmetic, mode=way[0], order=way[1],
                                 accumulate=way[2])
      err = np.abs(y - exact)
      assert np.all(err <= dev), (way, float(np.max(err - dev)))
      worst = max(worst, float(np.max(err / dev)))
  return model, nets, devs, worst
