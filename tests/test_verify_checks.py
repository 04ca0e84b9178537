"""verify.checks: the per-point properties, on hand-made values, in both representations."""

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua.exact.ops import ExactOps
from transformer_ua.verify import checks

OPS = ExactOps(None)


def _tokens(q, words):
  q = jnp.asarray(q, jnp.int64)
  return [[q[:, j]] if words else q[:, j] for j in range(q.shape[1])]


def test_lemma8_counts_each_property_in_values_and_words():
  with jax.enable_x64(True):
    # t_l = 10, t_r = 20, Lemma 10: 12 <= l~_n <= 18.
    q = [[11, 12], [11, 11], [11, 25], [1, 30], [15, 16]]
    cat = jnp.asarray([1, 1, 1, 3, 2], jnp.int32)
    ltn = jnp.asarray([12, 19, 15, 0, 0], jnp.int64)
    valid = jnp.asarray([True, True, True, True, False])
    for words in (False, True):
      cmp = checks.WORDS if words else OPS
      c = (lambda v: [jnp.int64(v)]) if words else jnp.int64  # noqa: E731
      out = checks.lemma8(_tokens(q, words), cat, valid, cmp=cmp, t_l=c(10), t_r=c(20),
                          ltn=ltn, l10_cmp=OPS, lo=jnp.int64(12), hi=jnp.int64(18))
      assert set(out) == set(checks.LEMMA8)
      assert {k: int(v) for k, v in out.items()} == {
          '8.1_distinct_entries': 1, '8.3_inside_interval': 1, '8.4_outside_interval': 0,
          'lemma10_bounds': 1}
    cats = checks.categories(cat, valid)
    assert {k: int(v) for k, v in cats.items()} == {'category_1': 3, 'category_2': 0,
                                                   'category_3': 1, 'points': 4}


def test_ties_and_equivariance():
  with jax.enable_x64(True):
    q = [[11, 11], [11, 12], [5, 12]]
    col = jnp.asarray([[3, 3], [3, 3], [0, 1]])
    cat = jnp.asarray([2, 2, 3], jnp.int32)
    valid = jnp.ones(3, bool)
    out = checks.ties(_tokens(q, False), col, cat, valid, cmp=OPS, t_l=jnp.int64(10),
                      t_r=jnp.int64(20))
    assert set(out) == set(checks.TIES)
    assert {k: int(v) for k, v in out.items()} == {
        'T1_ties_within_point': 1, 'T2_inside_interval': 0, 'T3_outside_interval': 1}
    pos = [jnp.asarray([1, 0, 0]), jnp.asarray([0, 1, 1])]
    ref = _tokens([[11, 11], [11, 12], [12, 5]], False)
    assert int(checks.equivariance(_tokens(q, False), pos, ref, valid, cmp=OPS)) == 1


def test_count_duplicates_counts_equal_values_of_different_owners():
  values = np.asarray([5, 3, 5, 3, 7])
  assert checks.count_duplicates(OPS, values, np.asarray([0, 1, 2, 1, 3])) == 1
