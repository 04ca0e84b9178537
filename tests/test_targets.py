"""Built-in targets, user-callable validation, and Lemma 4's f_bar."""

import numpy as np
import pytest

from transformer_ua.targets import functions as targets


@pytest.mark.parametrize('name', sorted(targets.BUILTIN_TARGETS))
def test_builtin_targets_have_declared_equivariance(name):
  t = targets.get_target(name, d=2, n=4)
  x = np.random.default_rng(0).random((16, 4, 2))
  perm = np.array([1, 0, 2, 3])
  equivariant = np.allclose(t(x[:, perm]), t(x)[:, perm], atol=1e-12)
  assert equivariant == t.permutation_equivariant


def test_builtin_formulas_against_loops():
  x = np.random.default_rng(1).random((2, 3, 2))
  for b in range(2):
    for j in range(3):
      np.testing.assert_allclose(targets.BUILTIN_TARGETS['prefix_mean'](x)[b, j],
                                 x[b, :j + 1].mean(axis=0))
      np.testing.assert_allclose(targets.BUILTIN_TARGETS['reversal'](x)[b, j], x[b, 2 - j])
      np.testing.assert_allclose(targets.BUILTIN_TARGETS['token_times_mean'](x)[b, j],
                                 x[b, j] * x[b].mean(axis=0))


@pytest.mark.parametrize('fn, message', [
    (lambda x: x[..., :1], 'returned shape'),
    (lambda x: x * np.nan, 'non-finite'),
    (lambda x: 'text', 'not a numeric array'),
])
def test_user_callable_is_validated(fn, message):
  with pytest.raises(ValueError, match=message):
    targets.get_target(fn, d=2, n=3)


def test_unknown_target_name():
  with pytest.raises(ValueError, match='built-ins'):
    targets.get_target('sorting', d=1, n=2)


def test_lemma4_fbar_is_constant_on_cubes_and_equivariant():
  f = targets.get_target('attention_map', d=2, n=3)
  f_bar = targets.piecewise_constant(f, 4)
  rng = np.random.default_rng(2)
  k = rng.integers(0, 4, size=(32, 3, 2))
  a = (k + rng.random(k.shape)) / 4  # two points of the same cube
  b = (k + rng.random(k.shape)) / 4
  np.testing.assert_array_equal(f_bar(a), f_bar(b))
  np.testing.assert_allclose(f_bar(a), f((k + 0.5) / 4))
  perm = np.array([1, 2, 0])
  np.testing.assert_allclose(f_bar(a[:, perm]), f_bar(a)[:, perm], atol=1e-12)
  # Zero outside the unit cube (the support).
  outside = a.copy()
  outside[:, 0, 0] = 1.0
  np.testing.assert_array_equal(f_bar(outside), 0.0)
