"""The numerical facts the proof notes of docs/proofs/ state beside their proofs.

* one_layer_separation.md: at an irrational beta one softmax layer need not separate: the
  contexts {0, 1, 4} and {1, 2, 3} (both hold the token 1) have Boltzmann means whose
  difference changes sign, so it vanishes at some beta_0 > 0, a root of the integer
  polynomial P'Q - PQ' at x = e^beta_0.
* ties_complete.md: the sweep's shift lam = V + 2n is sufficient, not necessary; the
  proof's two steps need only lam >= max(V + 1, 2n - 1). Checked here by a literal sweep
  (written from the note, sharing no code with ``contextual_ties``) on every multiset of
  small grids: (largest id, sum of ids, own id) is one-to-one on (multiset, token value).
"""

from __future__ import annotations

import itertools

import mpmath

S, S_PRIME = (0, 1, 4), (1, 2, 3)


def _mean_difference(beta):
  """mean_beta(S) - mean_beta(S'), mean_beta(S) = sum m e^{beta m} / sum e^{beta m}."""
  def mean(s):
    w = [mpmath.exp(beta * m) for m in s]
    return mpmath.fsum(m * x for m, x in zip(s, w)) / mpmath.fsum(w)
  return mean(S) - mean(S_PRIME)


def test_one_layer_irrational_beta_counterexample():
  with mpmath.workdps(60):
    assert _mean_difference(mpmath.mpf(0)) == mpmath.mpf(5) / 3 - 2   # means 5/3 and 2
    assert _mean_difference(mpmath.mpf(10)) > 0                       # means -> 4 and 3
    lo, hi = mpmath.mpf(0), mpmath.mpf(10)
    for _ in range(220):                                              # bisection
      mid = (lo + hi) / 2
      lo, hi = (mid, hi) if _mean_difference(mid) < 0 else (lo, mid)
    beta0 = (lo + hi) / 2
    assert 0 < beta0 < 10 and abs(_mean_difference(beta0)) < mpmath.mpf(10) ** -50
    # The same root as the note's integer polynomial: P = 1 + x + x^4, Q = x + x^2 + x^3.
    x = mpmath.exp(beta0)
    P, dP = 1 + x + x ** 4, 1 + 4 * x ** 3
    Q, dQ = x + x ** 2 + x ** 3, 1 + 2 * x + 3 * x ** 2
    assert abs(dP * Q - P * dQ) < mpmath.mpf(10) ** -45
    # Either side of beta0 the means differ (the sign change).
    assert _mean_difference(beta0 - mpmath.mpf('1e-6')) < 0 < _mean_difference(
        beta0 + mpmath.mpf('1e-6'))
    assert abs(beta0 - mpmath.mpf('0.141239')) < mpmath.mpf('1e-6'), beta0   # as the note says


def _sweep(cells, V, lam):
  """The tie-complete sweep on ids 1..V (ticks): at step l every column with id l is shifted
  by lam (max - min) of the current ids (docs/proofs/ties_complete.md, 'The sweep on G')."""
  z = list(cells)
  for l in range(1, V + 1):
    hit = [j for j, v in enumerate(z) if v == l]
    if hit:
      shift = lam * (max(z) - min(z))
      for j in hit:
        z[j] += shift
  return z


def _one_to_one(V, n, lam) -> bool:
  owner = {}
  for cells in itertools.combinations_with_replacement(range(1, V + 1), n):
    z = _sweep(cells, V, lam)
    for value, zj in zip(cells, z):
      owner.setdefault((max(z), sum(z), zj), set()).add((cells, value))
  return all(len(pairs) == 1 for pairs in owner.values())


def test_ties_complete_sweep_needs_only_max_v_plus_1_and_2n_minus_1():
  for V in range(2, 7):
    for n in range(2, 5):
      assert _one_to_one(V, n, max(V + 1, 2 * n - 1)), (V, n)
      assert _one_to_one(V, n, V + 2 * n), (V, n)


def test_ties_complete_sweep_check_can_fail():
  # The check itself: a shift too small to leave the sweep range merges contexts.
  assert not _one_to_one(4, 3, 1)
