r"""Fang et al. 2022, Sections 3 and 6 measured: the construction at the experiments' sizes.

``measure(f2_literal_points, corollary)`` returns the study's numbers (one dict, keys in
this order), all from ``numpy.random.default_rng(0)`` drawn in a fixed order:

    accuracy        Theorem 3.5 in float64: for Q in {f1, random dense d=2 q=5, f2,
                    random dense d=10 q=5}, on spheres ||x|| = r B, r in
                    (1e-3, 0.1, 0.5, 0.9, 1.0),
                        max_x |C(x) - Q(x)| / max(1, sum_a |c_a| |x^a|)
                    (Q in Fractions) for the literal and the compact network, next to the
                    worst-case model sum_k ||beta_k||_1 k 2^-50 T^k; the literal network's
                    max |C(x) - Q(x)| next to its certified sup over every input ``apply``
                    accepts, ||x|| <= B (1 + 1e-12) (``fang.float_bound``); Lemma 3.1's M_k^2,
                    Lemma 3.3's ridge conditioning, the counts and their Theorem 3.5 bounds
    error_vs_bound  d = 2, q = 5, random dense Q: the literal network's relative error
                    for B in 1 .. 1e4 and both M rules ('product', 'paper_strict')
    directions      Lemma 3.3 for f2 (d = 10, q = 5): cond_2 of the Bombieri system per
                    degree for lattice / random directions (n_q and 4368 tokens)
    exact           f1 with exact=True, B = 45: C(x) == Q(x) in Fractions and through
                    the JAX network in int64, boundary points included
    corollary_3_7   (when ``corollary``) Corollary 3.7: sup_[0,1]^d |C^q - f| vs q for
                    three continuous f (``corollary37.sup_errors``)

The report (``reports.fang_construction``) renders these into fang_construction.md.
``certify(rows)`` adds the certificates to a recorded ``accuracy`` list without
re-measuring it: ``accuracy_inputs`` replays the same draws from ``default_rng(0)`` with
the rows' point counts, the rebuilt models must reproduce the rows (tokens, M_k^2, the
error model), and the literal |C(x) - Q(x)| is re-measured at the recorded inputs where it
is cheap (at most ``CHEAP_TOKENS`` tokens).
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np

from transformer_ua.fang import corollary37, exact, float_bound, regression, ridge
from transformer_ua.fang.polynomial import build_polynomial_transformer

TOL = 1e-9
# certify(): rows whose literal network is re-measured (f1 and d = 2: 3 and 6 tokens).
CHEAP_TOKENS = 64
# The balls: B covers the largest norm in Section 5's data (f1: 41.7, f2: 6.39).
B_F1, B_F2 = 45.0, 6.5
#: Corollary 3.7's targets: name -> (d, f, degrees q, grid points per axis).
COROLLARY_TARGETS = {
    '|x - 1/2| (d=1)': (1, lambda x: np.abs(x[:, 0] - 0.5), (1, 2, 4, 8, 12, 16, 20), 2001),
    'exp(x1) sin(4 x2) (d=2)': (2, lambda x: np.exp(x[:, 0]) * np.sin(4 * x[:, 1]),
                                (1, 2, 4, 6, 8, 10, 12), 101),
    '||x - (1/2,1/2)|| (d=2)': (2, lambda x: np.linalg.norm(x - 0.5, axis=1),
                                (1, 2, 4, 6, 8, 10, 12), 101),
}


def ball_points(rng, d, B, per_radius, radii=(1e-3, 0.1, 0.5, 0.9, 1.0)):
  """[len(radii) * per_radius, d]: uniform directions on the spheres ||x|| = r B."""
  out = []
  for r in radii:
    u = rng.normal(size=(per_radius, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    out.append(u * r * B)
  return np.concatenate(out)


def rel_errors(poly, y, x):
  """|y - Q(x)| / max(1, sum |c_a||x^a|), Q in exact rational arithmetic."""
  want = np.asarray([float(ridge.evaluate_poly_exact(poly, row)) for row in x])
  return np.abs(y - want) / np.maximum(1.0, ridge.abs_scale(poly, x))


def max_abs_error(poly, y, x) -> Fraction:
  """max_x |y - Q(x)|, exactly (y as floats, Q in Fractions)."""
  return max(abs(Fraction(float(v)) - ridge.evaluate_poly_exact(poly, row))
             for v, row in zip(y, x))


def certificate(model, literal_abs=None) -> dict:
  """``float_bound.certified_float_error`` over ||x|| <= B (1 + 1e-12) as JSON floats
  (rounded up), with the measured literal max |C - Q| (an exact Fraction) beside it."""
  t0 = time.perf_counter()
  c = float_bound.certified_float_error(model, bound=float_bound.accepted_bound(model))
  out = {'certified_abs': c.upper, 'evaluation': float_bound.round_up(c.evaluation),
         'parameters': float_bound.round_up(c.parameters),
         'min_margin': float(min(c.margins)), 'readout_terms': c.terms,
         'seconds': time.perf_counter() - t0, 'line': c.line()}
  if literal_abs is not None:
    out['literal_max_abs_err'] = float(literal_abs)
    out['within'] = bool(literal_abs <= c.total)
  return out


def random_dense(rng, d):
  """A dense Q of degree 5 in d variables, N(0, 1) coefficients."""
  return {a: float(rng.normal()) for s in range(6) for a in ridge.exponents(d, s)}


def accuracy_inputs(rng, literal_points, compact_points=(2000,) * 4):
  """The four accuracy cases in the study's draw order: (name, Q, d, B, compact inputs,
  literal inputs); ``literal_points``, ``compact_points``: four counts each."""
  counts = iter(zip(literal_points, compact_points))

  def draw(name, poly, d, B):
    literal, compact = next(counts)
    xc = ball_points(rng, d, B, compact // 5)
    return name, poly, d, B, xc, ball_points(rng, d, B, max(1, literal // 5))
  out = [draw('f1 (Section 5)', regression.F1, 2, B_F1)]
  out.append(draw('random dense, d=2, q=5', random_dense(rng, 2), 2, 10.0))
  out.append(draw('f2 (Section 5)', regression.F2, 10, B_F2))
  out.append(draw('random dense, d=10, q=5', random_dense(rng, 10), 10, B_F2))
  return out


def error_model(model) -> float:
  """The heuristic worst case sum_k ||beta_k||_1 k 2^-50 T^k (absolute)."""
  T = model.operand_bound
  return float(sum(np.abs(model.beta_slots[:, k - 1]).sum() * k * 2.0 ** -50 * T ** k
                   for k in range(1, model.q + 1)))


def accuracy(name, poly, d, B, xc, xl):
  """Theorem 3.5 in float64 for one Q: errors, the certified sup, M_k^2, ridge report,
  counts, timings."""
  t0 = time.perf_counter()
  model = build_polynomial_transformer(poly, d=d, bound=B)
  build_s = time.perf_counter() - t0
  ec = rel_errors(poly, model.apply_compact(xc), xc)
  t0 = time.perf_counter()
  yl = model.apply(xl)
  lit_s = time.perf_counter() - t0
  el = rel_errors(poly, yl, xl)
  boundary = np.isclose(np.linalg.norm(xl, axis=1), B)
  return {'name': name, 'd': d, 'q': model.q, 'B': B, 'tokens': model.n,
          'm_squared': list(model.m_squared), 'build_s': build_s,
          'literal_points': int(len(xl)), 'boundary_points': int(boundary.sum()),
          'literal_max_rel_err': float(el.max()),
          'literal_max_rel_err_boundary': float(el[boundary].max()),
          'literal_seconds_per_point': lit_s / len(xl),
          'compact_points': int(len(xc)), 'compact_max_rel_err': float(ec.max()),
          'error_model_abs_bound': error_model(model),
          'certificate': certificate(model, max_abs_error(poly, yl, xl)),
          'ridge': model.ridge_report, 'free_params': model.num_free_params(),
          'nonzeros': model.num_nonzeros(), 'theorem_bounds': model.theorem_bounds(),
          'within_1e-9': bool(el.max() <= TOL)}


def error_vs_bound(rng):
  """d = 2, q = 5, random dense Q: the literal network's max rel. error vs B and M rule."""
  poly = random_dense(rng, 2)
  rows = []
  for B in (1.0, 10.0, 100.0, 1e3, 1e4):
    x = ball_points(rng, 2, B, 40)
    for rule in ('product', 'paper_strict'):
      model = build_polynomial_transformer(poly, d=2, bound=B, m_rule=rule)
      e = rel_errors(poly, model.apply(x), x)
      rows.append({'B': B, 'm_rule': rule, 'max_m_squared': max(model.m_squared),
                   'max_rel_err': float(e.max()), 'median_rel_err': float(np.median(e))})
  return rows


def exact_demo():
  """f1 with exact=True: Fractions and int64 against Q at four rational points."""
  poly = dict(regression.F1)
  model = build_polynomial_transformer(poly, d=2, bound=B_F1, exact=True)
  pts = [[Fraction(27), Fraction(36)], [Fraction(-45), Fraction(0)],
         [Fraction(1, 3), Fraction(-22, 7)], [Fraction(0), Fraction(0)]]
  want = [ridge.evaluate_poly_exact(poly, p) for p in pts]
  lit = model.apply_exact(pts)
  integer = exact.apply_exact_integer(model, pts)
  plan = exact.integer_plan(model, pts)
  return {'points': [[str(v) for v in p] for p in pts], 'Q': [str(v) for v in want],
          'literal_fraction_equal': lit == want, 'jax_int64_equal': integer == want,
          'int64_bits_needed': plan['bits'], 'scale_S': plan['S'],
          'directions': [[str(c) for c in row] for row in model.F_exact]}


def direction_conditioning():
  """Lemma 3.3 for f2: conditioning of the ridge solve per kind of directions."""
  out = []
  for kind, num in (('lattice', None), ('random', None), ('random', 4368)):
    _, F = ridge.ridge_directions(d=10, q=5, kind=kind, num=num)
    beta, rep = ridge.ridge_coefficients(regression.F2, F, 5)
    out.append({'directions': kind, 'tokens': F.shape[0],
                'cond_2_per_degree': [r['cond_2'] for r in rep],
                'max_rel_residual': max(r['relative_residual'] for r in rep),
                'max_abs_beta_f2': float(np.abs(beta).max())})
  return out


def corollary():
  """Corollary 3.7: target name -> one ``corollary37.sup_errors`` row per q."""
  return {name: [corollary37.sup_errors(f, d=d, degree=q, grid_points=grid) for q in qs]
          for name, (d, f, qs, grid) in COROLLARY_TARGETS.items()}


def measure(f2_literal_points: int, corollary_3_7: bool = True) -> dict:
  """The study's numbers (module docstring); ``f2_literal_points`` (>= 0) inputs go
  through the f2-size literal network (~n^3 each), half as many for random d = 10."""
  rng = np.random.default_rng(0)
  out = {}
  literal = (2000, 2000, f2_literal_points, max(5, f2_literal_points // 2))
  out['accuracy'] = [accuracy(*case) for case in accuracy_inputs(rng, literal)]
  out['error_vs_bound'] = error_vs_bound(rng)
  out['directions'] = direction_conditioning()
  out['exact'] = exact_demo()
  if corollary_3_7:
    out['corollary_3_7'] = corollary()
  return out


def certify(rows) -> list:
  """Recorded ``accuracy`` rows with their ``certificate`` added (module docstring).

  Raises ValueError when a rebuilt model does not reproduce its row."""
  cases = accuracy_inputs(np.random.default_rng(0), [r['literal_points'] for r in rows],
                          [r['compact_points'] for r in rows])
  out = []
  for row, (name, poly, d, B, _, xl) in zip(rows, cases):
    model = build_polynomial_transformer(poly, d=d, bound=B)
    same = (name == row['name'] and model.n == row['tokens']
            and list(model.m_squared) == list(row['m_squared'])
            and np.isclose(error_model(model), row['error_model_abs_bound'], rtol=1e-9))
    if not same:
      raise ValueError(f"the replayed case {name!r} does not reproduce the recorded row "
                       f"{row['name']!r}; re-measure instead.")
    literal_abs = max_abs_error(poly, model.apply(xl), xl) if model.n <= CHEAP_TOKENS else None
    out.append({**row, 'certificate': certificate(model, literal_abs)})
  return out
