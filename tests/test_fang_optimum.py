"""The ATTENTION model's least-squares optima (fang.optimum) against independent
computations: numpy.linalg.lstsq on the model's own features, and trained models."""

import jax
import numpy as np
import pytest

from experiments.configs import fang_f1
from transformer_ua.fang import optimum, regression
from transformer_ua.train import fang_regression as fang_training


def _tiny(seed=0, n=200, d=2, q=2):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)) * 2.0
  f = x[:, 0] ** 2 - 3 * x[:, 0] * x[:, 1] + 0.5 * x[:, 1] + 1.0
  y = f + rng.normal(size=n)
  return {'x_train': x[:150], 'y_train': y[:150], 'f_train': f[:150],
          'x_test': x[150:], 'y_test': y[150:], 'f_test': f[150:]}


def _ridge_features(F, x, q):
  """The model's own features, straight from its definition: [(-F_i . x)^k]_{i,k}, 1."""
  u = -(x @ F.T)                                                      # [N, n]
  cols = np.stack([u ** k for k in range(1, q + 1)], axis=-1)         # [N, n, q]
  return np.concatenate([cols.reshape(len(x), -1), np.ones((len(x), 1))], axis=1)


def test_monomials_count_and_features():
  e = optimum.monomial_exponents(10, 5)
  assert e.shape == (3003, 10) and len({tuple(a) for a in e}) == 3003
  assert e.sum(1).max() == 5 and (e.sum(1)[:-1] <= e.sum(1)[1:]).all()
  x = np.array([[2.0, 3.0]])
  phi = optimum.monomial_features(x, optimum.monomial_exponents(2, 2))
  expect = {(0, 0): 1, (1, 0): 2, (0, 1): 3, (2, 0): 4, (1, 1): 6, (0, 2): 9}
  for a, v in zip(optimum.monomial_exponents(2, 2), phi[0]):
    assert v == expect[tuple(a)]
  with pytest.raises(ValueError, match='positive integers'):
    optimum.monomial_exponents(0, 2)


@pytest.mark.parametrize('n', [3, 5])
def test_coefficient_map_reproduces_attention_apply(n):
  rng = np.random.default_rng(n)
  F, beta, b = rng.normal(size=(n, 2)), rng.normal(size=(n, 2)), 0.7
  x = rng.normal(size=(20, 2))
  exps = optimum.monomial_exponents(2, 2)
  M = optimum.coefficient_map(F, 2, exps)
  ours = optimum.monomial_features(x, exps) @ (M @ np.append(beta.reshape(-1), b))
  with jax.enable_x64(True):
    ref = np.asarray(regression.attention_apply({'F': F, 'beta': beta, 'b': b}, x))
  np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('n', [3, 5, 1])
def test_fixed_F_optimum_matches_numpy_lstsq(n):
  data = _tiny()
  F = np.random.default_rng(7).normal(size=(n, 2))
  ls = optimum.LeastSquares(data['x_train'], data['y_train'], 2)
  ours = ls.fixed_features_optimum(F)
  G = _ridge_features(F, data['x_train'], 2)
  w, *_ = np.linalg.lstsq(G, data['y_train'], rcond=None)
  ref = np.mean((G @ w - data['y_train']) ** 2)
  assert ours['mse_train'] == pytest.approx(ref, rel=1e-10)
  pred = G @ np.append(ours['beta'].reshape(-1), ours['b'])
  assert np.mean((pred - data['y_train']) ** 2) == pytest.approx(ref, rel=1e-10)
  assert ours['rank'] == np.linalg.matrix_rank(G)
  sv = np.linalg.svd(G, compute_uv=False)
  assert ours['singular_values_G_over_sqrtN']['q100'] == pytest.approx(
      sv[0] / np.sqrt(len(G)), rel=1e-10)
  # n >= n_q = 3: the fixed-F class is every quadratic, so both optima agree; n = 1 is
  # a strict subclass (rank 3 of 6) and strictly worse.
  poly = ls.polynomial_optimum()
  if n >= 3:
    assert ours['coefficient_map_rank'] == 5 and ours['rank'] == 6
    assert ours['mse_train'] == pytest.approx(poly['mse_train'], rel=1e-10)
  else:
    assert ours['rank'] == 3 and ours['mse_train'] > poly['mse_train'] * 1.01


def test_polynomial_optimum_matches_numpy_lstsq():
  data = _tiny(1)
  ls = optimum.LeastSquares(data['x_train'], data['y_train'], 2)
  res = ls.polynomial_optimum()
  x = data['x_train']
  V = np.stack([np.ones(len(x)), x[:, 0], x[:, 1], x[:, 0] ** 2, x[:, 0] * x[:, 1],
                x[:, 1] ** 2], 1)
  c, *_ = np.linalg.lstsq(V, data['y_train'], rcond=None)
  assert res['mse_train'] == pytest.approx(np.mean((V @ c - data['y_train']) ** 2), rel=1e-10)
  assert res['rank'] == 6 and res['normal_equation_residual'] < 1e-12
  report = optimum.optimum_report(data, 2, {'F': np.eye(3, 2) + 0.1})
  p = report['polynomial']
  assert p['mse_train_check'] == pytest.approx(p['mse_train'], rel=1e-10)
  assert p['mse_test'] == pytest.approx(
      np.mean((ls.predict(res['coefficients'], data['x_test']) - data['y_test']) ** 2))


def test_trained_model_never_below_the_optimum():
  """A short real training run of the f1 ATTENTION model: its training MSE (float64
  evaluation of the float32 params) is >= the least-squares optimum on the same data,
  and so is every model with the trained F and any (beta, b)."""
  c = fang_f1.get_config()
  c.model, c.num_tokens, c.epochs, c.tensorboard = 'attention', 3, 30, False
  import tempfile
  with tempfile.TemporaryDirectory() as d:
    res = fang_training.train_and_evaluate(c, d, progress=False)
  data = regression.make_data('f1', c.data_seed)
  ls = optimum.LeastSquares(data['x_train'], data['y_train'], 2)
  poly = ls.polynomial_optimum()
  F = np.asarray(res['final_params']['F'], np.float64)
  fixed = ls.fixed_features_optimum(F)
  assert res['mse_train'] >= fixed['mse_train'] >= poly['mse_train'] * (1 - 1e-12)
  # f1 is in the class, so the optimum is at most the realized noise, mean (y - f)^2.
  assert poly['mse_train'] <= np.mean((data['y_train'] - data['f_train']) ** 2)
  rng = np.random.default_rng(0)
  G = _ridge_features(F, data['x_train'], 2)
  for _ in range(5):
    w = np.append(fixed['beta'].reshape(-1), fixed['b']) + 1e-3 * rng.normal(size=G.shape[1])
    assert np.mean((G @ w - data['y_train']) ** 2) >= fixed['mse_train']


def test_bad_input_one_line():
  with pytest.raises(ValueError, match='underdetermined'):
    optimum.LeastSquares(np.zeros((3, 2)), np.zeros(3), 2)
  ls = optimum.LeastSquares(*(lambda d: (d['x_train'], d['y_train']))(_tiny()), 2)
  with pytest.raises(ValueError, match=r'F must be \[n, 2\]'):
    ls.fixed_features_optimum(np.zeros((3, 4)))


def test_report_resumes_from_an_earlier_report():
  """``done``: its entries are kept as they are (not recomputed) and only the missing
  labels are solved, each equal to the from-scratch solve."""
  data = _tiny()
  rng = np.random.default_rng(3)
  Fs = {'a': rng.normal(size=(3, 2)), 'b': rng.normal(size=(1, 2))}
  full = optimum.optimum_report(data, 2, Fs)
  earlier = optimum.optimum_report(data, 2, {'a': Fs['a']})
  earlier['fixed_F']['a'] = dict(earlier['fixed_F']['a'], marker=1)   # kept, not re-solved
  resumed = optimum.optimum_report(data, 2, Fs, done=earlier)
  assert resumed['fixed_F']['a']['marker'] == 1
  assert resumed['fixed_F']['b'] == full['fixed_F']['b']
  assert resumed['polynomial'] is earlier['polynomial']
  assert 'b' not in earlier['fixed_F']                               # done is not mutated
