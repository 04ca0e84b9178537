r"""Lemma 8's g_c evaluated on column ids alone (rank-one, shared-projection identity).

Yun et al. 2020, Appendix E.3; the layers are those of ``yun.stages.contextual``. Every head
of g_c has W_Q = W_K = W_V = u^T (head size m = 1, u = (1, N, ..., N^(d-1))) and
W_O = g e_1 (a multiple of the first unit vector). With id_j = u^T Z_j (token j) and
u_1 = 1, a layer changes Z only in row 1 and changes every id by the same amount, so
the network can be run on the n ids of a point instead of its n x d entries:

    id_j <- id_j + sum_h g_h mix_h(id)_j,    mix_h(id)_j = max_k id_k   if id_j + b_h > 0
                                                           min_k id_k   if id_j + b_h < 0
                                                           mean_k id_k  if id_j + b_h = 0

(hardmax with rank-one scores s_jk = (id_j + b_h) id_k: the arg max of the keys for a
positive query, the arg min for a negative one, a tie of all keys for 0; tied keys are
equal, so are their values). A selective-shift layer has two heads, b = -(c - delta/2)
and -(c + delta/2), g = +N^d and -N^d, hence

    id_j <- id_j + N^d (max_k id_k - min_k id_k) [c - delta/2 < id_j < c + delta/2]   (*)

-- per layer a max and a min over the n tokens, two threshold compares, a select and an
add. No query is 0 in the sweep: in scaled units (S = 2N) the ids are multiples of S/N
(the inputs are, and so is every shift), the thresholds odd multiples of S/(2N) (checked
on the params), so (*) is exact. The global shift (one head, b_f, gain F = N^((n+1)d)):

    q_j = id_j + F mix(id)_j                  (the mean branch counts inexact averages)
    g_c(L)_j = Z_j + (q_j - id_j) e_1         (Z: the encoded input)

Arithmetic. The sweep runs in the narrowest integer type its own proven bound allows
(``contextual_params.sweep_bound``: ids, spreads, shifts and the tie sum; int32, int64, or
limbs), the global shift and everything after it in the mapping's planned arithmetic
(``cm.arithmetic``: int64 or limbs) -- e.g. at N=8, d=2, n=4 the sweep needs 58 bits
and only the final layer's 81 bits need limbs.

The constants (thresholds c -+ delta/2, gains, u, F, b_f) are read from
``cm.exact_params`` and their structure is checked on the host; a network that is not
of this shape is refused (use the literal kernels). Tests compare this kernel with the
literal layers on whole grids, int64 and limbs.

Shapes: ids are token-major arrays ``[n, B]`` (int) or ``[n, B, K]`` (limbs): per
layer one reduction over the leading axis and elementwise operations over the batch.
The kernel's output is a ``gc_kernels.GcResult`` (batch-major, like every kernel's); it
is registered there as 'sweep' when this module is imported (the package imports it).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua.exact import limbs, planner
from transformer_ua.exact.ops import ExactOps
from transformer_ua.yun.stages import gc_kernels
from transformer_ua.yun.stages import contextual_params

#: Integer types of the sweep, narrowest first, and the bits (incl. sign) each holds.
SWEEP_INT_TYPES = (('int32', 31), ('int64', planner.INT64_BITS))
SWEEP_ARITHMETICS = ('auto', 'int32', 'int64', 'limbs')
#: Bits (incl. sign) up to which integers are exact in float64 with room for a quotient.
FLOAT_EXACT_BITS = 53




@dataclasses.dataclass(frozen=True)
class Program:
  """The integers of g_c that the id-only evaluation needs (scaled by S).

  Attributes:
    lo, hi: [L] Python ints, thresholds c - delta/2 and c + delta/2 of the sweep layers.
    gain: [L] Python ints, N^d of each sweep layer.
    final_bias: b_f of the global shift (0 for Yun); final_gain: F.
    u: the shared projection (Python ints, u[0] = 1).
    kind: the sweep's arithmetic, 'int32', 'int64' or 'limbs'; spec: its LimbSpec.
    sweep_bits: bits the sweep needs (``contextual_params.sweep_bound``).
  """

  lo: tuple
  hi: tuple
  gain: tuple
  final_bias: int
  final_gain: int
  u: tuple
  kind: str
  spec: limbs.LimbSpec | None
  sweep_bits: int

  @property
  def dtype(self):
    return {'int32': jnp.int32, 'int64': jnp.int64}.get(self.kind)

  def describe(self) -> str:
    if self.kind == 'limbs':
      return (f'sweep in limbs ({self.spec.num_limbs} x {self.spec.limb_bits}; '
              f'{self.sweep_bits} bits)')
    return f'sweep in {self.kind} ({self.sweep_bits} bits)'


def _ints(leaf, limb_bits: int) -> np.ndarray:
  """Params leaf (int64, or signed digit constants [..., Kc]) -> object array of ints."""
  a = np.asarray(leaf)
  if not limb_bits:
    return a.astype(object)
  out = np.zeros(a.shape[:-1], dtype=object)
  for j in range(a.shape[-1]):
    out = out + (a[..., j].astype(object) << (limb_bits * j))
  return out


def read_program(cm, arithmetic: str = 'auto') -> Program:
  """Reads and checks the id-only program from ``cm.exact_params``; plans the sweep.

  Args:
    cm: a ``contextual.ContextualMapping`` (Theorem 2 or 3).
    arithmetic: the sweep's arithmetic: 'auto' (narrowest that holds
      ``contextual_params.sweep_bound``), 'int32', 'int64' (refused when too narrow), 'limbs'.
  Raises:
    ValueError: the params are not of the selective-shift shape, or the arithmetic
      is too narrow.
  """
  if arithmetic not in SWEEP_ARITHMETICS:
    raise ValueError(f'sweep arithmetic {arithmetic!r}; allowed: {SWEEP_ARITHMETICS}.')
  w = cm.arithmetic.limb_bits if cm.limbs else 0
  sw = {k: _ints(v, w) for k, v in cm.exact_params['segment_0']['attention'].items()}
  fi = {k: _ints(v, w) for k, v in cm.exact_params['segment_1']['attention'].items()}
  u = np.asarray(cm.u, dtype=object)
  shape_error = ValueError('the id-only kernel needs W_Q = W_K = W_V = u^T in every head, '
                           'W_O along e_1, and selective-shift head pairs; these params are '
                           "not of that shape (use kernel='fast' or 'core').")
  for p, heads in ((sw, contextual_params.SWEEP_HEADS), (fi, contextual_params.FINAL_HEADS)):
    if p['W_Q'].shape[1:] != (heads, 1, cm.d) or p['W_O'].shape[1:] != (heads, cm.d, 1):
      raise shape_error
    for key in ('W_Q', 'W_K', 'W_V'):
      if not np.all(p[key] == u):
        raise shape_error
    if np.any(p['W_O'][:, :, 1:, :] != 0):
      raise shape_error
  if u[0] != 1:
    raise shape_error
  g = sw['W_O'][:, :, 0, 0]                       # [L, 2]
  lo, hi = -sw['b_Q'][:, 0, 0], -sw['b_Q'][:, 1, 0]
  half = cm.scale // (2 * cm.resolution)
  step = cm.scale // cm.resolution
  if (np.any(g[:, 0] != -g[:, 1]) or np.any(g[:, 0] < 0) or np.any(hi - lo != 2 * half)
      or np.any((lo - half) % step != 0)):
    raise shape_error
  bound = cm.id_sweep_bound
  bits = planner.bits_for(bound)
  if arithmetic == 'auto':
    kind = next((name for name, cap in SWEEP_INT_TYPES if bits <= cap), 'limbs')
  else:
    kind = arithmetic
    cap = dict(SWEEP_INT_TYPES).get(kind)
    if cap is not None and bits > cap:
      raise ValueError(f'the sweep needs {bits} bits; {kind} holds {cap}. Use '
                       "'auto' or 'limbs'.")
  spec = None
  if kind == 'limbs':
    spec = planner.plan(bound, 'limbs').spec
  return Program(lo=tuple(int(v) for v in lo), hi=tuple(int(v) for v in hi),
                 gain=tuple(int(v) for v in g[:, 0]), final_bias=int(fi['b_Q'][0, 0, 0]),
                 final_gain=int(fi['W_O'][0, 0, 0, 0]), u=tuple(int(v) for v in u),
                 kind=kind, spec=spec, sweep_bits=bits)


def sweep_ops(prog: Program) -> ExactOps:
  """The sweep's arithmetic (``prog.kind``: int32, int64 or limbs)."""
  return ExactOps(prog.spec, prog.dtype or jnp.int64)


def final_ops(cm) -> ExactOps:
  """The mapping's planned arithmetic (int64 or limbs): ``cm.ops``."""
  return cm.ops


# ---------------------------------------------------------------------------
# The kernel.
# ---------------------------------------------------------------------------


def input_ids(cm, prog: Program, k):
  """Scaled ids u^T Z_j of grid indices k [B, n, d] (encoded by ``cm.encode``), as
  sweep values [n, B(, K)]. The entries fit the sweep's arithmetic: |entry| <= S Omega
  (Omega = N^(nd); Theorem 3: < S n) and the sweep's bound holds every |id| <= S U_s,
  U_s >= Omega R (``contextual_params.sweep_id_max``; Theorem 3: the exhaustive max)."""
  s_ops = sweep_ops(prog)
  x = s_ops.convert(cm.encode(k), cm.ops)                   # [B, n, d(, K)]
  return jnp.moveaxis(s_ops.dot_const(x, prog.u), 1, 0)


def run_sweep(prog: Program, ids):
  """The L selective shifts (*) on ids [n, B(, K)] (token-major), one ``lax.fori_loop``.

  Token-major arrays, max / min reduced over the leading axis: XLA fuses each layer
  into one pass over the batch (measured 4x faster than a tuple of per-token arrays).
  A gain shared by every layer (Yun: N^d) is a compile-time constant.
  """
  ops = sweep_ops(prog)
  lo, hi = ops.const(prog.lo), ops.const(prog.hi)
  same_gain = len(set(prog.gain)) == 1
  if prog.spec is None:
    gain = ops.const(prog.gain)
  else:
    gain = jnp.asarray(limbs.digits_from_python(np.asarray(prog.gain, dtype=object),
                                                prog.spec.limb_bits))

  def body(l, ids):
    spread = ops.sub(ops.reduce_max(ids), ops.reduce_min(ids))
    if prog.spec is None:
      shift = spread * (prog.gain[0] if same_gain else gain[l])
    else:
      shift = limbs.mul_const(spread, gain[l], prog.spec)
    inside = ops.gt(ids, lo[l]) & ops.lt(ids, hi[l])
    return ops.where(inside, ops.add(ids, shift), ids)

  return jax.lax.fori_loop(0, len(prog.lo), body, ids)


def global_shift(cm, prog: Program, ids):
  """q_j = id_j + F mix(id)_j in the mapping's arithmetic, on sweep ids [n, B(, K)];
  (q [n, B(, K')], the sweep ids in the mapping's arithmetic, inexact tie averages)."""
  s_ops, f_ops = sweep_ops(prog), final_ops(cm)
  n = ids.shape[0]
  big, small, total = s_ops.reduce_max(ids), s_ops.reduce_min(ids), s_ops.reduce_sum(ids)
  if prog.spec is None and prog.sweep_bits <= FLOAT_EXACT_BITS:
    # floor(total / n) through float64 (no vector int64 division on x86): |total| <
    # 2^52, so total is exact in float64 and the rounded quotient is within
    # |total / n| 2^-53 < 1/n of total / n -- never across an integer.
    mean = jnp.floor(total.astype(jnp.float64) / n).astype(total.dtype)
    inexact_mean = mean * n != total
  elif prog.spec is None:
    mean, rem = total // n, total % n
    inexact_mean = rem != 0
  else:
    mean, inexact_mean = limbs.div_small(total, n, prog.spec)
  neg_b = s_ops.const(-prog.final_bias)
  sel = s_ops.where(s_ops.gt(ids, neg_b), big, s_ops.where(s_ops.lt(ids, neg_b), small, mean))
  inexact = jnp.sum(s_ops.eq(ids, neg_b) & inexact_mean).astype(jnp.int32)
  lt = f_ops.convert(ids, s_ops)
  q = f_ops.add(lt, f_ops.mul(f_ops.convert(sel, s_ops), prog.final_gain))
  return q, lt, inexact


def forward_fn(cm, arithmetic: str = 'auto'):
  """``f(params, k) -> gc_kernels.GcResult``: g_c on column ids, the sweep in
  ``arithmetic`` (``read_program``).

  The program is read from ``cm.exact_params`` now (``read_program``); ``params`` is
  accepted for the kernels' signature and must be ``cm.exact_params``. Call under x64.
  Output: ``sweep_ids`` (l~), ``ids`` (q), ``z`` (g_c output), ``inexact``, arrays in
  ``cm.arithmetic`` ([B, n] int64 or [B, n, K] limbs).
  """
  prog = read_program(cm, arithmetic)
  f_ops = final_ops(cm)

  def f(params, k):
    del params
    k = jnp.asarray(k, jnp.int64)
    ids0 = input_ids(cm, prog, k)                      # [n, B(, K)]
    q, lt, inexact = global_shift(cm, prog, run_sweep(prog, ids0))
    q_arr, lt_arr = jnp.moveaxis(q, 0, 1), jnp.moveaxis(lt, 0, 1)
    id0 = jnp.moveaxis(f_ops.convert(ids0, sweep_ops(prog)), 0, 1)
    x = cm.encode(k)                                   # [B, n, d(, K)]
    z0 = f_ops.add(x[:, :, 0], f_ops.sub(q_arr, id0))
    z = x.at[:, :, 0].set(z0)
    return gc_kernels.GcResult(sweep_ids=lt_arr, ids=q_arr, z=z, inexact=inexact)

  return f


@gc_kernels.register('sweep')
def sweep_kernel(cm):
  """The registry's 'sweep' kernel: ``forward_fn`` with the sweep's arithmetic planned
  ('auto'); the paper's g_c only (Theorem 2 / 3)."""
  if not cm.id_sweep:
    raise ValueError(f"kernel='sweep' runs the paper's g_c; ties={cm.ties!r} needs "
                     "kernel='fast' or 'core'.")
  return forward_fn(cm)


