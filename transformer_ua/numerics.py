r"""Exact integer arithmetic for the Yun et al. constructions: bit planning and limbs.

Every grid-side quantity of Yun et al.'s Theorem 2 network is a rational with
denominator dividing ``2N`` (``N = 1/delta``). Multiplying every grid-side value by a
scale ``S`` (a multiple of ``2N``; default ``S = 2N``) makes all of them integers, and
the layers can then be run in integer arithmetic with *no* rounding anywhere:

* ``int64``  -- the core's exact integer mode (``layers.attention_update`` etc. on
  int64 arrays under ``jax.enable_x64``), when the planner proves that every
  intermediate value fits with a bit of margin;
* ``limbs``  -- multi-word integers in JAX (this module), when it does not.

Bit planning
------------
``plan(bound, arithmetic)`` turns a proven bound ``B`` on the magnitude of *every*
intermediate integer a computation forms (inputs, products, partial sums, tie
numerators, outputs) into the arithmetic that holds it, or refuses:

    bits_required = bit_length(B) + 1          (magnitude + sign)
    int64  allowed  iff  bits_required <= 63   (one bit of margin below 64)
    limbs  K limbs of w bits hold |v| < 2^(K w - 1)  iff  K w >= bits_required

Requesting an arithmetic that is too narrow raises ``ValueError`` naming the bits
needed, so an overflow (a silently wrong answer) cannot happen. The bounds
themselves are derived per construction (``yun.contextual`` proves the one for the
contextual mapping, ``yun.value`` the one for the value mapping).

Limb representation
-------------------
A *limb number* is an int64 array ``x[..., K]`` holding the residue of an integer
``v`` modulo ``2^(K w)`` in base ``2^w`` digits (little-endian, every limb in
``[0, 2^w)``), read as signed: ``v = sum_i x_i 2^(w i)`` minus ``2^(K w)`` when the
top bit (bit ``w-1`` of limb ``K-1``) is set. Addition, subtraction and
multiplication are arithmetic modulo ``2^(K w)``, which equals integer arithmetic
whenever the true result lies in ``[-2^(Kw-1), 2^(Kw-1))`` -- exactly what the
planner guarantees. Comparison is lexicographic from the top limb with the top
bit flipped (no subtraction, hence no extra bit).

A *digit constant* (how params are stored in limb mode) is an int64 array
``c[..., Kc]`` of signed base-``2^w`` digits that all share the sign of the value:
``c = sum_j c_j 2^(w j)`` with ``|c_j| < 2^w``. Multiplying a limb number by a digit
constant forms products ``x_i c_j`` with ``|x_i c_j| < 2^(2w)`` and sums at most
``K`` of them per output limb before carrying; ``w`` is chosen so that
``K 2^(2w) < 2^63`` (``w = 30`` for ``K <= 7``, ``w = 28`` up to ``K = 127``).

Layers on limbs
---------------
``limb_attention_update`` (hardmax, head size ``m = 1``, through the rank-one
identity of ``layers.rank_one_hardmax_mix``) and ``limb_feedforward_update`` (Phi
or ReLU activations) implement the same math as ``layers.attention_update`` /
``layers.feedforward_update`` on limb numbers, generically on the built params;
``limb_apply_segment`` scans them over stacked params exactly like
``layers.apply_segment``. Everything is jit/vmap-able and runs on any JAX device.

Shared projections: when W_Q = W_K = W_V (every Yun selective-shift head; checked by
``shared_projections``), one projection gives the keys, the values and (plus b_Q)
the queries, and the average over tied arg-max keys is the max key itself (tied keys
are equal, so are their values). ``limb_attention_update(shared_qkv=True)`` and
``int64_shared_attention_update`` use this identity: the same integers as the core
layers with a third of the projections and no tie division (tests compare them on
whole grids).

Reference
---------
``numpy_apply_segment`` is a straightforward vectorized NumPy implementation of the
same layers (int64 or Python-int ``object`` arrays): the independent oracle for
tests and the baseline of ``benchmarks/verify_throughput.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import activations

#: ``bits_required <= INT64_BITS`` selects int64: one bit of margin below 64.
INT64_BITS = 63
#: Limb widths tried, widest first, and the most limbs each allows (K 2^(2w) < 2^63).
LIMB_WIDTHS = ((30, 7), (28, 127))
ARITHMETICS = ('auto', 'int64', 'limbs')

Array = Any


# ---------------------------------------------------------------------------
# Bit planning.
# ---------------------------------------------------------------------------


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
  def spec(self) -> 'LimbSpec':
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


# ---------------------------------------------------------------------------
# Limb numbers.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LimbSpec:
  """K limbs of w bits: residues mod 2^(K w), read as signed."""

  num_limbs: int
  limb_bits: int

  @property
  def mask(self) -> int:
    return (1 << self.limb_bits) - 1

  @property
  def top_bit(self) -> int:
    return 1 << (self.limb_bits - 1)

  @property
  def modulus(self) -> int:
    return 1 << (self.num_limbs * self.limb_bits)


def normalize(x, spec: LimbSpec):
  """Carries every limb into [0, 2^w) and reduces modulo 2^(K w). x: [..., K]."""
  w, mask = spec.limb_bits, spec.mask
  limbs = [x[..., i] for i in range(spec.num_limbs)]
  out = []
  carry = None
  for i, limb in enumerate(limbs):
    if carry is not None:
      limb = limb + carry
    carry = jnp.right_shift(limb, w)  # arithmetic shift: floor division
    out.append(jnp.bitwise_and(limb, mask))
  return jnp.stack(out, axis=-1)


def from_int64(x, spec: LimbSpec):
  """int64 array -> limb numbers [..., K]."""
  x = jnp.asarray(x, jnp.int64)
  w, mask = spec.limb_bits, spec.mask
  out = [jnp.bitwise_and(jnp.right_shift(x, w * i), mask) if w * i < 64
         else jnp.where(x < 0, mask, 0).astype(jnp.int64) for i in range(spec.num_limbs)]
  return jnp.stack(out, axis=-1)


def from_python(values, spec: LimbSpec) -> np.ndarray:
  """Python ints (any array-like, object dtype fine) -> NumPy int64 limbs [..., K].

  Raises ValueError if a value lies outside [-2^(Kw-1), 2^(Kw-1)).
  """
  v = np.asarray(values, dtype=object)
  half = spec.modulus >> 1
  flat = v.reshape(-1)
  if flat.size and (min(flat) < -half or max(flat) >= half):
    raise ValueError(f'a value does not fit in {spec.num_limbs} limbs of {spec.limb_bits} '
                     f'bits (range +-2^{spec.num_limbs * spec.limb_bits - 1}).')
  w, mask = spec.limb_bits, spec.mask
  out = np.empty(v.shape + (spec.num_limbs,), dtype=np.int64)
  for i in range(spec.num_limbs):
    out[..., i] = np.asarray((v >> (w * i)) & mask, dtype=object).astype(np.int64)
  return out


def to_python(x, spec: LimbSpec) -> np.ndarray:
  """Limb numbers [..., K] -> NumPy object array of Python ints (signed)."""
  x = np.asarray(x).astype(object)
  total = np.zeros(x.shape[:-1], dtype=object)
  for i in range(spec.num_limbs):
    total = total + (x[..., i] << (spec.limb_bits * i))
  half = spec.modulus >> 1
  return np.where(total >= half, total - spec.modulus, total)


def zeros(shape, spec: LimbSpec):
  return jnp.zeros(tuple(shape) + (spec.num_limbs,), jnp.int64)


def add(a, b, spec: LimbSpec):
  return normalize(a + b, spec)


def sub(a, b, spec: LimbSpec):
  return normalize(a - b, spec)


def neg(a, spec: LimbSpec):
  return normalize(-a, spec)


def is_negative(x, spec: LimbSpec):
  return x[..., -1] >= spec.top_bit


def is_zero(x):
  return jnp.all(x == 0, axis=-1)


def sign(x, spec: LimbSpec):
  """-1, 0 or 1 per limb number (int32)."""
  return jnp.where(is_negative(x, spec), -1, jnp.where(is_zero(x), 0, 1)).astype(jnp.int32)


def _ordered_limbs(x, spec: LimbSpec):
  """Limbs, most significant first, with the top bit flipped: signed -> unsigned order."""
  top = jnp.bitwise_xor(x[..., -1], spec.top_bit)
  return [top] + [x[..., i] for i in range(spec.num_limbs - 2, -1, -1)]


def compare(a, b, spec: LimbSpec):
  """sign(a - b) per element (-1, 0, 1), lexicographic; no subtraction, no overflow."""
  result = jnp.zeros(jnp.broadcast_shapes(a.shape[:-1], b.shape[:-1]), jnp.int32)
  decided = jnp.zeros(result.shape, bool)
  for la, lb in zip(_ordered_limbs(a, spec), _ordered_limbs(b, spec)):
    c = jnp.sign(la - lb).astype(jnp.int32)
    result = jnp.where(decided, result, c)
    decided = decided | (c != 0)
  return result


def extreme_mask(x, axis: int, spec: LimbSpec, largest: bool = True):
  """Boolean mask of the maxima (or minima) of limb numbers along ``axis`` (ties all True).

  Args:
    x: [..., K] limb numbers; ``axis`` indexes the leading dims (not the limb axis).
  """
  axis = axis % (x.ndim - 1)
  cand = jnp.ones(x.shape[:-1], bool)
  fill = -1 if largest else (1 << spec.limb_bits)
  for limb in _ordered_limbs(x, spec):
    masked = jnp.where(cand, limb, fill)
    ext = (jnp.max if largest else jnp.min)(masked, axis=axis, keepdims=True)
    cand = cand & (limb == ext)
  return cand


def resize(x, spec_from: LimbSpec, spec_to: LimbSpec):
  """Limb numbers in one layout -> another with the same limb width (sign-extended)."""
  if spec_from.limb_bits != spec_to.limb_bits:
    raise ValueError('resize keeps the limb width; got '
                     f'{spec_from.limb_bits} and {spec_to.limb_bits}.')
  k0, k1 = spec_from.num_limbs, spec_to.num_limbs
  if k1 <= k0:
    return normalize(x[..., :k1], spec_to)
  fill = jnp.where(is_negative(x, spec_from), spec_from.mask, 0)[..., None]
  return jnp.concatenate([x, jnp.broadcast_to(fill, x.shape[:-1] + (k1 - k0,))], axis=-1)


def digits_from_python(values, limb_bits: int, num_digits: int | None = None) -> np.ndarray:
  """Python ints -> NumPy signed-digit constants [..., Kc] (digits share the value's sign)."""
  v = np.asarray(values, dtype=object)
  mags = np.asarray(np.abs(v), dtype=object)
  need = max([int(m).bit_length() for m in mags.reshape(-1)] + [1])
  kc = max(1, -(-need // limb_bits)) if num_digits is None else num_digits
  mask = (1 << limb_bits) - 1
  sgn = np.asarray(np.sign(v), dtype=object).astype(np.int64)
  out = np.empty(v.shape + (kc,), dtype=np.int64)
  for j in range(kc):
    out[..., j] = np.asarray((mags >> (limb_bits * j)) & mask, dtype=object).astype(np.int64) * sgn
  return out


def digits_from_int64(x, limb_bits: int, num_digits: int):
  """int64 array (jnp) -> signed-digit constants [..., num_digits]."""
  x = jnp.asarray(x, jnp.int64)
  s, mag = jnp.sign(x), jnp.abs(x)
  mask = (1 << limb_bits) - 1
  return jnp.stack([s * jnp.bitwise_and(jnp.right_shift(mag, limb_bits * j), mask)
                    if limb_bits * j < 63 else jnp.zeros_like(x)
                    for j in range(num_digits)], axis=-1)


def digits_from_limbs(x, spec: LimbSpec):
  """Limb numbers [..., K] -> signed-digit constants [..., K] (same value)."""
  negative = is_negative(x, spec)
  mag = jnp.where(negative[..., None], neg(x, spec), x)
  return jnp.where(negative[..., None], -mag, mag)


def int64_digits_needed(max_abs: int, limb_bits: int) -> int:
  return max(1, -(-int(max_abs).bit_length() // limb_bits))


def const_to_limbs(c, spec: LimbSpec):
  """Signed-digit constant [..., Kc] -> limb number [..., K] (mod 2^(Kw))."""
  kc = c.shape[-1]
  if kc < spec.num_limbs:
    c = jnp.concatenate([c, jnp.zeros(c.shape[:-1] + (spec.num_limbs - kc,), c.dtype)], -1)
  return normalize(c[..., :spec.num_limbs], spec)


def mul_const(x, c, spec: LimbSpec):
  """Limb number x [..., K] times signed-digit constant c [..., Kc], mod 2^(Kw)."""
  k = spec.num_limbs
  kc = min(c.shape[-1], k)
  shape = jnp.broadcast_shapes(x.shape[:-1], c.shape[:-1]) + (k,)
  acc = jnp.zeros(shape, jnp.int64)
  for j in range(kc):
    shifted = x if j == 0 else jnp.concatenate(
        [jnp.zeros(x.shape[:-1] + (j,), x.dtype), x[..., :k - j]], axis=-1)
    acc = acc + shifted * c[..., j:j + 1]
  return normalize(acc, spec)


def limb_sum(x, axis: int, spec: LimbSpec):
  """Sum of limb numbers along ``axis`` of the leading dims (-1: last leading dim)."""
  axis = axis % (x.ndim - 1)
  return normalize(jnp.sum(x, axis=axis), spec)


def shared_projections(attention_params) -> bool:
  """Whether W_Q = W_K = W_V in every layer of stacked attention params (host check)."""
  w_q, w_k, w_v = (np.asarray(attention_params[k]) for k in ('W_Q', 'W_K', 'W_V'))
  return bool(np.array_equal(w_q, w_k) and np.array_equal(w_k, w_v))


def div_small(x, count, spec: LimbSpec):
  """floor(x / count) for small positive integer counts (< 2^(62-w)), and whether inexact.

  Floor division, as ``//`` on the core's int64 path, so that even an inexact tie
  average (which exact verifiers refuse anyway) matches the core bit for bit.
  Returns (quotient, bool array: remainder != 0).
  """
  negative = is_negative(x, spec)
  mag = jnp.where(negative[..., None], neg(x, spec), x)
  count = jnp.asarray(count, jnp.int64)
  rem = jnp.zeros(mag.shape[:-1], jnp.int64)
  q = [None] * spec.num_limbs
  for i in range(spec.num_limbs - 1, -1, -1):
    cur = jnp.left_shift(rem, spec.limb_bits) + mag[..., i]
    q[i] = cur // count
    rem = cur - q[i] * count
  quot = jnp.stack(q, axis=-1)
  inexact = rem != 0
  # x < 0: floor(x / c) = -(|x| // c) - [remainder != 0].
  up = jnp.where(negative & inexact, 1, 0)
  quot_neg = neg(add(quot, from_int64(up, spec), spec), spec)
  return jnp.where(negative[..., None], quot_neg, quot), inexact


# ---------------------------------------------------------------------------
# Params in limb mode.
# ---------------------------------------------------------------------------


def _path_has(path, name) -> bool:
  return any(getattr(k, 'key', None) == name for k in path)


def params_to_digits(params, limb_bits: int):
  """Integer params (int64 jnp/NumPy or Python-int object arrays) -> digit constants.

  Every numeric leaf gains a trailing digit axis (as many digits as its largest
  entry needs); boolean leaves (``left_closed``) are kept.
  """

  def convert(leaf):
    if getattr(leaf, 'dtype', None) == bool:
      return leaf
    arr = np.asarray(leaf)
    if arr.dtype == object:
      return jnp.asarray(digits_from_python(arr, limb_bits))
    if not np.issubdtype(arr.dtype, np.integer):
      raise ValueError(f'limb params must be integers, got dtype {arr.dtype}.')
    max_abs = int(np.max(np.abs(arr.astype(object)))) if arr.size else 0
    return digits_from_int64(jnp.asarray(leaf), limb_bits,
                             int64_digits_needed(max_abs, limb_bits))

  return jax.tree_util.tree_map(convert, params)


# ---------------------------------------------------------------------------
# Layers on limbs (same math as layers.attention_update / feedforward_update).
# ---------------------------------------------------------------------------


def _linear(x, w, spec):
  """sum_d x[..., n, d] w[o, d]: x [..., n, d, K], w [O, d, Kc] -> [..., n, O, K]."""
  prod = mul_const(x[..., :, None, :, :], w, spec)  # [..., n, O, d, K]
  return limb_sum(prod, -1, spec)


def limb_attention_update(p, x, spec: LimbSpec, shared_qkv: bool = False):
  """Hardmax attention part (no residual) for head size m = 1, on limb numbers.

  The rank-one identity (``layers.rank_one_hardmax_mix``): with scalar keys and
  queries, hardmax over keys picks the arg max of the keys when the query is > 0,
  the arg min when < 0, and ties every key when = 0; ties average exactly.

  With ``shared_qkv`` (the caller guarantees W_Q = W_K = W_V, as in every Yun
  selective-shift head) one projection serves as keys, values and (plus b_Q)
  queries, and the average over tied arg-max (arg-min) keys is the max (min) key
  itself -- tied keys are equal, hence so are their values: an identity, no division.

  Args:
    p: digit-constant params W_Q, W_K, W_V [h, 1, d, Kc], b_Q [h, 1, Kc], W_O [h, d, 1, Kc].
    x: [..., n, d, K].
    shared_qkv: W_Q = W_K = W_V holds (static; checked by the builder).
  Returns:
    ([..., n, d, K], number of inexact tie averages).
  """
  if shared_qkv:
    return _shared_attention_update(p, x, spec)
  if p['W_Q'].shape[1] != 1:
    raise ValueError('limb attention implements head size m = 1 only (the rank-one '
                     f'identity); got m = {p["W_Q"].shape[1]}.')
  h = p['W_Q'].shape[0]
  queries = _linear(x, p['W_Q'][:, 0], spec)  # [..., n, h, K]
  queries = add(queries, const_to_limbs(p['b_Q'][:, 0], spec), spec)
  keys = _linear(x, p['W_K'][:, 0], spec)
  values = _linear(x, p['W_V'][:, 0], spec)
  n = x.shape[-3]

  def tie_sum(mask):  # mask [..., n, h] -> (sum [..., h, K], count [..., h])
    s = limb_sum(jnp.where(mask[..., None], values, 0), -2, spec)
    return s, jnp.sum(mask, axis=-2)

  s_max, c_max = tie_sum(extreme_mask(keys, -2, spec, largest=True))
  s_min, c_min = tie_sum(extreme_mask(keys, -2, spec, largest=False))
  s_all = limb_sum(values, -2, spec)
  sg = sign(queries, spec)[..., None]  # [..., n, h, 1]
  numer = jnp.where(sg > 0, s_max[..., None, :, :],
                    jnp.where(sg < 0, s_min[..., None, :, :], s_all[..., None, :, :]))
  count = jnp.where(sg[..., 0] > 0, c_max[..., None, :],
                    jnp.where(sg[..., 0] < 0, c_min[..., None, :], n))
  mixed, inexact = div_small(numer, count, spec)  # [..., n, h, K]
  # out[..., n, d] = sum_h W_O[h, d, 0] mixed[..., n, h]
  w_o = jnp.swapaxes(p['W_O'][:, :, 0], 0, 1)  # [d, h, Kc]
  out = limb_sum(mul_const(mixed[..., :, None, :, :], w_o, spec), -1, spec)
  del h
  return out, jnp.sum(inexact).astype(jnp.int32)


def _pick(x, mask, axis):
  """The entry of limb numbers ``x`` at the first True of ``mask`` along leading ``axis``."""
  first = jnp.expand_dims(jnp.argmax(mask, axis=axis), axis)
  return jnp.take_along_axis(x, first[..., None], axis=axis - 1 if axis < 0 else axis)


def _shared_attention_update(p, x, spec):
  """limb_attention_update for W_Q = W_K = W_V (see there)."""
  n = x.shape[-3]
  keys = _linear(x, p['W_K'][:, 0], spec)                      # [..., n, h, K]
  queries = add(keys, const_to_limbs(p['b_Q'][:, 0], spec), spec)
  k_max = _pick(keys, extreme_mask(keys, -2, spec, largest=True), -2)   # [..., 1, h, K]
  k_min = _pick(keys, extreme_mask(keys, -2, spec, largest=False), -2)
  mean, inexact = div_small(limb_sum(keys, -2, spec), n, spec)   # all keys tie (query 0)
  sg = sign(queries, spec)[..., None]
  mixed = jnp.where(sg > 0, k_max, jnp.where(sg < 0, k_min, mean[..., None, :, :]))
  inexact = inexact[..., None, :] & (sg[..., 0] == 0)            # [..., n, h]
  w_o = jnp.swapaxes(p['W_O'][:, :, 0], 0, 1)  # [d, h, Kc]
  out = limb_sum(mul_const(mixed[..., :, None, :, :], w_o, spec), -1, spec)
  return out, jnp.sum(inexact).astype(jnp.int32)


def _phi_limbs(phi, pre, spec):
  """Phi units (digit constants) on pre-activations [..., r, K]."""
  idx = jnp.zeros(pre.shape[:-1], jnp.int32)
  for i in range(activations.MAX_PIECES - 1):
    c = const_to_limbs(phi['breaks'][:, i], spec)  # [r, K]
    cmp = compare(pre, c, spec)
    lc = phi['left_closed'][:, i]
    idx = idx + jnp.where(lc, cmp > 0, cmp >= 0).astype(jnp.int32)

  def pick(table):  # [r, 3, Kc] -> [..., r, Kc]
    t = jnp.broadcast_to(table, pre.shape[:-1] + table.shape[-2:])
    return jnp.take_along_axis(t, idx[..., None, None], axis=-2)[..., 0, :]

  return add(mul_const(pre, pick(phi['slopes']), spec),
             const_to_limbs(pick(phi['intercepts']), spec), spec)


def limb_feedforward_update(p, x, spec: LimbSpec):
  """``W_2 act(W_1 X + b_1) + b_2`` token-wise (no residual) on limb numbers.

  Args:
    p: digit-constant params W_1 [r, d, Kc], b_1 [r, Kc], W_2 [d, r, Kc], b_2 [d, Kc],
      and optionally ``phi`` (breaks/slopes/intercepts digit constants, left_closed).
    x: [..., n, d, K].
  """
  pre = add(_linear(x, p['W_1'], spec), const_to_limbs(p['b_1'], spec), spec)
  if 'phi' in p:
    act = _phi_limbs(p['phi'], pre, spec)
  else:
    act = jnp.where(is_negative(pre, spec)[..., None], 0, pre)
  out = _linear(act, p['W_2'], spec)
  return add(out, const_to_limbs(p['b_2'], spec), spec)


def limb_apply_segment(segment, params, x, spec: LimbSpec, trace: bool = False,
                       shared_qkv: bool = False):
  """``layers.apply_segment`` on limb numbers: lax.scan over stacked digit params.

  ``shared_qkv``: every layer has W_Q = W_K = W_V (see ``limb_attention_update``).
  Returns (y [..., n, d, K], outputs [depth, ..., n, d, K] or None, inexact [depth]).
  """
  if segment.has_attention and segment.normalizer != 'hardmax':
    raise ValueError(f'limb arithmetic runs hardmax attention only, got '
                     f'{segment.normalizer!r}.')

  def layer(z, p):
    inexact = jnp.zeros((), jnp.int32)
    if segment.has_attention:
      upd, inexact = limb_attention_update(p['attention'], z, spec, shared_qkv)
      z = add(z, upd, spec)
    if segment.has_feedforward:
      z = add(z, limb_feedforward_update(p['feedforward'], z, spec), spec)
    return z, (z if trace else None, inexact)

  y, (outputs, inexact) = jax.lax.scan(layer, x, params)
  return y, outputs, inexact


# ---------------------------------------------------------------------------
# int64 kernel with the shared-projection identity.
# ---------------------------------------------------------------------------


def int64_shared_attention_update(p, x):
  """``layers.attention_update`` (hardmax, m = 1) for W_Q = W_K = W_V, int64.

  Same identity as ``limb_attention_update(shared_qkv=True)``: one projection gives
  keys = values and queries = keys + b_Q; tied arg-max (arg-min) keys are equal, so
  their average is the max (min) key; only an all-key tie (query 0) divides.
  Returns ([..., n, d], number of inexact tie averages) like the core.
  """
  keys = jnp.sum(x[..., :, None, :] * p['W_K'][:, 0], axis=-1)       # [..., n, h]
  queries = keys + p['b_Q'][:, 0]
  k_max = jnp.max(keys, axis=-2, keepdims=True)
  k_min = jnp.min(keys, axis=-2, keepdims=True)
  total = jnp.sum(keys, axis=-2, keepdims=True)
  n = x.shape[-2]
  mixed = jnp.where(queries > 0, k_max, jnp.where(queries < 0, k_min, total // n))
  inexact = jnp.sum((queries == 0) & (total % n != 0))
  out = jnp.sum(mixed[..., :, None, :] * p['W_O'][:, :, 0].T, axis=-1)  # [..., n, d]
  return out, inexact.astype(jnp.int32)


def int64_apply_segment(segment, params, x):
  """``layers.apply_segment`` for attention segments with W_Q = W_K = W_V (int64)."""
  if segment.kind != 'attention' or segment.normalizer != 'hardmax':
    raise ValueError('the shared-projection int64 kernel runs hardmax attention segments.')

  def layer(z, p):
    upd, inexact = int64_shared_attention_update(p['attention'], z)
    return z + upd, inexact

  y, inexact = jax.lax.scan(layer, x, params)
  return y, None, inexact


# ---------------------------------------------------------------------------
# Arithmetic-agnostic helpers (int64 arrays or limb numbers [..., K]).
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ExactOps:
  """Comparisons and selections on int64 values or limb numbers (trailing K)."""

  spec: LimbSpec | None

  @property
  def limbs(self) -> bool:
    return self.spec is not None

  def cmp(self, a, b):
    if self.limbs:
      return compare(a, b, self.spec)
    return (a > b).astype(jnp.int32) - (a < b).astype(jnp.int32)

  def eq(self, a, b):
    return jnp.all(a == b, axis=-1) if self.limbs else a == b

  def take(self, x, idx, axis):
    """take_along_axis on the leading dims."""
    if self.limbs:
      return jnp.take_along_axis(x, idx[..., None], axis=axis - 1 if axis < 0 else axis)
    return jnp.take_along_axis(x, idx, axis=axis)

  def max(self, x, axis: int):
    """Maximum along a (non-negative) leading axis."""
    if not self.limbs:
      return jnp.max(x, axis=axis)
    mask = extreme_mask(x, axis, self.spec, largest=True)
    first = jnp.expand_dims(jnp.argmax(mask, axis=axis), axis)
    return jnp.take_along_axis(x, first[..., None], axis=axis).squeeze(axis)

  def extremes(self, x, valid):
    """(max, min) over all leading entries where ``valid`` (broadcast) holds."""
    lead = x.shape[:-1] if self.limbs else x.shape
    valid = jnp.broadcast_to(valid, lead).reshape(-1)
    if not self.limbs:
      flat = x.reshape(-1)
      big = jnp.iinfo(jnp.int64).max
      return (jnp.max(jnp.where(valid, flat, -big)), jnp.min(jnp.where(valid, flat, big)))
    flat = x.reshape(-1, x.shape[-1])
    first_valid = flat[jnp.argmax(valid)]
    flat = jnp.where(valid[:, None], flat, first_valid)
    # (max, -min): the host only needs magnitudes.
    return self.max(flat, 0), self.max(neg(flat, self.spec), 0)

  def to_python(self, x):
    if self.limbs:
      return to_python(np.asarray(x), self.spec)
    return np.asarray(x).astype(object)

  def sort_keys(self, x: np.ndarray) -> np.ndarray:
    """Order of host values x [M] (int64) or [M, K] (limbs), ascending."""
    if not self.limbs:
      return np.argsort(x, kind='stable')
    top = np.bitwise_xor(x[:, -1], self.spec.top_bit)
    keys = [x[:, i] for i in range(self.spec.num_limbs - 1)] + [top]
    return np.lexsort(keys)

  def host_equal_adjacent(self, x_sorted: np.ndarray) -> np.ndarray:
    if not self.limbs:
      return x_sorted[1:] == x_sorted[:-1]
    return np.all(x_sorted[1:] == x_sorted[:-1], axis=-1)

  # -- arithmetic ----------------------------------------------------------------

  def from_int64(self, x):
    return from_int64(x, self.spec) if self.limbs else jnp.asarray(x, jnp.int64)

  def constant(self, value: int):
    """A Python int as a value (int64 scalar or limbs [K]); call under x64."""
    if self.limbs:
      return jnp.asarray(from_python(int(value), self.spec))
    if not -2 ** 63 <= int(value) < 2 ** 63:
      raise ValueError(f'{value} does not fit int64.')
    return jnp.asarray(int(value), jnp.int64)

  def constants(self, values) -> Array:
    """Python ints (array-like) -> values (host NumPy)."""
    if self.limbs:
      return from_python(values, self.spec)
    return np.asarray(values, dtype=object).astype(np.int64)

  def add(self, a, b):
    return add(a, b, self.spec) if self.limbs else a + b

  def sub(self, a, b):
    return sub(a, b, self.spec) if self.limbs else a - b

  def zero_like(self, x):
    return jnp.zeros_like(x)

  def where(self, cond, a, b):
    """Elementwise select; ``cond`` has the leading shape."""
    return jnp.where(cond[..., None], a, b) if self.limbs else jnp.where(cond, a, b)

  def relu(self, x):
    if self.limbs:
      return jnp.where(is_negative(x, self.spec)[..., None], 0, x)
    return jnp.maximum(x, 0)

  def dot_const(self, x, weights):
    """sum_i x[..., i] weights[i] for Python-int weights: [.., m] -> [..]."""
    if self.limbs:
      w = jnp.asarray(digits_from_python(np.asarray(weights, dtype=object).reshape(1, -1),
                                         self.spec.limb_bits))
      return _linear(x[..., None, :, :], w, self.spec)[..., 0, 0, :]
    return jnp.sum(x * jnp.asarray([int(v) for v in weights], jnp.int64), axis=-1)

  def searchsorted_right(self, table, x):
    """Index of the first table entry > x (table sorted ascending, leading dim P)."""
    if not self.limbs:
      return jnp.searchsorted(table, x, side='right')
    p = table.shape[0]
    lo = jnp.zeros(x.shape[:-1], jnp.int32)
    hi = jnp.full(x.shape[:-1], p, jnp.int32)

    def step(_, lh):
      lo, hi = lh
      mid = (lo + hi) // 2
      go_right = compare(table[jnp.minimum(mid, p - 1)], x, self.spec) <= 0
      active = lo < hi
      lo = jnp.where(active & go_right, mid + 1, lo)
      hi = jnp.where(active & ~go_right, mid, hi)
      return lo, hi

    lo, _ = jax.lax.fori_loop(0, max(1, int(p).bit_length() + 1), step, (lo, hi))
    return lo

  def to_float(self, x):
    """Approximate float64 values (for paper-valued float params)."""
    if not self.limbs:
      return jnp.asarray(x).astype(jnp.float64)
    negative = is_negative(x, self.spec)
    mag = jnp.where(negative[..., None], neg(x, self.spec), x).astype(jnp.float64)
    scale = jnp.asarray([2.0 ** (self.spec.limb_bits * i) for i in range(self.spec.num_limbs)])
    val = jnp.sum(mag * scale, axis=-1)
    return jnp.where(negative, -val, val)

  def digits(self, x):
    """Values -> digit constants for limb params (int64 values are kept as int64)."""
    return digits_from_limbs(x, self.spec) if self.limbs else x


# ---------------------------------------------------------------------------
# NumPy reference (int64 or Python-int object arrays).
# ---------------------------------------------------------------------------


def _np_tie_avg(numer, count, inexact):
  if numer.dtype == object or np.issubdtype(numer.dtype, np.integer):
    inexact[0] += int(np.sum(numer % count != 0))
    return numer // count
  return numer / count


def numpy_attention_update(p, x, inexact=None):
  """Reference hardmax attention part, m = 1 (rank-one identity), NumPy, batched.

  p: NumPy params W_Q, W_K, W_V [h, 1, d], b_Q [h, 1], W_O [h, d, 1]; x [..., n, d].
  """
  inexact = [0] if inexact is None else inexact
  h = p['W_Q'].shape[0]
  out = np.zeros_like(x)
  for i in range(h):
    q = x @ p['W_Q'][i, 0] + p['b_Q'][i, 0]  # [..., n]
    k = x @ p['W_K'][i, 0]
    v = x @ p['W_V'][i, 0]
    kmax = k.max(axis=-1, keepdims=True)
    kmin = k.min(axis=-1, keepdims=True)
    is_max, is_min = k == kmax, k == kmin
    s_max = (v * is_max).sum(-1, keepdims=True)
    s_min = (v * is_min).sum(-1, keepdims=True)
    s_all = v.sum(-1, keepdims=True)
    c_max = is_max.sum(-1, keepdims=True)
    c_min = is_min.sum(-1, keepdims=True)
    numer = np.where(q > 0, s_max, np.where(q < 0, s_min, s_all))
    count = np.where(q > 0, c_max, np.where(q < 0, c_min, x.shape[-2]))
    mixed = _np_tie_avg(numer, count, inexact)  # [..., n]
    out = out + mixed[..., None] * p['W_O'][i, :, 0]
  return out


def numpy_phi(phi, t):
  """Phi units on pre-activations t [..., r] (NumPy; exact on ints/objects)."""
  idx = np.zeros(t.shape, dtype=np.int64)
  for i in range(activations.MAX_PIECES - 1):
    c, lc = phi['breaks'][:, i], phi['left_closed'][:, i]
    idx = idx + np.where(lc, t > c, t >= c).astype(np.int64)
  slopes = np.take_along_axis(np.broadcast_to(phi['slopes'], t.shape + (3,)),
                              idx[..., None], -1)[..., 0]
  inter = np.take_along_axis(np.broadcast_to(phi['intercepts'], t.shape + (3,)),
                             idx[..., None], -1)[..., 0]
  return slopes * t + inter


def numpy_feedforward_update(p, x):
  pre = x @ p['W_1'].T + p['b_1']
  act = numpy_phi(p['phi'], pre) if 'phi' in p else np.maximum(pre, 0)
  return act @ p['W_2'].T + p['b_2']


def numpy_apply_segment(segment, params, x, trace: bool = False):
  """``layers.apply_segment`` in NumPy, a Python loop over the stacked layers.

  Returns (y, outputs list or None, inexact tie count).
  """
  params = jax.tree_util.tree_map(np.asarray, params)
  inexact = [0]
  outputs = [] if trace else None
  for l in range(segment.depth):
    p = jax.tree_util.tree_map(lambda a: a[l], params)
    if segment.has_attention:
      x = x + numpy_attention_update(p['attention'], x, inexact)
    if segment.has_feedforward:
      x = x + numpy_feedforward_update(p['feedforward'], x)
    if trace:
      outputs.append(x)
  return x, outputs, inexact[0]


def as_object(tree):
  """Every numeric leaf -> NumPy object array of Python ints (bool leaves kept)."""
  return jax.tree_util.tree_map(
      lambda a: np.asarray(a) if np.asarray(a).dtype == bool
      else np.asarray(a).astype(object), tree)
