"""ExactOps: one interface to comparisons, selections and arithmetic on exact values.

A value is an integer array of ``dtype`` (``spec is None``; int64 unless a narrower
proven type, e.g. the int32 sweep of ``yun.stages.sweep``) or a limb number ``[..., K]`` of
``exact.limbs``; every method does the same thing on both, so a construction written
once against ``ExactOps`` runs in whichever arithmetic the planner chose.

Shapes: a value is ``[...]`` (integers) or ``[..., K]`` (limbs); "leading" axes are
the ``[...]`` ones. ``reduce_*`` reduce the first axis (token-major arrays ``[n, B]``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua.exact.limbs import (LimbSpec, add, compare, digits_from_limbs,
                                        digits_from_python, extreme_mask, from_int64,
                                        from_python, is_negative, linear, mul_const, neg,
                                        resize, sub, to_python)

Array = Any


@dataclasses.dataclass(frozen=True)
class ExactOps:
  """Comparisons, selections and arithmetic on integer values or limb numbers (trailing K).

  Attributes:
    spec: the limb format, or None for integer arrays.
    dtype: the integer type of values when ``spec`` is None (int64 by default).
  """

  spec: LimbSpec | None
  dtype: Any = jnp.int64

  @property
  def limbs(self) -> bool:
    return self.spec is not None

  def cmp(self, a, b):
    if self.limbs:
      return compare(a, b, self.spec)
    return (a > b).astype(jnp.int32) - (a < b).astype(jnp.int32)

  def eq(self, a, b):
    return jnp.all(a == b, axis=-1) if self.limbs else a == b

  def gt(self, a, b):
    return compare(a, b, self.spec) > 0 if self.limbs else a > b

  def lt(self, a, b):
    return compare(a, b, self.spec) < 0 if self.limbs else a < b

  def maximum(self, a, b):
    """Elementwise max of two values."""
    return jnp.where(self.gt(a, b)[..., None], a, b) if self.limbs else jnp.maximum(a, b)

  def minimum(self, a, b):
    return jnp.where(self.lt(a, b)[..., None], a, b) if self.limbs else jnp.minimum(a, b)

  def reduce_max(self, a):
    """Max over the leading (token) axis."""
    return functools.reduce(self.maximum, list(a)) if self.limbs else jnp.max(a, axis=0)

  def reduce_min(self, a):
    return functools.reduce(self.minimum, list(a)) if self.limbs else jnp.min(a, axis=0)

  def reduce_sum(self, a):
    return functools.reduce(self.add, list(a)) if self.limbs else jnp.sum(a, axis=0)

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

  def const(self, values):
    """Python ints (array-like) -> device values of ``dtype`` (jnp, leading shape of
    ``values``); call under x64."""
    if self.limbs:
      return jnp.asarray(from_python(np.asarray(values, dtype=object), self.spec))
    return jnp.asarray(np.asarray(values, dtype=object).astype(np.int64)).astype(self.dtype)

  def mul(self, a, c):
    """a times a constant (Python int, or a value of this arithmetic for integer types)."""
    if not self.limbs:
      return a * c
    digits = jnp.asarray(digits_from_python(np.asarray(c, dtype=object), self.spec.limb_bits))
    return mul_const(a, digits, self.spec)

  def convert(self, x, src: 'ExactOps'):
    """A value of arithmetic ``src`` as a value of this one (exact; the caller proves it
    fits)."""
    if not self.limbs and src.limbs:  # limbs -> int: two's complement
      w, k = src.spec.limb_bits, src.spec.num_limbs
      raw = sum(jnp.left_shift(x[..., i], w * i) for i in range(k) if w * i < 64)
      if w * k < 64:
        raw = raw - jnp.where(is_negative(x, src.spec), 1 << (w * k), 0)
      return raw.astype(self.dtype)
    if not self.limbs:
      return x.astype(self.dtype)
    if not src.limbs:
      return from_int64(x.astype(jnp.int64), self.spec)
    return resize(x, src.spec, self.spec)

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
      return linear(x[..., None, :, :], w, self.spec)[..., 0, 0, :]
    return jnp.sum(x * jnp.asarray([int(v) for v in weights], self.dtype), axis=-1)

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
