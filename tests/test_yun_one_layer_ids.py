"""The one-layer contextual mapping's plan and certified ids (yun.single_attention.one_layer_ids,
verify.one_layer)."""

import itertools
import math
from fractions import Fraction

import mpmath
import pytest

from transformer_ua.verify import one_layer as verify_ol
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.single_attention import one_layer, one_layer_ids
from transformer_ua.yun.variants.one_layer import OneLayer


# -- plan (hand-computed constants) --------------------------------------------


def test_cauchy_constant_bounds_b():
  with mpmath.workprec(200):
    b = 1 + mpmath.log(mpmath.sec(1)) + mpmath.pi / 2
    assert b < mpmath.mpf(one_layer_ids.CAUCHY_B.numerator) / one_layer_ids.CAUCHY_B.denominator
    assert b > 3.18   # and the rational bound is tight to 1e-3
    assert float(one_layer_ids.CAUCHY_B) - float(b) < 1e-3


def test_plan_d1_n3_n4_by_hand():
  # M = 4, h = 3/2, beta* = 1 / (16 B 3 1! 3^2 (3/2)^3) = 1 / (16 B 3 9 27/8)
  p = one_layer_ids.plan(Grid(1, 3, 4))
  beta_star = 1 / (16 * Fraction(3187, 1000) * 3 * 9 * Fraction(27, 8))
  assert p.beta_star == beta_star
  # beta* / (2 (M - 1)) = 3.59e-5: 2^-15 = 3.05e-5 <= it < 2^-14
  assert p.lam == Fraction(1, 2 ** 15)
  assert p.w == (4,) and p.T == 3 and p.id_scale == Fraction(1, 6)
  # gamma_mean = (lam (M - 1))^(n-2) / (2 n^(n-1) (n-2)!) = 3 / 2^15 / 18
  assert p.gamma_mean == Fraction(3, 2 ** 15) / 18
  q = one_layer_ids.plan(Grid(2, 3, 4))
  assert q.M == 16 and q.w == (4, 16)


def test_plan_refuses_grids_past_the_limit():
  with pytest.raises(ValueError, match='at most'):
    one_layer_ids.plan(Grid(2, 4, 64))
  with pytest.raises(ValueError, match='n'):
    one_layer_ids.plan(Grid(1, 1, 4))


# -- certified separation ----------------------------------------------------------


@pytest.mark.parametrize('d,n,N', [(1, 2, 4), (1, 3, 4), (1, 3, 16), (2, 3, 4), (2, 4, 4)])
def test_every_context_separated(d, n, N):
  r = verify_ol.verify_one_layer(Grid(d, n, N), samples=16)
  M = N ** d
  assert r['contexts'] == math.comb(M + n - 1, n)
  assert r['ids'] == M * math.comb(M + n - 2, n - 1)
  assert r['violations'] == 0 and r['overlaps'] == 0 and r['all_hold']
  assert r['certified_min_gap_mean'] >= r['proved_gap_mean'] > 0
  assert r['certified_min_cross_token_gap'] >= 0.5
  assert r['mpmath']['outside'] == 0 and r['mpmath']['closest_pair']['consistent']
  assert r['float64']['disagreements'] == 0


def test_repeated_tokens_are_ids_of_their_own():
  # M = 4, n = 3: 40 (context, token) pairs; contexts without repeats are the C(4, 3) = 4
  # sets, 3 tokens each: 12 pairs; the other 28 have a repeated token.
  r = verify_ol.verify_one_layer(Grid(1, 3, 4), samples=8)
  assert r['ids'] == 40 and r['ids_with_repeated_tokens'] == 28
  assert r['violations'] == 0
  # the contexts {0, 0, 1} and {0, 1, 1} differ only in multiplicity: token 0's means
  # are (e^0 * 0 * 2 + e^b) / (2 + e^b) and (2 e^b) / (1 + 2 e^b), b = beta_0 = 3 lam
  table = one_layer_ids.mean_enclosures(4, 3, Fraction(1, 2 ** 15), bits=80)
  lam = Fraction(1, 2 ** 15)
  with mpmath.workprec(200):
    e = mpmath.exp(mpmath.mpf(3 * lam.numerator) / lam.denominator)
    want = {(0, 1): e / (2 + e), (1, 1): 2 * e / (1 + 2 * e)}
  got = {}
  for i in range(len(table)):
    if table.tokens[i] == 0 and tuple(table.rests[i]) in want:
      got[tuple(table.rests[i])] = (Fraction(table.lo[i], 2 ** 80), Fraction(table.hi[i], 2 ** 80))
  with mpmath.workprec(200):
    for rest, v in want.items():
      lo, hi = got[rest]
      assert mpmath.mpf(lo.numerator) / lo.denominator <= v
      assert v <= mpmath.mpf(hi.numerator) / hi.denominator
  assert got[(0, 1)][1] < got[(1, 1)][0]


def test_plain_mean_collides_and_is_reported():
  # lam = 0: softmax is the plain mean; pairs of one token whose contexts have equal sums
  # collide. Count them independently: per token, rows minus distinct sums.
  M, n = 4, 3
  want = 0
  for t in range(M):
    sums = [t + sum(r) for r in itertools.combinations_with_replacement(range(M), n - 1)]
    want += len(sums) - len(set(sums))
  r = verify_ol.verify_one_layer(Grid(1, n, M), lam=0, samples=4)
  assert want > 0 and r['overlaps'] == want
  assert not r['all_hold']


def test_lambda_too_small_violates_the_margin():
  p = one_layer_ids.plan(Grid(1, 3, 16))
  r = verify_ol.verify_one_layer(Grid(1, 3, 16), lam=p.lam / 2 ** 10, samples=4)
  assert r['violations'] > 0 and not r['all_hold']
  # still injective (softmax of a transcendental base), only closer than the margin
  assert r['certified_min_gap_mean'] > 0


def test_search_lam_beats_the_proved_gap():
  r = one_layer_ids.search_lam(Grid(1, 3, 8))
  p = one_layer_ids.plan(Grid(1, 3, 8))
  assert r['lam'] >= p.lam and r['min_gap_mean'] >= p.gamma_mean
  net = one_layer.build('token_times_mean', OneLayer(Grid(1, 3, 8)), lam='search')
  assert net.lam == r['lam'] and net.min_gap > 0


def test_verifier_with_searched_lam():
  r = verify_ol.verify_one_layer(Grid(1, 3, 8), lam='search', samples=8)
  assert r['all_hold'] and r['lam'] > r['planned_lam']
  assert r['certified_min_gap_mean'] > r['proved_gap_mean']
  with pytest.raises(ValueError, match='search'):
    verify_ol.verify_one_layer(Grid(1, 3, 8), lam='largest')
