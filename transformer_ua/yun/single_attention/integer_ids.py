r"""Theorems 2 and 3 with integer ids: one network that computes the same in exact and IEEE arithmetic.

Token-major: X [.., n, d] in [0, 1)^{n x d}; M = N^d cells, m = sum_l N^(l-1) c_l the cell
index of a token whose cell is c. The residual stream has D = d + 2 coordinates
(o_1, .., o_d, a_1, a_2): X is padded with two zero coordinates and g reads o. p is the
significand precision of the format the parameters are built for (binary64: p = 53,
binary32: p = 24) and sigma = 2^(p-1) + 1 the snap constant: fl(y + sigma) = sigma + round(y)
for y in (-1/2, 2^(p-1) - 2), exactly (``realization.float_rounding``). Blocks (attention
switched off, W = 0, unless said):

  quantize   o_l <- o_l - ReLU(o_l)                                     (o = 0)
             a_1 <- a_1 + sigma + sum_l N^(l-1) sum_{k=1}^{N-1} [ReLU(s(x_l - a_k) + 1) - ReLU(s(x_l - a_k))]
             s = 2^j, ramps [a_k - 1/s, a_k] (a_k dyadic) inside the margin around k/N: on a cube
             interior a_1 = sigma + m'; m' = m (Theorem 2) or jM + m (Theorem 3: E_j = jM e_(a_1)).
             In float the sum is within 1/2 of the real one (proved), so the bias sigma snaps it.
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
quantization's ramps and the softmax average) end in a snap. On the windows (x in a ramp)
the snaps still land on integers in range, so the float network outputs some table value
A_i; the real network outputs a convex combination of two consecutive table values (the
value ramps [t_i - 1, t_i] are disjoint). Both stay in [min A, max A] per coordinate.

Certificate (``IntegerIdsRealized``): ``certify_interiors`` evaluates the parameters at
every class's exact point (prefix sums over the sorted kinks: O(n + log P) a class) and
checks that g = g_bar there; ``window_sup`` is max A - min A per coordinate;
``float_deviation`` bounds |fl(g) - g| in the format the parameters were built for: 0
up to one underflow of the zeroed o (binary64, exact value layer), or the any-order dot
product bound of the value layer (binary32, where b-bit values times ids overflow 24 bits).

Sizes (``predicted_size``, closed form): D = d + 2; blocks quantize, code, attention, value
(+ ceil(d / 2) clamp blocks); widths 2(N-1)d + d, K + 1, 1, 2(P - 1); P = M C(M + n - 2,
n - 1) (Theorem 2) or n M^n (Theorem 3).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
import time
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import layers, realize as realize_lib
from transformer_ua.yun import grid as grid_lib
from transformer_ua.yun.realization import float_rounding, plan as plan_lib
from transformer_ua.yun.single_attention import sum_distinct_code
from transformer_ua.yun.stages import targets as targets_lib

#: The formats the parameters can be built for (``float_rounding.FORMATS``).
NUMBER_FORMATS = ('float64', 'float32')
#: Stage names of the blocks, in order.
STAGES = ('quantization', 'code', 'attention', 'value', 'clamp')
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
  widths = [2 * (N - 1) * d + d, K + 1, 1, 2 * (P - 1)]
  att = 4 * D + 1
  params = sum(att + w * (2 * D + 1) + D for w in widths)
  clamp_blocks = -(-d // realize_lib.CLAMP_COORDS_PER_BLOCK) if clamp else 0
  params += clamp_blocks * (realize_lib.BLOCK_HEADS * att
                            + realize_lib.BLOCK_WIDTH * (2 * D + 1) + D)
  params += n * D if positional else 0
  return {'blocks': 4 + clamp_blocks, 'attention_layers': 1, 'max_width': max(widths),
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
  representable and every partial sum of its dot products below 2^p: ``float_rounding``);
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
class IntegerIdsApproximator:
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
  def d(self) -> int:
    return self.variant.d

  @property
  def n(self) -> int:
    return self.variant.n

  @property
  def resolution(self) -> int:
    return self.variant.N

  @property
  def positional(self) -> bool:
    return self.variant.positional

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

  def apply(self, x) -> np.ndarray:
    """g_bar(X) [batch, n, d]: the table value of each token's id."""
    x = grid_lib.check_domain(grid_lib.check_input(x, self.n, self.d))
    cells = np.minimum(np.floor(x * self.resolution).astype(np.int64), self.resolution - 1)
    t = token_ids(cells, self.phi, self.high, self.resolution, self.positional)
    idx = np.searchsorted(self._ids_int, np.asarray(t, self._ids_int.dtype))
    return self.values[idx]

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
    fmt = float_rounding.FORMATS[self.number_format]
    return plan_lib.Plan(lam=Fraction(1), epsilon=self.ramp(margin), bits=fmt.precision,
                         tolerance=tolerance, margin=margin,
                         bounds={'value_bits': self.value_bits, 'ids': self.num_ids,
                                 'largest_id': int(self.ids[-1])}, cancellation={})

  def realize(self, *, lam=None, epsilon=None, margin=DEFAULT_MARGIN,
              tolerance: float = plan_lib.DEFAULT_TOLERANCE, dtype: str = 'exact',
              clamp: bool = True) -> 'IntegerIdsRealized':
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
    return _realize(self, e, m, clamp)

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
  fmt = float_rounding.FORMATS[_check_format(number_format)]
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


# ---------------------------------------------------------------------------
# g: the parameters.
# ---------------------------------------------------------------------------


def _zeros(*shape) -> np.ndarray:
  return np.full(shape, Fraction(0), object)


def _off_attention(D: int) -> dict:
  return {'W_Q': _zeros(1, 1, 1, D), 'b_Q': _zeros(1, 1, 1), 'W_K': _zeros(1, 1, 1, D),
          'W_V': _zeros(1, 1, 1, D), 'W_O': _zeros(1, 1, D, 1)}


def _ff(width: int, D: int) -> dict:
  return {'W_1': _zeros(1, width, D), 'b_1': _zeros(1, width), 'W_2': _zeros(1, D, width),
          'b_2': _zeros(1, D)}


def staircase_coefficients(values) -> list:
  """c_k = dF_(k+1) - dF_k (dF_0 = dF_K = 0) for F = ``values`` on 0..K-1: then
  F(m) = F(0) + sum_k c_k ReLU(m - k) on those integers."""
  v = [Fraction(x) for x in values]
  dv = [Fraction(0)] + [v[k] - v[k - 1] for k in range(1, len(v))] + [Fraction(0)]
  return [dv[k + 1] - dv[k] for k in range(len(v))]


def _realize(net: IntegerIdsApproximator, e: Fraction, margin: Fraction,
             clamp: bool) -> 'IntegerIdsRealized':
  fmt = float_rounding.FORMATS[net.number_format]
  d, n, N = net.d, net.n, net.resolution
  D, A1, A2 = d + 2, d, d + 1
  sigma = fmt.snap
  s = 1 / e
  J = int(math.log2(s)) + 2
  kinks = [Fraction(math.ceil(Fraction(k, N) * 2 ** J), 2 ** J) + e / 2 for k in range(1, N)]
  # quantize
  q = _ff(2 * (N - 1) * d + d, D)
  u = 0
  for l in range(d):
    for a in kinks:
      for bias in (-s * a + 1, -s * a):
        q['W_1'][0, u, l], q['b_1'][0, u] = s, bias
        q['W_2'][0, A1, u] = Fraction(N ** l) * (1 if bias == -s * a + 1 else -1)
        u += 1
    q['W_1'][0, u, l], q['W_2'][0, l, u] = Fraction(1), Fraction(-1)
    u += 1
  q['b_2'][0, A1] = Fraction(sigma)
  # code
  K = len(net.phi)
  c = _ff(K + 1, D)
  c['W_1'][0, 0, A1], c['W_2'][0, A1, 0] = Fraction(1), Fraction(-1)
  c_phi = staircase_coefficients(net.phi)
  c_hi = staircase_coefficients([h - p for h, p in zip(net.high, net.phi)])
  for k in range(K):
    c['W_1'][0, k + 1, A1], c['b_1'][0, k + 1] = Fraction(1), Fraction(-(sigma + k))
    c['W_2'][0, A1, k + 1], c['W_2'][0, A2, k + 1] = c_hi[k], c_phi[k]
  # attention + snap
  att = _off_attention(D)
  att['W_V'][0, 0, 0, A2], att['W_O'][0, 0, A2, 0] = Fraction(1), Fraction(n)
  snap = _ff(1, D)
  snap['b_2'][0, A2] = Fraction(sigma)
  # value
  P, scale = net.num_ids, Fraction(1, 2 ** net.value_bits)
  v = _ff(2 * (P - 1), D)
  v['W_1'][0, :, A1] = Fraction(1)
  v['W_1'][0, :, A2] = Fraction(1)
  for i in range(1, P):
    ti = int(net.ids[i])
    v['b_1'][0, 2 * i - 2], v['b_1'][0, 2 * i - 1] = Fraction(-(sigma + ti - 1)), \
        Fraction(-(sigma + ti))
    for l in range(d):
      step = (net.value_num[i, l] - net.value_num[i - 1, l]) * scale
      v['W_2'][0, l, 2 * i - 2], v['W_2'][0, l, 2 * i - 1] = step, -step
  for l in range(d):
    v['b_2'][0, l] = net.value_num[0, l] * scale
  block = functools.partial(layers.Segment, 'block', 1, num_heads=1, head_size=1,
                            normalizer='softmax', lam=1.0, activation='relu')
  segments = (block(width=2 * (N - 1) * d + d, name='quantization'),
              block(width=K + 1, name='code'),
              block(width=1, name='attention'),
              block(width=2 * (P - 1), name='value'))
  params = {'segment_0': {'attention': _off_attention(D), 'feedforward': q},
            'segment_1': {'attention': _off_attention(D), 'feedforward': c},
            'segment_2': {'attention': att, 'feedforward': snap},
            'segment_3': {'attention': _off_attention(D), 'feedforward': v}}
  bounds = None
  if clamp:
    lo, hi = net.output_range()
    segs, cp = realize_lib.output_clamp(lo, hi, exact=True)
    params['segment_4'] = _pad_clamp(cp['segment_0'], d, D)
    segments = segments + segs
    bounds = (tuple(lo), tuple(hi))
  if net.positional:
    E = _zeros(n, D)
    for j in range(n):
      E[j, A1] = Fraction(j * N ** d)
    params['E'] = E
  return IntegerIdsRealized(segments=segments, exact=params, source=net, ramp=e,
                            margin=margin, kinks=tuple(kinks), clamp=bounds)


def _pad_clamp(p: dict, d: int, D: int) -> dict:
  """``realize.output_clamp``'s block on d coordinates, acting on the first d of D."""
  def pad(a, axis):
    width = [(0, 0)] * a.ndim
    width[axis] = (0, D - d)
    return np.pad(a, width, constant_values=Fraction(0))
  att, ff = p['attention'], p['feedforward']
  return {'attention': {'W_Q': pad(att['W_Q'], 3), 'b_Q': att['b_Q'], 'W_K': pad(att['W_K'], 3),
                        'W_V': pad(att['W_V'], 3), 'W_O': pad(att['W_O'], 2)},
          'feedforward': {'W_1': pad(ff['W_1'], 2), 'b_1': ff['b_1'], 'W_2': pad(ff['W_2'], 1),
                          'b_2': pad(ff['b_2'], 1)}}


def _float_array(a: np.ndarray, fmt) -> np.ndarray:
  """The exact rationals of ``a`` as float64, refusing any that is not a number of ``fmt``."""
  flat = [Fraction(v) for v in np.ravel(a)]
  for v in flat:
    if not fmt.representable(v):
      raise ValueError(f'parameter {v} is not a {fmt.name} number.')
  return np.asarray([float(v) for v in flat], np.float64).reshape(np.shape(a))


# ---------------------------------------------------------------------------
# g: evaluation and proofs.
# ---------------------------------------------------------------------------


def relu_sums(kinks, coefs, points) -> list:
  """[sum_u coefs_u ReLU(x - kinks_u) for x in points], exactly, by prefix sums over the
  sorted kinks (O((U + X) log U)); kinks, coefs, points exact rationals or ints."""
  order = sorted(range(len(kinks)), key=lambda i: kinks[i])
  ks = [kinks[i] for i in order]
  c1, c2 = [0], [0]
  for i in order:
    c1.append(c1[-1] + coefs[i])
    c2.append(c2[-1] + coefs[i] * kinks[i])
  out = []
  for x in points:
    j = bisect.bisect_left(ks, x)      # units with kink < x are on (kink = x gives 0)
    out.append(x * c1[j] - c2[j])
  return out


@dataclasses.dataclass(frozen=True, eq=False)
class IntegerIdsRealized:
  """The realized integer-id g (module docstring).

  Attributes: segments; exact (the parameters as exact rationals, object arrays); source
  (the ``IntegerIdsApproximator``); ramp (1/s), margin (the cube-interior margin the ramps
  keep clear of), kinks (a_k); clamp: None or (lo, hi) exact. ``params`` are the same
  numbers as float64 arrays (each a number of ``number_format``), ``dtype`` is 'exact'.
  """

  segments: tuple
  exact: dict
  source: IntegerIdsApproximator
  ramp: Fraction
  margin: Fraction
  kinks: tuple
  clamp: tuple | None = None
  dtype: str = 'exact'

  @property
  def number_format(self) -> str:
    return self.source.number_format

  @property
  def format(self):
    return float_rounding.FORMATS[self.number_format]

  @functools.cached_property
  def params(self) -> dict:
    return jax.tree_util.tree_map(lambda a: _float_array(a, self.format), self.exact)

  @property
  def lam(self) -> Fraction:
    return Fraction(1)

  @property
  def epsilon(self) -> Fraction:
    return self.ramp

  @property
  def quantization_epsilon(self) -> Fraction:
    return self.ramp

  @property
  def positional(self) -> bool:
    return self.source.positional

  @property
  def n(self) -> int:
    return self.source.n

  @property
  def d(self) -> int:
    return self.source.d

  @property
  def model_width(self) -> int:
    return self.d + 2

  # -- sizes ---------------------------------------------------------------

  def depth(self) -> int:
    return sum(s.depth for s in self.segments)

  def layer_counts(self) -> dict:
    return {STAGES[i]: {seg.kind: seg.depth} for i, seg in enumerate(self.segments)}

  def attention_layers(self) -> int:
    return 1

  def max_width(self) -> int:
    return max(s.width for s in self.segments)

  def num_params(self) -> int:
    return layers.count_params(self.exact)

  def bits_per_param(self) -> int:
    return self.format.precision

  def size(self) -> dict:
    return {'blocks': self.depth(), 'attention_layers': 1, 'max_width': self.max_width(),
            'params': self.num_params(), 'ids': self.source.num_ids,
            'model_width': self.model_width}

  def exact_params(self) -> dict:
    return self.exact

  def planned_bits(self, margin=None, tolerance: float = 1e-6) -> int:
    del margin, tolerance
    return self.format.precision

  def __repr__(self) -> str:
    return (f'IntegerIdsRealized({self.source.describe()}; ramp 2^{int(math.log2(self.ramp))}, '
            f'{"clamped" if self.clamp else "no clamp"})')

  # -- evaluation ------------------------------------------------------------

  def network(self) -> layers.Network:
    dt = jnp.float64 if self.number_format == 'float64' else jnp.float32
    return layers.Network(self.segments, positional=self.positional, num_tokens=self.n,
                          param_dtype=dt, embed_width=self.model_width)

  def apply(self, x) -> np.ndarray:
    """fl(g)(X) [batch, n, d]: the JAX network in ``number_format`` (returned as float64)."""
    x = grid_lib.check_domain(grid_lib.check_input(x, self.n, self.d))
    dt = np.dtype(self.number_format)
    with jax.enable_x64(True):
      params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, dt), self.params)
      y = layers.jit_apply(self.network())(params, jnp.asarray(x, dt))
      return np.asarray(y, np.float64)

  def apply_exact(self, x) -> np.ndarray:
    """The real network g(X) in exact rationals (object [batch, n, d]), layer by layer."""
    x = grid_lib.check_domain(grid_lib.check_input(x, self.n, self.d))
    D = self.model_width
    out = np.empty(x.shape, object)
    for b in range(x.shape[0]):
      z = np.full((self.n, D), Fraction(0), object)
      z[:, :self.d] = [[Fraction(float(v)) for v in row] for row in x[b]]
      if self.positional:
        z = z + self.exact['E']
      for i, seg in enumerate(self.segments):
        p = self.exact[f'segment_{i}']
        z = z + _exact_attention(p['attention'], z)
        ff = p['feedforward']
        pre = z.dot(ff['W_1'][0].T) + ff['b_1'][0]
        h = np.vectorize(lambda t: t if t > 0 else Fraction(0), otypes=[object])(pre)
        z = z + h.dot(ff['W_2'][0].T) + ff['b_2'][0]
      out[b] = z[:, :self.d]
    return out

  def apply_certified(self, x, bits: int | None = None):
    """(mid, rad) float64 [batch, n, d]: the exact g(X) lies in [mid - rad, mid + rad]
    (mid its float64 rounding, rad the rounding's size rounded up)."""
    del bits
    ex = self.apply_exact(x)
    mid = np.vectorize(float, otypes=[np.float64])(ex)
    rad = np.vectorize(lambda e, m: float(abs(Fraction(m) - e)) * (1 + 2 ** -50),
                       otypes=[np.float64])(ex, mid)
    return mid, rad

  # -- the certificate ---------------------------------------------------------

  def check_margin(self, margin) -> Fraction:
    """``margin`` if every quantization ramp lies off the cube interiors shrunk by it
    (checked exactly), else ValueError (one line)."""
    m, N = Fraction(margin), self.source.resolution
    for k, a in enumerate(self.kinks, start=1):
      if not (a <= Fraction(k, N) + m / N and a - self.ramp >= Fraction(k, N) - m / N):
        raise ValueError(f'margin={float(m):g}: the quantization ramp at {k}/N reaches into a '
                         f'cube interior (the ramps keep margin {float(self.margin):g}).')
    return m

  def _value_units(self, segment: int):
    """(kinks, coefficient per output coordinate) of the value layer, read from the params:
    unit u is ReLU(a_1 + a_2 - kink_u)."""
    ff = self.exact[f'segment_{segment}']['feedforward']
    sigma = self.format.snap
    kinks = [-ff['b_1'][0, u] - sigma for u in range(ff['b_1'].shape[1])]
    return kinks, [list(ff['W_2'][0, l]) for l in range(self.d)], list(ff['b_2'][0, :self.d])

  @functools.cached_property
  def _code_check(self) -> dict:
    """The code layer's outputs on every integer m' in [0, K), read from the params, checked
    equal to (H - phi, phi)."""
    src, sigma, d = self.source, self.format.snap, self.d
    ff = self.exact['segment_1']['feedforward']
    K = len(src.phi)
    kinks = [-ff['b_1'][0, u] - sigma for u in range(1, K + 1)]
    pts = list(range(K))
    a1 = relu_sums(kinks, list(ff['W_2'][0, d, 1:]), pts)
    a2 = relu_sums(kinks, list(ff['W_2'][0, d + 1, 1:]), pts)
    if ff['W_2'][0, d, 0] != -1 or any(ff['W_1'][0, u, d] != 1 for u in range(K + 1)):
      raise AssertionError('the code layer is not the staircase of the construction.')
    for m in pts:
      if a1[m] + ff['b_2'][0, d] != src.high[m] - src.phi[m] or \
          a2[m] + ff['b_2'][0, d + 1] != src.phi[m]:
        raise AssertionError(f'the code layer gives the wrong code at m={m}.')
    return {'symbols': K}

  @functools.cached_property
  def _value_check(self) -> dict:
    """The value layer at every id, read from the params, checked equal to the table."""
    src = self.source
    kinks, coefs, bias = self._value_units(3)
    ids = [int(t) for t in src.ids]
    scale = Fraction(1, 2 ** src.value_bits)
    for l in range(self.d):
      got = relu_sums(kinks, coefs[l], ids)
      for i, v in enumerate(got):
        if v + bias[l] != src.value_num[i, l] * scale:
          raise AssertionError(f'the value layer gives the wrong value at id {ids[i]}.')
    return {'ids': len(ids)}

  def certify_interiors(self, margin=None, bits: int | None = None, *, tolerance: float = 1e-6,
                        workers=None, check_plan: bool = False, executor=None,
                        state_dir: str | None = None) -> dict:
    """max |g - g_bar| over every cube interior (shrunk by margin delta per side), exactly:
    the ramps are off the interiors (``check_margin``), so each class is one exact point
    after the quantization; the code and value layers are evaluated from the parameters at
    every symbol and every id (``relu_sums``), each class's tokens are looked up (O(n +
    log P) a class). The answer is 0 or an AssertionError (the network is not its
    construction). Runs in process whatever ``workers`` / ``executor`` / ``state_dir`` say:
    nothing of it is computed elsewhere or resumed."""
    del bits, tolerance, check_plan, workers, executor, state_dir
    t0 = time.perf_counter()
    m = self.check_margin(self.margin if margin is None else margin)
    self._code_check  # pylint: disable=pointless-statement
    self._value_check  # pylint: disable=pointless-statement
    src = self.source
    cells = src.variant.grid_classes()
    t = token_ids(cells, src.phi, src.high, src.resolution, src.positional)
    idx = np.searchsorted(src._ids_int, np.asarray(t, src._ids_int.dtype))  # pylint: disable=protected-access
    if np.any(idx >= src.num_ids) or np.any(src._ids_int[np.minimum(idx, src.num_ids - 1)] != t):  # pylint: disable=protected-access
      raise AssertionError('a class has an id that is not in the table.')
    return {'max_abs_error': 0.0, 'classes': len(cells), 'margin': float(m),
            'seconds': time.perf_counter() - t0, 'lam': 1.0, 'epsilon': float(self.ramp),
            'method': 'exact: integer ids, every class evaluated'}

  def window_sup(self) -> np.ndarray:
    """[n, d] sup over the windows of |g - g_bar| (module docstring): both lie in the
    table's range, so b_i - a_i (rounded up)."""
    lo, hi = self.source.output_range()
    return np.tile([float(h - l) for l, h in zip(lo, hi)], (self.n, 1))

  @functools.cached_property
  def float_proof(self) -> dict:
    """The float certificate's checks and bound (module docstring) in ``number_format``:
    {'interior', 'window' (sup |fl(g) - g| bounds, rounded up), 'steps' (each proved
    inequality as text), 'assumes'}; ValueError (one line) where a snap or an exact
    partial sum cannot be proved."""
    return float_deviation(self)


def _exact_attention(p: dict, z: np.ndarray) -> np.ndarray:
  """The attention update in exact rationals: every head here has W_Q = W_K = 0 (all scores
  0, weights exactly 1/n); anything else is refused."""
  if any(v != 0 for v in np.ravel(p['W_Q'])) or any(v != 0 for v in np.ravel(p['W_K'])) \
      or any(v != 0 for v in np.ravel(p['b_Q'])):
    raise ValueError('exact evaluation covers heads with all scores 0 only.')
  n = z.shape[0]
  out = np.full(z.shape, Fraction(0), object)
  for h in range(p['W_V'].shape[1]):
    v = z.dot(p['W_V'][0, h].T)                    # [n, m]
    mean = v.sum(axis=0) * Fraction(1, n)           # [m]
    out = out + np.tile(p['W_O'][0, h].dot(mean), (n, 1))
  return out


# ---------------------------------------------------------------------------
# The float certificate.
# ---------------------------------------------------------------------------


def _up(x: Fraction) -> float:
  """float(x) rounded up."""
  f = float(x)
  return f if Fraction(f) >= x else float(np.nextafter(f, np.inf))


def float_deviation(g: IntegerIdsRealized) -> dict:
  """sup |fl(g) - g| on cube interiors and windows in g's format, from the rounding model
  (``float_rounding``); each step is an inequality checked in exact rationals."""
  fmt, src = g.format, g.source
  u, tau, limit = fmt.u, fmt.tiny, fmt.integer_limit
  d, n, N = src.d, src.n, src.resolution
  M, sigma = N ** d, fmt.snap
  steps = []
  # 1. quantize: the a_1 row is within 1/2 of the real sum in [0, M - 1], then snapped.
  ff = g.exact['segment_0']['feedforward']
  s = 1 / g.ramp
  err, load, terms = Fraction(0), Fraction(0), 0
  for uu in range(ff['b_1'].shape[1]):
    w2 = abs(ff['W_2'][0, d, uu])
    if w2 == 0:
      continue
    beta = ff['b_1'][0, uu]
    ymax = max(abs(beta), abs(s + beta))
    err += w2 * (u * ymax + tau)
    load += w2 * ((1 + u) * max(Fraction(0), s + beta) + tau)
    terms += 1
  err += float_rounding.dot_error(fmt, terms, load)
  if not err < Fraction(1, 2):
    raise ValueError(f'{fmt.name}: the quantization sum is only within {float(err):.3g} of '
                     'its real value (needs < 1/2 for the snap); use a larger margin or a '
                     'smaller resolution.')
  steps.append(f'quantization within {_up(err):.3g} < 1/2 of [0, M - 1]: snapped to an integer')
  # 2. code: integer partial sums below 2^p.
  ff = g.exact['segment_1']['feedforward']
  K = len(src.phi)
  reach = [K - 1 - k for k in range(K)]
  for row, extra in ((d, sigma + K), (d + 1, 0)):
    tot = extra + sum(abs(ff['W_2'][0, row, k + 1]) * reach[k] for k in range(K))
    if not tot < limit:
      raise ValueError(f'{fmt.name}: the code layer\'s sums reach {tot:,} >= 2^{fmt.precision}.')
  steps.append('code layer: integers, every partial sum below 2^p: exact')
  # 3. attention: the average is within 1/2 of phi_own + S, then snapped.
  phimax = max(src.phi)
  smax = n * phimax
  ew = float_rounding.SOFTMAX_ULPS * 2 * u / n
  mixed = ew * smax + fmt.gamma(n) * (Fraction(1, n) + ew) * smax + n * tau
  out = n * mixed + u * n * (Fraction(smax, n) + mixed) + tau
  a2 = out + u * (phimax + smax + out) + tau
  if not a2 < Fraction(1, 2):
    raise ValueError(f'{fmt.name}: the attention average is only within {float(a2):.3g} of '
                     'phi + S (needs < 1/2); use a smaller resolution.')
  steps.append(f'attention within {_up(a2):.3g} < 1/2 of phi(own) + S: snapped '
               f'(assumes {float_rounding.SOFTMAX_ASSUMPTION})')
  # 4. value: pre-activations exact integers; the products and sums exact or bounded.
  top = int(max(src.high)) + int(smax) + 1
  if not top + sigma + 2 < limit:
    raise ValueError(f'{fmt.name}: ids reach {top:,}; the value layer needs them below 2^(p-1).')
  kinks, coefs, bias = g._value_units(3)  # pylint: disable=protected-access
  ids = [int(t) for t in src.ids]
  scale = 2 ** src.value_bits
  dev = Fraction(0)
  for l in range(d):
    c = [abs(x) for x in coefs[l]]
    exact_load = sum(ci * (ids[-1] - k) for ci, k in zip(c, kinks) if k < ids[-1]) + abs(bias[l])
    if exact_load * scale < limit:
      continue                          # every partial sum a multiple of 2^-b below 2^(p-b)
    # any-order bound at each id: gamma_K sum_on |W_2| ReLU(t - kink) + the bias add
    load1 = relu_sums(kinks, c, ids)
    order = sorted(kinks)
    for i, t in enumerate(ids):
      on = bisect.bisect_left(order, t)
      if on == 0:
        continue
      value = abs(src.value_num[i, l]) / Fraction(scale)
      dot = float_rounding.dot_error(fmt, on, load1[i])
      dev = max(dev, dot + u * (value + dot) + tau)
  if dev == 0:
    steps.append('value layer: b-bit dyadics times integer ids, every partial sum below '
                 '2^(p-b): exact')
  else:
    steps.append(f'value layer: any-order dot product bound {_up(dev):.3g} at the worst id')
  # 5. the zeroed o (one flushed subnormal at most) and the clamp.
  total = dev + tau
  if g.clamp is not None and dev > 0:
    lo, hi = g.clamp
    total += u * (max(abs(v) for v in lo + hi) + 2 * dev) + 2 * tau
  steps.append('o zeroed exactly up to one subnormal; '
               + ('clamp: identity on the table range' if dev == 0 else 'clamp: rounding added'))
  return {'interior': _up(total), 'window': _up(total), 'steps': steps,
          'assumes': float_rounding.SOFTMAX_ASSUMPTION, 'format': fmt.describe(),
          'quantization_error': _up(err), 'attention_error': _up(a2)}
