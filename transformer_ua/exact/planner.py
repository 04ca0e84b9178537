"""The bit planner: a proven bound on every intermediate integer -> int64 or limbs.

``plan(bound, arithmetic)`` turns a proven bound ``B`` on the magnitude of *every*
intermediate integer a computation forms (inputs, products, partial sums, tie
numerators, outputs) into the arithmetic that holds it, or refuses:

    bits_required = bit_length(B) + 1          (magnitude + sign)
    int64  allowed  iff  bits_required <= 63   (one bit of margin below 64)
    limbs  K limbs of w bits hold |v| < 2^(K w - 1)  iff  K w >= bits_required

Requesting an arithmetic that is too narrow raises ``ValueError`` naming the bits
needed, so an overflow (a silently wrong answer) cannot happen. The bounds
themselves are derived per construction (``yun.stages.contextual`` proves the one for the
contextual mapping, ``yun.stages.value`` the one for the value mapping).
"""

from __future__ import annotations

import dataclasses

from transformer_ua.exact.limbs import LimbSpec

#: ``bits_required <= INT64_BITS`` selects int64: one bit of margin below 64.
INT64_BITS = 63
#: Limb widths tried, widest first, and the most limbs each allows (K 2^(2w) < 2^63).
LIMB_WIDTHS = ((30, 7), (28, 127))
ARITHMETICS = ('auto', 'int64', 'limbs')


@dataclasses.dataclass(frozen=True)
class Arithmetic:
  """The integer arithmetic chosen for a computation.

  Attributes:
    kind: 'int64' or 'limbs'.
    bits_required: bits (magnitude + sign) of the proven bound on every intermediate.
    num_limbs: K (limbs only).
    limb_bits: w (limbs only).
  """

  kind: str
  bits_required: int
  num_limbs: int = 0
  limb_bits: int = 0

  @property
  def capacity_bits(self) -> int:
    """Bits (incl. sign) this arithmetic holds."""
    return INT64_BITS if self.kind == 'int64' else self.num_limbs * self.limb_bits

  @property
  def spec(self) -> LimbSpec:
    if self.kind != 'limbs':
      raise ValueError(f'arithmetic {self.kind!r} has no limb spec.')
    return LimbSpec(self.num_limbs, self.limb_bits)

  def describe(self) -> str:
    if self.kind == 'int64':
      return f'int64 ({self.bits_required} of {INT64_BITS} bits)'
    return (f'limbs ({self.num_limbs} x {self.limb_bits} bits = {self.capacity_bits}; '
            f'{self.bits_required} required)')


def bits_for(bound: int) -> int:
  """Bits (magnitude + sign) of a signed integer with ``|v| <= bound``."""
  bound = int(bound)
  if bound < 0:
    raise ValueError(f'a magnitude bound must be >= 0, got {bound}.')
  return bound.bit_length() + 1


def limb_layout(bits_required: int) -> tuple[int, int]:
  """(K, w): the fewest limbs of the widest allowed width holding ``bits_required``."""
  for w, k_max in LIMB_WIDTHS:
    k = max(1, -(-bits_required // w))
    if k <= k_max:
      return k, w
  w, k_max = LIMB_WIDTHS[-1]
  raise ValueError(f'{bits_required} bits would need more than {k_max} limbs of {w} '
                   f'bits ({k_max * w} bits); no arithmetic here holds that.')


def plan(bound: int, arithmetic: str = 'auto') -> Arithmetic:
  """Chooses an exact arithmetic for a computation whose intermediates obey |v| <= bound.

  Args:
    bound: proven bound on the magnitude of every intermediate integer.
    arithmetic: 'auto' (int64 when it fits, else limbs), 'int64' (refused when too
      narrow), 'limbs', or 'limbs:K' / 'limbs:K:w' to force a layout (refused when
      too narrow; used by tests to show that refusal).
  Raises:
    ValueError: the requested arithmetic cannot hold ``bits_required`` bits.
  """
  bits = bits_for(bound)
  if not isinstance(arithmetic, str):
    raise ValueError(f'arithmetic must be a string; allowed: {ARITHMETICS} or limbs:K[:w].')
  if arithmetic == 'auto':
    return plan(bound, 'int64' if bits <= INT64_BITS else 'limbs')
  if arithmetic == 'int64':
    if bits > INT64_BITS:
      raise ValueError(
          f'this computation needs {bits} bits (bound {bound:.4g} on its intermediates); '
          f'int64 holds {INT64_BITS} with the required margin. Use arithmetic="limbs" '
          f'(or "auto").')
    return Arithmetic('int64', bits)
  if arithmetic.startswith('limbs'):
    parts = arithmetic.split(':')
    if parts == ['limbs']:
      k, w = limb_layout(bits)
      return Arithmetic('limbs', bits, k, w)
    try:
      k = int(parts[1])
      w = int(parts[2]) if len(parts) > 2 else 30
    except (IndexError, ValueError):
      raise ValueError(f'arithmetic {arithmetic!r}; allowed: {ARITHMETICS} or '
                       'limbs:K[:w] with integers K, w.') from None
    k_max = dict(LIMB_WIDTHS).get(w)
    if k_max is None or not 1 <= k <= k_max:
      raise ValueError(f'limb layout K={k}, w={w} not allowed; allowed: '
                       + ', '.join(f'w={a} with 1 <= K <= {b}' for a, b in LIMB_WIDTHS) + '.')
    if k * w < bits:
      raise ValueError(f'this computation needs {bits} bits; {k} limbs of {w} bits hold '
                       f'{k * w}. Use at least {-(-bits // w)} limbs.')
    return Arithmetic('limbs', bits, k, w)
  raise ValueError(f'arithmetic {arithmetic!r}; allowed: {ARITHMETICS} or limbs:K[:w].')
