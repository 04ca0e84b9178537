r"""The independent check of a network certificate: fl(g) run by JAX and onnxruntime.

Shares no code with the certifier: g runs as a JAX program (``jax_apply``: jnp einsums and
``jax.nn.softmax``, jit-compiled, matmul precision pinned to 'highest', float64 under
``jax.enable_x64``) and, where the flat ONNX writer is present, as an onnxruntime session.
On S uniform points X_s of the cube plus the centres of the certificate's worst boxes:

    sampled d_p = ( (1/S) sum_s sum_jk |f(X_s) - fl(g)(X_s)|_jk^p )^(1/p)   (uniform only)
    sampled sup = max over all points of max_jk |f - fl(g)|_jk

A certificate is contradicted when the sampled d_p exceeds its total (p < inf) or the
sampled sup exceeds it (p = inf), and whenever a run returns NaN or inf anywhere (a finite
total says fl(g) is finite on the whole cube; NaN > total is False, so a NaN is counted
apart, never compared). f is evaluated at the exact points X (float64 numbers, the
certificate's real inputs); only fl(g) sees X rounded to the run's format. The sampled d_p
is an estimate (its CLT 99% upper end is reported beside it), the sampled sup a true lower
bound of the sup.

'tf32', 'bfloat16', 'tf32-a100' and 'tf32-h100' certificates are checked by running float32
here (a CPU runs IEEE binary32), and by JAX with the low-precision matmuls emulated
(``jax_apply(operand=(p, mode))``): every operand of every matmul and einsum (weights and
activations, the softmax weights included) reduced to p significand bits (11 for TF32, 8 for
bfloat16), to nearest with ties to even and by truncation, then multiplied and summed in
float32,

    rnd_p(x) = R(m 2^p) 2^(e - p),  x = m 2^e, 1/2 <= |m| < 1,  R = round-half-even or trunc;

the tensor-core models' block accumulation is not emulated (float32 sums instead). On an
accelerator, run ``jax_apply`` at the default precision to exercise the hardware's own.
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np

from transformer_ua import rounding
from transformer_ua.networks import network_apply, network_dict
from transformer_ua.targets import functions as targets_lib

#: Points per JAX / onnxruntime call.
CHUNK = 4096


def jax_apply(net: network_dict.Net, x: np.ndarray, dtype: str = 'float64',
              precision: str = 'highest', operand: tuple | None = None) -> np.ndarray:
  """fl(g)(x) by JAX in ``dtype`` (x64 switched on for float64 inside this call only):
  jnp einsums, ``jax.nn.softmax`` (a causal mask as -inf), ``jax.nn.gelu``, and LayerNorm
  as mean / variance / ``lax.rsqrt``; ``operand`` = (bits, 'nearest' | 'truncate') reduces
  every matmul operand first (module docstring)."""
  import jax
  import jax.numpy as jnp

  def red(a):
    if operand is None:
      return a
    bits, mode = operand
    m, e = jnp.frexp(a)
    r = jnp.round(m * 2.0 ** bits) if mode == 'nearest' else jnp.trunc(m * 2.0 ** bits)
    return jnp.ldexp(r, e - bits).astype(a.dtype)

  def ein(spec, a, b):
    return jnp.einsum(spec, red(a), red(b))

  def mm(a, b):
    return red(a) @ red(b)

  def norm(z, ln):
    if ln is None:
      return z
    gamma, beta, eps = ln
    mu = z.mean(axis=-1, keepdims=True)
    var = ((z - mu) ** 2).mean(axis=-1, keepdims=True)
    return (z - mu) * jax.lax.rsqrt(var + eps) * gamma + beta

  def attn(a, z, spec):
    w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o = a
    scale, causal = spec
    q = ein('bnD,hmD->bhnm', z, w_q) + b_q[None, :, None, :]
    k = ein('bnD,hmD->bhnm', z, w_k)
    v = ein('bnD,hmD->bhnm', z, w_v)
    k = k if b_k is None else k + b_k[None, :, None, :]
    v = v if b_v is None else v + b_v[None, :, None, :]
    s = ein('bhjm,bhkm->bhjk', q, k)
    s = s if scale == 1.0 else s * scale
    if causal:
      n = s.shape[-1]
      s = jnp.where(jnp.triu(jnp.ones((n, n), bool), 1), -jnp.inf, s)
    out = ein('bhjm,hDm->bjD', ein('bhjk,bhkm->bhjm', jax.nn.softmax(s, axis=-1), v), w_o)
    return out if b_o is None else out + b_o

  def ffn(f, z, act):
    w_1, b_1, w_2, b_2 = f
    pre = mm(z, w_1.T) + b_1
    hid = (jax.nn.relu(pre) if act == 'relu'
           else jax.nn.gelu(pre, approximate=act == 'gelu_tanh'))
    return mm(hid, w_2.T) + b_2

  specs = tuple(((None if b.attention is None else (b.attention.scale, b.attention.causal)),
                 (None if b.ff is None else b.ff.activation), b.norm) for b in net.blocks)

  def run(params, z):
    e, e_b, pos, blocks, final_ln, readout, r_b = params
    h = mm(z, e.T) if e is not None else jnp.pad(z, [(0, 0), (0, 0), (0, net.D - net.d)])
    h = h if e_b is None else h + e_b
    if pos is not None:
      h = h + pos
    for (att, ff, ln_a, ln_f), (a_spec, act, where) in zip(blocks, specs):
      for part, ln, fn, spec in ((att, ln_a, attn, a_spec), (ff, ln_f, ffn, act)):
        if part is None:
          continue
        h = h + fn(part, norm(h, ln), spec) if where == 'pre' else norm(h + fn(part, h, spec), ln)
    h = norm(h, final_ln)
    if readout is None:
      return h[..., :net.d]
    y = mm(h, readout.T)
    return y if r_b is None else y + r_b

  with jax.enable_x64(dtype == 'float64'), jax.default_matmul_precision(precision):
    cast = (lambda a: None if a is None else jnp.asarray(a, dtype))   # noqa: E731

    def ln(x):
      return None if x is None else (cast(x.gamma), cast(x.beta), cast(x.eps))

    params = (cast(net.embed), cast(net.embed_bias), cast(net.positional),
              tuple((None if b.attention is None else tuple(
                  cast(getattr(b.attention, f)) for _, f in network_dict.Attention.ARRAYS),
                     None if b.ff is None else tuple(
                         cast(getattr(b.ff, f)) for _, f in network_dict.FeedForward.ARRAYS),
                     ln(b.ln_attn), ln(b.ln_ff)) for b in net.blocks),
              ln(net.final_ln), cast(net.readout), cast(net.readout_bias))
    fn = jax.jit(run)
    out = [np.asarray(fn(params, jnp.asarray(x[i:i + CHUNK], dtype)), np.float64)
           for i in range(0, len(x), CHUNK)]
  return np.concatenate(out)


def onnxruntime_apply(net: network_dict.Net, x: np.ndarray, dtype: str) -> np.ndarray | None:
  """fl(g)(x) by onnxruntime from the flat ONNX file; None where the writer is absent."""
  try:
    from transformer_ua.networks import flat_onnx
    import onnxruntime as ort
  except ImportError:
    return None
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'g.onnx')
    try:
      flat_onnx.write(net, path, dtype=dtype)
    except ValueError:          # an op the flat writer does not write
      return None
    try:
      sess = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
    except Exception:  # noqa: BLE001 -- e.g. no float64 Erf kernel: no onnxruntime run
      return None
    name = sess.get_inputs()[0].name
    out = [np.asarray(sess.run(None, {name: x[i:i + CHUNK].astype(dtype)})[0], np.float64)
           for i in range(0, len(x), CHUNK)]
  return np.concatenate(out)


def check(f, g, certificate, *, points: int = 20000, seed: int = 0) -> dict:
  """Runs fl(g) on ``points`` uniform points and the certificate's worst-box centres in
  JAX and onnxruntime; returns {runtime: {'d_p', 'd_p_high', 'sup', 'contradicted'}}."""
  d, n, p = certificate.d, certificate.n, certificate.p
  net = network_dict.check(g if not isinstance(g, network_dict.Net) else g, d=d, n=n)
  certificate.check_network(net)
  target = targets_lib.get_target(f, d=d, n=n)
  dtype = ('float64' if certificate.arithmetic == 'exact'
           else rounding.MATMUL_MODELS[certificate.arithmetic].dtype)
  run_net = net if dtype == 'float64' else network_apply.cast(net, np.float32)
  rng = np.random.default_rng(seed)
  x = rng.random((points, n, d))
  extra = np.asarray(certificate.worst_centres, np.float64)
  both = np.concatenate([x, extra])
  fx = target(both)                    # f at the exact X; fl(g) rounds X itself
  total = float(certificate.total)
  out = {}
  runs = [('jax', lambda z: jax_apply(run_net, z, dtype)),
          ('onnxruntime', lambda z: onnxruntime_apply(run_net, z, dtype))]
  model = rounding.MATMUL_MODELS.get(certificate.arithmetic)
  if model is not None and model.operand_rel:
    for mode in ('nearest', 'truncate'):
      runs.append((f'jax {certificate.arithmetic} emulated ({mode})',
                   lambda z, mode=mode: jax_apply(run_net, z, dtype,
                                                  operand=(model.operand_bits, mode))))
  for name, fn in runs:
    y = fn(both)
    if y is None:
      out[name] = {'skipped': 'no flat ONNX writer in this checkout'}
      continue
    err = np.abs(fx - y)
    bad = int(np.sum(~np.isfinite(y)))
    sup = float(err.max()) if not bad else math.inf
    row = {'sup': sup, 'points': points, 'worst_centres': len(extra), 'dtype': dtype,
           'non_finite': bad}
    if bad:
      row['contradicted'] = True          # fl(g) is NaN or inf: no finite total holds
      row['d_p'] = row['d_p_high'] = math.inf
    elif math.isinf(p):
      row['contradicted'] = sup > total
    else:
      s = (err[:points] ** p).reshape(points, -1).sum(axis=1)
      mean, sd = float(s.mean()), float(s.std(ddof=1))
      row['d_p'] = mean ** (1 / p)
      row['d_p_high'] = (mean + 2.5758293035489004 * sd / math.sqrt(points)) ** (1 / p)
      row['contradicted'] = row['d_p'] > total
    out[name] = row
  return out
