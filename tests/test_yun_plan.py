"""yun.realization.plan: planned lam/epsilon/bits, and the float64 check against the plan."""

from fractions import Fraction

import pytest

from realization_fixtures import exact134, net134  # pylint: disable=unused-import
from transformer_ua.yun import build_approximator
from transformer_ua.yun.realization import plan


def test_plan_is_powers_of_two_from_exact_bounds(exact134):
  p, _ = exact134
  assert p.lam.denominator == 1 and p.lam.numerator & (p.lam.numerator - 1) == 0
  assert p.epsilon.numerator == 1
  assert p.bounds['gap'] == Fraction(1, 32)  # (delta/2) * delta at N = 4
  assert p.epsilon <= p.bounds['clearance_quantization'] / 2
  assert p.bits > 53


def test_float64_warns_where_the_plan_needs_more_bits():
  net = build_approximator('token_times_mean', d=1, n=3, resolution=8)
  p = plan.plan_realization(net)
  with pytest.warns(plan.FloatRealizationWarning, match='float64 carries 53 bits'):
    net.realize(lam=float(p.lam), epsilon=float(p.epsilon), dtype='float64')


def test_ties_float64_is_checked_against_the_plan():
  """The float64 realization of the tie-complete map now has a plan to be checked
  against (before, 'no plan for this realization')."""
  net = build_approximator('token_times_mean', d=1, n=3, resolution=4, ties='complete')
  p = plan.plan_realization(net)
  with pytest.warns(plan.FloatRealizationWarning, match='float64 carries 53 bits; the plan needs'):
    net.realize(lam=float(p.lam), epsilon=float(p.epsilon), dtype='float64')
