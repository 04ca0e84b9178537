"""Shared helpers for the one-layer tests: the target written out, and the N = 4 net."""

import pytest

from transformer_ua.yun import one_layer


def token_times_mean(x):
  """f(X)_j = x_j * mean_k x_k (entrywise): the built-in target, written out here."""
  return x * x.mean(axis=1, keepdims=True)


@pytest.fixture(scope='module')
def net():
  return one_layer.build('token_times_mean', d=1, n=3, resolution=4)
