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
here (a CPU runs IEEE binary32): the record says so; on an accelerator, run ``jax_apply`` at
the default precision to exercise the reduced one.
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np

from transformer_ua import rounding
from transformer_ua.networks import network_dict
from transformer_ua.targets import functions as targets_lib

#: Points per JAX / onnxruntime call.
CHUNK = 4096


def jax_apply(net: network_dict.Net, x: np.ndarray, dtype: str = 'float64',
              precision: str = 'highest') -> np.ndarray:
  """fl(g)(x) by JAX in ``dtype`` (x64 switched on for float64 inside this call only)."""
  import jax
  import jax.numpy as jnp

  def run(params, z):
    e, pos, blocks, readout = params
    h = (z @ e.T) if e is not None else jnp.pad(z, [(0, 0), (0, 0), (0, net.D - net.d)])
    if pos is not None:
      h = h + pos
    for att, ff in blocks:
      if att is not None:
        w_q, b_q, w_k, w_v, w_o = att
        q = jnp.einsum('bnD,hmD->bhnm', h, w_q) + b_q[None, :, None, :]
        k = jnp.einsum('bnD,hmD->bhnm', h, w_k)
        v = jnp.einsum('bnD,hmD->bhnm', h, w_v)
        a = jax.nn.softmax(jnp.einsum('bhjm,bhkm->bhjk', q, k), axis=-1)
        h = h + jnp.einsum('bhjm,hDm->bjD', jnp.einsum('bhjk,bhkm->bhjm', a, v), w_o)
      if ff is not None:
        w_1, b_1, w_2, b_2 = ff
        h = h + jax.nn.relu(h @ w_1.T + b_1) @ w_2.T + b_2
    return h @ readout.T if readout is not None else h[..., :net.d]

  with jax.enable_x64(dtype == 'float64'), jax.default_matmul_precision(precision):
    cast = (lambda a: None if a is None else jnp.asarray(a, dtype))   # noqa: E731
    params = (cast(net.embed), cast(net.positional),
              tuple((None if b.attention is None else tuple(map(cast, b.attention)),
                     None if b.ff is None else tuple(map(cast, b.ff))) for b in net.blocks),
              cast(net.readout))
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
    flat_onnx.write(net, path, dtype=dtype)
    sess = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
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
  run_net = net if dtype == 'float64' else network_dict.cast(net, np.float32)
  rng = np.random.default_rng(seed)
  x = rng.random((points, n, d))
  extra = np.asarray(certificate.worst_centres, np.float64)
  both = np.concatenate([x, extra])
  fx = target(both)                    # f at the exact X; fl(g) rounds X itself
  total = float(certificate.total)
  out = {}
  for name, fn in (('jax', lambda z: jax_apply(run_net, z, dtype)),
                   ('onnxruntime', lambda z: onnxruntime_apply(run_net, z, dtype))):
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
