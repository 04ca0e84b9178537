"""Fang et al. 2022, Lemma 3.1: a fixed single-head block that multiplies two entries.

Input tokens (``tokens.Layout``; x, y any two entries of every token, here at
indices ``a`` and ``b``; slot ``c`` empty):

    z_i = [ t_i, e_i, ..x_i (at a).., ..y_i (at b).., 0 (at c), ..., 1 ]

Output: the same tokens with ``z'_i[c] = -x_i y_i``; every other entry unchanged.

Construction (paper's matrices, single head, one-hot maximum, FF width r = 2):

    query   q_i = W^Q z_i = [ x_i , 2M^2 e_i ]                   (n+1 entries)
    key     k_j = W^K z_j = [ y_j ,      e_j ]     (paper's "k_i = W^Q z_i": W^K)
    score   <q_i, k_j>    = x_i y_j + 2M^2 [i = j]
    one-hot maximum keeps the *value* s_i = x_i y_i + 2M^2 at j = i, zeros the rest
    value   W^V z_j = e_c (the constant 1 copied to slot c), so
    attn    zhat_i = z_i + s_i e_c
    FF      z'_i = zhat_i + W_2 relu(W_1 zhat_i + b_1) + b_2   (paper writes zhat_1)
            W_1 = [e_c; -e_c], b_1 = 0, W_2 = [-2 e_c, 2 e_c], b_2 = 2M^2 e_c
            => z'_i[c] = s_i - 2 (relu(s_i) - relu(-s_i)) + 2M^2 = -x_i y_i.

Why the diagonal wins (the paper prints 2B^2 for 2M^2): for j != i

    s_ii - s_ij = 2M^2 - x_i (y_j - y_i) >= 2M^2 - 2 X Y > 0   if   M^2 > X Y,

where |x_i| <= X and |y_j| <= Y for all tokens. The paper's sufficient condition
``|x_i|, |y_i| < M`` implies ``M^2 > X Y``; with ``M^2 = X Y`` a boundary input
(x_i = X, y_i = -Y, y_j = Y) *ties* and the one-hot maximum keeps both values
(``onehot_max`` keeps every tied maximum), so the product comes out wrong.

Only ``M^2`` enters (as ``2M^2``), so builders take ``m_squared``; the rules below
make it a power of two, so ``2M^2`` and the FF's cancellation are exact in binary
floating point and only ``fl(x_i y_i + 2M^2)`` rounds (absolute error <= ulp(2M^2)/2
... ulp(4M^2)/2 per block).

Parameters are returned in ``layers``' orientation (Yun et al.'s, one head h = 1,
head size m = n + 1): ``W_Q, W_K: [1, n+1, D]``, ``b_Q: [1, n+1]`` (zero), and the
paper's ``W^V in R^{D x D}`` factored as ``W_O[0] @ W_V[0]`` with
``W_V: [1, n+1, D]`` (one 1: constant -> value entry 0) and ``W_O: [1, D, n+1]``
(one 1: value entry 0 -> slot c). FF: ``W_1: [2, D]``, ``b_1: [2]``,
``W_2: [D, 2]``, ``b_2: [D]``.

Non-zeros in the paper's form (W^Q, W^K, W^V, W_1, W_2, b_1, b_2):
(n+1) + (n+1) + 1 + 2 + 2 + 0 + 1 = 2n + 8. The factored storage holds the single
non-zero of W^V as two (W_V and W_O): 2n + 9 stored non-zeros.
"""

from __future__ import annotations

import math

import numpy as np

from transformer_ua import layers
from transformer_ua.fang.tokens import Layout

# The 2 in 2M^2 (query diagonal and FF bias) and the FF's -2 / +2 weights.
TWO = 2.0
# FF width r of Fang's B block.
FF_WIDTH = 2
# M^2 is at least (1 + DOMINANCE_MARGIN) times the critical value, so the diagonal
# wins by >= 2 M^2 DOMINANCE_MARGIN / (1 + DOMINANCE_MARGIN), far above rounding.
DOMINANCE_MARGIN = 1.0 / 16.0
# M rules (see ``choose_m_squared``).
M_RULES = ('product', 'paper_strict', 'paper')


def _pow2_at_least(v: float) -> float:
  """Smallest power of two >= v (v > 0), exactly representable."""
  if not v > 0 or not math.isfinite(v):
    raise ValueError(f'need a positive finite value, got {v!r}.')
  m, e = math.frexp(v)  # v = m 2^e, 0.5 <= m < 1
  p = math.ldexp(1.0, e - 1)
  return p if p >= v else math.ldexp(1.0, e)


def choose_m_squared(*, x_bound: float, y_bound: float, rule: str = 'product',
                     block: int = 1, ball_bound: float | None = None) -> float:
  """M^2 for one block whose operands satisfy ``|x| <= x_bound``, ``|y| <= y_bound``.

  Rules:
    'product'      (default) smallest power of two >= (1+margin) X Y: the weakest
                   safe choice (M^2 > X Y is what the proof needs), hence the
                   smallest offset 2M^2 and the smallest float64 rounding.
    'paper_strict' smallest power of two M > (1+margin) max(X, Y), squared: the
                   paper's condition |x|, |y| < M, strictly.
    'paper'        the proof of Theorem 3.5 verbatim: M = B in blocks 1, 2 and
                   M = B^(k-1) in block k >= 3 (needs ``ball_bound`` B). Kept to show
                   the trap: it ties at boundary inputs (antipodal directions) and
                   fails for B < 1; never the default.
  """
  if rule not in M_RULES:
    raise ValueError(f'm_rule={rule!r}; allowed: {M_RULES}.')
  for name, v in (('x_bound', x_bound), ('y_bound', y_bound)):
    if not (isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(v) and v >= 0):
      raise ValueError(f'{name} must be a finite number >= 0, got {v!r}.')
  if rule == 'product':
    xy = float(x_bound) * float(y_bound)
    return _pow2_at_least((1 + DOMINANCE_MARGIN) * xy) if xy > 0 else 1.0
  if rule == 'paper_strict':
    big = max(float(x_bound), float(y_bound))
    m = _pow2_at_least((1 + DOMINANCE_MARGIN) * big) if big > 0 else 1.0
    return m * m
  if ball_bound is None or not ball_bound > 0:
    raise ValueError("m_rule='paper' needs ball_bound B > 0.")
  m = ball_bound if block <= 2 else ball_bound ** (block - 1)
  return float(m) * float(m)


def multiplication_block(*, n: int, q: int, x_index: int, y_index: int, out_index: int,
                         m_squared: float | None = None, m: float | None = None,
                         dtype=np.float64) -> dict:
  """Lemma 3.1's block: params ``{'attention': ..., 'feedforward': ...}`` (unstacked).

  Args:
    n: tokens. q: storage slots (token width D = n + q + 2).
    x_index, y_index: 0-based token entries holding x_i and y_i (may be equal).
    out_index: 0-based storage slot receiving -x_i y_i; must be a storage slot
      (``Layout.slot``) and distinct from x_index, y_index. It must be 0 on input.
    m_squared: M^2 with ``M^2 > max|x| max|y|`` over all tokens (see
      ``choose_m_squared``).
    m: alternatively M itself (then M^2 = m * m, rounded if not exact); give exactly
      one of ``m`` and ``m_squared``.
    dtype: numpy dtype of the params (float64, or int64 for exact integer mode).
  Returns:
    dict of numpy arrays in ``layers.attention_update``/``feedforward_update`` form.
  """
  lay = Layout(n, q)
  D = lay.width
  slots = [lay.slot(j) for j in range(1, q + 1)]
  for name, idx in (('x_index', x_index), ('y_index', y_index), ('out_index', out_index)):
    if not isinstance(idx, (int, np.integer)) or isinstance(idx, bool) or not 0 <= idx < D:
      raise ValueError(f'{name}={idx!r}; allowed: an integer in 0..{D - 1} (D = n+q+2).')
  if out_index not in slots:
    raise ValueError(f'out_index={out_index} is not a storage slot; allowed: {slots}.')
  if out_index in (x_index, y_index):
    raise ValueError(f'out_index={out_index} must differ from x_index={x_index} and '
                     f'y_index={y_index}.')
  if any(lay.onehot(0) <= i <= lay.onehot(n - 1) for i in (x_index, y_index)):
    raise ValueError('x_index/y_index point into the one-hot part e_i; allowed: the '
                     f'feature 0, the slots {slots} or the constant {lay.const}.')
  if (m is None) == (m_squared is None):
    raise ValueError('give exactly one of m (M) and m_squared (M^2).')
  if m is not None:
    if not (isinstance(m, (int, float, np.integer, np.floating)) and math.isfinite(m) and m > 0):
      raise ValueError(f'm must be finite and > 0, got {m!r}.')
    m_squared = float(m) * float(m)
  if not (isinstance(m_squared, (int, float, np.integer, np.floating))
          and math.isfinite(float(m_squared)) and float(m_squared) > 0):
    raise ValueError(f'm_squared must be finite and > 0, got {m_squared!r}.')
  two_m2 = TWO * m_squared
  if np.issubdtype(np.dtype(dtype), np.integer):
    if two_m2 != int(two_m2):
      raise ValueError(f'integer mode needs an integer 2M^2, got {two_m2!r}.')
    two_m2 = int(two_m2)
  h_size = n + 1  # head size: Fang's q_i, k_i live in R^{n+1}
  w_q = np.zeros((1, h_size, D), dtype)
  w_k = np.zeros((1, h_size, D), dtype)
  w_v = np.zeros((1, h_size, D), dtype)
  w_o = np.zeros((1, D, h_size), dtype)
  w_q[0, 0, x_index] = 1          # q_i[0] = x_i
  w_k[0, 0, y_index] = 1          # k_j[0] = y_j
  for i in range(n):
    w_q[0, 1 + i, lay.onehot(i)] = two_m2   # q_i[1:] = 2M^2 e_i
    w_k[0, 1 + i, lay.onehot(i)] = 1        # k_j[1:] = e_j
  w_v[0, 0, lay.const] = 1        # value entry 0 = the constant 1
  w_o[0, out_index, 0] = 1        # ... written to slot c: W^V = W_O W_V = e_c e_const^T
  w_1 = np.zeros((FF_WIDTH, D), dtype)
  w_1[0, out_index] = 1
  w_1[1, out_index] = -1
  w_2 = np.zeros((D, FF_WIDTH), dtype)
  w_2[out_index, 0] = -2
  w_2[out_index, 1] = 2
  b_2 = np.zeros((D,), dtype)
  b_2[out_index] = two_m2
  return {
      'attention': {'W_Q': w_q, 'b_Q': np.zeros((1, h_size), dtype), 'W_K': w_k,
                    'W_V': w_v, 'W_O': w_o},
      'feedforward': {'W_1': w_1, 'b_1': np.zeros((FF_WIDTH,), dtype), 'W_2': w_2,
                      'b_2': b_2},
  }


def paper_form(block: dict) -> dict:
  """The paper's matrices of one (unstacked) block: W^Q, W^K, W^V = W_O W_V, FF."""
  att, ff = block['attention'], block['feedforward']
  return {
      'W^Q': np.asarray(att['W_Q'])[0], 'W^K': np.asarray(att['W_K'])[0],
      'W^V': np.asarray(att['W_O'])[0] @ np.asarray(att['W_V'])[0],
      'W_1': np.asarray(ff['W_1']), 'b_1': np.asarray(ff['b_1']),
      'W_2': np.asarray(ff['W_2']), 'b_2': np.asarray(ff['b_2']),
  }


def paper_nonzeros(block: dict) -> int:
  """Non-zeros of one block counted in the paper's form (Lemma 3.1: 2n + 8)."""
  return int(sum(np.count_nonzero(v) for v in paper_form(block).values())
             + np.count_nonzero(np.asarray(block['attention']['b_Q'])))


def theorem_blocks(*, n: int, q: int, operand_bound: float, m_rule: str = 'product',
                   ball_bound: float | None = None, dtype=np.float64):
  """Theorem 3.5's q blocks: slot_1 = -t, slot_k = -t * slot_(k-1), so slot_k = (-t)^k.

  Block 1 multiplies t (index 0) by the constant 1; block k >= 2 multiplies t by slot
  k-1. With |t_i| <= T (``operand_bound``): block 1 has X = T, Y = 1; block k has
  X = T, Y = T^(k-1). The paper's powers alternate in sign: slot_k = (-1)^k t^k, and
  the output weights beta absorb the signs.

  Returns:
    (list of q unstacked block params, list of q M^2 values).
  """
  if not (math.isfinite(operand_bound) and operand_bound > 0):
    raise ValueError(f'operand_bound must be finite and > 0, got {operand_bound!r}.')
  lay = Layout(n, q)
  blocks, m2s = [], []
  for k in range(1, q + 1):
    y_index = lay.const if k == 1 else lay.slot(k - 1)
    y_bound = 1.0 if k == 1 else float(operand_bound) ** (k - 1)
    m2 = choose_m_squared(x_bound=operand_bound, y_bound=y_bound, rule=m_rule, block=k,
                          ball_bound=ball_bound)
    blocks.append(multiplication_block(n=n, q=q, x_index=lay.t, y_index=y_index,
                                       out_index=lay.slot(k), m_squared=m2, dtype=dtype))
    m2s.append(m2)
  return blocks, m2s


def block_segment(n: int, q: int) -> layers.Segment:
  """The q stacked Lemma 3.1 blocks as one core segment."""
  return layers.Segment('block', depth=q, num_heads=1, head_size=n + 1,
                        normalizer='onehot_max', width=FF_WIDTH,
                        name='fang_blocks')
