r"""The rounding models every float certificate rests on: one home for all of them.

IEEE 754 binary formats (round to nearest). For a format with unit roundoff u (binary64:
u = 2^-53, p = 53 significand bits; binary32: u = 2^-24, p = 24) and smallest normal
number tau (2^-1022, 2^-126):

    fl(a op b) = (a op b)(1 + e) + eta,    |e| <= u,  |eta| <= tau,    op in + - * /

(eta covers underflow, including runtimes that flush subnormals to zero); ReLU and max are
exact. A dot product of m terms, in ANY order, with or without fused multiply-add
(Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1):

    |fl(sum_i a_i b_i) - sum_i a_i b_i| <= gamma_m sum_i |a_i b_i| + m tau,
    gamma_m = m u / (1 - m u)                                   (m u < 1)

Two exact facts the integer-id network is built on:

  * integers and dyadic rationals: if every term and every partial sum of a sum is a multiple
    of 2^-b of magnitude below 2^(p-b), every order of summation is exact (each partial sum
    is representable, so rounding does nothing); a sum of such terms is exact in any order
    when sum |terms| < 2^(p-b).
  * the snap: on [2^c, 2^(c+1)) with c = p - 1 the spacing of the format is 1, so
    fl(y + 2^c + 1) = 2^c + 1 + round(y) for every y in (-1/2, 2^c - 2): an inexact y within
    1/2 of an integer becomes that integer exactly.

Matmul models (``MATMUL_MODELS``, what ``certify_network(arithmetic=)`` covers). A matmul
entry y = sum_{i<m} a_i b_i + c (c a bias, added anywhere in the sum, or 0) is computed as

    y^ = sum_i fl_op(a_i) fl_op(b_i) + c,  summed in any order,

    |fl_op(x) - x| <= v |x| + tau                 (operand reduction)
    each addition and product rounded with |e| <= u_acc, plus tau

so that, with S = sum_i |a_i b_i| + |c| and A, B the largest |a_i|, |b_i|,

    |y^ - y| <= kappa_m S + (m + 1) tau (A + B + 2),
    kappa_m = (1 + v)^2 (1 + gamma_{m+1}(u_acc)) - 1                          (*)

  'float64'  v = 0,      u_acc = 2^-53   IEEE binary64, round to nearest
  'float32'  v = 0,      u_acc = 2^-24   IEEE binary32, round to nearest
  'tf32'     v = 2^-10,  u_acc = 2^-23   float32 storage; operands to 10 explicit mantissa
                                         bits, rounded OR truncated (relative error below
                                         2^-10 either way); accumulation in float32 that
                                         need not round to nearest (tensor cores have been
                                         measured truncating, Fasi et al. 2021): any
                                         faithful rounding, |e| < 2^-23
  'bfloat16' v = 2^-7,   u_acc = 2^-23   one bfloat16 pass with float32 accumulation (JAX's
                                         DEFAULT precision on TPUs): operands to 7 explicit
                                         bits, rounded or truncated; accumulation as TF32's

Per-entry operand reduction (***). Where the weights are exact numbers of the operand format
(``with_weights_reduced``), the certifier splits (*) into the activation's own reduction
rho and the accumulation alone: with a^ the computed activation, fl_op(a^) = a^ + r,
|r| <= rho, and exact weights w,

    |y^ - y| <= sum_i |w_i| (D_i + rho_i) + kappa_m^acc (sum_i |w_i| (A_i + rho_i) + |c|)
                + (m + 1) tau (...),      kappa_m^acc = kappa_m with no reduced operand,

(the bias or residual c is added, never reduced), and for a product of two activations
(scores, mix) |a~ b~ - a b| <= (D_a + rho_a)(A_b + rho_b) + M_a (D_b + rho_b). rho is
per entry, from the computed value's range [lo, hi]: a number y of magnitude in
[2^e, 2^(e+1)) loses under one unit of its last kept bit, 2^(e + 1 - p_op), when truncated
and at most half of it when rounded, so |r| <= v 2^floor(log2 max|y|) + tau
(``operand_ulp_error``: up to 2x below v |y|; for a value in [1/2, 1) in bfloat16 rounded
to nearest, 2^-9 absolute); and where both ends of [lo, hi] reduce to one r in every mode
allowed (the reductions are monotone), every y between does too and |r| <= max(|r - lo|,
|r - hi|) (``operand_error``: 0 for an exactly representable point such as the scores of a
head with W_Q = W_K = 0, |fl_op(1/3) - 1/3| for its uniform weights).

One-signed reductions (****). A truncation moves toward zero: for a computed operand
a^ >= 0 (a ReLU output always; any activation whose range, widened by its D, is >= 0), r =
fl_op(a^) - a^ lies in [-rho^t, 0], for a^ <= 0 in [0, rho^t], rho^t its truncation bound;
rounded to nearest, |r| <= rho^n (half a unit of the last kept bit); a range straddling 0
keeps [-rho^t, rho^t]. Where the activations a^_1..a^_r that one output of a matmul sums
(a row or column of its operands: a token's entries at W_Q, W_K, W_V, W_1, the readout, a
head's o at W_O, the ReLU outputs at W_2, a row of softmax weights and a column of v in the
mix) are reduced in ONE mode (all truncated, or all rounded to
nearest: the operand row goes through one conversion; printed in the line; other rows and
other matmuls may use the other mode), with W the (exact) weights of that output and
nonnegative operands,

    |sum_i W_i r_i| <= max(P, N, S),   P = sum_{W_i > 0} W_i rho^t_i,
                                       N = sum_{W_i < 0} |W_i| rho^t_i,  S = sum_i |W_i| rho^n_i

in place of sum_i |W_i| max(rho^t_i, rho^n_i); in general (signs of either kind, interval
coefficients such as the feed-forward's W_2 [Theta] W_1, and two matmuls' reductions in one
output, each in its own mode, and deviations kept as signed sides through the attention
into the feed-forward) ``certify/signed_reduction.py``. It gains where coefficients of
both signs meet operands of one sign; a sum of same-sign terms keeps the magnitude bound.

Hardware models (**), from Khattak & Mikaitis, "Accurate Models of NVIDIA Tensor Cores"
(arXiv 2512.07004), as this module reads them: TF32 operands (either reduction, v as
above), products exact (11 x 11 bits fit binary32), the k = ``block`` products of a step
and the accumulator c aligned to the largest of them, each significand cut (truncated,
no sticky bit) below 2^(E + 1 - 24 - e) where 2^E <= the largest magnitude and e =
``align_bits``, the aligned terms summed exactly, and the sum normalized and truncated to
binary32 (|RZ(y) - y| < 2^-23 |y|):

  'tf32-a100'  k = 4, e = 1       'tf32-h100'  k = 8, e = 2   (H100 / H200)

A step with T = |c| + sum |x_i| then errs by at most beta T, beta = k 2^(-23-e) + 2^-23 (1 +
k 2^(-23-e)) (the largest term loses nothing, each other loses under 2^(E+1-24-e) <= 2^(-23-e)
T), and its result is at most (1 + beta) T; over nb = ceil(m / k) steps, and any split of
the steps into partial accumulators that IEEE binary32 additions (round to nearest) then
combine with the bias,

    |y^ - y| <= ((1 + v)^r (1 + beta)^nb (1 + gamma_{nb+1}(2^-24)) - 1) S + (m + 1) tau (...)

(r = 2 reduced operands, 1 when the weights are exact), in place of (*)'s factor. The
emulation that tests it is tests/tensor_core_models.py; no GPU ran here, and K&M's own
test vectors are not committed (their MATLAB models were not at hand), so the models rest
on the paper's description as summarized in issue 71.

Overflow. The model above holds only while no result overflows: each value z^ of the run,
each operand (before and after its reduction) and each partial sum of a dot product must
have magnitude at most the format's largest finite number (``Format.max_finite``; for
'tf32' and 'bfloat16' the operand format's, ``MatmulModel.range_limit``, since rounding to
nearest carries the largest binary32 numbers up to inf). A faithful rounding of a value
below a finite number F of the format is at most F, so it suffices that the bounds
M + D of every value and S + D of every partial sum (S = sum |terms|) stay below that
limit; the certifier refuses a network where one does not (``certify.float_deviation``).

Everything that is not a matmul (residual additions, the softmax's max subtraction, exp,
sum and division) runs in the storage format (binary64 for 'float64', binary32 for the
others), IEEE round to nearest. exp is the one library function: the certificate assumes
it within ``EXP_ULPS`` ulp of the true exp on the arguments that arise (t <= 0), and the
softmax's normalization within two roundings (a division, or a reciprocal and a product).
``certify.runtime_probe.check_runtime`` measures both, and the IEEE-ness of float32
matmuls, on the runtime at hand.

The integer-id network's certificate uses only the IEEE formats (``FORMATS``) and states
every hypothesis it rests on in its line (``INTEGER_ID_ASSUMPTIONS``, docs/proofs/
integer_ids.md, Model (R)): round to nearest; IEEE products of the stored operands, any
summation order, with or without FMA, and no rewriting across operations (no TF32 or
bfloat16 matmul passes, no fast-math); every softmax there has all its scores equal to 0
(W_Q = W_K = 0) and returns weights within 2 ulp of 1/n (``SOFTMAX_ASSUMPTION``: JAX and
onnxruntime return fl(1/n) exactly; the tests check it for both, n = 2..9, binary32 and
binary64); the input is the real X rounded once to the format. 'tf32' and 'bfloat16' are
refused for it (``check_arithmetic``): TF32 keeps 11 significant bits of an operand, so the
quantizer's ReLU outputs (about s x, s the inverse ramp) lose their low bits and a step
ReLU(y + 1) - ReLU(y) can come out 0 or 2^k instead of 1.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

#: What ``certify_lp(arithmetic=...)`` and ``approximate(arithmetic=...)`` accept.
ARITHMETICS = ('exact', 'float64', 'float32')

#: The integer-id certificate's assumption about the softmax, printed in its line.
SOFTMAX_ASSUMPTION = 'softmax of n equal scores within 2 ulp of 1/n'
#: |w - 1/n| <= SOFTMAX_ULPS ulp(1/n) <= SOFTMAX_ULPS 2 u / n.
SOFTMAX_ULPS = 2
#: Every hypothesis of the integer-id float certificate about the runtime (module docstring),
#: each printed in its line.
INTEGER_ID_ASSUMPTIONS = (
    'round to nearest',
    'IEEE products of the stored operands summed in any order, with or without FMA (no TF32 '
    'or bfloat16 matmul passes: in JAX, matmul precision HIGHEST on GPUs and TPUs), no '
    'fast-math rewriting across operations, subnormals kept or flushed',
    SOFTMAX_ASSUMPTION,
    'the input X rounded once to the format',
)
#: Why the integer-id certificate refuses the non-IEEE matmul models (``check_arithmetic``).
NOT_IEEE_PRODUCTS = ('the integer-id certificate covers IEEE products only: {name} rounds each '
                     'matmul operand to {bits} significant bits, so the quantizer\'s ReLU '
                     'outputs (about s x, s the inverse ramp: 2^17 for N = 61) lose their '
                     'low bits and a step ReLU(y + 1) - ReLU(y) can come out 0 or 128 '
                     'instead of 1; run g in '
                     "float32 or float64 with matmul precision HIGHEST (what g.apply does) "
                     "and certify arithmetic='float32' or 'float64'")


@dataclasses.dataclass(frozen=True)
class Format:
  """An IEEE 754 binary format: name, significand bits p, unit roundoff u = 2^-p, smallest
  normal tau, and the numpy dtype name."""

  name: str
  dtype: str
  precision: int
  tiny: Fraction
  emax: int

  @property
  def u(self) -> Fraction:
    return Fraction(1, 2 ** self.precision)

  @property
  def max_finite(self) -> Fraction:
    """The largest finite number, (2 - 2^(1-p)) 2^emax: a result of larger magnitude
    overflows (to inf under round to nearest once it passes the midpoint above it)."""
    return (2 - Fraction(2, 2 ** self.precision)) * Fraction(2) ** self.emax

  @property
  def snap_exponent(self) -> int:
    """c with spacing 1 on [2^c, 2^(c+1))."""
    return self.precision - 1

  @property
  def snap(self) -> int:
    """The snap constant 2^c + 1 (module docstring)."""
    return 2 ** self.snap_exponent + 1

  @property
  def integer_limit(self) -> int:
    """2^p: every integer of magnitude <= 2^p is representable."""
    return 2 ** self.precision

  def gamma(self, m: int) -> Fraction:
    """gamma_m = m u / (1 - m u); ValueError when m u >= 1."""
    mu = m * self.u
    if mu >= 1:
      raise ValueError(f'gamma_{m} is undefined in {self.name} (m u >= 1).')
    return mu / (1 - mu)

  def representable(self, value: Fraction) -> bool:
    """True iff the rational ``value`` is a number of this format (normal range)."""
    value = Fraction(value)
    if value == 0:
      return True
    num, den = abs(value.numerator), value.denominator
    if den & (den - 1):
      return False                  # not dyadic
    while num % 2 == 0:
      num //= 2
    return num.bit_length() <= self.precision and abs(value) >= self.tiny

  def describe(self) -> str:
    return (f'IEEE 754 {self.name} (u = 2^-{self.precision}), round to nearest, any summation '
            'order, with or without FMA, subnormals kept or flushed')


FORMATS = {
    'float64': Format('binary64', 'float64', 53, Fraction(1, 2 ** 1022), 1023),
    'float32': Format('binary32', 'float32', 24, Fraction(1, 2 ** 126), 127),
}


def check_arithmetic(arithmetic) -> str:
  """``arithmetic`` if it is one of ``ARITHMETICS``, else ValueError (one line); 'tf32' and
  'bfloat16' are refused with the reason (``NOT_IEEE_PRODUCTS``)."""
  if isinstance(arithmetic, str) and arithmetic in MATMUL_MODELS and \
      arithmetic not in ARITHMETICS:
    model = MATMUL_MODELS[arithmetic]
    raise ValueError(f'arithmetic={arithmetic!r}: '
                     + NOT_IEEE_PRODUCTS.format(name=arithmetic, bits=model.operand_bits)
                     + '.')
  if not isinstance(arithmetic, str) or arithmetic not in ARITHMETICS:
    raise ValueError(f'arithmetic={arithmetic!r}; allowed: '
                     f'{", ".join(repr(a) for a in ARITHMETICS)} (the arithmetic of g that '
                     'the certificate covers).')
  return arithmetic


def dot_error(fmt: Format, terms: int, abs_sum: Fraction) -> Fraction:
  """The any-order bound gamma_m sum |a_i b_i| + m tau of a dot product of ``terms``
  non-zero products."""
  return fmt.gamma(terms) * Fraction(abs_sum) + terms * fmt.tiny


#: The arithmetics ``certify_network`` covers: exact, and each ``MATMUL_MODELS`` entry.
NETWORK_ARITHMETICS = ('exact', 'float64', 'float32', 'tf32', 'bfloat16', 'tf32-a100',
                       'tf32-h100')

#: exp's assumed accuracy (ulp of the result) on the arguments a softmax gives it.
EXP_ULPS = 4
#: The exp assumption, printed in every network certificate's line.
EXP_ASSUMPTION = (f'exp within {EXP_ULPS} ulp on (-inf, 0] where exp(t) >= tau and within tau '
                  'below (subnormals kept or flushed), softmax normalized by a division or a '
                  'reciprocal and a product')


@dataclasses.dataclass(frozen=True)
class MatmulModel:
  """One of the module docstring's matmul models (*): storage format, operand reduction
  ``v`` and accumulation roundoff ``u_acc``, all exact rationals."""

  name: str
  storage: Format
  operand_rel: Fraction
  accum_u: Fraction
  operand_bits: int        # significand bits an operand keeps (implicit bit included)
  weights_exact: bool = False   # the weights were reduced to the operand format already
  block: int = 0           # hardware models (**): products per fused block, 0: none
  align_bits: int = 0      # extra alignment bits beyond the accumulator's 24
  hardware: str = ''       # the hardware the model describes, named in the line
  operand_mode: str = ''   # 'nearest' where the runtime probe measured it, '' either mode,
                           # 'truncate' (``with_truncated_operands``: one mode's own bound)

  def kappa(self, m: int, reduced: int = 2) -> Fraction:
    """kappa_m of (*): the relative bound of an m-term dot product plus a bias, with
    ``reduced`` (0, 1 or 2) of the two operands of each product reduced by v."""
    if self.block:
      return (1 + self.operand_rel) ** reduced * self.block_growth(m) - 1
    k = m + 1
    mu = k * self.accum_u
    if mu >= 1:
      raise ValueError(f'a {m}-term dot product has no error bound in {self.name}.')
    return (1 + self.operand_rel) ** reduced * (1 + mu / (1 - mu)) - 1

  def block_growth(self, m: int) -> Fraction:
    """(1 + beta)^nb (1 + gamma_{nb+1}(2^-24)), nb = ceil(m / block): the accumulation
    factor of the hardware models (**), exact."""
    nb = -(-m // self.block)
    p = self.storage.precision
    align = self.block * Fraction(1, 2 ** (p - 1 + self.align_bits))
    beta = align + Fraction(1, 2 ** (p - 1)) * (1 + align)
    mu = (nb + 1) * self.storage.u
    if mu >= 1:
      raise ValueError(f'a {m}-term dot product has no error bound in {self.name}.')
    return (1 + beta) ** nb * (1 + mu / (1 - mu))

  def with_nearest_operands(self) -> 'MatmulModel':
    """This model for a runtime that rounds operands to nearest (the probe's
    ``operand_rounding``): |fl_op(x) - x| <= v/2 |x| (half a unit of the last kept bit)."""
    return dataclasses.replace(self, operand_rel=self.operand_rel / 2, operand_mode='nearest')

  def with_truncated_operands(self) -> 'MatmulModel':
    """This model with operands truncated (toward zero) only: |fl_op(x) - x| <= v |x| still,
    and fl_op(x) - x <= 0 for x >= 0 (``operand_error`` then bounds that mode alone; the
    certifier uses it beside ``with_nearest_operands`` for one-signed reductions, (****))."""
    return dataclasses.replace(self, operand_mode='truncate')

  def with_weights_reduced(self) -> 'MatmulModel':
    """This model for a network whose weights are already numbers of the operand format
    (``reduce_weights``): a weight times an activation then has one reduced operand."""
    return dataclasses.replace(self, weights_exact=True)

  @property
  def range_limit(self) -> Fraction:
    """The largest finite number of both the storage and the operand format (TF32 and
    bfloat16 keep binary32's exponent range with fewer bits, so rounding an operand to
    nearest carries the binary32 values above (2 - 2^-p_op) 2^127 to inf). Every value,
    operand and partial sum of a certified run must stay below it (module docstring)."""
    operand = (2 - Fraction(2, 2 ** self.operand_bits)) * Fraction(2) ** self.storage.emax
    return min(self.storage.max_finite, operand)

  @property
  def u(self) -> Fraction:
    """The storage format's unit roundoff (elementwise operations)."""
    return self.storage.u

  @property
  def tiny(self) -> Fraction:
    return self.storage.tiny

  @property
  def dtype(self) -> str:
    return self.storage.dtype

  def emulate_matmul(self, a, b, mode: str = 'nearest'):
    """a [M, K] @ b [K, N] as the hardware model (**) computes it, exactly (NumPy): operands
    reduced by ``mode``, products exact, blocks of ``block`` aligned with the accumulator and
    truncated, block sums truncated to binary32, accumulated left to right. ValueError for
    a model without blocks (it allows many results, not one)."""
    import numpy as np  # local: this module stays importable without NumPy's cost
    if not self.block:
      raise ValueError(f'{self.name} is not a hardware model: it has no single result.')
    ra = self.reduce_operand(np.asarray(a, np.float32), mode).astype(np.float64)
    rb = self.reduce_operand(np.asarray(b, np.float32), mode).astype(np.float64)
    prods = ra[:, :, None] * rb[None, :, :]                  # [M, K, N], exact
    acc = np.zeros((ra.shape[0], rb.shape[1]))
    p = self.storage.precision
    for start in range(0, ra.shape[1], self.block):
      terms = np.concatenate([acc[:, None, :], prods[:, start:start + self.block, :]], axis=1)
      big = np.abs(terms).max(axis=1, keepdims=True)
      _, e = np.frexp(np.where(big > 0, big, 1.0))
      grid = np.ldexp(1.0, e - p - self.align_bits)          # 2^(E + 1 - 24 - e_align)
      total = (np.trunc(terms / grid) * grid).sum(axis=1)     # exact: few bits
      m, ex = np.frexp(total)
      acc = np.where(total == 0, 0.0, np.ldexp(np.trunc(np.ldexp(m, p)), ex - p))
    return acc.astype(np.float32)

  def operand_ulp_error(self, a, xp=None):
    """Per entry, a float64 upper bound of |fl_op(y) - y| over the storage-format numbers y
    with |y| <= a, for every operand reduction the model allows ((***) in the module
    docstring): v 2^floor(log2 a) + tau, 0 for the IEEE models. ``xp`` the array module
    (NumPy by default, jax.numpy in the box kernel); every step is exact (powers of 2)."""
    import numpy as np  # local: this module stays importable without NumPy's cost
    xp = np if xp is None else xp
    a = xp.abs(xp.asarray(a, xp.float64))
    if self.operand_rel == 0:
      return xp.zeros_like(a)
    finite = xp.isfinite(a)
    _, e = xp.frexp(xp.where(finite & (a > 0), a, 1.0))
    binade = xp.where(a > 0, xp.ldexp(xp.ones_like(a), e - 1), 0.0)     # 2^floor(log2 a)
    return xp.where(finite, float(self.operand_rel) * binade + float(self.storage.tiny),
                    xp.inf)

  def operand_error(self, lo, hi, xp=None):
    """Per entry, a float64 upper bound of |fl_op(y) - y| over the storage-format numbers y
    in [lo, hi] (a computed value's range), for every operand reduction the model allows:
    where one reduced value r serves all of [lo, hi] in every allowed mode (the reductions
    are monotone, so it is enough that both ends, taken inward to the storage format and
    normal or zero, reduce to r), max(|r - lo|, |r - hi|) + tau; elsewhere, and never above
    it, ``operand_ulp_error(max(|lo|, |hi|))``. 0 for the IEEE models. ``xp`` as there."""
    import contextlib
    import numpy as np  # local: this module stays importable without NumPy's cost
    xp = np if xp is None else xp
    lo = xp.asarray(lo, xp.float64)
    hi = xp.asarray(hi, xp.float64)
    ulp = self.operand_ulp_error(xp.maximum(xp.abs(lo), xp.abs(hi)), xp)
    if self.operand_rel == 0:
      return ulp
    f32 = xp.float32 if self.dtype == 'float32' else xp.float64
    quiet = np.errstate(over='ignore', invalid='ignore') if xp is np else \
        contextlib.nullcontext()
    with quiet:
      l32 = lo.astype(f32)
      l32 = xp.where(l32.astype(xp.float64) < lo, xp.nextafter(l32, f32(np.inf)), l32)
      h32 = hi.astype(f32)
      h32 = xp.where(h32.astype(xp.float64) > hi, xp.nextafter(h32, f32(-np.inf)), h32)
      l64, h64 = l32.astype(xp.float64), h32.astype(xp.float64)
      normal = float(self.storage.tiny)
      ok = xp.isfinite(l64) & xp.isfinite(h64) & (l64 <= h64)
      for end in (l64, h64):
        ok = ok & ((end == 0) | (xp.abs(end) >= normal))
      exact = xp.zeros_like(l64)
      modes = {'nearest': ('nearest',), 'truncate': ('truncate',)}.get(
          self.operand_mode, ('nearest', 'truncate'))
      for mode in modes:
        r_lo, r_hi = self._reduce_f(l64, mode, xp), self._reduce_f(h64, mode, xp)
        ok = ok & (r_lo == r_hi)
        exact = xp.maximum(exact, xp.maximum(xp.abs(r_lo - l64), xp.abs(r_lo - h64)))
    exact = xp.nextafter(exact + normal, np.inf)
    return xp.where(ok, xp.minimum(exact, ulp), ulp)

  def _reduce_f(self, y, mode: str, xp=None):
    """``reduce_operand`` of normal (or zero) float64 copies of storage numbers, through
    frexp: y = m 2^e, m in [1/2, 1), kept to ``operand_bits`` bits (trunc, or rint: ties to
    even), exact. Agrees with ``reduce_operand`` on every normal number (tested)."""
    import numpy as np  # local: this module stays importable without NumPy's cost
    xp = np if xp is None else xp
    m, e = xp.frexp(y)
    scaled = xp.ldexp(m, xp.full_like(e, self.operand_bits))
    kept = xp.trunc(scaled) if mode == 'truncate' else xp.rint(scaled)
    return xp.ldexp(kept, e - self.operand_bits)

  def check_weights(self, named_arrays) -> None:
    """ValueError (one line) unless every weight of ``named_arrays`` ((name, array) pairs of
    the network as given) stays finite when stored in the storage format and is at most
    ``range_limit`` in magnitude (so that its reduction to the operand format stays finite)."""
    import numpy as np  # local: this module stays importable without NumPy's cost
    limit = float(self.range_limit)
    for name, arr in named_arrays:
      arr = np.asarray(arr, np.float64)
      if arr.size == 0:
        continue
      with np.errstate(over='ignore'):
        stored = np.abs(arr.astype(self.dtype).astype(np.float64))
      worst = float(stored.max())
      if not worst <= limit:
        raw = float(np.abs(arr).max())
        cause = (f'overflows to inf when stored in {self.storage.name}' if np.isinf(worst)
                 else f'is above {limit:.6g}, the largest finite {self.name} operand, so '
                 'rounding it can give inf')
        raise ValueError(f'the weight {name} holds {raw:.6g}, which {cause}; no '
                         f'{self.name} certificate (scale the network down or certify it in '
                         'float64).')

  def describe(self) -> str:
    if self.operand_rel == 0:
      return self.storage.describe()
    both = self.operand_mode != 'nearest'
    weights = ('weights reduced to the operand format exactly, ' + (
        'by round to nearest and by truncation (one mode throughout; both certified, the '
        'worse counted), ' if both else 'by round to nearest, ') + 'activations '
        if self.weights_exact else '')
    how = ('rounded or truncated' + (' (one mode within each vector of activations that '
                                     'one output of a matmul sums)' if self.weights_exact
                                     else '')
           if both else 'rounded to nearest, as the runtime probe measured')
    accumulation = ('float32 accumulation in any order, faithful rounding' if not self.block
                    else f'exact products accumulated in fused blocks of {self.block} with the '
                    f'accumulator, aligned with {self.align_bits} extra bit'
                    f'{"s" if self.align_bits > 1 else ""} and truncated (no sticky bit), '
                    'the block sums truncated to binary32, partial sums combined in IEEE '
                    f'binary32: the model of {self.hardware}')
    return (f'{self.name} matmuls ({weights}operands to {self.operand_bits - 1} explicit '
            f'bits, {how}; {accumulation}), other operations in IEEE binary32, round to '
            'nearest')

  def reduce_operand(self, x, mode: str = 'nearest'):
    """Exact NumPy emulation of the operand reduction: float32 ``x`` to
    ``operand_bits`` significand bits, ``mode`` 'nearest' (ties to even) or 'truncate'.
    The identity (a copy, dtype kept) for the IEEE models."""
    import numpy as np  # local: this module stays importable without NumPy's cost
    if self.operand_rel == 0:
      return np.array(x, copy=True)
    x = np.asarray(x, dtype=np.float32)
    drop = 24 - self.operand_bits
    if drop <= 0:
      return x.copy()
    bits = x.view(np.uint32).astype(np.uint64)
    if mode == 'nearest':
      half = np.uint64(1 << (drop - 1))
      lsb = (bits >> np.uint64(drop)) & np.uint64(1)
      bits = bits + half - np.uint64(1) + lsb
    elif mode != 'truncate':
      raise ValueError(f"mode={mode!r}; allowed: 'nearest', 'truncate'.")
    mask = np.uint64((0xFFFFFFFF >> drop) << drop)
    return (bits & mask).astype(np.uint32).view(np.float32)


MATMUL_MODELS = {
    'float64': MatmulModel('float64', FORMATS['float64'], Fraction(0), Fraction(1, 2 ** 53),
                           53),
    'float32': MatmulModel('float32', FORMATS['float32'], Fraction(0), Fraction(1, 2 ** 24),
                           24),
    'tf32': MatmulModel('tf32', FORMATS['float32'], Fraction(1, 2 ** 10),
                        Fraction(1, 2 ** 23), 11),
    'bfloat16': MatmulModel('bfloat16', FORMATS['float32'], Fraction(1, 2 ** 7),
                            Fraction(1, 2 ** 23), 8),
    'tf32-a100': MatmulModel('tf32-a100', FORMATS['float32'], Fraction(1, 2 ** 10),
                             Fraction(1, 2 ** 23), 11, block=4, align_bits=1,
                             hardware='NVIDIA A100 tensor cores (Khattak & Mikaitis 2025)'),
    'tf32-h100': MatmulModel('tf32-h100', FORMATS['float32'], Fraction(1, 2 ** 10),
                             Fraction(1, 2 ** 23), 11, block=8, align_bits=2,
                             hardware='NVIDIA H100/H200 tensor cores (Khattak & Mikaitis '
                             '2025)'),
}


def check_network_arithmetic(arithmetic) -> str:
  """``arithmetic`` if it is one of ``NETWORK_ARITHMETICS``, else ValueError (one line)."""
  if not isinstance(arithmetic, str) or arithmetic not in NETWORK_ARITHMETICS:
    raise ValueError(f'arithmetic={arithmetic!r}; allowed: '
                     f'{", ".join(repr(a) for a in NETWORK_ARITHMETICS)}.')
  return arithmetic


# -- The stock-layer operations (issue 69): sqrt, division, erf, tanh -------------------------
#
# LayerNorm and GELU add four library operations to the softmax's exp. What the network
# certificate assumes of each, in the storage format (u its unit roundoff, tau its smallest
# normal; ``certify.float_deviation`` derives its bounds from exactly these):
#
#   sqrt, division     correctly rounded IEEE 754 operations: |fl(op) - op| <= u |op| + tau
#                      (a reciprocal square root is a sqrt and a division, or a reciprocal
#                      and a product: each its own correctly rounded operation)
#   erf, tanh          |f^ - f| <= 2 F u |f| + tau with F = ERF_ULPS / TANH_ULPS (F ulp, an
#                      ulp being at most 2 u |f|, plus tau absolute), on every argument
#
# ``certify.runtime_probe`` measures erf and tanh against mpmath on the runtime at hand.

#: erf's assumed accuracy (ulp of the result), on every float argument.
ERF_ULPS = 4
#: tanh's assumed accuracy (ulp of the result), on every float argument.
TANH_ULPS = 4
#: Printed where a certificate's network has a LayerNorm.
SQRT_DIV_ASSUMPTION = ('LayerNorm: sqrt and division each one correctly rounded IEEE '
                       'operation (rsqrt as a sqrt and a division or a reciprocal), mean and '
                       'variance in the storage format, two-pass, one-pass (E[z^2] - mu^2) or '
                       "Welford's recurrence, sums in any order")
#: Printed where a certificate's network has an erf-form GELU.
ERF_ASSUMPTION = (f'GELU x Phi(x) as 0.5 x (1 + erf(x / sqrt 2)) or 0.5 x erfc(-x / sqrt 2), '
                  f'erf and erfc within {2 * ERF_ULPS} u |erf| + tau ({ERF_ULPS} ulp) on every '
                  'argument')
#: Printed where a certificate's network has a tanh-form GELU.
TANH_ASSUMPTION = (f'GELU 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) with its constants '
                   f'rounded to the format, tanh within {2 * TANH_ULPS} u |tanh| + tau '
                   f'({TANH_ULPS} ulp) on every argument')
