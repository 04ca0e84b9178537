r"""What the certificate needs to know about a target f: a modulus and exact values.

Modulus of continuity, in the form the certificate uses (entrywise out, max norm in):

    |f(X)_ji - f(Y)_ji| <= L max_kl |X_kl - Y_kl|        for X, Y in [0, 1]^{n x d}

Built-in constants (proved here, per output entry (j, i)):

    token_times_mean   f_ji = x_ji m_i, m_i = mean_k x_ki:  d f_ji = m_i dx_ji
                       + x_ji mean_k dx_ki, so |df_ji| <= (m_i + x_ji) max|dX| <= 2 max|dX|
                                                                                  L = 2
    prefix_mean        a mean of entries:                                         L = 1
    reversal           a permutation of entries:                                  L = 1
    attention_map      f_j = sum_k w_jk v_k, v_k = x_k W_V, w_j = softmax_k(s_jk),
                       s_jk = (x_j W_Q).(x_k W_K) / sqrt(d). With c(W) = max_i sum_l
                       |W_li| (so |(xW)_i| <= c(W) max|x| <= c(W) on [0, 1]^d):
                         |dv_ki| <= c(W_V) max|dX|,  |ds_jk| <= 2 sqrt(d) c(W_Q) c(W_K) max|dX|,
                         ||dw_j||_1 <= 2 max_k |ds_jk|   (softmax Jacobian diag(w) - w w^T:
                         ||J e||_1 = sum_k w_k |e_k - w.e| <= 2 ||e||_inf),
                       and df_ji = sum_k w_jk dv_ki + sum_k dw_jk v_ki, so
                                     L = c(W_V) (1 + 4 sqrt(d) c(W_Q) c(W_K))
                       (sqrt(d) rounded up to a rational; the weights are the float64
                       weights the target uses, taken exactly)
    random_bumps       f_ji = sum_b a_b g(x_ji - c_b, m_i - e_b), g(u, v) = exp(-(u^2 + v^2)
                       / (2 s^2)), s = 3/20: d f_ji = sum_b a_b (g_u dx_ji + g_v dm_i) with
                       |dx_ji|, |dm_i| <= max|dX|, and with t = r / s, r^2 = u^2 + v^2,
                         |g_u| + |g_v| = (|u| + |v|) g / s^2 <= sqrt(2) r g / s^2
                                       = (sqrt(2) / s) t exp(-t^2 / 2) <= sqrt(2) / (s sqrt(e))
                       (t exp(-t^2/2) is largest at t = 1), so
                                     L = sqrt(2 / e) / s  sum_b |a_b|
                       (the float64 a_b taken exactly; sqrt(2/e) rounded up to a rational
                       through e > 2.718281828); about 37.67

A caller's ``lipschitz=`` for a built-in must be >= the proved constant (refused in one
line otherwise; a larger one is a weaker, valid modulus and is used as given). A user
callable has no constant the code can know: the caller states one, and the certificate
refutes it where it can (``callable_checks``: neighbouring centres, sampled points).

Exact values: f_bar's table holds f evaluated in float64 at the cube centres. For the
built-ins, ``exact_values`` encloses the real f(C) (rationals for the first three, arb
balls for attention_map), so the certificate can bound the rounding too.

Exact forms (the per-cube f-term, ``f_term``): ``polynomial`` gives token_times_mean,
prefix_mean and reversal as polynomials with rational coefficients,

    token_times_mean   f_ji = (1/n) sum_k x_ji x_ki
    prefix_mean        f_ji = (1/(j+1)) sum_{k <= j} x_ki
    reversal           f_ji = x_{n-1-j, i},

and ``arb_function`` every built-in as a function of balls (attention_map with the
softmax weights written 1 / sum_l exp(s_jl - s_jk), which stays tight on boxes;
random_bumps as written, with s = 3/20 and the float64 a_b, c_b, e_b taken exactly).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from flint import arb, ctx

from transformer_ua.targets import callable_checks
from transformer_ua.targets import functions as targets_lib

#: arb precision of the exact target values (bits).
EXACT_VALUE_BITS = 128


def _sqrt_up(x: int) -> Fraction:
  """A rational >= sqrt(x)."""
  r = math.isqrt(x)
  return Fraction(r) if r * r == x else Fraction(math.isqrt(x * 2 ** 40) + 1, 2 ** 20)


def _col_abs_sum(w) -> Fraction:
  w = np.asarray(w, np.float64)
  return max(sum(abs(Fraction(float(v))) for v in w[:, i]) for i in range(w.shape[1]))


#: A rational lower bound on e (e = 2.718281828459...), for sqrt(2/e) rounded up.
_E_BELOW = Fraction(2718281828, 10 ** 9)


def _sqrt_fraction_up(x: Fraction) -> Fraction:
  """A rational >= sqrt(x) for a rational x >= 0: sqrt(p q) / q rounded up."""
  x = Fraction(x)
  return _sqrt_up(x.numerator * x.denominator) / x.denominator


def random_bumps_lipschitz() -> Fraction:
  """L = sqrt(2 / e) / s sum_b |a_b| (module doc), rounded up to a rational."""
  a = targets_lib.random_bumps_params()[0]
  s = Fraction(*targets_lib.RANDOM_BUMPS_WIDTH)
  return _sqrt_fraction_up(2 / _E_BELOW) / s * sum(abs(Fraction(float(v))) for v in a)


def builtin_lipschitz(name: str, d: int, n: int) -> Fraction | None:
  """The proved constant L of a built-in target (see module doc), None for others."""
  if name == 'token_times_mean':
    return Fraction(2)
  if name in ('prefix_mean', 'reversal'):
    return Fraction(1)
  if name == 'attention_map':
    w_q, w_k, w_v = targets_lib.attention_map_weights(d)
    return _col_abs_sum(w_v) * (1 + 4 * _sqrt_up(d) * _col_abs_sum(w_q) * _col_abs_sum(w_k))
  if name == 'random_bumps':
    return random_bumps_lipschitz()
  return None


def _builtin_name(target) -> str | None:
  """The target's built-in name when it is that built-in (not a look-alike), else None."""
  name = getattr(target, 'name', None)
  if name in targets_lib.BUILTIN_TARGETS and targets_lib.BUILTIN_TARGETS[name] is target:
    return name
  return None


def check_lipschitz(lipschitz, target, d: int, n: int) -> Fraction:
  """The constant to use: the built-in's proved one, or the caller's (positive, finite).

  A caller's constant for a built-in target must be >= the proved one (a smaller one
  would be a claim the code cannot back; a larger one is a valid, weaker modulus and is
  used as given).

  Raises:
    ValueError: a bad value, a value below a built-in's proved constant, or a target
      without a known constant and none given.
  """
  name = _builtin_name(target)
  const = builtin_lipschitz(name, d, n) if name else None
  if lipschitz is not None:
    if isinstance(lipschitz, bool) or not isinstance(lipschitz, (int, float, Fraction)) \
        or not math.isfinite(float(lipschitz)) or lipschitz <= 0:
      raise ValueError(f'lipschitz={lipschitz!r}; it must be a positive finite number L '
                       'with |f(X)_ij - f(Y)_ij| <= L max|X - Y|.')
    given = Fraction(lipschitz)
    if const is not None and given < const:
      raise ValueError(f'lipschitz={callable_checks.show_constant(given)} is below the '
                       'proved constant '
                       f'{_show(const)} of the built-in target {name!r} (d={d}); omit '
                       f'lipschitz= or pass a value >= {_show(const)}.')
    return given
  if const is None:
    raise ValueError(f'target {target.name!r} has no known modulus of continuity; pass '
                     'lipschitz=L with |f(X)_ij - f(Y)_ij| <= L max|X - Y| (it cannot be '
                     'guessed from samples).')
  return const


def lipschitz_source(lipschitz: Fraction, target, d: int, n: int) -> str:
  """Where the constant L (from ``check_lipschitz``) comes from, in words."""
  name = _builtin_name(target)
  const = builtin_lipschitz(name, d, n) if name else None
  if const is None:
    return 'given by the caller'
  if Fraction(lipschitz) == const:
    return 'proved constant'
  return f'given by the caller, above the proved constant {_show(const)}'


def _show(v: Fraction) -> str:
  """A short decimal for a rational in a message (exact when it is an integer)."""
  v = Fraction(v)
  return str(v.numerator) if v.denominator == 1 else f'{float(v):.6g}'


# ---------------------------------------------------------------------------
# The built-ins as exact polynomials and as arb functions (per-cube f-terms).
# ---------------------------------------------------------------------------

#: Built-ins that are polynomials in the entries of X.
POLYNOMIAL_TARGETS = ('token_times_mean', 'prefix_mean', 'reversal')


def polynomial_terms(target, d: int, n: int) -> int | None:
  """The most monomials in one entry of ``polynomial`` (without building it): n for
  token_times_mean and prefix_mean, 1 for reversal; None for others."""
  name = _builtin_name(target)
  if name not in POLYNOMIAL_TARGETS:
    return None
  return 1 if name == 'reversal' else n


def polynomial(target, d: int, n: int):
  """The built-in as exact polynomials: a nested list [n][d] of {exponents: coefficient},
  exponents a tuple over the nd variables x_v, v = j d + i (token-major, as X.ravel()),
  coefficients Fractions; None for a target that is not a polynomial built-in.

      token_times_mean   f_ji = (1/n) sum_k x_ji x_ki
      prefix_mean        f_ji = (1/(j+1)) sum_{k <= j} x_ki
      reversal           f_ji = x_{n-1-j, i}
  """
  name = _builtin_name(target)
  if name not in POLYNOMIAL_TARGETS:
    return None
  m = n * d

  def mono(*vs):
    e = [0] * m
    for v in vs:
      e[v] += 1
    return tuple(e)

  out = []
  for j in range(n):
    row = []
    for i in range(d):
      poly = {}
      if name == 'token_times_mean':
        for k in range(n):
          key = mono(j * d + i, k * d + i)
          poly[key] = poly.get(key, Fraction(0)) + Fraction(1, n)
      elif name == 'prefix_mean':
        for k in range(j + 1):
          poly[mono(k * d + i)] = Fraction(1, j + 1)
      else:
        poly[mono((n - 1 - j) * d + i)] = Fraction(1)
      row.append(poly)
    out.append(row)
  return out


def arb_function(target, d: int, n: int):
  """The built-in f as a function of a nested list X [n][d] of numbers that support
  +, -, *, / and ``.exp()`` (arb balls, or ``f_term``'s gradient-carrying balls),
  returning [n][d]; None for a target that is not a built-in. Evaluated on balls it
  encloses the real f (attention_map: the float64 weights taken exactly)."""
  name = _builtin_name(target)
  if name is None:
    return None
  if name in POLYNOMIAL_TARGETS:
    built = []        # the polynomials, built at the first evaluation (O(n^3) at large n)

    def fn(x):
      if not built:
        built.append(polynomial(target, d, n))
      polys = built[0]
      flat = [v for tok in x for v in tok]
      out = []
      for row in polys:
        out_row = []
        for poly in row:
          acc = 0
          for e, c in poly.items():
            term = arb(c.numerator) / c.denominator
            for v, k in enumerate(e):
              for _ in range(k):
                term = flat[v] * term
            acc = term + acc
          out_row.append(acc)
        out.append(out_row)
      return out
    return fn
  if name == 'random_bumps':
    return _random_bumps_arb
  w_q, w_k, w_v = ([[arb(float(v)) for v in row] for row in np.asarray(w, np.float64)]
                   for w in targets_lib.attention_map_weights(d))

  def fn(x):
    # (arb(d).sqrt() is evaluated at the caller's precision)
    root = arb(d).sqrt()

    def mat(w):
      return [[sum((x[j][l] * w[l][i] for l in range(1, d)), x[j][0] * w[0][i])
               for i in range(d)] for j in range(n)]

    q, k, v = mat(w_q), mat(w_k), mat(w_v)
    s = [[sum((q[j][i] * k[k2][i] for i in range(1, d)), q[j][0] * k[k2][0]) / root
          for k2 in range(n)] for j in range(n)]
    out = []
    for j in range(n):
      # softmax weight of k: 1 / sum_l exp(s_jl - s_jk) (tighter on boxes than e_k / sum)
      wts = [1 / sum(((s[j][l] - s[j][k2]).exp() for l in range(n) if l != k2),
                     arb(1)) for k2 in range(n)]
      out.append([sum((wts[k2] * v[k2][i] for k2 in range(1, n)), wts[0] * v[0][i])
                  for i in range(d)])
    return out
  return fn


def _random_bumps_arb(x):
  """random_bumps on a nested list X [n][d] of balls (or gradient-carrying balls):
  f_ji = sum_b a_b exp(-((x_ji - c_b)^2 + (m_i - e_b)^2) / (2 s^2)), s = 3/20, with the
  float64 constants taken exactly (arb of a float64 is exact)."""
  a, c, e = (list(map(arb, map(float, v))) for v in targets_lib.random_bumps_params()[:3])
  num, den = targets_lib.RANDOM_BUMPS_WIDTH
  scale = -(arb(den) * den) / (2 * num * num)        # -1 / (2 s^2), exact
  n, d = len(x), len(x[0])
  out = [[None] * d for _ in range(n)]
  for i in range(d):
    m = sum((x[j][i] for j in range(1, n)), x[0][i]) / n
    dm = [(m - eb) * (m - eb) for eb in e]
    for j in range(n):
      acc = arb(0)
      for ab, cb, dmb in zip(a, c, dm):
        u = x[j][i] - cb
        acc = ((u * u + dmb) * scale).exp() * ab + acc
      out[j][i] = acc
  return out


def exact_values(target, k: np.ndarray, resolution: int):
  """Enclosures of the real f(C_L) at the centres C_L = (K + 1/2) / N of K [C, n, d]:
  a nested list [C][n][d] of arb balls, or None for a target that is not a built-in."""
  name = target.name
  if name not in targets_lib.BUILTIN_TARGETS or targets_lib.BUILTIN_TARGETS[name] is not target:
    return None
  k = np.asarray(k)
  _, n, d = k.shape
  out = []
  with ctx.workprec(EXACT_VALUE_BITS):
    if name == 'attention_map':
      w_q, w_k, w_v = (np.vectorize(lambda v: arb(float(v)), otypes=[object])(w)
                       for w in targets_lib.attention_map_weights(d))
      root = arb(d).sqrt()
    for row in k:
      c = [[Fraction(2 * int(v) + 1, 2 * resolution) for v in tok] for tok in row]
      if name == 'token_times_mean':
        m = [sum(c[j][i] for j in range(n)) / n for i in range(d)]
        vals = [[c[j][i] * m[i] for i in range(d)] for j in range(n)]
      elif name == 'prefix_mean':
        vals = [[sum(c[k2][i] for k2 in range(j + 1)) / (j + 1) for i in range(d)]
                for j in range(n)]
      elif name == 'reversal':
        vals = [[c[n - 1 - j][i] for i in range(d)] for j in range(n)]
      elif name == 'random_bumps':
        vals = _random_bumps_arb([[arb(v.numerator) / v.denominator for v in tok]
                                  for tok in c])
      else:
        x = np.asarray([[arb(v.numerator) / v.denominator for v in tok] for tok in c], object)
        q, kk, v = x @ w_q, x @ w_k, x @ w_v
        s = [[sum(q[j] * kk[k2]) / root for k2 in range(n)] for j in range(n)]
        vals = []
        for j in range(n):
          e = [(s[j][k2] - s[j][0]).exp() for k2 in range(n)]
          tot = sum(e)
          vals.append([sum(e[k2] * v[k2][i] for k2 in range(n)) / tot for i in range(d)])
      out.append([[v if isinstance(v, arb) else arb(v.numerator) / v.denominator
                   for v in tok] for tok in vals])
  return out
