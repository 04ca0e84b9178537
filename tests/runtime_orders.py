"""A NumPy interpreter of a standard Transformer's params in the orders and arithmetics a
runtime may use, to test the integer-id certificate's runtime model (docs/proofs/
integer_ids.md, Model (R)) against what it covers and what it does not.

Every matmul entry y = sum_i a_i b_i + c is summed left to right, the bias c added after
``bias_at`` products (0: bias first, as a kernel that initializes its accumulator with C;
None: last), each product and addition rounded to ``dtype``. ``operands`` ('tf32',
'bfloat16' or None) reduces every matmul operand first (``rounding.MatmulModel.
reduce_operand``, exact). ``softmax_ulps`` moves every softmax weight by that many ulp.
Vectorized over the batch; shares no code with the certificate or ``layers``.
"""

from __future__ import annotations

import numpy as np

from transformer_ua import rounding


def _reduce(a, dt, operands, mode):
  if operands is None:
    return a
  return rounding.MATMUL_MODELS[operands].reduce_operand(a, mode).astype(dt)


def _matvec(W, b, z, dt, bias_at, operands, mode):
  """[B, out]: W [out, in] times z [B, in] plus b [out], in the order of the module doc."""
  W = _reduce(np.asarray(W, dt), dt, operands, mode)
  z = _reduce(np.asarray(z, dt), dt, operands, mode)
  acc = np.zeros((z.shape[0], W.shape[0]), dt)
  b = np.asarray(b, dt)
  terms = W.shape[1]
  at = terms if bias_at is None else min(bias_at, terms)
  for i in range(terms + 1):
    if i == at:
      acc = (acc + b).astype(dt)
    if i < terms:
      acc = (acc + (z[:, i:i + 1] * W[None, :, i]).astype(dt)).astype(dt)
  return acc


def run(params, x, *, positional: bool, dtype='float64', bias_at=None, operands=None,
        mode: str = 'nearest', softmax_ulps: int = 0) -> np.ndarray:
  """The network's output [B, n, d] on X [B, n, d] (d read from X; width from the params)."""
  dt = np.dtype(dtype)
  x = np.asarray(x, dt)
  B, n, d = x.shape
  segs = sorted((k for k in params if k.startswith('segment_')), key=lambda k: int(k[8:]))
  D = np.shape(params[segs[0]]['feedforward']['b_2'])[-1]
  z = np.zeros((B, n, D), dt)
  z[..., :d] = x
  if positional:
    z = (z + np.asarray(params['E'], dt)).astype(dt)
  mv = lambda W, b, v: _matvec(W, b, v, dt, bias_at, operands, mode)  # noqa: E731
  for key in segs:
    att, ff = params[key]['attention'], params[key]['feedforward']
    upd = np.zeros_like(z)
    for h in range(np.shape(att['W_Q'])[1]):
      flat = z.reshape(B * n, D)
      q = mv(att['W_Q'][0, h], att['b_Q'][0, h], flat).reshape(B, n, -1)
      k = mv(att['W_K'][0, h], np.zeros(np.shape(att['W_K'])[2]), flat).reshape(B, n, -1)
      v = mv(att['W_V'][0, h], np.zeros(np.shape(att['W_V'])[2]), flat).reshape(B, n, -1)
      s = np.einsum('bik,bjk->bij', q, k).astype(dt)
      e = np.exp((s - s.max(axis=-1, keepdims=True)).astype(dt)).astype(dt)
      w = (e / e.sum(axis=-1, keepdims=True, dtype=dt)).astype(dt)
      for _ in range(abs(softmax_ulps)):
        w = np.nextafter(w, np.asarray(np.inf if softmax_ulps > 0 else -np.inf, dt))
      mixed = np.zeros((B, n, v.shape[-1]), dt)
      for j in range(n):
        mixed = (mixed + (w[:, :, j:j + 1] * v[:, j:j + 1, :]).astype(dt)).astype(dt)
      out = mv(att['W_O'][0, h], np.zeros(D), mixed.reshape(B * n, -1)).reshape(B, n, D)
      upd = (upd + out).astype(dt)
    z = (z + upd).astype(dt)
    flat = z.reshape(B * n, D)
    hid = np.maximum(mv(ff['W_1'][0], ff['b_1'][0], flat), 0).astype(dt)
    z = (z + mv(ff['W_2'][0], ff['b_2'][0], hid).reshape(B, n, D)).astype(dt)
  return z[..., :d].astype(np.float64)
