"""exact: limb arithmetic vs Python ints, the bit planner, limb layers vs NumPy."""

import random

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua import activations, layers
from transformer_ua.exact import limb_layers, limbs, planner, reference
from transformer_ua.layers import Segment

SPECS = [limbs.LimbSpec(1, 30), limbs.LimbSpec(3, 30), limbs.LimbSpec(9, 28)]


def _ints(rng, count, bits):
  return [rng.randrange(-2 ** (bits - 1), 2 ** (bits - 1)) for _ in range(count)]


def _lim(values, spec):
  return jnp.asarray(limbs.from_python(values, spec))


@pytest.mark.parametrize('spec', SPECS, ids=str)
def test_limb_ring_operations_equal_python_ints(spec):
  rng = random.Random(spec.num_limbs)
  cap = spec.num_limbs * spec.limb_bits
  with jax.enable_x64(True):
    a, b = _ints(rng, 300, cap - 1), _ints(rng, 300, cap - 1)
    la, lb = _lim(a, spec), _lim(b, spec)
    assert list(limbs.to_python(la, spec)) == a
    assert list(limbs.to_python(limbs.add(la, lb, spec), spec)) == [x + y for x, y in zip(a, b)]
    assert list(limbs.to_python(limbs.sub(la, lb, spec), spec)) == [x - y for x, y in zip(a, b)]
    assert list(limbs.to_python(limbs.neg(la, spec), spec)) == [-x for x in a]
    assert list(np.asarray(limbs.compare(la, lb, spec))) == [(x > y) - (x < y) for x, y in zip(a, b)]
    assert list(np.asarray(limbs.sign(la, spec))) == [(x > 0) - (x < 0) for x in a]
    # Multiplication by (multi-digit, signed) constants, products kept in range.
    half = cap // 2 - 1
    x, c = _ints(rng, 300, half), _ints(rng, 300, half)
    digits = jnp.asarray(limbs.digits_from_python(c, spec.limb_bits))
    got = limbs.to_python(limbs.mul_const(_lim(x, spec), digits, spec), spec)
    assert list(got) == [p * q for p, q in zip(x, c)]


@pytest.mark.parametrize('spec', SPECS[1:], ids=str)
def test_limb_division_extremes_and_resize(spec):
  rng = random.Random(7)
  cap = spec.num_limbs * spec.limb_bits
  with jax.enable_x64(True):
    a = _ints(rng, 120, cap - 1)
    for count in (1, 2, 3, 7):
      q, inexact = limbs.div_small(_lim(a, spec), count, spec)
      # Floor division (as // on int64), remainder flag.
      assert list(limbs.to_python(q, spec)) == [x // count for x in a]
      assert list(np.asarray(inexact)) == [x % count != 0 for x in a]
    m = np.asarray(a, dtype=object).reshape(12, 10)
    m[3, 4] = m[3, 7] = max(m[3])  # a tie
    lm = _lim(m, spec)
    np.testing.assert_array_equal(np.asarray(limbs.extreme_mask(lm, -1, spec)),
                                  m == m.max(axis=1, keepdims=True))
    np.testing.assert_array_equal(np.asarray(limbs.extreme_mask(lm, 0, spec, largest=False)),
                                  m == m.min(axis=0, keepdims=True))
    wider = limbs.LimbSpec(spec.num_limbs + 2, spec.limb_bits)
    assert list(limbs.to_python(limbs.resize(_lim(a, spec), spec, wider), wider)) == a


@pytest.mark.parametrize('spec', SPECS + [limbs.LimbSpec(2, 30), limbs.LimbSpec(4, 30)],
                         ids=str)
def test_ordered_words_order_and_identify_values(spec):
  rng = random.Random(11)
  cap = spec.num_limbs * spec.limb_bits
  with jax.enable_x64(True):
    a = _ints(rng, 150, cap) + [-2 ** (cap - 1), 2 ** (cap - 1) - 1, 0, -1, 1]
    a += a[:5]  # repeated values
    words = np.stack([np.asarray(w) for w in limbs.ordered_words(_lim(a, spec), spec)], -1)
    assert words.dtype == np.int64 and words.min() >= 0
    assert list(limbs.words_to_python(words, spec)) == a
    # Lexicographic order of the words is the order of the integers; equal iff equal.
    keys = [tuple(int(x) for x in row) for row in words]
    for i in range(0, len(a), 7):
      for j in range(len(a)):
        assert (keys[i] < keys[j]) == (a[i] < a[j])
        assert (keys[i] == keys[j]) == (a[i] == a[j])


@hypothesis.settings(max_examples=8)
@hypothesis.given(st.lists(st.integers(-2 ** 62, 2 ** 62), min_size=16, max_size=16))
def test_int64_conversions(values):
  spec = limbs.LimbSpec(3, 30)
  with jax.enable_x64(True):
    x = jnp.asarray(values, jnp.int64)
    assert list(limbs.to_python(limbs.from_int64(x, spec), spec)) == values
    digits = limbs.digits_from_int64(x, 30, 3)
    assert list(limbs.to_python(limbs.const_to_limbs(digits, spec), spec)) == values
    assert list(limbs.to_python(limbs.digits_from_limbs(limbs.from_int64(x, spec), spec),
                                   spec)) == values


def test_from_python_refuses_out_of_range_values():
  spec = limbs.LimbSpec(2, 30)
  limbs.from_python([2 ** 59 - 1, -2 ** 59], spec)
  with pytest.raises(ValueError, match='does not fit'):
    limbs.from_python([2 ** 59], spec)


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


# ---------------------------------------------------------------------------
# Limb layers vs the NumPy object reference (same math, Python ints).
# ---------------------------------------------------------------------------


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


def test_exact_ops_elementwise_and_reductions_agree_across_arithmetics():
  """ExactOps' sweep operations (the former yun.sweep.Ops): int32, int64 and limbs give
  the same integers, and ``convert`` moves values between them exactly."""
  from transformer_ua.exact.ops import ExactOps  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  a = rng.integers(-10 ** 6, 10 ** 6, size=(4, 5)).astype(object)
  b = rng.integers(-10 ** 6, 10 ** 6, size=(4, 5)).astype(object)
  spec = planner.plan(2 ** 80, 'limbs').spec
  with jax.enable_x64(True):
    i64, i32, lim = ExactOps(None), ExactOps(None, jnp.int32), ExactOps(spec)
    for ops in (i64, i32, lim):
      x, y = ops.const(a), ops.const(b)
      got = {'max': ops.maximum(x, y), 'min': ops.minimum(x, y), 'gt': ops.gt(x, y),
             'lt': ops.lt(x, y), 'rmax': ops.reduce_max(x), 'rmin': ops.reduce_min(x),
             'rsum': ops.reduce_sum(x), 'mul': ops.mul(x, 3), 'sub': ops.sub(x, y)}
      want = {'max': np.maximum(a, b), 'min': np.minimum(a, b), 'gt': a > b, 'lt': a < b,
              'rmax': a.max(axis=0), 'rmin': a.min(axis=0), 'rsum': a.sum(axis=0),
              'mul': a * 3, 'sub': a - b}
      for key, val in got.items():
        val = np.asarray(val) if key in ('gt', 'lt') else ops.to_python(val)
        np.testing.assert_array_equal(val, want[key], err_msg=f'{ops} {key}')
    np.testing.assert_array_equal(lim.to_python(lim.convert(i32.const(a), i32)), a)
    np.testing.assert_array_equal(np.asarray(i32.convert(lim.const(a), lim)), a.astype(int))
