"""fang.float_bound: the certified sup of |fl(C^q(x)) - Q(x)| over ||x|| <= B.

Soundness: the float64 network (``model.apply``), the float32 network
(``model.literal_fn``) and an independent emulation of the literal network with every
dot product (bias and residual included) summed in a random order, with and without
FMA, all stay within the certificate, at random, boundary and adversarial inputs
(x = +-B xi_i puts |t_i| = T; tiny x exercises underflow). Q is evaluated here in
Fractions, by code that shares nothing with the module.
"""

import dataclasses
import json
import math
import os
import subprocess
import sys
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua import cli, fang, layers
from transformer_ua.fang import float_bound, measure
from transformer_ua.reports import fang_construction

# Certified / largest measured error over the test points, at most (measured on this
# file's cases, float64 and float32: 21 to 74; the any-order gamma terms and the
# worst case over the ball against a sample).
MAX_RATIO = 1e3


def q_exact(poly, row):
  total = Fraction(0)
  for a, c in poly.items():
    term = Fraction(c)
    for v, e in zip(row, a):
      term *= Fraction(float(v)) ** e
    total += term
  return total


def inside(x, B, dtype=np.float64):
  """Shrinks each row toward 0 (float steps) until ||x|| <= B holds exactly."""
  out = np.array(x, dtype)
  for r in range(out.shape[0]):
    while sum(Fraction(float(v)) ** 2 for v in out[r]) > Fraction(B) ** 2:
      out[r] = np.nextafter(out[r], np.zeros((), dtype)).astype(dtype)
  return out


def sample_points(model, rng, count=160):
  """Random interior, sphere ||x|| = B, +-B xi_i, +-B e_j and tiny inputs."""
  d, B = model.d, model.bound
  u = rng.normal(size=(count, d))
  u /= np.linalg.norm(u, axis=1, keepdims=True)
  radii = np.concatenate([rng.uniform(0, 1, count // 2), np.ones(count - count // 2)])
  pts = [u * radii[:, None] * B, B * model.F, -B * model.F, B * np.eye(d), -B * np.eye(d),
         np.full((1, d), 5e-324), np.full((1, d), 1e-300), u[:4] * 1e-160]
  return np.concatenate(pts)


POLYS = [
    ('d1_q2', 1, 3.0, {(2,): 1.5, (1,): -0.5, (0,): 0.25}),
    ('d1_q5', 1, 2.0, {(5,): -0.7, (4,): 0.3, (3,): 1.1, (1,): 2.0, (0,): -1.0}),
    ('d2_q2_f1', 2, 45.0, {(2, 0): 1.0, (0, 2): 1.0}),
    ('d2_q3', 2, 5.0, {(3, 0): 0.5, (1, 2): -1.25, (0, 1): 3.0, (1, 1): 0.75}),
    ('d2_q5_dense', 2, 10.0, None),
]


def poly_of(entry):
  name, d, B, poly = entry
  if poly is None:  # dense, N(0, 1) coefficients
    rng = np.random.default_rng(5)
    poly = {(i, s - i): float(rng.normal()) for s in range(6) for i in range(s + 1)}
  return name, d, B, poly


@pytest.fixture(scope='module', params=POLYS, ids=[p[0] for p in POLYS])
def case(request):
  name, d, B, poly = poly_of(request.param)
  model = fang.build_polynomial_transformer(poly, d=d, bound=B)
  x = inside(sample_points(model, np.random.default_rng(1)), B)
  return model, poly, x, float_bound.certified_float_error(model)


def abs_errors(poly, y, x):
  return [abs(Fraction(float(v)) - q_exact(poly, row)) for v, row in zip(y, x)]


def test_float64_network_within_certificate_and_not_vacuous(case):
  model, poly, x, cert = case
  errs = abs_errors(poly, model.apply(x), x)
  worst = max(errs)
  assert worst <= cert.total, (float(worst), cert.line())
  assert worst > 0 and cert.total <= MAX_RATIO * worst, (float(worst), cert.line())
  assert cert.total == cert.evaluation + cert.parameters and min(cert.margins) > 0


# -- an emulation of the literal network, any summation order, FMA or not ----------


def dot(pairs, rng, fma, dtype):
  """sum a b over pairs in a random order, each step rounded to dtype (FMA: a b + acc
  rounded once, float64 only)."""
  pairs = [pairs[i] for i in rng.permutation(len(pairs))]
  acc = None
  for a, b in pairs:
    a, b = dtype(a), dtype(b)
    if acc is None:
      acc = dtype(a * b)
    elif fma and a != 0 and b != 0:
      acc = dtype(float(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(acc))))
    else:
      acc = dtype(acc + dtype(a * b))
  return acc


def emulate(model, row, rng, fma=False, dtype=np.float64):
  n, D, q = model.n, model.layout.width, model.q
  F = np.asarray(model.F, dtype)
  t = [dot([(row[j], F[i, j]) for j in range(model.d)], rng, fma, dtype) for i in range(n)]
  z = [[dtype(0)] * D for _ in range(n)]
  for i in range(n):
    z[i][0], z[i][1 + i], z[i][D - 1] = t[i], dtype(1), dtype(1)
  for k in range(q):
    p = layers.unstack_layer(model.block_params, k)
    a, f = p['attention'], p['feedforward']
    WQ, bQ, WK, WV, WO = (np.asarray(a[s], dtype)[0] for s in ('W_Q', 'b_Q', 'W_K', 'W_V',
                                                                'W_O'))
    H = WQ.shape[0]

    def lin(W, v, bias=None):  # W v + bias, each row one dot product
      return [dot([(W[m, l], v[l]) for l in range(len(v))]
                  + ([(bias[m], 1.0)] if bias is not None else []), rng, fma, dtype)
              for m in range(W.shape[0])]
    qs = [lin(WQ, z[i], bQ) for i in range(n)]
    ks = [lin(WK, z[i]) for i in range(n)]
    vs = [lin(WV, z[i]) for i in range(n)]
    new = []
    for i in range(n):
      s = [dot([(qs[i][m], ks[j][m]) for m in range(H)], rng, fma, dtype) for j in range(n)]
      w = [sj if sj == max(s) else dtype(0) for sj in s]       # one-hot maximum
      mixed = [dot([(w[j], vs[j][m]) for j in range(n)], rng, fma, dtype) for m in range(H)]
      zh = [dot([(WO[l, m], mixed[m]) for m in range(H)] + [(z[i][l], 1.0)], rng, fma, dtype)
            for l in range(D)]
      W1, b1, W2, b2 = (np.asarray(f[s], dtype) for s in ('W_1', 'b_1', 'W_2', 'b_2'))
      act = [max(v, dtype(0)) for v in lin(W1, zh, b1)]
      new.append([dot([(W2[l, r], act[r]) for r in range(len(act))]
                      + [(b2[l], 1.0), (zh[l], 1.0)], rng, fma, dtype) for l in range(D)])
    z = new
  beta = np.asarray(model.beta_full(), dtype)
  return dot([(beta[i, l], z[i][l]) for i in range(n) for l in range(D)]
             + [(model.b, 1.0)], rng, fma, dtype)


@pytest.mark.parametrize('fma', [False, True], ids=['no_fma', 'fma'])
def test_any_summation_order_within_certificate(case, fma):
  model, poly, x, cert = case
  rng = np.random.default_rng(2)
  pick = np.concatenate([np.arange(len(x) - 2 * model.n - 2 * model.d - 6, len(x)),
                         rng.choice(len(x), 12, replace=False)])
  for r in pick:
    y = emulate(model, x[r], rng, fma=fma)
    err = abs(Fraction(float(y)) - q_exact(poly, x[r]))
    assert err <= cert.total, (r, x[r], float(err), cert.line())


def test_float32_within_float32_certificate(case):
  model, poly, _, _ = case
  cert = float_bound.certified_float_error(model, arithmetic='float32')
  assert cert.total > float_bound.certified_float_error(model).total
  x = inside(sample_points(model, np.random.default_rng(3)), model.bound, np.float32)
  y = np.asarray(jax.jit(model.literal_fn(jnp.float32))(jnp.asarray(x)))
  assert np.all(np.isfinite(y))
  worst = max(abs_errors(poly, y, x))
  assert worst <= cert.total <= MAX_RATIO * worst, (float(worst), cert.line())
  rng = np.random.default_rng(4)
  for r in rng.choice(len(x), 8, replace=False):
    y = emulate(model, x[r], rng, dtype=np.float32)
    assert abs(Fraction(float(y)) - q_exact(poly, x[r])) <= cert.total


# -- the formula by hand, for Q(x) = x, d = 1, B = 1 ------------------------------


def test_one_block_matches_the_formula_by_hand():
  model = fang.build_polynomial_transformer({(1,): 1.0}, d=1, bound=1.0)
  assert model.m_squared == (2.0,) and model.beta_slots.tolist() == [[-1.0]]
  cert = float_bound.certified_float_error(model)
  u, eta = Fraction(1, 2 ** 53), Fraction(1, 2 ** 1074)

  def g(m):
    return m * u / (1 - m * u)
  D0 = g(1) + eta                     # t = 1 * x, |x| <= 1
  X, m2 = 1 + D0, 2
  S = (1 + g(2)) * (X + 2 * m2)
  E1 = D0 + g(2) * (X + 2 * m2) + 2 * eta + g(2) * (3 * S + 2 * m2) + 3 * eta
  assert cert.slot_errors == (E1,)
  assert cert.margins == (2 * m2 - 2 * X - g(2) * (X + 2 * m2) - g(1) * X - 3 * eta,)
  assert cert.evaluation == E1 + g(1) * (1 + E1) + eta   # one read-out term, |slot| <= 1
  assert cert.parameters == 0                             # -1 * (-x) = x exactly
  assert cert.upper >= float(cert.total) and Fraction(cert.upper) >= cert.total


def test_parameter_term_counts_the_ridge_residual():
  # d = 2, q = 2 with the diagonal direction: beta has a ~1e-19 residual entry.
  model = fang.build_polynomial_transformer({(1, 1): 1.0}, d=2, bound=3.0)
  cert = float_bound.certified_float_error(model)
  P = float_bound.network_polynomial(model)
  assert P.keys() <= {(1, 1), (2, 0), (0, 2), (1, 0), (0, 1), (0, 0)}
  assert cert.parameters >= abs(P.get((1, 1), 0) - 1) * Fraction(9, 2)  # sup |x1 x2| = B^2/2
  assert cert.parameters < Fraction(1, 10 ** 12)


def test_network_polynomial_is_the_exact_network(case):
  # P's coefficients against the literal network run in Fractions (fang.exact) with the
  # float parameters (not the rational directions F_exact the builder also keeps).
  model = dataclasses.replace(case[0], F_exact=None, beta_exact=None, b_exact=None)
  P = float_bound.network_polynomial(model)
  rows = [[Fraction(1, 3)] * model.d, [Fraction(-7, 5)] + [Fraction(2, 9)] * (model.d - 1)]
  for row, want in zip(rows, model.apply_exact(rows)):
    got = sum((c * math.prod(v ** e for v, e in zip(row, a)) for a, c in P.items()),
              Fraction(0))
    assert got == want


def test_sqrt_up_and_monomial_sup():
  assert float_bound.sqrt_up(Fraction(9, 4)) == Fraction(3, 2)
  r = float_bound.sqrt_up(Fraction(2))
  assert r * r >= 2 and r - Fraction(math.isqrt(2 * 10 ** 30), 10 ** 15) < Fraction(1, 10 ** 14)
  assert float_bound.monomial_sup((1, 1), Fraction(3)) == Fraction(9, 2)
  assert float_bound.monomial_sup((2, 0), Fraction(3)) == 9


# -- refusals and bad input ----------------------------------------------------------


def test_refuses_where_the_one_hot_maximum_may_flip():
  # The paper's M = B in block 2 ties at the boundary (M^2 = X Y): no certificate.
  model = fang.build_polynomial_transformer({(2,): 1.0}, d=1, bound=4.0, m_rule='paper')
  with pytest.raises(ValueError, match='block 2: the one-hot margin is not certified'):
    float_bound.certified_float_error(model)
  ok = fang.build_polynomial_transformer({(2,): 1.0}, d=1, bound=4.0)
  with pytest.raises(ValueError, match='one-hot margin'):
    float_bound.certified_float_error(ok, bound=8.0)     # |t| |y| beyond M^2
  assert float_bound.certified_float_error(ok, bound=2.0).total < \
      float_bound.certified_float_error(ok).total


@pytest.mark.parametrize('kwargs, match', [
    (dict(arithmetic='float16'), r"arithmetic='float16'; allowed: \('float64', 'float32'\)"),
    (dict(arithmetic='Float64'), 'allowed'),
    (dict(bound=-1.0), 'bound must be a finite number B > 0'),
    (dict(bound=float('nan')), 'bound must be a finite number B > 0'),
    (dict(d=3), 'disagrees with the model'),
])
def test_bad_input(kwargs, match):
  model = fang.build_polynomial_transformer({(2,): 1.0}, d=1, bound=2.0)
  with pytest.raises(ValueError, match=match) as e:
    float_bound.certified_float_error(model, **kwargs)
  assert '\n' not in str(e.value)


def test_bad_model():
  with pytest.raises(ValueError, match='PolynomialTransformer or a polynomial dict'):
    float_bound.certified_float_error('x^2')
  with pytest.raises(ValueError, match='needs d= and bound='):
    float_bound.certified_float_error({(2,): 1.0}, bound=2.0)
  res = float_bound.certified_float_error({(2,): 1.0}, d=1, bound=2.0)
  assert res.target == 'Q' and res.total > 0
  model = fang.build_polynomial_transformer({(2,): 1.0}, d=1, bound=2.0)
  bp = jax.tree_util.tree_map(np.copy, model.block_params)
  bp['feedforward']['W_2'][0, model.layout.slot(1), 0] = -3.0
  with pytest.raises(ValueError, match="block 1's W_2 is not Lemma 3.1's"):
    float_bound.certified_float_error(dataclasses.replace(model, block_params=bp))


# -- the study and its record (fang.measure, reports.fang_construction) -------

RECORD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      'results', 'fang', 'fang_construction.json')


def test_study_replays_the_recorded_inputs_within_the_certificate():
  with open(RECORD) as f:
    rows = json.load(f)['accuracy']
  cases = measure.accuracy_inputs(np.random.default_rng(0),
                                       [r['literal_points'] for r in rows],
                                       [r['compact_points'] for r in rows])
  for row, (name, poly, d, B, _, xl) in list(zip(rows, cases))[:2]:   # f1, d = 2 (cheap)
    model = fang.build_polynomial_transformer(poly, d=d, bound=B)
    assert name == row['name'] and len(xl) == row['literal_points']
    assert measure.error_model(model) == pytest.approx(row['error_model_abs_bound'],
                                                            rel=1e-9)
    cert = float_bound.certified_float_error(model, bound=float_bound.accepted_bound(model))
    assert np.max(np.sum(xl * xl, axis=1)) > B * B      # rounded sphere points just outside
    worst = measure.max_abs_error(poly, model.apply(xl), xl)
    assert worst <= cert.total <= MAX_RATIO * worst
    assert row['literal_max_rel_err'] <= cert.total


def test_report_marks_missing_certificates():
  with open(RECORD) as f:
    record = json.load(f)
  record.pop('certificate_provenance', None)
  bare = [{k: v for k, v in r.items() if k != 'certificate'} for r in record['accuracy']]
  md = fang_construction.render({**record, 'accuracy': bare})
  assert 'added to this record' not in md
  assert sum('| not run | not run |' in line for line in md.splitlines()) == len(bare)
  cert = {'certified_abs': 1.5e-8, 'evaluation': 1e-8, 'parameters': 5e-9}
  one = [{**bare[0], 'certificate': cert}] + bare[1:]
  md = fang_construction.render({**record, 'accuracy': one})
  assert '| not re-measured | 1.5e-08 |' in md


def test_certify_only_without_a_record_is_one_line(tmp_path):
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run(
      [sys.executable, os.path.join(root, 'experiments', 'fang_construction.py'),
       '--certify_only', f'--output_dir={tmp_path}'], capture_output=True, text=True,
      env={**os.environ, 'PYTHONPATH': root}, timeout=120)
  assert proc.returncode == cli.USAGE_ERROR and 'Traceback' not in proc.stderr, proc.stderr
  lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
  assert lines[0].startswith('error: ') and 'run the study first' in lines[0], proc.stderr
  assert len(lines) == 2 and '--help' in lines[1], proc.stderr
