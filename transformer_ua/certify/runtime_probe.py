r"""The runtime probe: measure, on the runtime at hand, what a float certificate assumes.

A network certificate covers fl(g) under ``rounding``'s models. Four of their premises are
properties of the runtime that runs g, not of IEEE 754. ``check_runtime`` measures them in
the storage format of the arithmetic (binary64 for 'float64', binary32 for 'float32',
'tf32' and 'bfloat16'), with p its significand bits, u = 2^-p, tau its smallest normal and
ulp(y) the spacing of the format at the exact y (2^(e-p+1) on [2^e, 2^(e+1)), the
subnormal spacing below tau):

  (a) exp. On t in [-T, 0], T = 745 (binary64) or 104 (binary32), the range that a softmax's
      exp(s_j - max_k s_k) meets before its result rounds to 0:

          |exp^(t) - exp(t)| <= EXP_ULPS ulp(exp t)     where exp(t) >= tau
          |exp^(t) - exp(t)| <= tau                     where exp(t) <  tau

      The second line is the model's underflow term eta, so flushing subnormals to zero
      is allowed (XLA on CPU flushes them). There are ``samples`` arguments: a quarter
      uniform on [-T, 0], a quarter uniform on [-1, 0], and a half with |t| log-uniform
      on [1e-20, T], plus 0, -T and -tiny. The reference is exp in np.longdouble for
      binary64 (on x86 a 64-bit significand: relative error below 2^-62, under 2^-9 ulp
      of binary64), and exp in binary64 for binary32 (under 2^-28 ulp of binary32). Where
      np.longdouble is no wider than binary64, mpmath at 113 bits is used instead on a
      subsample of 20,000 arguments, and the report says so.

  (b) softmax, over the last axis.
      (1) n equal scores, n = 2..9, at score values 0, 1, -3.5, +-60 and 1000:
          |w_j - 1/n| <= SOFTMAX_ULPS ulp(1/n). A softmax that skips the max
          subtraction turns 1000 into inf and fails here.
      (2) Random rows, n = 2..100. The scores spread up to 700 (binary64) or 80
          (binary32), so that every exp stays normal, with offsets 0 and +-1000. Each w^_j
          must lie within the model's bound around the exact
          w_j = exp(s_j - M) / sum_k exp(s_k - M), M = max_k s_k (mpmath, 113 bits):

            d_j = s_j - M,  D = max_k |d_k|,  delta = EXP_ULPS 2u,  rho = 2u + u^2,
            w^_j / w_j <= e^{u(|d_j|+D)} (1+delta)(1+rho) / ((1-delta)(1-gamma_{n-1}))
            w^_j / w_j >= e^{-u(|d_j|+D)} (1-delta)(1-rho) / ((1+delta)(1+gamma_{n-1}))

          The bound comes from fl(s_j - M) = d_j (1+e) with |e| <= u, exp within delta, a
          sum of n terms in any order, and a division, or a reciprocal and a product (two
          roundings, rho). The report gives the largest fraction of this bound used.

  (c) matmuls.
      - Crafted operands. Operands 1 + 2^-k (k = 1..p-1) are placed against ones, in A
        and in B, in GEMV and GEMM shapes up to 256 x 256 x 256. IEEE arithmetic
        returns 1 + 2^-k exactly; an operand reduction to b explicit bits returns 1 for
        every k > b. The bits kept name the mode: 52 IEEE binary64, 23 IEEE binary32,
        10 TF32-like, 7 bfloat16-like.
      - Random operands, with random signs and magnitudes 2^-8..2^8, are measured
        against each model (*) of this storage: the largest
            |y^ - y| / (kappa_m S + (m+1) tau (A+B+2)).
        y is math.fsum of error-free products (Dekker's two-product), and its own
        rounding, 2^-52 |y|, is added to the error.
      - Accumulator sums (issue 71: random operands sit far from the worst case, and the
        crafted ones meet only zeros). Rows [1, t, t, ..., t] and [t, ..., t, 1] of K = 8,
        64 and 256 terms against ones, t = c 2^-k for c in {3, 15} and k from p - 4 to
        p + 3: every addend non-zero, each just below a half or a whole unit of some
        accumulator width, so that an accumulator that truncates where the model says
        nearest, one shorter than the format, one that rounds only non-zero addends, and a
        blocked one with too few alignment bits each lose t at every addition (up to about
        1.5 times the bound); the operands are numbers of every operand format, so the
        bound is (*) without its operand factor (1 + v)^2, gamma_{K+1}(u_acc) S (or the
        hardware model's); their largest ratio is ``accumulator_ratios``.
      - The operand rounding: 1 + 2^-11 + 2^-12 (and its negative) against 1 comes back
        1 + 2^-10 under round to nearest and 1 under truncation to TF32's 10 bits (for
        bfloat16, 1 + 2^-8 + 2^-9 and 7 bits): ``operand_rounding`` is 'nearest',
        'truncate', 'none' (IEEE: the operand is kept) or 'other'.
      - The hardware models (**): the runtime's matmul against the model's exact emulation
        (``MatmulModel.emulate_matmul``) on the random and accumulator operands;
        ``hardware_match`` is the fraction of entries equal to the bit. A hardware model
        is ok only at 1: its bound covers that accumulator, not any other.
      - For binary64, every result must come back a binary64 array. JAX with x64 off
        returns binary32.

  (d) erf and tanh, the library functions of GELU's two forms (issue 69):
      0.5 x (1 + erf(x / sqrt 2)) and 0.5 x (1 + tanh(c (x + 0.044715 x^3))),
      c = sqrt(2/pi). ``rounding.ERF_ASSUMPTION`` and ``TANH_ASSUMPTION`` assume, for
      f = erf with F = ERF_ULPS and f = tanh with F = TANH_ULPS, on every argument z,

          |f^(z) - f(z)| <= 2 F u |f(z)| + tau     (F ulp, an ulp being <= 2 u |f|)

      and the probe reports the largest max(|f^ - f| - tau, 0) / (2 u |f|), the error in
      those units (a true ulp just below 1 is u, so 7 ulp there is 3.5 of them).

      There are GELU_SAMPLES arguments of each, with x uniform on [-GELU_X, GELU_X]:
          erf:  a quarter z = fl(x / sqrt 2) (what the erf form evaluates), a quarter
                uniform on +-[2, 6] (erf rounds to 1 from z ~ 3.9 in binary32, ~ 5.9 in
                binary64), a half |z| log-uniform on [1e-20, 10] with random signs;
          tanh: a quarter z = fl(c (x + 0.044715 x^3)) in the format (|z| <= 44), a
                quarter uniform on +-[2, 20] (tanh rounds to 1 from z ~ 9.0 / ~ 19.1),
                a half |z| log-uniform on [1e-20, 45] with random signs;
      plus 0, +-tau, +-tau/4 (a subnormal: a runtime may flush it), +-1 and +-GELU_X. The
      reference is mpmath at 113 bits (below 2^-59 ulp of binary64). A runtime without the
      method, or whose method raises NotImplementedError (onnxruntime has no binary64 Erf
      kernel), is reported 'not measured' with the reason, and not refused for it: the
      certificate of a network with that GELU then prints the assumption unchecked.

A runtime is what ``certify.runtimes`` says: exp, softmax and matmul on NumPy arrays,
optionally erf, tanh and a name; ``check_runtime`` takes any of them, or what
``runtimes.as_runtime`` turns into one. The tests plant faults into subclasses of
``runtimes.NumpyRuntime``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from transformer_ua import rounding
from transformer_ua.certify.runtime_report import EXP_RANGE, GELU_X, RuntimeReport
from transformer_ua.certify.runtimes import JaxRuntime, as_runtime, runtime_name

#: The widest spread of a random softmax row: every exp(s_j - max) stays normal.
SOFTMAX_SPREAD = {'float64': 700.0, 'float32': 80.0}
#: Score values of the equal-score softmax rows.
EQUAL_SCORE_VALUES = (0.0, 1.0, -3.5, 60.0, -60.0, 1000.0)
#: Row lengths of the softmax rows (equal scores: n <= 9).
SOFTMAX_ROW_LENGTHS = (2, 3, 4, 5, 6, 7, 8, 9, 16, 64, 100)
#: (M, K, N) shapes of the crafted matmuls: GEMV and GEMM kernels, operand 1 + 2^-k in A.
CRAFTED_SHAPES = ((64, 32, 1), (64, 32, 32), (256, 256, 256))
#: (M, K, N) shapes of the random-operand matmuls.
RANDOM_SHAPES = ((32, 256, 32), (8, 1024, 4))
#: Fewest arguments ``check_runtime`` accepts (the certificates quote 10^6).
MIN_SAMPLES = 1000
#: Subsample measured with mpmath where np.longdouble is no wider than binary64.
MPMATH_SUBSAMPLE = 20000

#: Arguments of erf and of tanh (module docstring, (d)): mpmath measures each.
GELU_SAMPLES = 4000

_MP_BITS = 113


# -- (a) exp -------------------------------------------------------------------


def _exp_arguments(dtype: str, samples: int, rng) -> np.ndarray:
  top = EXP_RANGE[dtype]
  special = np.array([0.0, -top, -np.finfo(dtype).tiny, -1.0])
  quarter = (samples - len(special)) // 4
  rest = samples - len(special) - 2 * quarter
  t = np.concatenate([special, rng.uniform(-top, 0.0, quarter), rng.uniform(-1.0, 0.0, quarter),
                      -10.0 ** rng.uniform(-20.0, math.log10(top), rest)])
  return np.maximum(t, -top).astype(dtype)


def _ulp(ref, fmt: rounding.Format):
  """ulp of ``fmt`` at the exact positive values ``ref``: 2^(e-p) on [2^(e-1), 2^e)."""
  _, e = np.frexp(ref)
  floor = math.floor(math.log2(fmt.tiny)) - fmt.precision + 1
  return np.ldexp(np.ones_like(ref), np.maximum(e - fmt.precision, floor))


def _exp_errors_longdouble(t, y, fmt: rounding.Format):
  """(|y - exp t| / ulp, |y - exp t| / tau, exp t >= tau, y == 0 < exp t) with exp t in
  np.longdouble (binary64 arguments) or binary64 (binary32 arguments)."""
  if fmt.precision == 53:
    ref = np.exp(t.astype(np.longdouble))
  else:
    ref = np.exp(t.astype(np.float64)).astype(np.longdouble)
  err = np.abs(y.astype(np.longdouble) - ref)
  err = np.where(np.isfinite(err), err, np.inf)
  tau = float(fmt.tiny)
  smallest = float(fmt.tiny) * 2.0 ** (1 - fmt.precision)
  return (err / _ulp(ref, fmt), err / np.longdouble(tau), ref >= tau,
          (y == 0) & (ref >= smallest))


def _errors_mpmath(t, y, fmt: rounding.Format, function: str = 'exp'):
  """The same four arrays as ``_exp_errors_longdouble`` for mpmath's ``function`` (exp, erf,
  tanh) at 113 bits, with |f(t)| in place of exp t."""
  import mpmath                    # pylint: disable=import-outside-toplevel
  tau = mpmath.mpf(fmt.tiny.numerator) / fmt.tiny.denominator
  floor = math.floor(math.log2(fmt.tiny)) - fmt.precision + 1
  smallest = mpmath.ldexp(1, floor)
  ulps, taus, normal, flushed = [], [], [], []
  with mpmath.workprec(_MP_BITS):
    for ti, yi in zip(t.tolist(), y.tolist()):
      ref = getattr(mpmath, function)(mpmath.mpf(ti))
      err = abs(mpmath.mpf(yi) - ref) if math.isfinite(yi) else mpmath.inf
      _, e = mpmath.frexp(ref)
      ulps.append(float(err / mpmath.ldexp(1, max(e - fmt.precision, floor))))
      taus.append(float(err / tau))
      normal.append(abs(ref) >= tau)
      flushed.append(yi == 0 and abs(ref) >= smallest)
  return np.array(ulps), np.array(taus), np.array(normal), np.array(flushed)


def _model_ulps(t, y, fmt: rounding.Format, function: str):
  """max(|y - f(t)| - tau, 0) / (2 u |f(t)|) by mpmath at 113 bits: the error in the units
  the GELU bound uses (``rounding.ERF_ASSUMPTION``: |f^ - f| <= 2 F u |f| + tau, an ulp
  being at most 2 u |f|), inf where f(t) = 0 and the error exceeds tau."""
  import mpmath                    # pylint: disable=import-outside-toplevel
  tau = mpmath.mpf(fmt.tiny.numerator) / fmt.tiny.denominator
  u = mpmath.mpf(fmt.u.numerator) / fmt.u.denominator
  out = []
  with mpmath.workprec(_MP_BITS):
    for ti, yi in zip(t.tolist(), y.tolist()):
      ref = getattr(mpmath, function)(mpmath.mpf(ti))
      err = abs(mpmath.mpf(yi) - ref) if math.isfinite(yi) else mpmath.inf
      excess = max(err - tau, 0)
      out.append(0.0 if excess == 0 else (math.inf if ref == 0 else
                                         float(excess / (2 * u * abs(ref)))))
  return np.array(out)


def _longdouble_is_wide() -> bool:
  return np.finfo(np.longdouble).nmant >= 63


def _measure_exp(runtime, dtype: str, samples: int, rng, seen: set):
  fmt = rounding.FORMATS[dtype]
  t = _exp_arguments(dtype, samples, rng)
  if dtype == 'float64' and not _longdouble_is_wide():
    t = t[np.unique(np.linspace(0, len(t) - 1, MPMATH_SUBSAMPLE).astype(int))]   # every part
    errors, reference = _errors_mpmath, f'mpmath {_MP_BITS} bits on {len(t):,} args'
  else:
    errors = _exp_errors_longdouble
    reference = 'np.longdouble exp' if dtype == 'float64' else 'binary64 exp'
  y = _result(runtime.exp(t), t.shape, 'exp', seen)
  ulps, taus, normal, flushed = errors(t, y, fmt)
  worst = int(np.argmax(np.where(normal, ulps, -1.0)))
  under = taus[~normal]
  return dict(exp_ulps=float(ulps[worst]), exp_worst_t=float(t[worst]),
              exp_underflow=float(under.max()) if under.size else 0.0,
              exp_flushes=bool(flushed.any()), samples=len(t), reference=reference)


def _result(value, shape, op: str, seen: set) -> np.ndarray:
  """The runtime's result as a NumPy array of ``shape``; its dtype joins ``seen``."""
  arr = np.asarray(value)
  if arr.shape != tuple(shape):
    raise ValueError(f'the runtime\'s {op} returned shape {arr.shape}, expected {tuple(shape)}.')
  seen.add(arr.dtype.name)
  return arr


# -- (d) erf and tanh ----------------------------------------------------------


def _gelu_arguments(function: str, dtype: str, rng) -> np.ndarray:
  """The GELU_SAMPLES arguments of ``function`` (module docstring, (d)), in ``dtype``."""
  dt = np.dtype(dtype).type
  tiny = float(np.finfo(dtype).tiny)
  special = np.array([0.0, tiny, -tiny, tiny / 4, -tiny / 4, 1.0, -1.0, GELU_X, -GELU_X])
  quarter = (GELU_SAMPLES - len(special)) // 4
  rest = GELU_SAMPLES - len(special) - 2 * quarter
  x = rng.uniform(-GELU_X, GELU_X, quarter).astype(dtype)
  if function == 'erf':
    gelu = x / dt(math.sqrt(2))
    band, top = (2.0, 6.0), 10.0
  else:
    gelu = dt(math.sqrt(2 / math.pi)) * (x + dt(0.044715) * x * x * x)
    band, top = (2.0, 20.0), 45.0
  signs = rng.choice([-1.0, 1.0], quarter + rest)
  return np.concatenate([special.astype(dtype), gelu,
                         (signs[:quarter] * rng.uniform(*band, quarter)).astype(dtype),
                         (signs[quarter:] * 10.0 ** rng.uniform(-20.0, math.log10(top), rest)
                          ).astype(dtype)])


def _measure_gelu(runtime, dtype: str, rng, seen: set) -> dict:
  """The erf and tanh fields of a RuntimeReport (module docstring, (d))."""
  fmt = rounding.FORMATS[dtype]
  out, unmeasured, under = {}, [], 0.0
  for function in ('erf', 'tanh'):
    z = _gelu_arguments(function, dtype, rng)
    method = getattr(runtime, function, None)
    if not callable(method):
      unmeasured.append(f'{function} not measured (the runtime has no {function} method)')
      continue
    try:
      value = method(z)
    except NotImplementedError as err:
      unmeasured.append(f'{function} not measured ({err})')
      continue
    y = _result(value, z.shape, function, seen)
    ulps, taus, normal, _ = _errors_mpmath(z, y, fmt, function)
    model = _model_ulps(z, y, fmt, function)
    worst = int(np.argmax(model))
    out[f'{function}_ulps'] = float(model[worst])
    out[f'{function}_worst_x'] = float(z[worst])
    if np.any(~normal):
      under = max(under, float(taus[~normal].max()))
  return dict(out, gelu_underflow=under, gelu_samples=GELU_SAMPLES,
              gelu_unmeasured='; '.join(unmeasured))


# -- (b) softmax ---------------------------------------------------------------


def _equal_ulps(w, n: int, fmt: rounding.Format) -> float:
  """The largest |w - 1/n| / ulp(1/n), exact in Fractions."""
  exact = Fraction(1, n)
  ulp = Fraction(2) ** (math.floor(math.log2(exact)) - fmt.precision + 1)
  return max(float(abs(Fraction(v) - exact) / ulp) if math.isfinite(v) else math.inf
             for v in w.ravel().tolist())


def _random_rows(n: int, dtype: str, rng) -> np.ndarray:
  """Rows of n scores: spreads 0.1 .. SOFTMAX_SPREAD (reached), offsets 0 and +-1000."""
  rows = []
  for spread in (0.1, 1.0, 10.0, SOFTMAX_SPREAD[dtype]):
    for offset in (0.0, 1000.0, -1000.0):
      s = offset + spread * rng.uniform(-1.0, 0.0, (4, n))
      s[:, 0] = offset
      rows.append(rng.permuted(s, axis=1))
  return np.concatenate(rows).astype(dtype)


def _row_fraction(s, w, fmt: rounding.Format) -> float:
  """The largest fraction of the (b)(2) bound that the rows ``w`` = softmax^(``s``) use."""
  import mpmath                    # pylint: disable=import-outside-toplevel
  n = s.shape[1]
  u = float(fmt.u)
  delta = rounding.EXP_ULPS * 2 * u
  rho = 2 * u + u * u
  gamma = float(fmt.gamma(n - 1))
  worst = 0.0
  with mpmath.workprec(_MP_BITS):
    for row, got in zip(s.tolist(), w.tolist()):
      top = max(row)
      e = [mpmath.exp(mpmath.mpf(x) - mpmath.mpf(top)) for x in row]
      total = mpmath.fsum(e)
      big = max(abs(x - top) for x in row)
      for x, ej, wj in zip(row, e, got):
        if not math.isfinite(wj):
          return math.inf
        slack = u * (abs(x - top) + big)
        hi = math.exp(slack) * (1 + delta) * (1 + rho) / ((1 - delta) * (1 - gamma)) - 1
        lo = 1 - math.exp(-slack) * (1 - delta) * (1 - rho) / ((1 + delta) * (1 + gamma))
        dev = float(mpmath.mpf(wj) * total / ej - 1)
        worst = max(worst, dev / hi if dev > 0 else -dev / lo)
  return worst


def _measure_softmax(runtime, dtype: str, rng, seen: set):
  """(largest equal-score error in ulp of 1/n, largest fraction of the row bound used):
  one softmax call per row length, the equal-score rows (n <= 9) with the random ones."""
  fmt = rounding.FORMATS[dtype]
  equal, rows = 0.0, 0.0
  for n in SOFTMAX_ROW_LENGTHS:
    same = (np.repeat(np.array(EQUAL_SCORE_VALUES, dtype)[:, None], n, axis=1)
            if n <= 9 else np.zeros((0, n), dtype))
    s = np.concatenate([same, _random_rows(n, dtype, rng)])
    w = _result(runtime.softmax(s), s.shape, 'softmax', seen)
    if len(same):
      equal = max(equal, _equal_ulps(w[:len(same)], n, fmt))
    rows = max(rows, _row_fraction(s[len(same):], w[len(same):], fmt))
  return equal, rows


# -- (c) matmuls ---------------------------------------------------------------


def _operand_bits(runtime, dtype: str, seen: set) -> int:
  """The explicit significand bits matmul operands keep: the largest b with 1 + 2^-k
  returned exactly for every k <= b, operand in A or in B, every crafted shape."""
  full = rounding.FORMATS[dtype].precision - 1
  ks = np.arange(1, full + 1)
  lost = set()
  for m, k, n in CRAFTED_SHAPES:
    rows = np.arange(m)
    ops = (1.0 + np.ldexp(1.0, -ks[rows % full])).astype(dtype)
    a = np.zeros((m, k), dtype)
    a[rows, rows % k] = ops
    c = _result(runtime.matmul(a, np.ones((k, n), dtype)), (m, n), 'matmul', seen)
    lost.update(ks[rows % full][np.any(c != ops[:, None], axis=1)].tolist())
    c = _result(runtime.matmul(np.ones((n, k), dtype), a.T.copy()), (n, m), 'matmul', seen)
    lost.update(ks[rows % full][np.any(c != ops[None, :], axis=0)].tolist())
  return min(lost) - 1 if lost else full


def _accumulator_operands(dtype: str) -> list:
  """(a, b) pairs of the accumulator sums (module docstring, (c)): a = ones [2, K], b [K, N]
  with columns [1, t, ..., t] and [t, ..., t, 1]."""
  p = rounding.FORMATS[dtype].precision
  ts = [c * 2.0 ** -k for c in (3.0, 15.0) for k in range(p - 4, p + 4)]
  out = []
  for k_terms in (8, 64, 256):
    cols = []
    for t in ts:
      col = np.full(k_terms, t)
      col[0] = 1.0
      cols.append(col)
      cols.append(col[::-1].copy())
    b = np.stack(cols, axis=1).astype(dtype)
    out.append((np.ones((2, k_terms), dtype), b))
    out.append((b.T.copy(), np.ones((k_terms, 2), dtype)))
  return out


def _operand_rounding(runtime, dtype: str, seen: set) -> str:
  """'nearest' | 'truncate' | 'none' | 'other': how a matmul reduces 1 + 2^-(b+1) +
  2^-(b+2) (b = 10, TF32, unless 7, bfloat16, is what the operand bits say)."""
  bits = _operand_bits(runtime, dtype, seen)
  if bits >= rounding.FORMATS[dtype].precision - 1:
    return 'none'
  x = 1.0 + 2.0 ** -(bits + 1) + 2.0 ** -(bits + 2)
  a = np.array([[x], [-x]], dtype)
  got = _result(runtime.matmul(a, np.ones((1, 1), dtype)), (2, 1), 'matmul', seen)
  got = got[:, 0].astype(np.float64) * np.array([1.0, -1.0])
  if np.all(got == 1.0 + 2.0 ** -bits):
    return 'nearest'
  if np.all(got == 1.0):
    return 'truncate'
  return 'other'


def _hardware_match(runtime, dtype: str, rng, seen: set, mode: str) -> dict:
  """Model name -> fraction of matmul entries equal to the model's emulation."""
  models = {k: v for k, v in rounding.MATMUL_MODELS.items() if v.block and v.dtype == dtype}
  if not models:
    return {}
  pairs = _accumulator_operands(dtype)
  for m, k, n in ((8, 64, 8), (4, 256, 4)):
    pairs.append(((rng.choice([-1.0, 1.0], (m, k)) * 2.0 ** rng.uniform(-8, 8, (m, k))
                   ).astype(dtype),
                  (rng.choice([-1.0, 1.0], (k, n)) * 2.0 ** rng.uniform(-8, 8, (k, n))
                   ).astype(dtype)))
  got = [_result(runtime.matmul(a, b), (a.shape[0], b.shape[1]), 'matmul', seen)
         for a, b in pairs]
  out = {}
  modes = ('nearest', 'truncate') if mode not in ('nearest', 'truncate') else (mode,)
  for name, model in models.items():
    best = 0.0
    for md in modes:
      same = sum(int(np.sum(model.emulate_matmul(a, b, md) == g.astype(np.float32)))
                 for (a, b), g in zip(pairs, got))
      best = max(best, same / sum(g.size for g in got))
    out[name] = best
  return out


def _exact_error(got: float, a_row, b_col) -> float:
  """|got - sum_i a_i b_i| exactly (Fractions), rounded up to a float; inf if not finite."""
  if not math.isfinite(got):
    return math.inf
  diff = abs(Fraction(float(got)) - sum(Fraction(float(x)) * Fraction(float(y))
                                        for x, y in zip(a_row, b_col)))
  f = float(diff)
  return f if Fraction(f) >= diff else float(np.nextafter(f, np.inf))


def _two_product(a, b):
  """p, e with p + e = a b exactly (Dekker; binary64, no overflow or underflow)."""
  p = a * b
  split = 134217729.0                  # 2^27 + 1
  ca, cb = split * a, split * b
  ah, bh = ca - (ca - a), cb - (cb - b)
  al, bl = a - ah, b - bh
  return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _measure_matmul(runtime, dtype: str, rng, seen: set):
  """(model name -> largest |y^ - y| / (kappa_m S + (m+1) tau (A+B+2)) on random operands
  and the accumulator sums, the same on the accumulator sums alone)."""
  models = {k: v for k, v in rounding.MATMUL_MODELS.items() if v.dtype == dtype}
  ratios = dict.fromkeys(models, 0.0)
  pairs = []
  for m, k, n in RANDOM_SHAPES:
    pairs.append(((rng.choice([-1.0, 1.0], (m, k)) * 2.0 ** rng.uniform(-8, 8, (m, k))
                   ).astype(dtype),
                  (rng.choice([-1.0, 1.0], (k, n)) * 2.0 ** rng.uniform(-8, 8, (k, n))
                   ).astype(dtype)))
  crafted = _accumulator_operands(dtype)
  accumulator = dict.fromkeys(models, 0.0)
  for index, (a, b) in enumerate(pairs + crafted):
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    got = _result(runtime.matmul(a, b), (m, n), 'matmul', seen).astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    p, e = _two_product(a64[:, :, None], b64[None, :, :])
    exact = np.array([[math.fsum(np.concatenate([p[i, :, j], e[i, :, j]]))
                       for j in range(n)] for i in range(m)])
    err = (np.abs(got - exact) + 2.0 ** -52 * np.abs(exact)) * (1 + 2.0 ** -50)
    if index >= len(pairs):                  # the accumulator sums: exact in Fractions
      err = np.array([[_exact_error(got[i, j], a64[i], b64[:, j]) for j in range(n)]
                      for i in range(m)])
    err = np.where(np.isfinite(err), err, np.inf)
    s = np.abs(a64) @ np.abs(b64)
    big_a = np.abs(a64).max(axis=1)[:, None]
    big_b = np.abs(b64).max(axis=0)[None, :]
    for name, model in models.items():
      crafted_sum = index >= len(pairs)      # operands exact in every operand format: the
      kappa = model.kappa(k, 0 if crafted_sum else 2)       # model promises its sum alone
      bound = float(kappa) * s + (k + 1) * float(model.tiny) * (big_a + big_b + 2)
      ratio = float(np.max(err / bound))
      if crafted_sum:
        accumulator[name] = max(accumulator[name], ratio)
      else:
        ratios[name] = max(ratios[name], ratio)
  return ratios, accumulator


# -- the probe -----------------------------------------------------------------


def check_runtime(runtime='jax', *, arithmetic: str | None = None,
                  samples: int = 10 ** 6) -> RuntimeReport:
  """Measure exp, erf, tanh, softmax and matmuls of ``runtime`` in the storage format of
  ``arithmetic`` (module docstring): a ``RuntimeReport`` whose ``line()`` a certificate
  prints and whose ``ok_for(arithmetic)`` says whether its assumptions hold. ``arithmetic``
  None: what the runtime computes, 'float64' for JAX with x64 on and for the others,
  'float32' for JAX with x64 off (the report says that float64 needs x64); 'float64' asked
  of JAX with x64 off is refused in one line."""
  rt = as_runtime(runtime) if arithmetic is None or isinstance(arithmetic, str) else None
  x64_off = isinstance(rt, JaxRuntime) and not rt.x64
  note = ''
  if arithmetic is None:
    arithmetic = 'float32' if x64_off else 'float64'
    note = ("float64 needs JAX's x64 (jax.config.update('jax_enable_x64', True))"
            if x64_off else '')
  elif x64_off and arithmetic in rounding.MATMUL_MODELS and \
      rounding.MATMUL_MODELS[arithmetic].dtype == 'float64':
    raise ValueError(f'arithmetic={arithmetic!r} on JAX with x64 off: JAX computes binary32 '
                     "there; switch x64 on (jax.config.update('jax_enable_x64', True)) or "
                     "probe arithmetic='float32' (the default, None, picks it).")
  if not isinstance(arithmetic, str) or arithmetic not in rounding.MATMUL_MODELS:
    raise ValueError(f'arithmetic={arithmetic!r}; allowed: '
                     f'{", ".join(map(repr, rounding.MATMUL_MODELS))} (exact arithmetic runs '
                     'on no runtime).')
  if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or \
      samples < MIN_SAMPLES:
    raise ValueError(f'samples={samples!r}; allowed: an integer >= {MIN_SAMPLES} (exp '
                     'arguments; the certificates quote 10^6).')
  dtype = rounding.MATMUL_MODELS[arithmetic].dtype
  rng = np.random.default_rng(0)
  seen = set()
  exp = _measure_exp(rt, dtype, int(samples), rng, seen)
  equal, rows = _measure_softmax(rt, dtype, rng, seen)
  bits = _operand_bits(rt, dtype, seen)
  ratios, accumulator = _measure_matmul(rt, dtype, rng, seen)
  operand_rounding = _operand_rounding(rt, dtype, seen)
  match = _hardware_match(rt, dtype, rng, seen, operand_rounding)
  gelu = _measure_gelu(rt, dtype, np.random.default_rng(1), seen)
  return RuntimeReport(runtime=runtime_name(rt), arithmetic=arithmetic, dtype=dtype,
                       dtypes_seen=tuple(sorted(seen)), softmax_equal_ulps=equal,
                       softmax_rows=rows, operand_bits=bits, matmul_ratios=ratios,
                       note=note, accumulator_ratios=accumulator,
                       operand_rounding=operand_rounding, hardware_match=match, **exp,
                       **gelu)
