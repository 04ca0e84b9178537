r"""The NumPy reference evaluation of a ``network_dict.Net``: g(X) in one dtype, not certified.

``apply(net, x, dtype)`` runs the forward pass of network_dict's docstring with every
operation in ``dtype`` (float64 or float32), x [batch, n, d] -> [batch, n, d]:

    Z_0 = X embed^T + embed_bias (or X zero-padded to D) + E
    s_jk^i = scale * (q_j^i . k_k^i),  s <- s - max_k s   (-inf above the diagonal if causal)
    a_jk^i = exp(s_jk^i) / sum_k exp(s_jk^i)
    Attn(z)_j = sum_i W_O^i sum_k a_jk^i v_k^i + b_O,  FF(z)_j = W_2 act(W_1 z_j + b_1) + b_2
    no norm / 'post' / 'pre' residuals, final_ln, Y = Z_L readout^T + readout_bias

with

    gelu(x)        'gelu':      0.5 x (1 + erf(x / sqrt 2)), erf by math.erf in float64,
                                rounded to x's dtype
                   'gelu_tanh': 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    layer_norm(z)  gamma (z - mu) / sqrt(var + eps) + beta, mu and the biased var two-pass

``cast(net, dtype)`` is the real network a ``dtype`` runtime stores: every parameter rounded
to ``dtype`` (to nearest) and held as float64 again. These are what ``certify.runtimes``'
NumpyRuntime runs and what the import checks (source_check.py) compare against.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from transformer_ua.networks.network_dict import Attention, Block, FeedForward, LayerNorm, Net

def cast(net: Net, dtype) -> Net:
  """The same network with every parameter (the scales and eps too) rounded to ``dtype``
  (round to nearest) and held as float64 again: the real network a ``dtype`` runtime
  stores."""
  def c(a):
    return None if a is None else np.asarray(a, dtype).astype(np.float64)

  def s(x):
    return float(np.asarray(x, dtype))

  def ln(x):
    return None if x is None else LayerNorm(c(x.gamma), c(x.beta), s(x.eps))

  blocks = []
  for b in net.blocks:
    att = None if b.attention is None else dataclasses.replace(
        b.attention, **{f: c(getattr(b.attention, f)) for _, f in Attention.ARRAYS},
        scale=s(b.attention.scale))
    ff = None if b.ff is None else dataclasses.replace(
        b.ff, **{f: c(getattr(b.ff, f)) for _, f in FeedForward.ARRAYS})
    blocks.append(Block(att, ff, ln(b.ln_attn), ln(b.ln_ff), b.norm))
  return dataclasses.replace(net, embed=c(net.embed), positional=c(net.positional),
                             blocks=tuple(blocks), readout=c(net.readout),
                             embed_bias=c(net.embed_bias), final_ln=ln(net.final_ln),
                             readout_bias=c(net.readout_bias))


_ERF = np.vectorize(math.erf, otypes=[np.float64])


_GELU_TANH_C = math.sqrt(2 / math.pi)


def gelu(x, form: str = 'gelu') -> np.ndarray:
  """GELU in x's dtype: 'gelu' 0.5 x (1 + erf(x / sqrt 2)) (erf by ``math.erf`` in float64,
  rounded to x's dtype), 'gelu_tanh' 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
  x = np.asarray(x)
  dt = x.dtype
  half, one = dt.type(0.5), dt.type(1)
  if form == 'gelu':
    e = _ERF(x.astype(np.float64) / math.sqrt(2)).astype(dt)
    return half * x * (one + e)
  inner = dt.type(_GELU_TANH_C) * (x + dt.type(0.044715) * x * x * x)
  return half * x * (one + np.tanh(inner))


def layer_norm(z, ln: LayerNorm) -> np.ndarray:
  """LN over the last axis in z's dtype (two-pass mean and biased variance)."""
  dt = z.dtype
  mu = z.mean(axis=-1, keepdims=True)
  c = z - mu
  var = (c * c).mean(axis=-1, keepdims=True)
  return c / np.sqrt(var + dt.type(ln.eps)) * ln.gamma.astype(dt) + ln.beta.astype(dt)


def _activation(x, act: str):
  return np.maximum(x, 0) if act == 'relu' else gelu(x, act)


def _attention(a: Attention, z, dtype):
  w_q, b_q, w_k, w_v, w_o = (x.astype(dtype) for x in (a.w_q, a.b_q, a.w_k, a.w_v, a.w_o))
  q = np.einsum('bnD,hmD->bhnm', z, w_q) + b_q[None, :, None, :]
  k = np.einsum('bnD,hmD->bhnm', z, w_k)
  v = np.einsum('bnD,hmD->bhnm', z, w_v)
  if a.b_k is not None:
    k = k + a.b_k.astype(dtype)[None, :, None, :]
  if a.b_v is not None:
    v = v + a.b_v.astype(dtype)[None, :, None, :]
  s = np.einsum('bhjm,bhkm->bhjk', q, k)
  if a.scale != 1.0:
    s = s * dtype(a.scale)
  if a.causal:
    n = s.shape[-1]
    s = np.where(np.triu(np.ones((n, n), bool), 1), -np.inf, s)
  s = s - s.max(axis=-1, keepdims=True)
  e = np.exp(s)
  w = e / e.sum(axis=-1, keepdims=True)
  out = np.einsum('bhjm,hDm->bjD', np.einsum('bhjk,bhkm->bhjm', w, v), w_o)
  return out if a.b_o is None else out + a.b_o.astype(dtype)


def _feedforward(f: FeedForward, z, dtype):
  w_1, b_1, w_2, b_2 = (x.astype(dtype) for x in (f.w_1, f.b_1, f.w_2, f.b_2))
  return _activation(z @ w_1.T + b_1, f.activation) @ w_2.T + b_2


def apply(net: Net, x, dtype=np.float64) -> np.ndarray:
  """g(X) in NumPy, every operation in ``dtype``: x [batch, n, d] -> [batch, n, d]."""
  dtype = np.dtype(dtype).type
  x = np.asarray(x, dtype)
  z = (x @ net.embed.T.astype(dtype) if net.embed is not None
       else np.pad(x, [(0, 0), (0, 0), (0, net.D - net.d)]))
  if net.embed_bias is not None:
    z = z + net.embed_bias.astype(dtype)
  if net.positional is not None:
    z = z + net.positional.astype(dtype)

  def norm(z, ln):
    return z if ln is None else layer_norm(z, ln)

  for b in net.blocks:
    for part, ln, fn in ((b.attention, b.ln_attn, _attention), (b.ff, b.ln_ff, _feedforward)):
      if part is None:
        continue
      if b.norm == 'pre':
        z = z + fn(part, norm(z, ln), dtype)
      else:
        z = norm(z + fn(part, z, dtype), ln)
  if net.final_ln is not None:
    z = layer_norm(z, net.final_ln)
  if net.readout is None:
    return z[..., :net.d]
  y = z @ net.readout.T.astype(dtype)
  return y if net.readout_bias is None else y + net.readout_bias.astype(dtype)
