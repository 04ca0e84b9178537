"""A NumPy emulation of a ``network_dict.Net`` run in a low-precision arithmetic, in the
ways the rounding models of ``rounding.py`` allow, to test the certifier's D against.

Every matmul operand (weights and activations) is reduced to the model's operand format
(``MatmulModel.reduce_operand``: 'nearest' or 'truncate', exact), each product of reduced
operands is formed exactly (float64: at most 2 x 11 significant bits) and added to a float32
accumulator one term at a time, ``order`` 'forward' or 'reverse', the bias last, each addition
rounded to nearest ('nearest') or toward zero ('toward_zero', a faithful rounding the
conservative model allows); the softmax (max subtraction, exp, sum, division) and the
residual additions run in float32, round to nearest. Vectorized over the batch; shares no
code with the certifier.
"""

from __future__ import annotations

import numpy as np

from transformer_ua import rounding


def _round32(s, accumulate):
  f = s.astype(np.float32)
  if accumulate == 'toward_zero':
    away = np.abs(f.astype(np.float64)) > np.abs(s)
    f = np.where(away, np.nextafter(f, np.float32(0)), f)
  return f


def dot(a, b, *, order='forward', accumulate='nearest', bias=None):
  """sum_i a[..., i] b[i, :] (+ bias) in float32: a [..., K] and b [K, N] already reduced.
  ``accumulate`` 'block:k:e': the hardware accumulator of tensor_core_models.block_dot
  (blocks of k, e alignment bits; the bias as the starting accumulator)."""
  a = np.asarray(a, np.float64)
  b = np.asarray(b, np.float64)
  if accumulate.startswith('block:'):
    import tensor_core_models   # noqa: PLC0415 -- a sibling helper of the tests
    _, k, e = accumulate.split(':')
    lead = a.shape[:-1]
    flat = a.reshape(-1, a.shape[-1])
    c = 0.0 if bias is None else np.asarray(bias, np.float64)
    cols = []
    for j in range(b.shape[1]):
      cj = c if np.ndim(c) == 0 else c[j]
      cols.append(tensor_core_models.block_dot(flat, b[:, j], int(k), int(e), c=cj))
    return np.stack(cols, axis=-1).reshape(lead + (b.shape[1],)).astype(np.float32)
  acc = np.zeros(a.shape[:-1] + b.shape[1:], np.float32)
  idx = range(a.shape[-1]) if order == 'forward' else range(a.shape[-1] - 1, -1, -1)
  for i in idx:
    acc = _round32(acc.astype(np.float64) + a[..., i, None] * b[i], accumulate)
  if bias is not None:
    acc = _round32(acc.astype(np.float64) + np.asarray(bias, np.float32), accumulate)
  return acc


def run(net, x, arithmetic: str, *, mode='nearest', order='forward', accumulate='nearest'):
  """fl(g)(x) [B, n, d] (float64 array of float32 values)."""
  model = rounding.MATMUL_MODELS[arithmetic]

  def red(v):
    return model.reduce_operand(np.asarray(v, np.float32), mode).astype(np.float64)

  def mm(a, w, bias=None):                       # a @ w^T (+ bias)
    return dot(red(a), red(w).T, order=order, accumulate=accumulate, bias=bias)
  f32 = np.float32
  z = np.asarray(x, np.float32)
  z = mm(z, net.embed) if net.embed is not None else np.pad(
      z, [(0, 0), (0, 0), (0, net.D - net.d)])
  if net.positional is not None:
    z = (z + net.positional.astype(f32)).astype(f32)
  for blk in net.blocks:
    if blk.attention is not None:
      a = blk.attention
      w_q, b_q, w_k, w_v, w_o = a.w_q, a.b_q, a.w_k, a.w_v, a.w_o
      out = z
      for i in range(w_q.shape[0]):
        q = mm(z, w_q[i], b_q[i])
        k, v = mm(z, w_k[i]), mm(z, w_v[i])
        s = np.stack([dot(red(q[b]), red(k[b]).T, order=order, accumulate=accumulate)
                      for b in range(len(q))])
        e = np.exp((s - s.max(axis=-1, keepdims=True)).astype(f32))
        w = (e / e.sum(axis=-1, keepdims=True, dtype=f32)).astype(f32)
        o = np.stack([dot(red(w[b]), red(v[b]), order=order, accumulate=accumulate)
                      for b in range(len(q))])
        out = (out + mm(o, w_o[i])).astype(f32)
      z = out
    if blk.ff is not None:
      f = blk.ff
      w_1, b_1, w_2, b_2 = f.w_1, f.b_1, f.w_2, f.b_2
      act = np.maximum(mm(z, w_1, b_1), f32(0))
      z = (z + mm(act, w_2, b_2)).astype(f32)
  y = mm(z, net.readout) if net.readout is not None else z[..., :net.d]
  return np.asarray(y, np.float64)


def ways(arithmetic: str):
  """Every (mode, order, accumulate) the model covers that this emulation offers."""
  model = rounding.MATMUL_MODELS[arithmetic]
  modes = ('nearest',) if model.operand_rel == 0 else ('nearest', 'truncate')
  if model.block:                                # the hardware model's own accumulator
    return [(m, 'forward', f'block:{model.block}:{model.align_bits}') for m in modes]
  accs = ('nearest',) if arithmetic in ('float32', 'float64') else ('nearest', 'toward_zero')
  return [(m, o, a) for m in modes for o in ('forward', 'reverse') for a in accs]


def residual_net():
  """z' = z + W_2 ReLU(W_1 z + b_1) + b_2 with a small FF (d = 1, n = 2, float32): z' is
  mostly the residual, so a runtime that reduces the residual errs far beyond D."""
  from transformer_ua.networks import network_apply, network_dict  # noqa: PLC0415
  return network_apply.cast(network_dict.check(
      {'blocks': [{'W_1': np.array([[1.0]]), 'b_1': np.array([0.1]),
                   'W_2': np.array([[2.0 ** -12]]), 'b_2': np.array([0.3])}]}, d=1, n=2),
      np.float32)


def fused_epilogue(net, arithmetic: str):
  """A runtime of a one-block FF network (``residual_net``) whose second matmul takes
  C = z + b_2 as its accumulator and reduces it to the operand format like an operand (a
  bias-first fused epilogue the model forbids), every operand truncated, sums toward zero:
  X [B, n, d] float32 -> its output (float64 array of float32 values)."""
  model = rounding.MATMUL_MODELS[arithmetic]
  ff = net.blocks[0].ff

  def red(a):
    return model.reduce_operand(np.asarray(a, np.float32), 'truncate').astype(np.float64)

  def run_fused(x):
    z = np.asarray(x, np.float32).astype(np.float64)
    pre = dot(red(z), red(ff.w_1).T, accumulate='toward_zero', bias=ff.b_1)
    act = np.maximum(pre.astype(np.float64), 0)
    c = red((z + ff.b_2).astype(np.float32))
    return dot(red(act), red(ff.w_2).T, accumulate='toward_zero', bias=c).astype(np.float64)
  return run_fused
