r"""Theorems 2 and 3 with integer ids: exact and IEEE arithmetic agree on cube interiors.

Token-major: X [.., n, d] in [0, 1]^{n x d} (closed: x = 1 is in the last cell); M = N^d cells, m = sum_l N^(l-1) c_l the cell
index of a token whose cell is c. The residual stream has D = d + 2 coordinates
(o_1, .., o_d, a_1, a_2): X is padded with two zero coordinates and g reads o. p is the
significand precision of the format the parameters are built for (binary64: p = 53,
binary32: p = 24) and sigma = 2^(p-1) + 1 the snap constant: fl(y + sigma) = sigma + round(y)
for y in (-1/2, 2^(p-1) - 2), exactly (``transformer_ua.rounding``). Blocks (attention
switched off, W = 0, unless said):

  quantize   o_l <- o_l - ReLU(o_l)                                     (o = 0)
             a_1 <- a_1 + sum_l N^(l-1) sum_{k=1}^{N-1} [ReLU(s(x_l - a_k) + 1) - ReLU(s(x_l - a_k))]
             s = 2^j, ramps [a_k - 1/s, a_k] (a_k dyadic) inside the margin around k/N: on a cube
             interior a_1 = m'; m' = m (Theorem 2) or jM + m (Theorem 3: E_j = jM e_(a_1)).
             In float the sum, in any order, is within 1/2 of the real one (proved).
  snap       feed-forward W_2 = 0, b_2 = sigma e_(a_1): a_1 <- a_1 + sigma = sigma + m' (exact:
             sigma is added once, to the finished sum, in a block of its own, so no summation
             order of the quantization can reach it).
  code       U_k = ReLU(a_1 - sigma - k), k = 0..K-1 (K = M, Theorem 3: nM), so that
             sum_k c_k U_k = F(m') for c_k = dF_(k+1) - dF_k on the integers m' (dF_k = F(k) - F(k-1)):
               a_1 <- a_1 - ReLU(a_1) + H(m') - phi(m'),     a_2 <- a_2 + phi(m')
             Theorem 2: phi = a B_n code (``sum_distinct_code``: n-multiset sums distinct),
             H(m) = R m, R = n max phi + 1;  Theorem 3: phi(jM + m) = m M^j, H = j M^n.
  attention  one head, W_Q = W_K = 0 (every score 0: weights 1/n), W_V = e_(a_2)^T, W_O = n e_(a_2):
               a_2 <- phi(m'_own) + S,   S = sum over the n tokens of phi(m'_k)
             feed-forward W_2 = 0, b_2 = sigma e_(a_2): a_2 <- a_2 + sigma (the snap).
  value      t = a_1 + a_2 - sigma = H(m'_own) + S: Theorem 2, R m_own + the multiset's code sum
             (one integer per (multiset, own cell)); Theorem 3, j M^n + sum_j m_j M^j (one per
             (cube, position)). With the ids t_0 < .. < t_(P-1) and their values A_i (f_bar's
             table rounded to b-bit dyadics, ``value_bits``):
               o <- o + A_0 + sum_{i=1}^{P-1} (A_i - A_(i-1)) [ReLU(t - t_i + 1) - ReLU(t - t_i)]
  clamp      (``clamp=True``) ``realize.output_clamp`` to the table's range, padded to D.

Why it is exact. On a cube interior every quantization ramp is off or fully on, so the real
network computes integers from there on; every later quantity is an integer or a b-bit
dyadic, and every partial sum of every dot product stays below 2^p in magnitude (checked),
so IEEE arithmetic computes them exactly in any order. The two inexact steps (the
quantization's ramps and the softmax average) end in a snap, a block of its own. So on cube
interiors fl(g) = g = g_bar. On the windows (x in a ramp) the claims are weaker and differ:
the snaps still land on integers in range, so the float network outputs some table value
A_i, while the real network outputs a convex combination of two consecutive table values
(the value ramps [t_i - 1, t_i] are disjoint); the two need not agree, and both stay in
[min A, max A] per coordinate. The runtime model (round to nearest, IEEE products, the
softmax of equal scores) is ``transformer_ua.rounding``'s and the proof's
(docs/proofs/integer_ids.md).

Certificate (``integer_ids_realized.IntegerIdsRealized``): ``certify_interiors`` evaluates the parameters at
every class's exact point (prefix sums over the sorted kinks: O(n + log P) a class) and
checks that g = g_bar there; ``window_sup`` is max A - min A per coordinate;
``float_deviation`` bounds |fl(g) - g| in the format the parameters were built for: 0
up to one underflow of the zeroed o (binary64, exact value layer), or the any-order dot
product bound of the value layer (binary32, where b-bit values times ids overflow 24 bits).

Sizes (``predicted_size``, closed form): D = d + 2; blocks quantize, snap, code, attention,
value (+ ceil(d / 2) clamp blocks); widths 2(N-1)d + d, 1, K + 1, 1, 2(P - 1); P = M C(M + n - 2,
n - 1) (Theorem 2) or n M^n (Theorem 3).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from fractions import Fraction

import numpy as np

from transformer_ua import realize as realize_lib
from transformer_ua import rounding
from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun import grid as grid_lib
from transformer_ua.yun.realization import plan as plan_lib
from transformer_ua.yun.single_attention import integer_ids_realized, sum_distinct_code

#: The formats the parameters can be built for (``rounding.FORMATS``).
NUMBER_FORMATS = ('float64', 'float32')
#: Fewest fraction bits of the value table (coarser tables are refused).
MIN_VALUE_BITS = 8
#: Default cube-interior margin (fraction of delta) of ``realize``.
DEFAULT_MARGIN = Fraction(1, 2 ** 10)


def _check_format(number_format) -> str:
  if number_format not in NUMBER_FORMATS:
    raise ValueError(f'number_format={number_format!r}; allowed: '
                     f'{", ".join(repr(f) for f in NUMBER_FORMATS)}.')
  return number_format


def num_ids(d: int, n: int, resolution: int, positional: bool) -> int:
  """P: (multiset, own cell) pairs M C(M + n - 2, n - 1) (Theorem 2) or n M^n (Theorem 3)."""
  M = resolution ** d
  return n * M ** n if positional else M * math.comb(M + n - 2, n - 1)


def predicted_size(d: int, n: int, resolution: int, *, positional: bool,
                   clamp: bool = True) -> dict:
  """Sizes in closed form (module docstring): {'blocks', 'attention_layers', 'max_width',
  'params', 'ids', 'model_width'}. A block with width w on D coordinates: attention (1 head of
  size 1) 4D + 1, feed-forward w (2D + 1) + D; a clamp block: 2 heads 2 (4D + 1), width 4;
  Theorem 3 adds E [n, D]."""
  d, n, N = grid_lib.check_config(d, n, resolution)
  D, M = d + 2, N ** d
  K = n * M if positional else M
  P = num_ids(d, n, N, positional)
  widths = [2 * (N - 1) * d + d, 1, K + 1, 1, 2 * (P - 1)]
  att = 4 * D + 1
  params = sum(att + w * (2 * D + 1) + D for w in widths)
  clamp_blocks = -(-d // realize_lib.CLAMP_COORDS_PER_BLOCK) if clamp else 0
  params += clamp_blocks * (realize_lib.BLOCK_HEADS * att
                            + realize_lib.BLOCK_WIDTH * (2 * D + 1) + D)
  params += n * D if positional else 0
  return {'blocks': len(widths) + clamp_blocks, 'attention_layers': 1, 'max_width': max(widths),
          'params': params, 'ids': P, 'model_width': D}


# ---------------------------------------------------------------------------
# The ids: codes, high digits, classes.
# ---------------------------------------------------------------------------


def code_tables(d: int, n: int, resolution: int, positional: bool):
  """(phi [K], H [K]) as Python-int object arrays (module docstring, 'code')."""
  M = resolution ** d
  if positional:
    k = np.arange(n * M, dtype=object)
    j, m = k // M, k % M
    return np.array([int(mm) * M ** int(jj) for jj, mm in zip(j, m)], object), \
        np.array([int(jj) * M ** n for jj in j], object)
  phi = np.array([int(v) for v in sum_distinct_code.code(M, n)], object)
  R = n * int(phi[-1]) + 1
  return phi, np.array([R * m for m in range(M)], object)


def _cell_index(cells: np.ndarray, resolution: int) -> np.ndarray:
  """m = sum_l N^(l-1) c_l for cells [..., d] (int64)."""
  d = cells.shape[-1]
  return np.tensordot(cells.astype(np.int64), resolution ** np.arange(d, dtype=np.int64),
                      axes=([-1], [0]))


def token_ids(cells: np.ndarray, phi, high, resolution: int, positional: bool) -> np.ndarray:
  """t [..., n] (object ints) of the tokens whose cells are [..., n, d]."""
  m = _cell_index(cells, resolution)
  n = m.shape[-1]
  if positional:
    m = m + np.arange(n, dtype=np.int64) * resolution ** cells.shape[-1]
  codes = phi[m]
  s = codes.sum(axis=-1, keepdims=True)
  return high[m] + s


# ---------------------------------------------------------------------------
# g_bar.
# ---------------------------------------------------------------------------


def _value_bits(values: np.ndarray, ids: np.ndarray, fmt) -> tuple:
  """(b, numerators [P, d] object): the table rounded to b-bit dyadics. First choice: the
  largest b >= ``MIN_VALUE_BITS`` whose value layer is exact in ``fmt`` (parameters
  representable and every partial sum of its dot products below 2^p: ``transformer_ua.rounding``);
  failing that (binary32 past a few ids), the largest b whose parameters are representable,
  and the certificate then bounds the layer's rounding instead."""
  limit = fmt.integer_limit
  amax = float(np.max(np.abs(values))) if values.size else 0.0
  if not math.isfinite(amax):
    raise ValueError('the value table has a non-finite entry.')
  t = np.asarray(ids, object)
  T = int(t[-1])
  weight = (2 * (T - t[1:]) + 1)[:, None]
  top = fmt.precision - 2 - max(0, math.ceil(math.log2(amax + 1)))
  for exact_layer in (True, False):
    b = top
    while b >= MIN_VALUE_BITS:
      num = np.array([[int(round(v * 2 ** b)) for v in row] for row in values], object)
      diff = num[1:] - num[:-1]
      ok = all(abs(int(v)) < limit for v in np.ravel(num)) and \
          all(abs(int(v)) < limit for v in np.ravel(diff))
      if ok and exact_layer:
        load = np.sum(np.abs(diff) * weight, axis=0) + np.abs(num[0])
        ok = all(int(v) < limit for v in load)
      if ok:
        return b, num
      b -= 1
  raise ValueError(f'no value table of at least {MIN_VALUE_BITS} fraction bits fits '
                   f'{fmt.name} (largest |f| {amax:.3g}, largest id {T:,}); use a smaller '
                   'resolution.')


@dataclasses.dataclass(frozen=True, eq=False)
class IntegerIdsApproximator(grid_lib.OnVariant):
  """g_bar of Theorem 2 or 3 with integer ids (module docstring).

  Attributes:
    target, f_bar: f and its piecewise-constant f_bar (the float64 table at the centres).
    variant: the ``yun.variants`` object (``IntegerIds`` or ``PositionalIntegerIds``).
    number_format: 'float64' or 'float32', the format the parameters are exact in.
    phi, high: [K] object ints, the code and the high digit of each (position, cell).
    ids: [P] object ints, sorted; value_num [P, d] object ints; value_bits b: g_bar's value at
      id t_i is value_num[i] / 2^b.
    build_seconds: wall time of ``build``.
  """

  target: targets_lib.Target
  f_bar: targets_lib.Target
  variant: object
  number_format: str
  phi: np.ndarray
  high: np.ndarray
  ids: np.ndarray
  value_num: np.ndarray
  value_bits: int
  build_seconds: float

  @property
  def lam(self) -> Fraction:
    """The softmax scale: 1 (every score is 0, so no scale changes a weight)."""
    return Fraction(1)

  @property
  def num_ids(self) -> int:
    return len(self.ids)

  @functools.cached_property
  def values(self) -> np.ndarray:
    """[P, d] float64: the table A_i = value_num / 2^b (exact dyadics)."""
    return np.ldexp(self.value_num.astype(np.float64), -self.value_bits) \
        if self.value_num.size else np.zeros((0, self.d))

  @functools.cached_property
  def _ids_int(self) -> np.ndarray:
    return np.asarray(self.ids, dtype=np.int64) if int(self.ids[-1]) < 2 ** 62 else self.ids

  def token_ids(self, cells: np.ndarray) -> np.ndarray:
    """t [..., n] of the tokens whose cells are [..., n, d] (``token_ids``)."""
    return token_ids(cells, self.phi, self.high, self.resolution, self.positional)

  def id_positions(self, t) -> np.ndarray:
    """The positions of the ids ``t`` in ``ids``; ValueError if one is not an id."""
    idx = np.searchsorted(self._ids_int, np.asarray(t, self._ids_int.dtype))
    if np.any(idx >= self.num_ids) or np.any(self._ids_int[np.minimum(idx, self.num_ids - 1)]
                                             != np.asarray(t, self._ids_int.dtype)):
      raise ValueError('an id is not in the table.')
    return idx

  def apply(self, x) -> np.ndarray:
    """g_bar(X) [batch, n, d]: the table value of each token's id; X in the closed cube
    [0, 1]^(n x d) (x = 1 is in the last cell)."""
    x = integer_ids_realized.check_cube(grid_lib.check_input(x, self.n, self.d))
    cells = np.minimum(np.floor(x * self.resolution).astype(np.int64), self.resolution - 1)
    return self.values[self.id_positions(self.token_ids(cells))]

  def output_range(self) -> tuple[list, list]:
    """(lo, hi) [d] exact: the range of the table, which is g_bar's range."""
    s = Fraction(1, 2 ** self.value_bits)
    lo = [min(self.value_num[:, i]) * s for i in range(self.d)]
    hi = [max(self.value_num[:, i]) * s for i in range(self.d)]
    return lo, hi

  def predicted_size(self, clamp: bool = True) -> dict:
    return predicted_size(self.d, self.n, self.resolution, positional=self.positional,
                          clamp=clamp)

  def ramp(self, margin) -> Fraction:
    """The quantization ramp 1/s: the largest power of two <= margin delta / 2."""
    m = Fraction(margin)
    if not 0 < m < Fraction(1, 2):
      raise ValueError(f'margin must be in (0, 1/2), got {float(m):g}.')
    e = Fraction(1)
    while e > m / (2 * self.resolution):
      e /= 2
    return e

  def realization_plan(self, tolerance: float, margin: float) -> plan_lib.Plan:
    """``plan.plan_realization``'s answer: lam 1, the quantization ramp, the format's bits."""
    fmt = rounding.FORMATS[self.number_format]
    return plan_lib.Plan(lam=Fraction(1), epsilon=self.ramp(margin), bits=fmt.precision,
                         tolerance=tolerance, margin=margin,
                         bounds={'value_bits': self.value_bits, 'ids': self.num_ids,
                                 'largest_id': int(self.ids[-1])}, cancellation={})

  def realize(self, *, lam=None, epsilon=None, margin=DEFAULT_MARGIN,
              tolerance: float = plan_lib.DEFAULT_TOLERANCE, dtype: str = 'exact',
              clamp: bool = True) -> integer_ids_realized.IntegerIdsRealized:
    """The standard Transformer g (module docstring), parameters exact in ``number_format``.

    Args:
      lam: None or 1 (the head's scores are all 0; no other scale is meaningful).
      epsilon: the quantization ramp 1/s, a power of two (None: ``ramp(margin)``).
      margin: cube interiors shrunk by margin delta per side stay off the ramps.
      tolerance: unused (g = g_bar on every cube interior).
      dtype: 'exact' (the parameters are exact rationals that are also numbers of
        ``number_format``; ``g.apply`` runs them in that format).
      clamp: end with ``realize.output_clamp`` to the table's range.
    """
    del tolerance
    if lam is not None and Fraction(lam) != 1:
      raise ValueError(f'lam={lam!r}: the integer-id head has all scores 0; lam is 1.')
    if dtype != 'exact':
      raise ValueError(f"dtype={dtype!r}: the integer-id network's parameters are exact and "
                       f"already numbers of {self.number_format}; use dtype='exact' (build "
                       "with another arithmetic for another format).")
    if not isinstance(clamp, bool):
      raise ValueError(f'clamp must be True or False, got {clamp!r}.')
    m = Fraction(margin)
    e = self.ramp(m) if epsilon is None else Fraction(epsilon)
    if e <= 0 or e.numerator != 1 or e.denominator & (e.denominator - 1):
      raise ValueError(f'epsilon={epsilon!r} must be a power of two (the ramp 1/s).')
    if e > m / (2 * self.resolution):
      raise ValueError(f'epsilon={float(e):g} is wider than margin delta / 2 = '
                       f'{float(m / (2 * self.resolution)):g}.')
    return integer_ids_realized.realize_network(self, e, m, clamp)

  def describe(self) -> str:
    s = self.predicted_size()
    return (f'Theorem {3 if self.positional else 2}, integer ids ({self.number_format}): '
            f'target {self.target.name}, d={self.d}, n={self.n}, N={self.resolution}; '
            f'{s["blocks"]} blocks, {s["ids"]:,} ids, max width {s["max_width"]:,}, '
            f'{s["params"]:,} params')

  def __repr__(self) -> str:
    return f'IntegerIdsApproximator({self.describe()})'


def build(target, variant, *, number_format: str = 'float64') -> IntegerIdsApproximator:
  """Compiles a target into g_bar with integer ids.

  Args:
    target: a built-in name, a ``targets.Target`` or a callable (``yun.stages.targets``).
    variant: the ``yun.variants`` object: Theorem 2 (f permutation equivariant; classes
      are multisets) or, with ``variant.positional``, Theorem 3 (every cube).
    number_format: the format the parameters must be exact in ('float64', 'float32').
  Raises:
    ValueError: a bad target or format, a non-equivariant target under Theorem 2, ids past
      the format's integers, a table that fits no exact value layer, or colliding ids.
  """
  t0 = time.perf_counter()
  fmt = rounding.FORMATS[_check_format(number_format)]
  d, n, N = variant.d, variant.n, variant.N
  f = targets_lib.get_target(target, d=d, n=n)
  if not variant.positional:
    targets_lib.check_equivariant(f, d, n)
  phi, high = code_tables(d, n, N, variant.positional)
  top = int(max(high)) + int(n * max(phi)) + 1
  if top + fmt.snap + 2 >= fmt.integer_limit:
    raise ValueError(f'ids reach {top:,}; {fmt.name} holds the integer-id network exactly only '
                     f'below 2^{fmt.precision - 1} - 2; use a smaller resolution.')
  cells = variant.grid_classes()                       # [C, n, d]
  t = token_ids(cells, phi, high, N, variant.positional)
  values = targets_lib.grid_values(f, cells, N)        # [C, n, d]
  flat_t = np.asarray(t, object).ravel()
  order = np.argsort(np.asarray(flat_t, dtype=np.int64 if top < 2 ** 62 else object),
                     kind='stable')
  sorted_t = flat_t[order]
  first = np.ones(len(sorted_t), bool)
  first[1:] = sorted_t[1:] != sorted_t[:-1]
  ids = sorted_t[first]
  table = values.reshape(-1, d)[order[first]]
  m = _cell_index(cells, N)
  pairs = len(cells) * n if variant.positional else \
      sum(len(set(row.tolist())) for row in m)     # (cube, position) / (multiset, own cell)
  if len(ids) != pairs or pairs != num_ids(d, n, N, variant.positional):
    raise ValueError(f'{pairs} (context, token) pairs got {len(ids)} distinct ids: ids '
                     'collide.')
  b, num = _value_bits(table, ids, fmt)
  return IntegerIdsApproximator(
      target=f, f_bar=targets_lib.piecewise_constant(f, N), variant=variant,
      number_format=number_format, phi=phi, high=high, ids=np.asarray(ids, object),
      value_num=num, value_bits=b, build_seconds=time.perf_counter() - t0)
