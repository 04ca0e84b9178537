"""Fang et al. 2022: input map, Lemma 3.1, Lemma 3.3, Theorem 3.5, exact modes.

Expectations are computed independently of the code under test: Q by direct monomial
evaluation (float64 or Fractions), products x*y by hand, counts from the lemma's
formulas.
"""

import itertools
import math
from fractions import Fraction

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua import fang, layers
from transformer_ua.exact import reference
from transformer_ua.fang import exact, multiply_block, ridge
from transformer_ua.fang.tokens import Layout


def random_poly(rng, d, q, density=0.6, scale=3.0):
  poly = {}
  for s in range(q + 1):
    for a in ridge.exponents(d, s):
      if rng.random() < density:
        poly[a] = float(np.round(rng.normal() * scale, 3))
  poly[tuple([q] + [0] * (d - 1))] = 1.5  # make the degree exactly q
  return poly


def ball_points(rng, d, bound, per_radius=8, radii=(0.0, 1e-3, 0.3, 0.7, 1.0)):
  """Points at the given fractions of B, the boundary ||x|| = B included."""
  pts = []
  for r in radii:
    u = rng.normal(size=(per_radius, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    pts.append(u * r * bound)
  return np.concatenate(pts)


def run_block(block, tokens):
  """One block through the core layers (float64)."""
  with jax.enable_x64(True):
    z = jnp.asarray(tokens)
    p = jax.tree_util.tree_map(jnp.asarray, block)
    z = z + layers.attention_update(p['attention'], z, normalizer='onehot_max')[0]
    z = z + layers.feedforward_update(p['feedforward'], z)
    return np.asarray(z)


# ---------------------------------------------------------------------------
# Section 2.1: the input map.
# ---------------------------------------------------------------------------


def test_input_map_layout_matches_section_2_1():
  F = np.asarray([[1.0, 0.0], [0.5, 0.75], [0.0, -1.0]])  # dyadic: t exact
  x = np.asarray([[2.0, 3.0]])
  with jax.enable_x64(True):
    z = np.asarray(fang.input_map(jnp.asarray(F), jnp.asarray(x), q=2))
  n, q = 3, 2
  assert z.shape == (1, n, n + q + 2)
  for i in range(n):
    expect = [F[i] @ x[0]] + [1.0 if j == i else 0.0 for j in range(n)] + [0.0] * q + [1.0]
    np.testing.assert_array_equal(z[0, i], expect)
  lay = Layout(n, q)
  assert (lay.t, lay.onehot(0), lay.slot(1), lay.slot(q), lay.const) == (0, 1, n + 1, n + q,
                                                                          n + q + 1)
  with pytest.raises(ValueError, match='allowed 1..2'):
    lay.slot(3)


# ---------------------------------------------------------------------------
# Lemma 3.1.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize('n,q', [(1, 2), (3, 2), (7, 4)])
def test_multiplication_block_writes_minus_product_and_nothing_else(n, q):
  rng = np.random.default_rng(n * 10 + q)
  lay = Layout(n, q)
  X, Y = 3.0, 5.0
  m2 = fang.choose_m_squared(x_bound=X, y_bound=Y)
  if q > 2:   # slot_q = -slot_1 * slot_2
    xi, yi, ci = lay.slot(1), lay.slot(2), lay.slot(q)
  else:       # slot_2 = -t * slot_1
    xi, yi, ci = lay.t, lay.slot(1), lay.slot(2)
  block = fang.multiplication_block(n=n, q=q, x_index=xi, y_index=yi, out_index=ci,
                                    m_squared=m2)
  tokens = np.zeros((4, n, lay.width))
  tokens[..., lay.t] = rng.uniform(-X, X, size=(4, n))
  tokens[..., np.arange(n), [lay.onehot(i) for i in range(n)]] = 1.0
  tokens[..., lay.const] = 1.0
  tokens[..., xi] = rng.uniform(-X, X, size=(4, n))
  tokens[..., yi] = rng.uniform(-Y, Y, size=(4, n))
  # Boundary operands: +-X and +-Y exactly, opposite signs across tokens.
  tokens[0, :, xi] = X
  tokens[0, :, yi] = np.where(np.arange(n) % 2 == 0, -Y, Y)
  out = run_block(block, tokens)
  expect = tokens.copy()
  expect[..., ci] = -tokens[..., xi] * tokens[..., yi]
  np.testing.assert_allclose(out, expect, rtol=0, atol=4 * 2.0 ** -52 * 4 * m2)


@pytest.mark.parametrize('n', [1, 2, 5, 13])
def test_lemma_3_1_nonzero_count_is_2n_plus_8(n):
  q = 3
  lay = Layout(n, q)
  block = fang.multiplication_block(n=n, q=q, x_index=lay.slot(1), y_index=lay.slot(2),
                                    out_index=lay.slot(3), m_squared=4.0)
  assert fang.paper_nonzeros(block) == 2 * n + 8
  assert layers.count_nonzero(block) == 2 * n + 9  # W^V stored as W_O W_V
  pf = multiply_block.paper_form(block)
  D = n + q + 2
  assert pf['W^Q'].shape == (n + 1, D) and pf['W^V'].shape == (D, D)
  # The paper's matrices (1-based positions in the proof): W^V has one 1 at
  # (out slot, constant); W^Q's first row picks x, the rest 2M^2 on e_i.
  assert pf['W^V'][lay.slot(3), lay.const] == 1 and np.count_nonzero(pf['W^V']) == 1
  assert pf['W^Q'][0, lay.slot(1)] == 1
  np.testing.assert_array_equal(np.diag(pf['W^Q'][1:, 1:n + 1]), [8.0] * n)
  np.testing.assert_array_equal(pf['W_2'][lay.slot(3)], [-2, 2])
  assert pf['b_2'][lay.slot(3)] == 8.0


def test_multiplication_block_bad_arguments():
  with pytest.raises(ValueError, match='not a storage slot'):
    fang.multiplication_block(n=2, q=2, x_index=0, y_index=5, out_index=0, m_squared=1.0)
  with pytest.raises(ValueError, match='must differ'):
    fang.multiplication_block(n=2, q=2, x_index=3, y_index=0, out_index=3, m_squared=1.0)
  with pytest.raises(ValueError, match='one-hot'):
    fang.multiplication_block(n=2, q=2, x_index=1, y_index=0, out_index=3, m_squared=1.0)
  with pytest.raises(ValueError, match='allowed: an integer in 0..5'):
    fang.multiplication_block(n=2, q=2, x_index=9, y_index=0, out_index=3, m_squared=1.0)
  with pytest.raises(ValueError, match='m_squared'):
    fang.multiplication_block(n=2, q=2, x_index=0, y_index=5, out_index=3, m_squared=0.0)
  with pytest.raises(ValueError, match='exactly one of m'):
    fang.multiplication_block(n=2, q=2, x_index=0, y_index=5, out_index=3, m=2.0,
                              m_squared=4.0)
  a = fang.multiplication_block(n=2, q=2, x_index=0, y_index=5, out_index=3, m=3.0)
  b = fang.multiplication_block(n=2, q=2, x_index=0, y_index=5, out_index=3, m_squared=9.0)
  assert all(np.array_equal(u, v) for u, v in zip(jax.tree_util.tree_leaves(a),
                                                  jax.tree_util.tree_leaves(b)))
  with pytest.raises(ValueError, match='positive integer'):
    fang.multiplication_block(n=0, q=2, x_index=0, y_index=5, out_index=3, m_squared=1.0)
  with pytest.raises(ValueError, match="allowed: \\('product'"):
    fang.choose_m_squared(x_bound=1.0, y_bound=1.0, rule='tight')


def test_m_rules_strictly_dominate_and_are_powers_of_two():
  for X, Y in [(1.0, 1.0), (3.0, 27.0), (0.1, 0.01), (50.0, 1.0), (8.0, 4096.0)]:
    for rule in ('product', 'paper_strict'):
      m2 = fang.choose_m_squared(x_bound=X, y_bound=Y, rule=rule)
      assert m2 > X * Y                     # what the proof needs
      assert math.frexp(m2)[0] == 0.5       # a power of two: 2M^2 exact
    m2 = fang.choose_m_squared(x_bound=X, y_bound=Y, rule='paper_strict')
    assert math.sqrt(m2) > max(X, Y)        # the paper's |x|, |y| < M


def test_paper_m_ties_at_the_boundary_and_product_rule_does_not():
  # Antipodal directions (a trained F may have them): at x = (B, 0) the tokens carry
  # t = (B, -B); with the paper's M = B block 2's scores tie (x_i y_i + 2M^2 = x_i y_j),
  # the one-hot maximum keeps both, and the square comes out wrong.
  F = np.asarray([[1.0, 0.0], [-1.0, 0.0]])
  beta = np.asarray([[0.0, 1.0], [0.0, 0.0]])  # C = slot_2 of token 0 = t_0^2
  x = np.asarray([[2.0, 0.0]])
  paper = fang.from_params(F=F, beta_slots=beta, b=0.0, bound=2.0, m_rule='paper')
  ours = fang.from_params(F=F, beta_slots=beta, b=0.0, bound=2.0)
  assert ours.apply(x)[0] == 4.0
  assert paper.apply(x)[0] != 4.0
  assert paper.apply(np.asarray([[1.0, 0.0]]))[0] == 1.0  # inside: the paper's M is fine


def test_paper_m_fails_for_small_B_and_product_rule_does_not():
  # Block k >= 3 with M = B^(k-1) needs 2 B^(2k-2) > 2 B^k, false for B < 1.
  poly = {(3, 0): 1.0, (0, 3): -2.0, (1, 2): 1.0}
  B = 0.05
  rng = np.random.default_rng(0)
  x = ball_points(rng, 2, B, per_radius=20, radii=(0.3, 0.6, 1.0))
  want = fang.evaluate_poly(poly, x)
  ours = fang.build_polynomial_transformer(poly, d=2, bound=B)
  paper = fang.build_polynomial_transformer(poly, d=2, bound=B, m_rule='paper')
  scale = np.maximum(1.0, ridge.abs_scale(poly, x))
  assert np.max(np.abs(ours.apply(x) - want) / scale) < 1e-12
  assert np.max(np.abs(paper.apply(x) - want)) > 1e-6


# ---------------------------------------------------------------------------
# Lemma 3.3.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize('d,q', [(1, 4), (2, 3), (3, 4), (5, 3)])
def test_ridge_representation_reproduces_Q(d, q):
  rng = np.random.default_rng(d * 7 + q)
  poly = random_poly(rng, d, q)
  _, F = ridge.ridge_directions(d=d, q=q)
  assert F.shape == (math.comb(d - 1 + q, q), d)
  np.testing.assert_allclose(np.linalg.norm(F, axis=1), 1.0, rtol=1e-15)
  beta, report = fang.ridge_coefficients(poly, F, q)
  x = rng.normal(size=(50, d))
  t = x @ F.T
  got = poly.get((0,) * d, 0.0) + sum(t ** s @ beta[:, s - 1] for s in range(1, q + 1))
  np.testing.assert_allclose(got, fang.evaluate_poly(poly, x), rtol=1e-10, atol=1e-10)
  assert [r['degree'] for r in report] == list(range(1, q + 1))
  assert all(r['relative_residual'] < 1e-12 and 1 <= r['cond_2'] < 1e6 for r in report)


def test_rational_unit_vectors_have_norm_exactly_one():
  for v in ([3.0, 4.0], [1.0, 1.0, 1.0], [0.2, -0.7, 0.1, -0.3], [0.0, 0.0, -1.0], [5.0]):
    for den in (4, 2 ** 20):
      xi = ridge.rational_unit_vector(v, den)
      assert sum(c * c for c in xi) == 1
      assert np.allclose([float(c) for c in xi], np.asarray(v) / np.linalg.norm(v),
                         atol=4.0 / den)


def test_exact_ridge_solve_is_exact():
  poly = {(2, 1): Fraction(1, 3), (0, 3): -2.0, (1, 0): 5.0, (0, 0): 0.25, (1, 1): 1.0}
  F_exact, _ = ridge.ridge_directions(d=2, q=3, max_denominator=ridge.EXACT_DENOMINATOR)
  beta = ridge.ridge_coefficients_exact(poly, F_exact, 3)
  for x in ([Fraction(1, 7), Fraction(-2, 3)], [Fraction(5), Fraction(0)]):
    t = [sum(a * b for a, b in zip(xi, x)) for xi in F_exact]
    got = Fraction(1, 4) + sum(beta[k][s - 1] * t[k] ** s for k in range(len(t))
                               for s in range(1, 4))
    assert got == fang.evaluate_poly_exact(poly, x)


# ---------------------------------------------------------------------------
# Theorem 3.5.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize('d,q,B', [(1, 5, 3.0), (2, 2, 45.0), (2, 4, 0.5), (3, 3, 7.0),
                                   (4, 5, 7.0), (10, 2, 6.5)])
def test_theorem_3_5_literal_equals_Q_on_the_ball(d, q, B):
  rng = np.random.default_rng(d * 100 + q)
  poly = random_poly(rng, d, q)
  model = fang.build_polynomial_transformer(poly, d=d, bound=B)
  assert model.depth() == q and model.n == math.comb(d - 1 + q, q)
  x = ball_points(rng, d, B)
  assert np.any(np.isclose(np.linalg.norm(x, axis=1), B, rtol=1e-15))  # boundary inside
  want = np.asarray([float(fang.evaluate_poly_exact(poly, row)) for row in x])
  scale = np.maximum(1.0, ridge.abs_scale(poly, x))
  lit = model.apply(x)
  assert np.max(np.abs(lit - want) / scale) <= 1e-9
  comp = model.apply_compact(x)
  assert np.max(np.abs(comp - want) / scale) <= 1e-9
  assert np.max(np.abs(lit - comp) / scale) <= 1e-9


def test_trace_holds_alternating_powers():
  poly = {(2, 0, 1): 1.0, (0, 1, 0): -3.0}
  model = fang.build_polynomial_transformer(poly, d=3, bound=2.0)
  x = np.asarray([[0.5, -1.0, 1.2], [2.0, 0.0, 0.0]])
  outs = model.trace(x)
  assert outs.shape == (3, 2, model.n, model.n + 3 + 2)
  t = x @ model.F.T
  lay = model.layout
  for k in range(1, 4):  # after block k, slots 1..k hold (-t)^1..(-t)^k, later slots 0
    for j in range(1, 4):
      want = (-t) ** j if j <= k else np.zeros_like(t)
      np.testing.assert_allclose(outs[k - 1][..., lay.slot(j)], want, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(outs[k - 1][..., lay.t], t)


@pytest.mark.parametrize('d,q', [(1, 1), (1, 4), (2, 1), (2, 2), (3, 3), (10, 2), (4, 5)])
def test_counts_against_theorem_bounds(d, q):
  rng = np.random.default_rng(q)
  poly = random_poly(rng, d, q, density=1.0)
  model = fang.build_polynomial_transformer(poly, d=d, bound=1.0)
  n = math.comb(d - 1 + q, q)
  assert model.num_free_params() == n * d + n * q + 1
  nnz_expect = (np.count_nonzero(model.F) + np.count_nonzero(model.beta_slots)
                + int(model.b != 0) + q * (2 * n + 8))
  assert model.num_nonzeros() == nnz_expect
  assert model.num_nonzeros('stored') == nnz_expect + q
  # Theorem 3.5: "< d^(q+1) + q d^q + 1" and "< d^(q+1) + 3q d^q + 8q + 1"; equality
  # is attained when n_q = d^q (d = 1 or q = 1), so <= is what holds.
  assert model.num_free_params() <= d ** (q + 1) + q * d ** q + 1
  assert model.num_nonzeros() <= d ** (q + 1) + 3 * q * d ** q + 8 * q + 1
  if d > 1 and q > 1:
    assert model.num_free_params() < d ** (q + 1) + q * d ** q + 1
  assert model.theorem_bounds() == {'free_params': d ** (q + 1) + q * d ** q + 1,
                                    'nonzeros': d ** (q + 1) + 3 * q * d ** q + 8 * q + 1}


def test_paper_f1_free_parameter_count_is_41():
  # Section 5: "With only 41 free parameters" -- n = 10 tokens, d = 2, q = 2.
  rng = np.random.default_rng(0)
  model = fang.from_params(F=rng.normal(size=(10, 2)), beta_slots=rng.normal(size=(10, 2)),
                           b=0.0, bound=1.0)
  assert model.num_free_params() == 10 * 2 + 10 * 2 + 1 == 41


# ---------------------------------------------------------------------------
# Compact == literal; exact modes.
# ---------------------------------------------------------------------------


@hypothesis.given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 6),
                  st.integers(0, 2 ** 31))
@hypothesis.settings(max_examples=8)
def test_compact_equals_literal_for_random_params(d, q, n, seed):
  rng = np.random.default_rng(seed)
  F = rng.normal(size=(n, d)) * rng.uniform(0.1, 2.0, size=(n, 1))  # rows of any norm
  beta = rng.normal(size=(n, q))
  B = float(rng.uniform(0.2, 5.0))
  model = fang.from_params(F=F, beta_slots=beta, b=float(rng.normal()), bound=B)
  x = ball_points(rng, d, B, per_radius=3)
  lit, comp = model.apply(x), model.apply_compact(x)
  # Independent expectation: the un-normalized params' formula.
  t = x @ F.T
  want = model.b + sum(((-t) ** k) @ beta[:, k - 1] for k in range(1, q + 1))
  scale = np.maximum(1.0, np.sum(np.abs(beta) * np.abs(t[..., None]) ** np.arange(1, q + 1),
                                 axis=(-1, -2)))
  assert np.max(np.abs(comp - want) / scale) < 1e-13
  T = model.operand_bound
  # Literal: per-block rounding of fl(xy + 2M^2), ~2^-50 T^k per slot (module doc).
  tol = sum(np.abs(model.beta_slots[:, k - 1]).sum() * k * 2.0 ** -48 * max(T, 1.0) ** k
            for k in range(1, q + 1))
  assert np.max(np.abs(lit - comp)) <= tol + 1e-300


def test_exact_literal_and_compact_agree_exactly_and_with_floats():
  rng = np.random.default_rng(3)
  F = rng.normal(size=(4, 2))
  beta = rng.normal(size=(4, 3))
  model = fang.from_params(F=F, beta_slots=beta, b=0.5, bound=2.0)
  rows = [[Fraction(1, 3), Fraction(-5, 4)], [Fraction(6, 5), Fraction(8, 5)], [0, 0]]
  lit = model.apply_exact(rows)
  comp = model.apply_exact(rows, path='compact')
  assert list(lit) == list(comp)  # Fractions: identical
  fl = model.apply(np.asarray([[float(v) for v in r] for r in rows]))
  np.testing.assert_allclose(fl, [float(v) for v in lit], rtol=1e-12, atol=1e-12)


def test_fraction_mirror_matches_core_layers():
  rng = np.random.default_rng(5)
  lay = Layout(3, 2)
  block = fang.multiplication_block(n=3, q=2, x_index=lay.t, y_index=lay.const,
                                    out_index=lay.slot(1), m_squared=4.0)
  z = rng.integers(-3, 4, size=(2, 3, lay.width)).astype(np.float64)
  with jax.enable_x64(True):
    pj = jax.tree_util.tree_map(jnp.asarray, block)
    a_jax = np.asarray(layers.attention_update(pj['attention'], jnp.asarray(z),
                                               normalizer='onehot_max')[0])
    f_jax = np.asarray(layers.feedforward_update(pj['feedforward'], jnp.asarray(z)))
  np.testing.assert_array_equal(reference.numpy_attention_update(block['attention'], z, normalizer='onehot_max'), a_jax)
  np.testing.assert_array_equal(reference.numpy_feedforward_update(block['feedforward'], z), f_jax)


@pytest.mark.parametrize('d,q', [(2, 2), (2, 3), (3, 2)])
def test_exact_build_reproduces_Q_exactly_incl_boundary(d, q):
  rng = np.random.default_rng(d + q)
  poly = random_poly(rng, d, q)
  poly[(0,) * d] = Fraction(7, 3)
  B = 5.0
  model = fang.build_polynomial_transformer(poly, d=d, bound=B, exact=True)
  # Rational boundary points: Pythagorean triples scaled to ||x|| = B exactly.
  pts = [[Fraction(3), Fraction(4)] + [Fraction(0)] * (d - 2),
         [Fraction(-4), Fraction(3)] + [Fraction(0)] * (d - 2),
         [Fraction(0)] * (d - 1) + [Fraction(-5)],
         [Fraction(1, 3)] * d, [Fraction(0)] * d]
  want = [fang.evaluate_poly_exact(poly, p) for p in pts]
  assert list(model.apply_exact(pts)) == want
  assert list(model.apply_exact(pts, path='compact')) == want
  assert exact.apply_exact_integer(model, pts) == want   # the JAX network in int64


def test_exact_integer_mode_refuses_when_bits_run_out():
  poly = {(5, 0): 1.0, (1, 4): 2.0}
  model = fang.build_polynomial_transformer(poly, d=2, bound=50.0, exact=True)
  with pytest.raises(ValueError, match='needs [0-9]+ bits'):
    exact.apply_exact_integer(model, [[Fraction(49, 997), Fraction(1, 1013)]])


# ---------------------------------------------------------------------------
# Domain and input validation.
# ---------------------------------------------------------------------------


def test_outside_ball_is_refused_or_flagged():
  model = fang.build_polynomial_transformer({(1, 1): 1.0}, d=2, bound=1.0)
  x = np.asarray([[0.6, 0.8], [0.8, 0.8]])
  with pytest.raises(ValueError, match='1 of 2 inputs lie outside the ball'):
    model.apply(x)
  with pytest.raises(ValueError, match='outside the ball'):
    model.apply_compact(x)
  out = model.apply(x, outside='nan')
  assert abs(out[0] - 0.48) < 1e-12 and np.isnan(out[1])
  with pytest.raises(ValueError, match='outside the ball'):
    model.apply_exact([[Fraction(4, 5), Fraction(4, 5)]])
  assert model.apply_exact([[Fraction(3, 5), Fraction(4, 5)]]).size
  with pytest.raises(ValueError, match="allowed: \\('raise', 'nan'\\)"):
    model.apply(x, outside='clip')
  f = jax.jit(model.compact_fn())
  assert np.isnan(np.asarray(f(jnp.asarray(x, jnp.float32)))[1])
  g = jax.jit(model.literal_fn())
  out = np.asarray(g(jnp.asarray(x, jnp.float32)))
  assert abs(out[0] - 0.48) < 1e-5 and np.isnan(out[1])
  with pytest.raises(ValueError, match='inside jit use'):
    jax.jit(model.apply)(jnp.asarray(x))


@pytest.mark.parametrize('poly,kwargs,match', [
    ({(1,): 1.0}, dict(d=2, bound=1.0), 'tuples of 2 non-negative integers'),
    ({(1, -1): 1.0}, dict(d=2, bound=1.0), 'tuples of 2 non-negative integers'),
    ({'x1': 1.0}, dict(d=2, bound=1.0), 'tuples of 2'),
    ({(1, 0.5): 1.0}, dict(d=2, bound=1.0), 'tuples of 2'),
    ({(1, 0): float('nan')}, dict(d=2, bound=1.0), 'finite real'),
    ({(1, 0): float('inf')}, dict(d=2, bound=1.0), 'finite real'),
    ({(1, 0): 1j}, dict(d=2, bound=1.0), 'finite real'),
    ({(1, 0): True}, dict(d=2, bound=1.0), 'finite real'),
    ([((1, 0), 1.0)], dict(d=2, bound=1.0), 'must be a dict'),
    ({(1, 0): 1.0}, dict(d=2, bound=0.0), 'B > 0'),
    ({(1, 0): 1.0}, dict(d=2, bound=-1.0), 'B > 0'),
    ({(1, 0): 1.0}, dict(d=2, bound=float('nan')), 'B > 0'),
    ({(1, 0): 1.0}, dict(d=2, bound='1'), 'B > 0'),
    ({(1, 0): 1.0}, dict(d=0, bound=1.0), 'positive integer'),
    ({(3, 0): 1.0}, dict(d=2, bound=1.0, degree=2), 'integer >= 3'),
    ({(1, 0): 1.0}, dict(d=2, bound=1.0, m_rule='loose'), "allowed: \\('product'"),
    ({(1, 0): 1.0}, dict(d=2, bound=1.0, directions='sobol'), "allowed: \\('lattice'"),
    ({(6, 0, 0, 0, 0): 1.0}, dict(d=5, bound=1.0, exact=True), 'exact=True needs'),
])
def test_bad_build_arguments_give_one_line_errors(poly, kwargs, match):
  with pytest.raises(ValueError, match=match) as e:
    fang.build_polynomial_transformer(poly, **kwargs)
  assert '\n' not in str(e.value)


def test_bad_apply_inputs():
  model = fang.build_polynomial_transformer({(1, 1): 1.0}, d=2, bound=1.0)
  for x, match in [(np.zeros((3, 3)), 'shape \\[..., d\\] with d = 2'),
                   (np.asarray([[np.nan, 0.0]]), 'non-finite'),
                   (np.asarray([['a', 'b']]), 'real array')]:
    with pytest.raises(ValueError, match=match):
      model.apply(x)
  with pytest.raises(ValueError, match='not a rational'):
    model.apply_exact([[0.5, 'x']])
  with pytest.raises(ValueError, match='d = 2 entries'):
    model.apply_exact([[0.5]])


def test_zero_and_constant_polynomials():
  model = fang.build_polynomial_transformer({(0, 0): 2.5}, d=2, bound=3.0)
  assert model.depth() == 1
  np.testing.assert_array_equal(model.apply(np.asarray([[1.0, 2.0], [0.0, 0.0]])), [2.5, 2.5])
  zero = fang.build_polynomial_transformer({}, d=3, bound=1.0, degree=2)
  np.testing.assert_array_equal(zero.apply(np.asarray([[0.1, 0.2, 0.3]])), [0.0])


def test_random_directions_with_more_tokens():
  poly = {(2, 1): 1.0, (0, 3): -1.0, (1, 0): 0.5}
  model = fang.build_polynomial_transformer(poly, d=2, bound=2.0, directions='random',
                                            num_tokens=10, seed=1)
  assert model.n == 10
  x = ball_points(np.random.default_rng(1), 2, 2.0)
  np.testing.assert_allclose(model.apply(x), fang.evaluate_poly(poly, x), atol=1e-11)
  with pytest.raises(ValueError, match='at least n_q'):
    fang.build_polynomial_transformer(poly, d=2, bound=2.0, directions='random', num_tokens=3)


@pytest.mark.slow
def test_f2_size_literal_network_within_1e_9_at_the_boundary():
  # Section 5's f2: d = 10, q = 5, n_q = 2002 tokens, B = 6.5 (data norms <= 6.39).
  from transformer_ua.fang import regression
  model = fang.build_polynomial_transformer(regression.F2, d=10, bound=6.5)
  rng = np.random.default_rng(7)
  x = ball_points(rng, 10, 6.5, per_radius=1, radii=(0.05, 0.5, 1.0))
  want = np.asarray([float(fang.evaluate_poly_exact(regression.F2, r)) for r in x])
  err = np.abs(model.apply(x) - want) / np.maximum(1.0, ridge.abs_scale(regression.F2, x))
  assert err.max() <= 1e-9


def test_polynomial_transformer_repr_is_one_short_line():
  model = fang.build_polynomial_transformer({(1, 0): 2.0, (1, 1): -1.0}, d=2, bound=2.0)
  text = repr(model)
  assert text.startswith('PolynomialTransformer(d=2, q=2, ') and 'blocks' in text, text
  assert len(text) < 200 and '\n' not in text and 'array' not in text, text


def test_recorded_construction_report_rebuilds_from_its_json():
  # results/fang/fang_construction.md is render() of the JSON written beside it.
  import json
  import os
  from transformer_ua.reports import fang_construction
  res = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'results',
                     'fang')
  with open(os.path.join(res, 'fang_construction.json')) as f:
    record = json.load(f)
  with open(os.path.join(res, 'fang_construction.md')) as f:
    assert fang_construction.render(record) == f.read()
