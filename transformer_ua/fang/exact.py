"""Exact evaluation of Fang et al.'s C^q: rational inputs, no rounding anywhere.

Two modes:

* ``apply_exact(model, x_rows, path='literal')``: the literal network's math --
  F(x), the q blocks' attention (one-hot maximum) and FF, beta . concat(T) + b --
  on numpy object arrays of ``fractions.Fraction``, through the NumPy reference
  layers of ``exact.reference`` (tests check them against the JAX functions).
  ``path='compact'`` evaluates the compact form exactly.
  With ``build_polynomial_transformer(..., exact=True)`` (exact rational
  directions with ||xi|| = 1 and an exact ridge solve) the result is Q(x) exactly.
* ``apply_exact_integer(model, x_rows)`` (``path='integer'``): the *JAX* network itself
  (``modules.Network`` through ``modules.exact_apply``) in int64. The exact ridge features
  t_i = xi_i . x share a denominator S; tokens carry t' = S t, and block k then holds
  slot'_k = S^k slot_k exactly; C(x) = b + sum beta_{i,k} slot'_{i,k} / S^k in
  Fractions. Every intermediate is planned before running (<= 13 X^q with
  X = ceil(S B)) by ``exact.planner``; if int64 cannot hold it the call refuses.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import layers, modules
from transformer_ua.exact import planner, reference
from transformer_ua.fang import multiply_block
from transformer_ua.fang.tokens import input_map

# Literal exact path costs O(q n^3) Fraction operations per input.
EXACT_LITERAL_MAX_TOKENS = 64
PATHS = ('literal', 'compact', 'integer')


def to_fraction(v) -> Fraction:
  """A rational from a Fraction, int, finite float (exactly) or a string like '3/7'."""
  if isinstance(v, bool):
    raise ValueError(f'{v!r} is not a rational number.')
  if isinstance(v, (Fraction, int, np.integer)):
    return Fraction(int(v)) if isinstance(v, np.integer) else Fraction(v)
  if isinstance(v, (float, np.floating)):
    if not math.isfinite(float(v)):
      raise ValueError(f'{v!r} is not a finite rational number.')
    return Fraction(float(v))
  if isinstance(v, str):
    try:
      return Fraction(v)
    except ValueError as e:
      raise ValueError(f'{v!r} is not a rational number (e.g. "3/7").') from e
  raise ValueError(f'{v!r} ({type(v).__name__}) is not a rational number; allowed: '
                   'Fraction, int, float, str.')


def _rows(model, x_rows):
  try:
    rows = [[to_fraction(v) for v in row] for row in x_rows]
  except TypeError as e:
    raise ValueError('x_rows must be a sequence of rows of d rationals.') from e
  for r in rows:
    if len(r) != model.d:
      raise ValueError(f'each input row needs d = {model.d} entries, got {len(r)}.')
  B2 = Fraction(model.bound) ** 2
  for r in rows:
    if sum(v * v for v in r) > B2:
      raise ValueError(f'input {[str(v) for v in r]} lies outside the ball ||x|| <= B = '
                       f'{model.bound:g}; the construction is exact only inside.')
  return rows


def _frac_array(a) -> np.ndarray:
  a = np.asarray(a)
  if a.dtype == object:
    return a
  return np.vectorize(lambda v: Fraction(float(v)) if a.dtype.kind == 'f' else Fraction(int(v)),
                      otypes=[object])(a)


def _model_exact(model):
  F = (np.asarray(model.F_exact, dtype=object) if model.F_exact is not None
       else _frac_array(model.F))
  beta = (np.asarray(model.beta_exact, dtype=object) if model.beta_exact is not None
          else _frac_array(model.beta_slots))
  b = model.b_exact if model.b_exact is not None else Fraction(model.b)
  return F, beta, b


def apply_exact(model, x_rows, *, path: str = 'literal') -> list:
  """Exact C(x) (Fractions) for rational inputs inside the ball; see module doc."""
  if path not in PATHS:
    raise ValueError(f'path={path!r}; allowed: {PATHS}.')
  if path == 'integer':
    return apply_exact_integer(model, x_rows)
  if path == 'literal' and model.n > EXACT_LITERAL_MAX_TOKENS:
    raise ValueError(f"exact literal path with n = {model.n} tokens is too slow; allowed "
                     f"n <= {EXACT_LITERAL_MAX_TOKENS} (use path='compact').")
  rows = _rows(model, x_rows)
  if not rows:
    return []
  F, beta, b = _model_exact(model)
  x = np.asarray(rows, dtype=object)                                 # [batch, d]
  if path == 'compact':
    t = np.einsum('bd,nd->bn', x, F)
    slot = np.ones_like(t)
    acc = 0 * t
    for k in range(model.q):
      slot = -t * slot
      acc = acc + beta[:, k] * slot
    return [sum(r, Fraction(0)) + b for r in acc]
  z = input_map(F, x, q=model.q, xp=np)                              # [batch, n, D]
  for k in range(model.q):
    p = jax.tree_util.tree_map(_frac_array, layers.unstack_layer(model.block_params, k))
    z = z + reference.numpy_attention_update(p['attention'], z, normalizer='onehot_max')
    z = z + reference.numpy_feedforward_update(p['feedforward'], z)
  lay = model.layout
  beta_full = np.zeros((model.n, lay.width), dtype=object) * Fraction(0)
  for k in range(1, model.q + 1):
    beta_full[:, lay.slot(k)] = beta[:, k - 1]
  return [Fraction(0) + np.sum(zb * beta_full) + b for zb in z]


def integer_plan(model, x_rows) -> dict:
  """Scale S, integer operand bound X, M_k^2 and the planned arithmetic (``bits``)."""
  rows = _rows(model, x_rows)
  F, _, _ = _model_exact(model)
  t = np.einsum('bd,nd->bn', np.asarray(rows, dtype=object), F)
  S = 1
  for v in t.flat:
    S = S * v.denominator // math.gcd(S, v.denominator)
  fnorm = max(math.sqrt(float(sum(c * c for c in row))) for row in F)
  X = max(1, math.ceil(S * model.bound * fnorm * (1 + 1e-12)))
  m2 = [multiply_block.choose_m_squared(x_bound=X, y_bound=1 if k == 1 else X ** (k - 1))
        for k in range(1, model.q + 1)]
  biggest = 6 * max(m2) + X ** model.q
  arith = planner.plan(math.ceil(biggest))
  return {'S': S, 'X': X, 'm_squared': m2, 'arithmetic': arith, 'bits': arith.bits_required,
          'rows': rows, 't': t}


def apply_exact_integer(model, x_rows) -> list:
  """Exact C(x) through the JAX literal network in int64 (``modules.exact_apply``).

  Raises:
    ValueError: int64 cannot hold the scaled values (says how many bits they need),
      or an input lies outside the ball.
  """
  plan = integer_plan(model, x_rows)
  if plan['arithmetic'].kind != 'int64':
    raise ValueError(f"exact integer mode needs {plan['bits']} bits (scale S = {plan['S']}, "
                     f'X = {plan["X"]}, q = {model.q}); int64 holds {planner.INT64_BITS}. '
                     "Use apply_exact (Fractions) instead.")
  if not plan['rows']:
    return []
  S, X = plan['S'], plan['X']
  blocks, _ = multiply_block.theorem_blocks(n=model.n, q=model.q, operand_bound=float(X),
                                            dtype=np.int64)
  params = jax.tree_util.tree_map(lambda *a: np.stack(a), *blocks)
  t_int = np.asarray([[int(v * S) for v in row] for row in plan['t']], dtype=np.int64)
  lay = model.layout
  batch = t_int.shape[0]
  tokens = np.zeros((batch, model.n, lay.width), np.int64)
  tokens[:, :, lay.t] = t_int
  tokens[:, np.arange(model.n), [lay.onehot(i) for i in range(model.n)]] = 1
  tokens[:, :, lay.const] = 1
  with jax.enable_x64(True):
    net = modules.Network([multiply_block.block_segment(model.n, model.q)])
    p = {'segment_0': jax.tree_util.tree_map(jnp.asarray, params)}
    out = np.asarray(modules.exact_apply(net, p, jnp.asarray(tokens)))
  _, beta, b = _model_exact(model)
  results = []
  for r in range(batch):
    total = Fraction(b)
    for k in range(1, model.q + 1):
      col = out[r, :, lay.slot(k)]
      for i in range(model.n):
        if col[i]:
          total += beta[i, k - 1] * Fraction(int(col[i]), S ** k)
    results.append(total)
  return results
