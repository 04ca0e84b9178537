"""Shared module-scoped fixtures: planned, exactly realized Theorem 2 networks (N = 4)."""

import pytest

from transformer_ua.yun import build_approximator
from transformer_ua.yun.realization import plan


@pytest.fixture(scope='module')
def net134():
  return build_approximator('token_times_mean', d=1, n=3, resolution=4)


@pytest.fixture(scope='module')
def exact134(net134):
  p = plan.plan_realization(net134)
  return p, net134.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact')


@pytest.fixture(scope='module')
def ties134():
  net = build_approximator('token_times_mean', d=1, n=3, resolution=4, ties='complete')
  p = plan.plan_realization(net)
  return net, p, net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact')
