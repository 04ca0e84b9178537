"""Limb numbers: multi-word signed integers in JAX, and digit constants.

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
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


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
  for limb in limbs:
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


def ordered_words(x, spec: LimbSpec) -> list:
  """Limb numbers [..., K] -> int64 words [...], most significant first, that order and
  identify the values: the limbs with the top bit flipped (``_ordered_limbs``: U = v +
  2^(Kw-1), 0 <= U < 2^(Kw)), packed 63 // w limbs to a word (each word in [0, 2^63)).

  Lexicographic order of the words is the signed order of the values, and equal words
  mean equal values -- fewer, wider comparisons than limb by limb (``words_to_python``
  inverts it).
  """
  w, k = spec.limb_bits, spec.num_limbs
  per = max(1, 63 // w)
  limbs = [x[..., i] for i in range(k)]
  limbs[-1] = jnp.bitwise_xor(limbs[-1], spec.top_bit)
  words = []
  for lo in range(0, k, per):
    word = limbs[lo]
    for j in range(lo + 1, min(k, lo + per)):
      word = word + jnp.left_shift(limbs[j], w * (j - lo))
    words.append(word)
  return words[::-1]


def words_to_python(words, spec: LimbSpec) -> np.ndarray:
  """``ordered_words`` (host array [..., C], most significant first) -> Python ints."""
  words = np.asarray(words).astype(object)
  per = max(1, 63 // spec.limb_bits)
  total = words[..., 0]
  for c in range(1, words.shape[-1]):  # every word below the top holds ``per`` limbs
    total = (total << (spec.limb_bits * per)) + words[..., c]
  return total - (spec.modulus >> 1)


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
# Linear maps and params in limb mode.
# ---------------------------------------------------------------------------


def linear(x, w, spec):
  """sum_d x[..., n, d] w[o, d]: x [..., n, d, K], w [O, d, Kc] -> [..., n, O, K]."""
  prod = mul_const(x[..., :, None, :, :], w, spec)  # [..., n, O, d, K]
  return limb_sum(prod, -1, spec)


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
