"""Lemma 6 on params: Phi -> 4 ReLUs, hardmax -> softmax, packing into blocks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua import activations, layers, realize
from transformer_ua.layers import Segment
from transformer_ua.modules import Network

# Three Phi units, one per placement of the constant piece, plus a 2-piece one.
UNITS = [
    activations.Phi((0.0, 1.0), ((0.0, 2.0), (1.0, -1.0), (-3.0, 4.0))),
    activations.Phi((0.0, 1.0), ((-1.0, -5.0), (0.0, 0.0), (-1.0, -5.0))),
    activations.Phi((-1.0, 0.5), ((2.0, 1.0), (-1.0, 3.0), (0.0, 7.0)), (True, False)),
    activations.Phi((0.25,), ((3.0, 0.0), (0.0, -2.0))),
]


def _phi_network(d=2, seed=0):
  rng = np.random.default_rng(seed)
  r = len(UNITS)
  segs = (Segment('feedforward', 2, width=r, activation='phi'),)
  phi = activations.phi_arrays(UNITS, dtype=jnp.float64)
  params = {'segment_0': {'feedforward': {
      'W_1': jnp.asarray(rng.normal(size=(2, r, d))), 'b_1': jnp.asarray(rng.normal(size=(2, r))),
      'W_2': jnp.asarray(rng.normal(size=(2, d, r))), 'b_2': jnp.asarray(rng.normal(size=(2, d))),
      'phi': jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), phi)}}}
  return segs, params


def _pre_activations_outside_windows(params, x, epsilon):
  """Mask of samples whose every pre-activation (both layers) avoids all windows."""
  ok = np.ones(x.shape[0], dtype=bool)
  ff = params['segment_0']['feedforward']
  z = x
  for l in range(2):
    p = layers.unstack_layer(ff, l)
    pre = np.asarray(jnp.einsum('...nd,rd->...nr', z, p['W_1']) + p['b_1'])
    for u, phi in enumerate(UNITS):
      for lo, hi in activations.ramp_windows(phi, epsilon):
        ok &= ~np.any((pre[..., u] > lo) & (pre[..., u] < hi), axis=-1)
    z = z + layers.feedforward_update(p, z)
  return ok


@pytest.mark.parametrize('epsilon', [1e-2, 1e-4])
def test_relu_realization_equals_phi_network_outside_windows(epsilon):
  with jax.enable_x64(True):
    segs, params = _phi_network()
    relu_segs, relu_params = realize.relu_realization(segs, params, epsilon)
    assert relu_segs[0].activation == 'relu' and relu_segs[0].width == 4 * len(UNITS)
    x = jax.random.normal(jax.random.PRNGKey(0), (4000, 3, 2), dtype=jnp.float64)
    y_phi = Network(segs).apply({'params': params}, x)
    y_relu = Network(relu_segs).apply({'params': relu_params}, x)
    ok = _pre_activations_outside_windows(params, x, epsilon)
    assert ok.mean() > 0.9
    np.testing.assert_allclose(np.asarray(y_relu)[ok], np.asarray(y_phi)[ok], atol=1e-9)
    # Inside the windows the realization differs (the units are discontinuous).
    assert float(jnp.max(jnp.abs(y_relu - y_phi))) > 1e-3 or ok.all()


def test_softmax_realization_folds_lambda_and_converges():
  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    seg = (Segment('attention', 3, num_heads=2, head_size=1, normalizer='hardmax'),)
    params = {'segment_0': {'attention': {k: jnp.asarray(rng.normal(size=(3,) + s)) for k, s in [
        ('W_Q', (2, 1, 2)), ('b_Q', (2, 1)), ('W_K', (2, 1, 2)), ('W_V', (2, 1, 2)),
        ('W_O', (2, 2, 1))]}}}
    x = jnp.asarray(rng.normal(size=(256, 4, 2)))
    hard = Network(seg).apply({'params': params}, x)
    gaps = []
    for lam in [1.0, 1e2, 1e4, 1e6]:
      soft_segs, soft_params = realize.softmax_realization(seg, params, lam)
      assert soft_segs[0].normalizer == 'softmax' and soft_segs[0].lam == 1.0
      np.testing.assert_allclose(soft_params['segment_0']['attention']['W_Q'],
                                 lam * params['segment_0']['attention']['W_Q'])
      soft = Network(soft_segs).apply({'params': soft_params}, x)
      gaps.append(float(jnp.median(jnp.max(jnp.abs(soft - hard), axis=(1, 2)))))
    assert gaps[-1] < 1e-6 < gaps[0], gaps
    assert all(b <= a for a, b in zip(gaps, gaps[1:])), gaps


def test_as_blocks_is_the_identity_on_outputs():
  with jax.enable_x64(True):
    rng = np.random.default_rng(2)
    segs, params = _phi_network(d=2)
    segs, params = realize.relu_realization(segs, params, 1e-3)
    # 4 units -> width 16 > 4: too wide for T^{2,1,4}.
    with pytest.raises(ValueError, match='width <= 4'):
      realize.as_blocks(segs, params)
    att_seg = Segment('attention', 2, num_heads=1, head_size=1, normalizer='softmax')
    att = {k: jnp.asarray(rng.normal(size=(2,) + s)) for k, s in [
        ('W_Q', (1, 1, 2)), ('b_Q', (1, 1)), ('W_K', (1, 1, 2)), ('W_V', (1, 1, 2)),
        ('W_O', (1, 2, 1))]}
    ff_seg = Segment('feedforward', 3, width=3)
    ff = {k: jnp.asarray(rng.normal(size=(3,) + s)) for k, s in [
        ('W_1', (3, 2)), ('b_1', (3,)), ('W_2', (2, 3)), ('b_2', (2,))]}
    segs = (att_seg, ff_seg)
    params = {'segment_0': {'attention': att}, 'segment_1': {'feedforward': ff}}
    block_segs, block_params = realize.as_blocks(segs, params)
    assert all(s.kind == 'block' and s.num_heads == 2 and s.head_size == 1 and s.width == 4
               for s in block_segs)
    x = jnp.asarray(rng.normal(size=(16, 5, 2)))
    np.testing.assert_allclose(Network(block_segs).apply({'params': block_params}, x),
                               Network(segs).apply({'params': params}, x), atol=1e-12)


def test_realization_rejects_bad_scales():
  with jax.enable_x64(True):
    segs, params = _phi_network()
  with pytest.raises(ValueError, match='lambda must be a positive'):
    realize.softmax_realization(segs, params, -1.0)
  with pytest.raises(ValueError, match='epsilon must be a positive'):
    realize.relu_realization(segs, params, 0.0)
