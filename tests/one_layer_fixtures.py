"""Shared helpers for the one-layer tests: the target written out, and the N = 4 net."""

import itertools
import math
from fractions import Fraction

import pytest

from transformer_ua.yun.single_attention import one_layer
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.variants.one_layer import OneLayer


def token_times_mean(x):
  """f(X)_j = x_j * mean_k x_k (entrywise): the built-in target, written out here."""
  return x * x.mean(axis=1, keepdims=True)


@pytest.fixture(scope='module')
def net():
  return one_layer.build('token_times_mean', OneLayer(Grid(1, 3, 4)))


def token_times_mean_d2(n, N):
  """d_2(f, f_bar) of token_times_mean (d = 1) worked out by hand: on a cube with centre
  c, f_j(c + u) - f_j(c) = sum_k alpha_k u_k + u_j mean(u), alpha_k = c_j / n + mean(c)
  [k = j]; with E u^2 = h^2 / 3, E u^4 = h^4 / 5 and odd moments 0 (h = delta / 2),
  E (f_j - f_j(c))^2 = (h^2 / 3) sum_k alpha_k^2 + (h^4 / n^2) (1/5 + (n - 1) / 9)."""
  h = Fraction(1, 2 * N)
  quad = h ** 4 / n ** 2 * (Fraction(1, 5) + Fraction(n - 1, 9))
  total = Fraction(0)
  for k in itertools.product(range(N), repeat=n):
    c = [Fraction(2 * v + 1, 2 * N) for v in k]
    m = sum(c) / n
    for j in range(n):
      total += h * h / 3 * sum((c[j] / n + (m if i == j else 0)) ** 2 for i in range(n))
      total += quad
  return math.sqrt(total / N ** n)
