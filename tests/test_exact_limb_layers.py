"""exact.limb_layers: limb layers vs the NumPy object reference (same math, Python ints)."""

import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from exact_helpers import _random_attention, _random_phi_ff
from transformer_ua import activations
from transformer_ua.exact import limb_layers, limbs, reference
from transformer_ua.layers import Segment


@pytest.mark.parametrize('seed', [0])
def test_limb_layers_equal_numpy_object_reference(seed):
  rng = random.Random(seed)
  spec = limbs.LimbSpec(5, 30)
  d, n, depth = 3, 5, 4
  big = 2 ** 70  # far beyond int64
  att = _random_attention(rng, depth, 2, d, big)
  ff = _random_phi_ff(rng, depth, 2, d, big)
  x = np.vectorize(lambda _: rng.randrange(-big, big), otypes=[object])(np.zeros((24, n, d)))
  x[:12, 1] = x[:12, 3]  # repeated tokens: tied keys
  segs = (Segment('attention', depth, num_heads=2, head_size=1, normalizer='hardmax'),
          Segment('feedforward', depth, width=2, activation='phi'))
  ref = x
  with jax.enable_x64(True):
    lx = jnp.asarray(limbs.from_python(x, spec))
    for seg, p in zip(segs, ({'attention': att}, {'feedforward': ff})):
      ref, _, ref_inexact = reference.numpy_apply_segment(seg, p, ref)
      lp = limbs.params_to_digits(p, spec.limb_bits)
      lx, _, inexact = jax.jit(lambda p, z, s=seg: limb_layers.limb_apply_segment(s, p, z, spec))(lp, lx)
      assert int(jnp.sum(inexact)) == ref_inexact
  assert max(abs(v) for v in ref.reshape(-1)) > 2 ** 63  # the test really leaves int64
  np.testing.assert_array_equal(limbs.to_python(lx, spec), ref)


def test_limb_phi_matches_activation_semantics():
  """Breakpoint ownership (left_closed) in limbs equals activations.Phi on Python ints."""
  spec = limbs.LimbSpec(3, 30)
  phi = activations.Phi(breaks=(-2 ** 70, 2 ** 70), pieces=((0, 1), (0, 0), (0, 1)),
                        left_closed=(False, True))
  t = np.asarray([-2 ** 70 - 1, -2 ** 70, 0, 2 ** 70, 2 ** 70 + 1], dtype=object)
  arrays = {'breaks': np.asarray([list(phi.breaks)], dtype=object),
            'slopes': np.asarray([[0, 0, 0]], dtype=object),
            'intercepts': np.asarray([[1, 0, 1]], dtype=object),
            'left_closed': np.asarray([[False, True]])}
  with jax.enable_x64(True):
    digits = limbs.params_to_digits(arrays, spec.limb_bits)
    out = limb_layers._phi_limbs(digits, jnp.asarray(limbs.from_python(t[:, None], spec)), spec)  # pylint: disable=protected-access
  np.testing.assert_array_equal(limbs.to_python(out, spec)[:, 0], phi(t))
  assert list(phi(t)) == [1, 0, 0, 0, 1]


def test_shared_projection_identity_equals_generic_limb_attention():
  """W_Q = W_K = W_V: the shared-projection kernel equals the generic one, ties included."""
  rng = random.Random(11)
  spec = limbs.LimbSpec(3, 30)
  att = _random_attention(rng, 1, 2, 2, 2 ** 40)
  att['b_Q'][0, 0, 0] = 0  # head 0: queries can be exactly 0 (all keys tie)
  p = jax.tree_util.tree_map(lambda a: a[0], limbs.params_to_digits(att, spec.limb_bits))
  assert limbs.shared_projections(att)
  assert not limbs.shared_projections(dict(att, W_V=att['W_V'] + 1))
  x = np.vectorize(lambda _: rng.randrange(-2 ** 40, 2 ** 40), otypes=[object])(np.zeros((64, 5, 2)))
  x[:32, 2] = x[:32, 4]       # tied keys
  x[32:40] = 0                # every key 0: zero queries in head 0
  with jax.enable_x64(True):
    lx = jnp.asarray(limbs.from_python(x, spec))
    generic = jax.jit(lambda p, z: limb_layers.limb_attention_update(p, z, spec))(p, lx)
    shared = jax.jit(lambda p, z: limb_layers.limb_attention_update(p, z, spec, True))(p, lx)
  np.testing.assert_array_equal(np.asarray(generic[0]), np.asarray(shared[0]))
  assert int(generic[1]) == int(shared[1])
