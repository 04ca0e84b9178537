r"""Fang et al. 2022, Theorem 3.5 as it runs: a certified bound on |fl(C^q(x)) - Q(x)|
for every x with ||x|| <= B, in IEEE binary64 (or binary32), any summation order.

Rounding model (``../shared/DESIGN.md``, "Certified as it runs"): round to nearest,
u = 2^-53 (binary32: 2^-24), eta = 2^-1074 (binary32: 2^-149) the underflow allowance;
fl(a op b) = (a op b)(1 + e), |e| <= u; ReLU, max, == exact. A dot product of m terms in
any order, with or without FMA (Higham, ch. 3):

    |fl(sum_i a_i b_i) - sum_i a_i b_i| <= gamma_m sum_i |a_i b_i| + m eta,
    gamma_m = m u / (1 - m u).

Terms whose product is exactly 0 cost nothing (a + 0 = a and fma(0, b, c) = c exactly,
and no value is infinite: every magnitude below is checked against the largest float),
so m counts the non-zero products. Products by 1 and sums of one non-zero term are exact.
When every product is exact (a power of two times a float, no overflow), the m terms
are summed only: gamma_(m-1) (Higham, ch. 4).

Lemma (the float literal network). Let T >= B max_i ||xi_i|| (xi_i the rows of the float
F), M_k^2 the powers of two in block k's params, and for the *exact* real network with
the same (float) parameters write t_i = <xi_i, x>, slot_k = (-t)^k, |slot_(k-1)| <= Y_k
= T^(k-1) (Y_1 = 1). Then for every x with ||x|| <= B, whatever order the runtime sums in:

    input map   |fl(t_i) - t_i| <= D0 = gamma_m T + m eta (m <= d: non-zeros of a row of F),
                |fl(t_i)| <= X~ = T + D0
    block k     operands |fl(y)| <= Y~_k = Y_k + E_(k-1)  (E_0 = 0: the constant 1)
                scores   fl(s_ij), s_ij = t_i y_j + 2M_k^2 [i = j] (two non-zero terms)
                margin   fl(s_ii) - fl(s_ij) >= G_k = 2M_k^2 - 2 X~ Y~_k
                                    - gamma_2 (X~ Y~_k + 2M_k^2) - gamma_1 X~ Y~_k - 3 eta
                G_k > 0 is checked in rationals: the one-hot maximum then keeps exactly
                the diagonal score, in float as in the exact network, so the attention
                writes fl(s_ii) into slot k without rounding (value 1, W_O one 1);
                FF      slot~_k = fl(s~ + (-2 relu(s~) + 2 relu(-s~)) + 2M_k^2): three
                        non-zero exact terms (W_2 = +-2, b_2, the residual) summed,
                        |s~| <= S_k = (1 + gamma_2)(X~ Y~_k + 2M_k^2)
                E_k = D0 Y_k + X~ E_(k-1)                       (operands' errors)
                      + gamma_2 (X~ Y~_k + 2M_k^2) + 2 eta       (score rounding)
                      + gamma_2 (3 S_k + 2M_k^2) + 3 eta          (FF and residual)
                >= |slot~_k - slot_k|
    read-out    C~ = fl(sum_{i,k} beta_ik slot~_ik + b): m = nnz(beta) + [b != 0] terms,

    |C~(x) - P(x)| <= E_eval = sum_{i,k} |beta_ik| E_k
                               + gamma_m (sum_{i,k} |beta_ik| (T^k + E_k) + |b|) + m eta,

where P(x) = b + sum_{i,k} beta_ik (-<xi_i, x>)^k is the polynomial that the float
parameters realize in exact arithmetic (the exact network, Lemma 3.1 with G_k > 0).
P is expanded exactly (the parameters are dyadic rationals; no rounding model needed
for them) and compared with Q coefficient by coefficient:

    |P(x) - Q(x)| <= E_param = sum_a |p_a - c_a| sup_{||x|| <= B} |x^a|,
    sup_{||x|| <= B} |x^a| = B^|a| prod_j (a_j / |a|)^(a_j / 2)     (a square root, up)

(the ridge solve's residual and, for ``exact=True`` models, the rounding of the exact
F and beta to floats). The certificate:

    sup_{||x|| <= B} |fl(C^q(x)) - Q(x)| <= E_eval + E_param.

Every quantity is a ``fractions.Fraction``; square roots are rounded up; the printed
float is rounded up. The block params are checked to be exactly Lemma 3.1's (2M_k^2
a power of two, representable in the arithmetic), otherwise ValueError.

Scope: the operations of the network as written (input map, queries, keys, scores,
one-hot maximum, value, FF, residual, read-out), each sum in any order and with FMA or
not (the FF's matmul, bias and residual count as one sum); no rewriting of one
operation into another (no fast-math; XLA's default). float32 on a GPU: JAX's
default matmul precision may run float32 dots in TF32, outside this model (use
``jax.default_matmul_precision('highest')``).

    from transformer_ua.fang import float_bound
    res = float_bound.certified_float_error(model)          # float64, ball of model.bound
    res.total, res.upper, res.evaluation, res.parameters, res.margins
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Mapping

import numpy as np

from transformer_ua.fang import exact, multiply_block, ridge
from transformer_ua.fang.polynomial import (BOUNDARY_RTOL, PolynomialTransformer,
                                            _check_bound, build_polynomial_transformer)

#: arithmetic -> (numpy dtype, unit roundoff u, underflow allowance eta, largest float).
ARITHMETICS = {
    'float64': (np.float64, Fraction(1, 2 ** 53), Fraction(1, 2 ** 1074),
                (2 - Fraction(1, 2 ** 52)) * 2 ** 1023),
    'float32': (np.float32, Fraction(1, 2 ** 24), Fraction(1, 2 ** 149),
                (2 - Fraction(1, 2 ** 23)) * 2 ** 127),
}


def gamma(m: int, u: Fraction) -> Fraction:
  """gamma_m = m u / (1 - m u) (Higham, Lemma 3.1); needs m u < 1."""
  if m * u >= 1:
    raise ValueError(f'gamma_{m} is undefined: m u = {float(m * u):.3g} >= 1.')
  return m * u / (1 - m * u)


def sqrt_up(x: Fraction) -> Fraction:
  """A rational >= sqrt(x), x >= 0, within a relative 2^-60 or so (exact for squares)."""
  if x < 0:
    raise ValueError(f'sqrt_up needs x >= 0, got {x}.')
  p, q = x.numerator, x.denominator
  scale = 2 ** max(0, 64 - (p * q).bit_length() // 2)  # >= ~64 bits in the root
  r = math.isqrt(p * q * scale * scale)
  r = r if r * r == p * q * scale * scale else r + 1
  return Fraction(r, q * scale)


def round_up(x: Fraction) -> float:
  """The smallest float64 >= x (inf when x exceeds the largest float)."""
  f = float(x) if x < ARITHMETICS['float64'][3] else math.inf
  return f if Fraction(f) >= x else float(np.nextafter(f, np.inf))


def accepted_bound(model: PolynomialTransformer) -> Fraction:
  """B (1 + r) exactly, r = BOUNDARY_RTOL = 1e-12: every input ``model.apply`` accepts lies
  in this ball. Its float test fl(sum_j x_j^2) <= fl(fl(B^2) fl(1 + r)) gives ||x||^2 <=
  B^2 (1 + r) (1 + u)^3 / (1 - gamma_d) <= B^2 (1 + r)^2, since (d + 3) u < r / 2 for
  d <= 4000."""
  if model.d > 4000:
    raise ValueError(f'accepted_bound needs d <= 4000, got d = {model.d}.')
  return Fraction(model.bound) * (1 + Fraction(BOUNDARY_RTOL))


@dataclasses.dataclass(frozen=True)
class FloatErrorBound:
  """sup_{||x|| <= B} |fl(C^q(x)) - Q(x)| <= total = evaluation + parameters (Fractions).

  Fields: arithmetic ('float64' | 'float32'), u, bound B, operand_bound T (>= |t_i|),
  input_error D0, slot_errors [E_1..E_q], margins [G_1..G_q] (lower bounds of every
  block's diagonal score gap in float, all > 0), evaluation (|fl(C) - P|), parameters
  (|P - Q|), total, target ('Q' or 'P' when the model has no polynomial), terms (m of
  the read-out sum).
  """

  arithmetic: str
  u: Fraction
  bound: Fraction
  operand_bound: Fraction
  input_error: Fraction
  slot_errors: tuple
  margins: tuple
  evaluation: Fraction
  parameters: Fraction
  total: Fraction
  target: str
  terms: int

  @property
  def upper(self) -> float:
    """``total`` as a float rounded up."""
    return round_up(self.total)

  def __repr__(self) -> str:
    """The line, not the Fractions' thousands of digits (they stay in the fields)."""
    return f'FloatErrorBound({self.line()})'

  def line(self) -> str:
    """One line: the certified sup and its parts (floats rounded up)."""
    return (f'sup_(||x|| <= {float(self.bound):.15g}) |fl(C(x)) - {self.target}(x)| <= '
            f'{self.upper:.4g} in {self.arithmetic} (any summation order, FMA or not): '
            f'evaluation {round_up(self.evaluation):.4g}, parameters '
            f'{round_up(self.parameters):.4g}; min one-hot margin '
            f'{float(min(self.margins)):.4g} > 0')


def network_polynomial(model: PolynomialTransformer, dtype=np.float64) -> dict:
  """P's coefficients, exactly: {a: Fraction} with P(x) = b + sum_{i,k} beta_ik
  (-<xi_i, x>)^k for the model's F, beta_slots, b rounded to ``dtype`` (dyadic
  rationals, expanded in integer arithmetic)."""
  F = np.asarray(model.F, dtype)
  beta = np.asarray(model.beta_slots, dtype)

  def dyadic(a):  # integers N and a common denominator 2^e with a = N / 2^e exactly
    ratios = [Fraction(float(v)) for v in a.ravel()]
    den = max(r.denominator for r in ratios)
    ints = np.empty(a.size, dtype=object)
    ints[:] = [r.numerator * (den // r.denominator) for r in ratios]
    return ints.reshape(a.shape), den

  NF, dF = dyadic(F)
  NB, dB = dyadic(beta)
  pows = [[NF[:, j] ** e for e in range(model.q + 1)] for j in range(model.d)]
  out = {(0,) * model.d: Fraction(float(np.asarray(model.b, dtype)))}
  for k in range(1, model.q + 1):
    for a in ridge.exponents(model.d, k):
      prod = np.ones(model.n, dtype=object)
      for j, e in enumerate(a):
        if e:
          prod = prod * pows[j][e]
      s = int(np.dot(NB[:, k - 1], prod))
      if s:
        out[a] = Fraction((-1) ** k * ridge.multinomial(a) * s, dB * dF ** k)
  return {a: c for a, c in out.items() if c != 0}


def monomial_sup(a, B: Fraction) -> Fraction:
  """A rational >= sup_{||x|| <= B} |x^a| = B^|a| prod_j (a_j / |a|)^(a_j / 2)."""
  k = sum(a)
  if k == 0:
    return Fraction(1)
  sq = B ** (2 * k)
  for e in a:
    if e:
      sq *= Fraction(e, k) ** e
  return sqrt_up(sq)


def _check_blocks(model: PolynomialTransformer, dtype) -> list[Fraction]:
  """M_k^2 read from the params, after checking they are Lemma 3.1's blocks exactly and
  representable in ``dtype``."""
  lay = model.layout
  m2s = []
  for k in range(1, model.q + 1):
    got = {part: {name: np.asarray(v)[k - 1] for name, v in ps.items()}
           for part, ps in model.block_params.items()}
    two_m2 = float(got['feedforward']['b_2'][lay.slot(k)])
    m2 = two_m2 / multiply_block.TWO
    want = multiply_block.multiplication_block(
        n=model.n, q=model.q, x_index=lay.t, y_index=lay.const if k == 1 else lay.slot(k - 1),
        out_index=lay.slot(k), m_squared=m2)
    for part, ps in want.items():
      for name, w in ps.items():
        g = got[part][name]
        if g.shape != w.shape or not np.array_equal(g, w):
          raise ValueError(f"block {k}'s {name} is not Lemma 3.1's; the bound covers only "
                           'the construction (multiply_block.theorem_blocks).')
        if not np.array_equal(np.asarray(g, dtype).astype(np.float64), g):
          raise ValueError(f"block {k}'s {name} is not exactly representable in "
                           f'{np.dtype(dtype).name}.')
    mant, _ = math.frexp(two_m2)
    if mant != 0.5:
      raise ValueError(f'block {k}: 2M^2 = {two_m2!r} is not a power of two.')
    m2s.append(Fraction(m2))
  return m2s


def certified_float_error(model, *, bound=None, arithmetic: str = 'float64',
                          d: int | None = None) -> FloatErrorBound:
  """sup_{||x|| <= B} |fl(C^q(x)) - Q(x)| for the literal network (module docstring).

  Args:
    model: a ``PolynomialTransformer``, or a polynomial dict (then ``d`` and ``bound``
      are required and the default construction is built).
    bound: B (default: the model's ball; a Fraction is taken exactly). A larger B is
      certified only if every block's one-hot margin G_k stays positive there.
    arithmetic: 'float64' (``model.apply``) or 'float32' (``model.literal_fn()``); the
      float32 network's F, beta, b are the float32-rounded params, counted exactly.
    d: input dimension, for a polynomial dict only.
  Returns:
    FloatErrorBound (every part a Fraction; ``.upper`` the total as a float, rounded up).
  Raises:
    ValueError (one line): bad input, a margin G_k <= 0 (the float one-hot maximum may
    pick another key), a magnitude beyond the largest float, or params that are not
    the construction's.
  """
  if not isinstance(arithmetic, str) or arithmetic not in ARITHMETICS:
    raise ValueError(f'arithmetic={arithmetic!r}; allowed: {tuple(ARITHMETICS)}.')
  if isinstance(model, Mapping):
    if d is None or bound is None:
      raise ValueError('a polynomial dict needs d= and bound= (or pass a '
                       'PolynomialTransformer).')
    model = build_polynomial_transformer(model, d=d, bound=bound)
  elif not isinstance(model, PolynomialTransformer):
    raise ValueError(f'model must be a PolynomialTransformer or a polynomial dict, got '
                     f'{type(model).__name__}.')
  elif d is not None and d != model.d:
    raise ValueError(f'd={d!r} disagrees with the model (d = {model.d}).')
  dtype, u, eta, fmax = ARITHMETICS[arithmetic]
  B = Fraction(_check_bound(model.bound if bound is None else bound))
  if isinstance(bound, Fraction):
    B = bound                               # exactly, e.g. B (1 + BOUNDARY_RTOL)
  m2s = _check_blocks(model, dtype)

  F = np.asarray(model.F, dtype)
  beta = np.asarray(model.beta_slots, dtype)
  b = Fraction(float(np.asarray(model.b, dtype)))
  if not (np.all(np.isfinite(F)) and np.all(np.isfinite(beta))):
    raise ValueError(f'F or beta overflows {arithmetic}.')
  rows = [sum((Fraction(float(v)) ** 2 for v in row), Fraction(0)) for row in F]
  r_max = sqrt_up(max(rows))
  T = B * r_max
  nnz_f = max(1, int(np.max(np.count_nonzero(F, axis=1))))
  D0 = gamma(nnz_f, u) * T + nnz_f * eta
  X = T + D0

  errors, margins = [], []
  E_prev = Fraction(0)
  for k, m2 in enumerate(m2s, start=1):
    Y = T ** (k - 1)
    Yt = Y + E_prev
    xy = X * Yt
    margin = 2 * m2 - 2 * xy - gamma(2, u) * (xy + 2 * m2) - gamma(1, u) * xy - 3 * eta
    if margin <= 0:
      raise ValueError(f'block {k}: the one-hot margin is not certified in {arithmetic} '
                       f'(M^2 = {float(m2):g} vs |t| |y| <= {float(xy):.6g} on ||x|| <= '
                       f'{float(B):g}); the float maximum may pick another key.')
    s_bound = (1 + gamma(2, u)) * (xy + 2 * m2)
    if 4 * s_bound >= fmax:
      raise ValueError(f'block {k}: scores up to {float(s_bound):.3g} overflow {arithmetic}.')
    E = (D0 * Y + X * E_prev + gamma(2, u) * (xy + 2 * m2) + 2 * eta
         + gamma(2, u) * (3 * s_bound + 2 * m2) + 3 * eta)  # three exact terms, summed
    errors.append(E)
    margins.append(margin)
    E_prev = E

  abs_beta = [[Fraction(float(v)) for v in np.abs(row)] for row in beta]
  col = [sum((r[k] for r in abs_beta), Fraction(0)) for k in range(model.q)]  # ||beta_k||_1
  m = int(np.count_nonzero(beta)) + int(b != 0)
  weighted = sum((col[k - 1] * errors[k - 1] for k in range(1, model.q + 1)), Fraction(0))
  mags = sum((col[k - 1] * (T ** k + errors[k - 1]) for k in range(1, model.q + 1)),
             Fraction(0)) + abs(b)
  if 2 * mags >= fmax:
    raise ValueError(f'the read-out sum, up to {float(mags):.3g}, overflows {arithmetic}.')
  evaluation = weighted + (gamma(m, u) * mags + m * eta if m else Fraction(0))

  if model.poly is None:
    parameters, target = Fraction(0), 'P'
  else:
    P = network_polynomial(model, dtype)
    Q = {a: exact.to_fraction(c) for a, c in model.poly.items()}
    parameters = sum((abs(P.get(a, 0) - Q.get(a, 0)) * monomial_sup(a, B)
                      for a in set(P) | set(Q)), Fraction(0))
    target = 'Q'
  return FloatErrorBound(arithmetic=arithmetic, u=u, bound=B, operand_bound=T,
                         input_error=D0, slot_errors=tuple(errors), margins=tuple(margins),
                         evaluation=evaluation, parameters=parameters,
                         total=evaluation + parameters, target=target, terms=m)
