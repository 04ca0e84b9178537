"""Fang et al. 2022, Section 5: the best training MSE the ATTENTION model can reach.

The compact ATTENTION model (``regression.attention_apply``) with n tokens, degree q:

    C(x) = sum_{i=1}^{n} sum_{k=1}^{q} beta[i,k] (-F_i . x)^k + b,     F [n, d], beta [n, q].

By the multinomial theorem (Lemma 3.3, ``ridge``) every ridge power is a polynomial:

    (-F_i . x)^k = sum_{|a| = k} multinom(k; a) (-F_i)^a x^a,

so with Phi(x) = [x^a]_{|a| <= q}  (P = C(d+q, q) monomials, 1 for a = 0; [N, P]) and
the coefficient map  M(F) [P, n q + 1]:

    M[a, (i,k)] = multinom(k; a) (-F_i)^a   if |a| = k,  else 0,      M[0, last] = 1 (b),

the model's outputs on a data set X are  C(X) = G w,  G = Phi(X) M(F)  [N, n q + 1],
w = (beta flattened row-major (i, k), b).  So:

(1) Fixed F: C is linear in (beta, b). Its least-squares optimum is
        min_w ||G w - y||^2 / N,
    with G's singular values the square roots of N/2 x the eigenvalues of the MSE's
    Hessian in (beta, b): cond(G)^2 is what plain (S)GD on beta faces.
(2) F trained too (what the experiment trains): the model is not linear in F, but its
    function class is contained in the polynomials of degree <= q, the span of Phi's
    columns. Whenever M(F) has full row rank P (true for generic F once n >= n_q:
    Lemma 3.3's unisolvence, degree by degree) the fixed-F class IS that span. So the
    global optimum over (F, beta, b) is the polynomial least-squares problem
        min_c ||Phi c - y||^2 / N,
    attained (not only approached) at every such F. The row rank of M at the F we
    evaluate (initial, or trained when given) is measured and reported.

Numerics (float64, numpy/LAPACK): Phi is column-equilibrated (A = Phi diag(1/s), s_j
= ||Phi[:, j]||) and factored A = Q R once (Householder QR). Then
    ||Phi c - y||^2 = ||R (s * c) - Q^T y||^2 + (||y||^2 - ||Q^T y||^2),
so (2) is an SVD solve of R (P x P), and (1) is an SVD solve of
    B = R diag(s) M(F)  [P, n q + 1]   (G = Q B, same singular values as G),
with numerical rank cut at  sigma > max(shape) eps sigma_max  (numpy's lstsq default).
The training residual is the solve's residual; test MSE evaluates the train-optimal
coefficients on the test set (NOT a lower bound for any model's test MSE; the
training optimum IS a lower bound for every model's training MSE, at any parameters).

``study(config, path, runs_dir=..., done=..., prov=...)`` runs both on a Section 5 config's
data (``regression.make_data(target, data_seed)``): (2) once, and (1) for every ATTENTION
sweep entry and seed at the seed's initial F (``regression.init_params``) and, when
``runs_dir/<target>/<run>/params.npz`` exists, at the trained F; it writes the result
JSON to ``path`` (``done``: an earlier result of the same data, ``read_previous``, whose
entries are kept). ``summary`` is its text for a terminal.
"""

from __future__ import annotations

import json
import math
import os
import time

import jax
import numpy as np

from transformer_ua import outputs
from transformer_ua.fang import regression, ridge

# Spectrum summaries: these quantiles of the singular values are recorded.
SPECTRUM_QUANTILES = (0.0, 0.01, 0.1, 0.5, 0.9, 1.0)


def monomial_exponents(d: int, q: int) -> np.ndarray:
  """[P, d] int: every a in N^d with |a| <= q, by degree (0 first); P = C(d+q, q)."""
  if not (isinstance(d, int) and d >= 1 and isinstance(q, int) and q >= 1):
    raise ValueError(f'd and q must be positive integers, got d={d!r}, q={q!r}.')
  return np.asarray([a for s in range(q + 1) for a in ridge.exponents(d, s)], np.int64)


def monomial_features(x: np.ndarray, exps: np.ndarray) -> np.ndarray:
  """Phi(x) = [x^a]_a in float64: x [N, d], exps [P, d] -> [N, P]."""
  x = np.asarray(x, np.float64)
  out = np.ones((x.shape[0], exps.shape[0]))
  for j in range(x.shape[1]):
    for e in range(1, int(exps[:, j].max()) + 1):
      cols = exps[:, j] == e
      out[:, cols] *= (x[:, j] ** e)[:, None]
  return out


def coefficient_map(F: np.ndarray, q: int, exps: np.ndarray) -> np.ndarray:
  """M(F) [P, n q + 1]: monomial coefficients of each ridge power (-F_i . x)^k, columns
  ordered as beta[n, q].reshape(-1) (i major, k = 1..q), then b (the constant 1)."""
  F = np.asarray(F, np.float64)
  n, _ = F.shape
  deg = exps.sum(1)
  mult = np.asarray([ridge.multinomial(a) for a in exps], np.float64)        # [P]
  pw = np.prod((-F)[None, :, :] ** exps[:, None, :], axis=-1)                # [P, n]
  M = np.zeros((exps.shape[0], n, q))
  for k in range(1, q + 1):
    rows = deg == k
    M[rows, :, k - 1] = mult[rows, None] * pw[rows]
  M = M.reshape(exps.shape[0], n * q)
  const = (deg == 0).astype(np.float64)[:, None]
  return np.concatenate([M, const], axis=1)


def _spectrum(sv: np.ndarray) -> dict:
  sv = np.sort(np.asarray(sv, np.float64))
  return {f'q{int(100 * p)}': float(np.quantile(sv, p)) for p in SPECTRUM_QUANTILES}


def _svd_solve(B: np.ndarray, rhs: np.ndarray):
  """Minimum-norm least squares min ||B w - rhs|| by SVD; numpy lstsq's rank rule."""
  U, sv, Vt = np.linalg.svd(B, full_matrices=False)
  tol = max(B.shape) * np.finfo(np.float64).eps * sv[0]
  r = int(np.sum(sv > tol))
  w = Vt[:r].T @ ((U[:, :r].T @ rhs) / sv[:r])
  return w, sv, r, tol


class LeastSquares:
  """The QR of the equilibrated monomial features of one training set (see module doc).

  Args:
    x_train [N, d], y_train [N] (float64), q: the degree.
  """

  def __init__(self, x_train: np.ndarray, y_train: np.ndarray, q: int):
    x_train = np.asarray(x_train, np.float64)
    y_train = np.asarray(y_train, np.float64)
    if x_train.ndim != 2 or y_train.shape != (x_train.shape[0],):
      raise ValueError(f'x_train must be [N, d] and y_train [N], got {x_train.shape} and '
                       f'{y_train.shape}.')
    self.q = q
    self.exps = monomial_exponents(x_train.shape[1], q)
    if x_train.shape[0] < self.exps.shape[0]:
      raise ValueError(f'{x_train.shape[0]} training rows < {self.exps.shape[0]} monomials '
                       f'of degree <= {q}: the least-squares problem is underdetermined.')
    phi = monomial_features(x_train, self.exps)
    self.scale = np.linalg.norm(phi, axis=0)                                 # s [P]
    self.Q, self.R = np.linalg.qr(phi / self.scale)                          # [N, P], [P, P]
    self.n = x_train.shape[0]
    self.qty = self.Q.T @ y_train                                            # [P]
    self.outside = float(y_train @ y_train - self.qty @ self.qty)           # ||(I - QQ^T) y||^2
    del phi

  def _mse(self, B, w):
    r = B @ w - self.qty
    return (float(r @ r) + max(self.outside, 0.0)) / self.n

  def polynomial_optimum(self) -> dict:
    """(2): min over all polynomials of degree <= q. Returns the float64 solution's
    coefficients ``c`` [P] (monomial basis, order of ``exps``) and its diagnostics."""
    u, sv, rank, tol = _svd_solve(self.R, self.qty)
    c = u / self.scale
    raw_sv = np.linalg.svd(self.R * self.scale, compute_uv=False)            # Phi's own
    return {'coefficients': c, 'mse_train': self._mse(self.R, u),
            'num_features': int(self.R.shape[1]), 'rank': rank, 'rank_tolerance': float(tol),
            'cond_equilibrated': float(sv[0] / sv[-1]), 'cond_raw': float(raw_sv[0] / raw_sv[-1]),
            'singular_values_equilibrated': _spectrum(sv),
            'normal_equation_residual': self._normal_residual(self.R, u)}

  def _normal_residual(self, B, w) -> float:
    """||B^T (B w - Q^T y)|| / (||B||_2 ||Q^T y||): 0 at an exact least-squares solution."""
    g = B.T @ (B @ w - self.qty)
    return float(np.linalg.norm(g) / (np.linalg.norm(B, 2) * np.linalg.norm(self.qty)))

  def fixed_features_optimum(self, F: np.ndarray) -> dict:
    """(1): F fixed, (beta, b) optimal. Returns ``beta`` [n, q], ``b``, the spectrum of
    G = Phi M(F) (equal to B's), its rank, and the training MSE."""
    F = np.asarray(F, np.float64)
    if F.ndim != 2 or F.shape[1] != self.exps.shape[1]:
      raise ValueError(f'F must be [n, {self.exps.shape[1]}], got {F.shape}.')
    M = coefficient_map(F, self.q, self.exps)
    B = (self.R * self.scale) @ M                                            # [P, n q + 1]
    w, sv, rank, tol = _svd_solve(B, self.qty)
    m_sv = np.linalg.svd(M[1:, :-1], compute_uv=False)                       # beta -> coeffs
    m_tol = max(M.shape) * np.finfo(np.float64).eps * m_sv[0]
    return {'beta': w[:-1].reshape(F.shape[0], self.q), 'b': float(w[-1]),
            'coefficients': M @ w, 'mse_train': self._mse(B, w),
            'num_params': int(B.shape[1]), 'rank': rank, 'rank_tolerance': float(tol),
            'max_rank': int(min(B.shape)),
            'cond_G_on_rank': float(sv[0] / sv[rank - 1]),
            'singular_values_G_over_sqrtN': _spectrum(sv[:rank] / math.sqrt(self.n)),
            'coefficient_map_rank': int(np.sum(m_sv > m_tol)),
            'coefficient_map_rows': int(M.shape[0] - 1),
            'normal_equation_residual': self._normal_residual(B, w)}

  def predict(self, coefficients: np.ndarray, x: np.ndarray) -> np.ndarray:
    return monomial_features(x, self.exps) @ coefficients


def mse(a, b) -> float:
  return float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))


def optimum_report(data: dict, q: int, F_by_label: dict, done: dict | None = None) -> dict:
  """Both optima on one data set (``regression.make_data``'s dict), float64.

  F_by_label: label -> F [n, d] (e.g. 'seed0_init'); each gets the fixed-F optimum.
  done: an earlier report of this function on the same data: its polynomial optimum and
  fixed-F entries are kept, and only the labels it lacks are solved.
  Returns JSON-ready numbers (coefficients dropped).
  """
  ls = LeastSquares(data['x_train'], data['y_train'], q)
  if done is None:
    out = {'polynomial': _with_test(ls, ls.polynomial_optimum(), data), 'fixed_F': {}}
  else:
    out = {'polynomial': done['polynomial'], 'fixed_F': dict(done['fixed_F'])}
  for label, F in F_by_label.items():
    if label not in out['fixed_F']:
      out['fixed_F'][label] = _with_test(ls, ls.fixed_features_optimum(F), data)
  return out


def _with_test(ls, res, data):
  c = res['coefficients']
  pred_tr, pred_te = ls.predict(c, data['x_train']), ls.predict(c, data['x_test'])
  keep = {k: v for k, v in res.items() if k not in ('coefficients', 'beta')}
  keep.update({'mse_train_check': mse(pred_tr, data['y_train']),
               'mse_test': mse(pred_te, data['y_test']),
               'mse_train_vs_f': mse(pred_tr, data['f_train']),
               'mse_test_vs_f': mse(pred_te, data['f_test'])})
  return keep


def read_previous(path: str, config) -> dict:
  """The result at ``path`` to resume from; ValueError unless it is one of this config's
  target and data_seed."""
  try:
    with open(path) as f:
      done = json.load(f)
  except (OSError, ValueError) as e:
    raise ValueError(f'--resume: cannot read {path} ({e}); run without '
                     '--resume to start a new file.') from None
  if (done.get('target'), done.get('data_seed')) != (config.target, config.data_seed):
    raise ValueError(f"--resume: {path} is for target {done.get('target')!r}, "
                     f"data_seed {done.get('data_seed')!r}; the config has "
                     f'{config.target!r}, {config.data_seed}.')
  if not {'polynomial', 'fixed_F', 'seconds', 'provenance'} <= set(done):
    raise ValueError(f'--resume: {path} is not a fang_optimum result.')
  return done


def study(config, path: str, *, runs_dir: str | None = None, done: dict | None = None,
          prov: dict) -> dict:
  """Both optima for every ATTENTION run of ``config`` (module docstring); writes and
  returns the result (``done``'s runs listed under ``earlier_runs``)."""
  runs = [(e, c) for e, c in regression.run_configs(config) if c.model == 'attention']
  t0 = time.perf_counter()
  data = regression.make_data(config.target, config.data_seed)
  q = regression.DATA[config.target]['q']
  Fs, meta = {}, {}
  for entry, c in runs:
    s = regression.resolved_sizes(c)
    p = regression.init_params(jax.random.PRNGKey(c.seed), model='attention', d=s['d'],
                               q=s['q'], num_tokens=s['num_tokens'],
                               depth_width=s['depth_width'])
    label = f'{regression.run_name(c)}:init'
    Fs[label] = np.asarray(p['F'], np.float64)
    meta[label] = {'entry': entry, 'seed': c.seed, 'num_tokens': s['num_tokens'], 'F': 'init'}
    trained = os.path.join(runs_dir or '', c.target, regression.run_name(c))
    if runs_dir and os.path.exists(os.path.join(trained, 'params.npz')):
      label = f'{regression.run_name(c)}:trained'
      Fs[label] = np.asarray(regression.load_params(trained)['F'], np.float64)
      meta[label] = dict(meta[f'{regression.run_name(c)}:init'], F='trained')
  res = optimum_report(data, q, Fs, done)
  for label, m in meta.items():
    res['fixed_F'][label].update(m)
  result = {'target': config.target, 'data_seed': config.data_seed,
            'seeds': list(config.seeds), 'num_train': int(data['x_train'].shape[0]),
            'num_test': int(data['x_test'].shape[0]),
            'note': ('Same data set for every seed (data_seed); seeds change the '
                     'initialization only, so the polynomial optimum is one number.'),
            'seconds': time.perf_counter() - t0, **res, 'provenance': prov}
  if done is not None:
    result['earlier_runs'] = done.get('earlier_runs', []) + [
        {'seconds': done['seconds'], 'provenance': done['provenance']}]
  outputs.atomic_json(path, result, indent=1)
  return result


def summary(result: dict) -> str:
  """One line for the polynomial optimum, one per fixed F."""
  p = result['polynomial']
  q = regression.DATA[result['target']]['q']
  lines = [f"polynomial LS (degree <= {q}, {p['num_features']} monomials, rank {p['rank']}, "
           f"cond {p['cond_equilibrated']:.3g} equilibrated): MSE_Tr {p['mse_train']:.4f} "
           f"MSE_Te {p['mse_test']:.4f} MSE_Te vs f {p['mse_test_vs_f']:.4f}"]
  for label, r in result['fixed_F'].items():
    lines.append(f"{label}: rank {r['rank']} of {r['max_rank']}, cond(G) "
                 f"{r['cond_G_on_rank']:.3g}, MSE_Tr {r['mse_train']:.4f} "
                 f"MSE_Te {r['mse_test']:.4f}")
  return '\n'.join(lines)
