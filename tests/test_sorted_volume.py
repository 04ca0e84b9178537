"""vol(B cap R) (certify/sorted_volume.py) against an independent exact count, and the sorted
total it gives against dense samples and against the symmetric total it replaces.

The independent count: the a's and b's cut the line into cells; a point of B cap R puts each
x_j in a cell inside [a_j, b_j], in non-decreasing cell order, and the coordinates sharing a
cell of length L are sorted on a simplex of volume L^k / k!. Summing over the assignments
gives V exactly, with no integration.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from transformer_ua.certify import box_bound, box_sums
from transformer_ua.certify import network_certificate as nc
from transformer_ua.certify import sorted_volume
from transformer_ua.networks import network_apply
from network_ops_helpers import small_relu_net


def cell_count_volume(a, b) -> Fraction:
  a = [Fraction(x) for x in a]
  b = [Fraction(x) for x in b]
  cuts = sorted(set(a) | set(b))
  cells = list(zip(cuts, cuts[1:]))
  allowed = [[i for i, (lo, hi) in enumerate(cells) if a[j] <= lo and hi <= b[j]]
             for j in range(len(a))]
  total = Fraction(0)
  for pick in itertools.product(*allowed):
    if any(x > y for x, y in zip(pick, pick[1:])):
      continue
    term = Fraction(1)
    for i in set(pick):
      k = pick.count(i)
      term *= (cells[i][1] - cells[i][0]) ** k / math.factorial(k)
    total += term
  return total


def random_dyadic_boxes(rng, count, n, levels=(1, 2, 3, 4)):
  out = []
  for _ in range(count):
    a, b = [], []
    for _ in range(n):
      k = 2 ** int(rng.choice(levels))
      i = int(rng.integers(k))
      a.append(Fraction(i, k))
      b.append(Fraction(i + 1, k))
    out.append((a, b))
  return out


@pytest.mark.parametrize('n', [1, 2, 3, 4])
def test_volume_equals_the_cell_count(n):
  rng = np.random.default_rng(n)
  boxes = random_dyadic_boxes(rng, 150, n)
  # and the boxes straddling the diagonal in every way at one level
  k = 4
  for idx in itertools.product(range(k), repeat=min(n, 3)):
    idx = list(idx) + [k - 1] * (n - len(idx))
    boxes.append(([Fraction(i, k) for i in idx], [Fraction(i + 1, k) for i in idx]))
  for a, b in boxes:
    assert sorted_volume.first_coordinate_volume(a, b) == cell_count_volume(a, b), (a, b)


def test_known_values():
  # the whole cube: 1/n!
  for n in range(1, 7):
    assert sorted_volume.first_coordinate_volume([0] * n, [1] * n) == Fraction(1,
                                                                               math.factorial(n))
  assert sorted_volume.first_coordinate_volume([0, 0.5], [0.5, 1]) == Fraction(1, 4)
  assert sorted_volume.first_coordinate_volume([0.5, 0], [1, 0.5]) == 0
  assert sorted_volume.first_coordinate_volume([0] * 3, [0.5] * 3) == Fraction(1, 48)
  assert sorted_volume.first_coordinate_volume([0, 0.5], [1, 1]) == Fraction(3, 8)


def test_volumes_up_with_more_coordinates_and_the_filter():
  rng = np.random.default_rng(3)
  n, d = 3, 2
  k = 4
  idx = rng.integers(k, size=(400, n, d)).astype(np.float64)
  lo, hi = idx / k, (idx + 1) / k
  got = sorted_volume.volumes_up(lo, hi)
  for i in range(len(lo)):
    exact = cell_count_volume(lo[i, :, 0].tolist(), hi[i, :, 0].tolist()) * \
        Fraction(1, k) ** (n * (d - 1))
    assert Fraction(float(got[i])) >= exact
    assert float(got[i]) == pytest.approx(float(exact), rel=1e-15, abs=0)
    assert sorted_volume.meets_sorted(lo[i:i + 1], hi[i:i + 1])[0] == (exact > 0)


def small_net():
  return small_relu_net(seed=4, scale=0.4)


@pytest.mark.parametrize('n', [3, 4])
def test_sorted_total_between_dense_samples_and_the_symmetric_total(n):
  """On the same boxes (the initial partition, then refined 3 rounds): the n!-fold sum with
  vol(B cap R) is at most the one with vol(B), and at least the dense-sampled d_2^2."""
  net = small_net()
  rng = np.random.default_rng(0)
  x = rng.random((100_000, n, 1))
  err = network_apply.apply(net, x) - x * x.mean(axis=1, keepdims=True)
  sq = (err ** 2).sum(axis=(1, 2))
  sampled = sq.mean() + 5 * sq.std() / math.sqrt(len(sq))      # ~ a 1 - 3e-7 upper end
  cert = nc.certify_network('token_times_mean', net, d=1, n=n, p=2, arithmetic='exact',
                            max_rounds=4, progress=False)
  assert cert.symmetric
  assert float(cert.total) ** 2 >= sampled
  _, ev = box_bound.build_evaluator(net.as_dict(), 1, n, 'token_times_mean', 'exact')
  lo, hi = box_sums.initial_boxes(n, 1, True)
  e = ev.evaluate(lo, hi)[0]
  mult = math.factorial(n)
  exact = box_sums.contributions(e, box_sums.volumes(lo, hi, True), 2, mult)
  whole = box_sums.contributions(e, box_sums.volumes(lo, hi, False), 2, mult)
  assert np.all(exact <= whole) and exact.sum() < whole.sum()
  assert exact.sum() >= sampled
