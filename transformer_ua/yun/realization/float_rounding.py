r"""The rounding model the float certificates rest on (IEEE 754, round to nearest).

For a binary format with unit roundoff u (binary64: u = 2^-53, p = 53 significand bits;
binary32: u = 2^-24, p = 24) and smallest normal number tau (2^-1022, 2^-126):

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

What the runtime's softmax does is the one thing outside this model: every softmax in the
integer-id network has all its scores equal to 0 (W_Q = W_K = 0), and the certificate assumes
``SOFTMAX_ASSUMPTION`` (JAX and onnxruntime return fl(1/n) exactly; the tests check it for
both, n = 2..9, binary32 and binary64).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

#: What ``certify_lp(arithmetic=...)`` and ``approximate(arithmetic=...)`` accept.
ARITHMETICS = ('exact', 'float64', 'float32')

#: The one assumption of a float certificate about the runtime, printed in its line.
SOFTMAX_ASSUMPTION = 'softmax of n equal scores within 2 ulp of 1/n'
#: |w - 1/n| <= SOFTMAX_ULPS ulp(1/n) <= SOFTMAX_ULPS 2 u / n.
SOFTMAX_ULPS = 2


@dataclasses.dataclass(frozen=True)
class Format:
  """An IEEE 754 binary format: name, significand bits p, unit roundoff u = 2^-p, smallest
  normal tau, and the numpy dtype name."""

  name: str
  dtype: str
  precision: int
  tiny: Fraction

  @property
  def u(self) -> Fraction:
    return Fraction(1, 2 ** self.precision)

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
    'float64': Format('binary64', 'float64', 53, Fraction(1, 2 ** 1022)),
    'float32': Format('binary32', 'float32', 24, Fraction(1, 2 ** 126)),
}


def check_arithmetic(arithmetic) -> str:
  """``arithmetic`` if it is one of ``ARITHMETICS``, else ValueError (one line)."""
  if not isinstance(arithmetic, str) or arithmetic not in ARITHMETICS:
    raise ValueError(f'arithmetic={arithmetic!r}; allowed: '
                     f'{", ".join(repr(a) for a in ARITHMETICS)} (the arithmetic of g that '
                     'the certificate covers).')
  return arithmetic


def dot_error(fmt: Format, terms: int, abs_sum: Fraction) -> Fraction:
  """The any-order bound gamma_m sum |a_i b_i| + m tau of a dot product of ``terms``
  non-zero products."""
  return fmt.gamma(terms) * Fraction(abs_sum) + terms * fmt.tiny
