"""exact.reference: the NumPy object reference vs the core int64 layers."""

import random

import jax
import jax.numpy as jnp
import numpy as np

from exact_helpers import _random_attention, _random_phi_ff
from transformer_ua import layers
from transformer_ua.exact import reference
from transformer_ua.layers import Segment


def test_core_int64_layers_equal_numpy_reference():
  rng = random.Random(5)
  d, n, depth = 2, 4, 5
  att = _random_attention(rng, depth, 2, d, 2 ** 20)
  ff = _random_phi_ff(rng, depth, 1, d, 2 ** 20)
  x = np.asarray([[[rng.randrange(-2 ** 20, 2 ** 20) for _ in range(d)] for _ in range(n)]
                  for _ in range(7)], dtype=np.int64)
  segs = (Segment('attention', depth, num_heads=2, head_size=1, normalizer='hardmax'),
          Segment('feedforward', depth, width=1, activation='phi'))
  with jax.enable_x64(True):
    z, ref = jnp.asarray(x), x.astype(object)
    for seg, p in zip(segs, ({'attention': att}, {'feedforward': ff})):
      ref, _, _ = reference.numpy_apply_segment(seg, p, ref)
      p64 = jax.tree_util.tree_map(lambda a: jnp.asarray(a.astype(np.int64) if a.dtype == object
                                                         else a), p)
      z, _, _ = layers.apply_segment(seg, p64, z)
  np.testing.assert_array_equal(np.asarray(z).astype(object), ref)
