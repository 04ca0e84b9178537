"""exact.limbs: limb arithmetic vs Python ints."""

import random

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua.exact import limbs

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
