"""Core layers: Claim 1, normalizer semantics, segments/scan, integer mode, fast path."""

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua import activations, layers, modules
from transformer_ua.layers import Segment
from transformer_ua.modules import Network


# ---------------------------------------------------------------------------
# Normalizer semantics.
# ---------------------------------------------------------------------------


def test_hardmax_splits_ties_evenly():
  with jax.enable_x64(True):
    scores = jnp.asarray([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 1.0], [5.0, 0.0, 0.0, 0.0]])
    mixed, inexact = layers.hardmax_mix(scores, jnp.eye(4))
    np.testing.assert_array_equal(
        np.asarray(mixed), [[0, .5, .5, 0], [1 / 3, 1 / 3, 1 / 3, 0], [1, 0, 0, 0]])
    assert int(inexact) == 0


def test_hardmax_integer_ties_exact_and_inexact_counted():
  with jax.enable_x64(True):
    scores = jnp.asarray([[7, 7, 1], [0, 4, 4]], dtype=jnp.int64)
    values = jnp.asarray([[10], [20], [30]], dtype=jnp.int64)
    mixed, inexact = layers.hardmax_mix(scores, values)
    # Row 0: (10 + 20) / 2 = 15 exactly; row 1: (20 + 30) / 2 = 25.
    np.testing.assert_array_equal(np.asarray(mixed), [[15], [25]])
    assert mixed.dtype == jnp.int64 and int(inexact) == 0
    _, inexact = layers.hardmax_mix(scores, jnp.asarray([[1], [2], [3]], dtype=jnp.int64))
    assert int(inexact) == 2  # 3/2 and 5/2 are not integers


def test_onehot_max_keeps_the_score_value():
  scores = jnp.asarray([[1.0, 5.0, 2.0], [-1.0, -3.0, -2.0]])
  out = layers.onehot_max_mix(scores, jnp.eye(3))
  np.testing.assert_array_equal(np.asarray(out), [[0, 5, 0], [-1, 0, 0]])


def test_softmax_approaches_hardmax_with_measured_gap():
  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    scores = jnp.asarray(rng.normal(size=(64, 8)))
    sorted_s = np.sort(np.asarray(scores), axis=-1)
    margin = float(np.min(sorted_s[:, -1] - sorted_s[:, -2]))  # smallest top-2 gap
    hard, _ = layers.hardmax_mix(scores, jnp.eye(8))
    gaps = []
    for lam in [1.0, 10.0, 100.0, 1e3, 1e4, 1e5]:
      soft = layers.softmax_mix(scores, jnp.eye(8), lam)
      gap = float(jnp.max(jnp.abs(soft - hard)))
      # Off-max weights are each at most exp(-lam * margin); total gap <= 2(n-1) that.
      assert gap <= 2 * 7 * np.exp(-lam * margin) + 1e-15
      gaps.append(gap)
    assert all(b <= a for a, b in zip(gaps, gaps[1:])) and gaps[-1] < 1e-12, gaps


# ---------------------------------------------------------------------------
# Claim 1: permutation equivariance.
# ---------------------------------------------------------------------------

_segment_strategy = st.builds(
    lambda kind, depth, h, m, norm, r, act: Segment(
        kind, depth, num_heads=h, head_size=m, normalizer=norm, width=r, activation=act),
    st.sampled_from(layers.SEGMENT_KINDS), st.integers(1, 3), st.integers(1, 3),
    st.integers(1, 3), st.sampled_from(['softmax', 'hardmax']), st.integers(1, 5),
    st.sampled_from(layers.ACTIVATIONS))


def _random_params(segments, d, seed):
  """Random float64 params for ``segments`` built with NumPy (no JAX init compile).

  Phi units are random members of Phi (sorted breakpoints, one constant piece).
  """
  rng = np.random.default_rng(seed)
  params = {}
  for i, seg in enumerate(segments):
    L, p = seg.depth, {}
    if seg.has_attention:
      h, m = seg.num_heads, seg.head_size
      p['attention'] = {k: jnp.asarray(rng.normal(size=(L,) + s)) for k, s in [
          ('W_Q', (h, m, d)), ('b_Q', (h, m)), ('W_K', (h, m, d)), ('W_V', (h, m, d)),
          ('W_O', (h, d, m))]}
    if seg.has_feedforward:
      r = seg.width
      ff = {k: jnp.asarray(rng.normal(size=(L,) + s)) for k, s in [
          ('W_1', (r, d)), ('b_1', (r,)), ('W_2', (d, r)), ('b_2', (d,))]}
      if seg.activation == 'phi':
        slopes = rng.normal(size=(L, r, 3))
        slopes[..., rng.integers(0, 3)] = 0.0  # at least one constant piece
        ff['phi'] = {'breaks': jnp.asarray(np.sort(rng.normal(size=(L, r, 2)), axis=-1)),
                     'slopes': jnp.asarray(slopes),
                     'intercepts': jnp.asarray(rng.normal(size=(L, r, 3))),
                     'left_closed': jnp.asarray(rng.random((L, r, 2)) < 0.5)}
      p['feedforward'] = ff
    params[f'segment_{i}'] = p
  return params


@hypothesis.settings(max_examples=12)
@hypothesis.given(segments=st.lists(_segment_strategy, min_size=1, max_size=3),
                  n=st.integers(2, 6), d=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_claim1_permutation_equivariance(segments, n, d, seed):
  with jax.enable_x64(True):
    net = Network(tuple(segments), param_dtype=jnp.float64)
    key = jax.random.PRNGKey(seed)
    x = jax.random.normal(key, (3, n, d), dtype=jnp.float64)
    params = _random_params(segments, d, seed)
    perm = np.random.default_rng(seed).permutation(n)
    apply = jax.jit(net.apply)
    y = apply({'params': params}, x)
    y_perm = apply({'params': params}, x[:, perm])
    np.testing.assert_allclose(np.asarray(y_perm), np.asarray(y[:, perm]),
                               rtol=1e-9, atol=1e-9)


def test_positional_encodings_break_equivariance():
  with jax.enable_x64(True):
    seg = (Segment('block', 2, num_heads=2, head_size=2, normalizer='softmax', width=4),)
    net = Network(seg, positional=True, num_tokens=4, param_dtype=jnp.float64)
    x = jax.random.normal(jax.random.PRNGKey(0), (8, 4, 3), dtype=jnp.float64)
    params = jax.jit(net.init)(jax.random.PRNGKey(1), x)['params']
    perm = np.array([1, 0, 3, 2])
    apply = jax.jit(net.apply)  # one compilation for the four calls (same shapes)
    # E = 0 (init): still equivariant.
    np.testing.assert_allclose(apply({'params': params}, x[:, perm]),
                               apply({'params': params}, x)[:, perm], atol=1e-12)
    params = dict(params, E=jnp.arange(12, dtype=jnp.float64).reshape(4, 3))
    diff = jnp.abs(apply({'params': params}, x[:, perm])
                   - apply({'params': params}, x)[:, perm])
    assert float(jnp.max(diff)) > 1e-3


def test_positional_network_rejects_wrong_length():
  net = Network((Segment('feedforward', 1, width=2),), positional=True, num_tokens=4)
  with pytest.raises(ValueError, match='n=4'):
    jax.jit(net.init)(jax.random.PRNGKey(0), jnp.zeros((1, 5, 2)))


# ---------------------------------------------------------------------------
# Segments, scan, params structure, counting.
# ---------------------------------------------------------------------------

SEGMENTS = (Segment('block', 3, num_heads=2, head_size=1, normalizer='softmax', width=4),
            Segment('attention', 2, num_heads=2, head_size=1, normalizer='hardmax'),
            Segment('feedforward', 4, width=1, activation='phi'))


def test_scan_equals_layers_applied_one_by_one():
  with jax.enable_x64(True):
    net = Network(SEGMENTS, param_dtype=jnp.float64)
    x = jax.random.uniform(jax.random.PRNGKey(3), (5, 4, 3), dtype=jnp.float64)
    params = _random_params(SEGMENTS, 3, 7)
    y, trace = net.apply({'params': params}, x, trace=True)
    z = x
    for i, seg in enumerate(SEGMENTS):
      for l in range(seg.depth):
        p = layers.unstack_layer(params[f'segment_{i}'], l)
        if seg.has_attention:
          upd, _ = layers.attention_update(p['attention'], z, normalizer=seg.normalizer)
          z = z + upd
        if seg.has_feedforward:
          z = z + layers.feedforward_update(p['feedforward'], z)
        np.testing.assert_allclose(trace[i][l], z, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y, z, rtol=1e-12, atol=1e-12)


def test_init_params_match_hand_built_structure():
  d, n = 3, 4
  net = Network(SEGMENTS, positional=True, num_tokens=n)
  # Structure and shapes only: jax.eval_shape runs init abstractly (no compilation).
  params = jax.eval_shape(net.init, jax.random.PRNGKey(0), jnp.zeros((1, n, d)))['params']

  def att(h, m):
    return {'W_Q': np.zeros((h, m, d)), 'b_Q': np.zeros((h, m)), 'W_K': np.zeros((h, m, d)),
            'W_V': np.zeros((h, m, d)), 'W_O': np.zeros((h, d, m))}

  def ff(r, phi=False):
    p = {'W_1': np.zeros((r, d)), 'b_1': np.zeros(r), 'W_2': np.zeros((d, r)),
         'b_2': np.zeros(d)}
    if phi:
      p['phi'] = activations.phi_arrays([activations.RELU] * r)
    return p

  stack = lambda ps: jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *ps)  # noqa: E731
  hand = {'E': np.zeros((n, d)),
          'segment_0': stack([{'attention': att(2, 1), 'feedforward': ff(4)}] * 3),
          'segment_1': stack([{'attention': att(2, 1)}] * 2),
          'segment_2': stack([{'feedforward': ff(1, phi=True)}] * 4)}
  shapes = lambda t: jax.tree_util.tree_map(lambda a: np.shape(a), t)  # noqa: E731
  assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(hand)
  assert shapes(params) == shapes(hand)
  # The hand-built pytree runs through the same module.
  net.apply({'params': hand}, jnp.zeros((2, n, d)))


def test_parameter_counts_of_named_configurations():
  d = 3
  net = Network(SEGMENTS)
  params = jax.jit(net.init)(jax.random.PRNGKey(0), jnp.zeros((1, 4, d)))['params']
  att = lambda h, m: h * (3 * m * d + m + d * m)  # W_Q, W_K, W_V, b_Q, W_O  # noqa: E731
  ff = lambda r: r * d + r + d * r + d  # noqa: E731
  expected = 3 * (att(2, 1) + ff(4)) + 2 * att(2, 1) + 4 * ff(1)
  assert layers.count_params(params) == expected == 171 + 52 + 40
  # b_Q and b_1 / b_2 are zero at init; the rest is Gaussian (non-zero a.s.).
  zero_biases = 3 * (2 + 4 + 3) + 2 * 2 + 4 * (1 + 3)
  assert layers.count_nonzero(params) == expected - zero_biases


def test_segment_validation():
  with pytest.raises(ValueError, match='allowed'):
    Segment('conv', 1)
  with pytest.raises(ValueError, match='positive integer'):
    Segment('feedforward', 0, width=1)
  with pytest.raises(ValueError, match='num_heads >= 1'):
    Segment('attention', 1)
  with pytest.raises(ValueError, match='width >= 1'):
    Segment('block', 1, num_heads=1, head_size=1)


# ---------------------------------------------------------------------------
# Exact integer mode and the rank-one fast path.
# ---------------------------------------------------------------------------


def _integer_selective_shift_params(depth, d, rng):
  """Random integer-valued two-head m=1 hardmax params (Yun-style shapes)."""
  u = rng.integers(-3, 4, size=(depth, 2, 1, d))
  return {'attention': {
      # Odd query biases against even inputs: queries are never 0 (no all-key tie),
      # as with Yun's thresholds l +- delta/2 on the scaled grid.
      'W_Q': jnp.asarray(u), 'b_Q': jnp.asarray(2 * rng.integers(-5, 6, size=(depth, 2, 1)) + 1),
      'W_K': jnp.asarray(u), 'W_V': jnp.asarray(u),
      'W_O': jnp.asarray(rng.integers(-2, 3, size=(depth, 2, d, 1)))}}


@pytest.mark.parametrize('seed', range(5))
def test_integer_mode_equals_float64_where_exact(seed):
  rng = np.random.default_rng(seed)
  with jax.enable_x64(True):
    d, n, depth = 2, 4, 6
    seg = (Segment('attention', depth, num_heads=2, head_size=1, normalizer='hardmax'),)
    net = Network(seg)
    params = {'segment_0': _integer_selective_shift_params(depth, d, rng)}
    # Repeated tokens create ties; W_K = W_V means tied keys have equal values.
    x = 2 * jnp.asarray(rng.integers(-4, 5, size=(50, n, d)))
    x = x.at[:, 1].set(x[:, 2])
    exact = modules.exact_apply(net, params, x)
    assert exact.dtype == jnp.int64
    as_float = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), params)
    approx = net.apply({'params': as_float}, x.astype(jnp.float64))
    # Magnitudes stay far below 2**53, so float64 is exact here too.
    assert float(jnp.max(jnp.abs(approx))) < 2.0**40
    np.testing.assert_array_equal(np.asarray(exact), np.asarray(approx))


def test_exact_apply_refuses_inexact_tie_average():
  with jax.enable_x64(True):
    seg = (Segment('attention', 1, num_heads=1, head_size=1, normalizer='hardmax'),)
    net = Network(seg)
    one = lambda *s: jnp.ones((1,) + s, jnp.int64)  # noqa: E731
    params = {'segment_0': {'attention': {
        'W_Q': 0 * one(1, 1, 1), 'b_Q': 0 * one(1, 1), 'W_K': 0 * one(1, 1, 1),
        'W_V': one(1, 1, 1), 'W_O': one(1, 1, 1)}}}
    # Query 0 -> all keys tie -> average of (1, 2) = 3/2.
    with pytest.raises(ValueError, match='not integers'):
      modules.exact_apply(net, params, jnp.asarray([[[1], [2]]], jnp.int64))
    with pytest.raises(ValueError, match='integer input'):
      modules.exact_apply(net, params, jnp.asarray([[[1.0], [2.0]]]))


def test_softmax_refuses_integer_mode():
  with jax.enable_x64(True):
    p = {k: jnp.ones(s, jnp.int64) for k, s in
         [('W_Q', (1, 1, 2)), ('b_Q', (1, 1)), ('W_K', (1, 1, 2)), ('W_V', (1, 1, 2)),
          ('W_O', (1, 2, 1))]}
    with pytest.raises(ValueError, match='softmax'):
      layers.attention_update(p, jnp.ones((3, 2), jnp.int64), normalizer='softmax')


@pytest.mark.parametrize('integer', [False, True])
@pytest.mark.parametrize('seed', range(4))
def test_rank_one_fast_path_equals_score_matrix(integer, seed):
  rng = np.random.default_rng(seed)
  with jax.enable_x64(True):
    h, d, n = 3, 3, 6
    if integer:
      x = jnp.asarray(rng.integers(-3, 4, size=(40, n, d)))
      p = {k: jnp.asarray(rng.integers(-3, 4, size=s)) for k, s in
           [('W_Q', (h, 1, d)), ('b_Q', (h, 1)), ('W_K', (h, 1, d)), ('W_V', (h, 1, d)),
            ('W_O', (h, d, 1))]}
      p['W_V'] = p['W_K']  # tied keys -> equal values, so tie averages are integers
      # Some queries exactly zero: all keys tie.
      p['W_Q'] = p['W_Q'].at[0].set(0)
      p['b_Q'] = p['b_Q'].at[0].set(0)
    else:
      x = jnp.asarray(rng.normal(size=(40, n, d)))
      p = {k: jnp.asarray(rng.normal(size=s)) for k, s in
           [('W_Q', (h, 1, d)), ('b_Q', (h, 1)), ('W_K', (h, 1, d)), ('W_V', (h, 1, d)),
            ('W_O', (h, d, 1))]}
    fast, inexact_fast = layers.attention_update(p, x, normalizer='hardmax', fast_path=True)
    slow, inexact_slow = layers.attention_update(p, x, normalizer='hardmax', fast_path=False)
    if integer:
      # Head 0 ties all keys (query 0) over unequal values: both paths see the same
      # non-integer averages (and floor them identically); the rest is exact.
      assert int(inexact_fast) == int(inexact_slow) > 0
      np.testing.assert_array_equal(np.asarray(fast), np.asarray(slow))
    else:
      np.testing.assert_allclose(np.asarray(fast), np.asarray(slow), rtol=1e-12, atol=1e-12)
