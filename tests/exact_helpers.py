"""Shared helpers for the exact tests: random integer layer parameters (object arrays)."""

import numpy as np


def _random_attention(rng, depth, h, d, big):
  def ints(*shape, scale=big):
    return np.vectorize(lambda _: rng.randrange(-scale, scale + 1), otypes=[object])(
        np.zeros(shape))
  w = ints(depth, h, 1, d, scale=5)
  return {'W_Q': w, 'b_Q': ints(depth, h, 1), 'W_K': w.copy(),
          'W_V': w.copy(), 'W_O': ints(depth, h, d, 1, scale=5)}


def _random_phi_ff(rng, depth, r, d, big):
  def ints(*shape, scale=big):
    return np.vectorize(lambda _: rng.randrange(-scale, scale + 1), otypes=[object])(
        np.zeros(shape))
  breaks = np.sort(ints(depth, r, 2), axis=-1)
  slopes = ints(depth, r, 3, scale=3)
  slopes[..., 1] = 0  # a constant piece
  return {'W_1': ints(depth, r, d, scale=4), 'b_1': ints(depth, r), 'W_2': ints(depth, d, r, scale=4),
          'b_2': ints(depth, d),
          'phi': {'breaks': breaks, 'slopes': slopes, 'intercepts': ints(depth, r, 3),
                  'left_closed': np.asarray([[[bool(rng.getrandbits(1)) for _ in range(2)]
                                              for _ in range(r)] for _ in range(depth)])}}
