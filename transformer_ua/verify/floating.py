r"""Where floating point breaks g_c: the paper-valued float network vs the exact integers.

Runs ``ContextualMapping.params`` (paper values: inputs k/N, thresholds l -+ delta/2,
weights N^d, N^((n+1)d)) through ``modules.Network`` in float64 and float32 on the
class representatives (the multiset grid, or its first ``max_points``), and counts
points whose column ids u^T g_c(L) differ from the exact ones, and the Lemma 8
properties evaluated on the float ids (8.1, 8.3, 8.4 per point; 8.2 as colliding
values across classes). These are observations, not verification results: the
exact verifier (``contextual_mapping``) is the ground truth.
"""

from __future__ import annotations

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua.yun import enumeration
from transformer_ua.yun.stages import contextual_params

DTYPES = ('float64', 'float32')


def float_breakdown(cm, *, max_points: int = 200_000, chunk: int = 8192) -> dict:
  """Float64/float32 g_c vs exact on (a prefix of) the multiset grid."""
  from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
  n, N = cm.n, cm.resolution
  codec = enumeration.make_codec(cm.grid)
  m = min(enumeration.grid_size(cm.grid, 'multiset'), max_points)
  out = {'points': int(m)}
  t_l, t_r = float(cm.t_l), float(cm.t_r)
  with jax.enable_x64(True):
    k = np.asarray(codec['decode_multiset'](jnp.arange(m)))
    cat = np.asarray(codec['category'](jnp.asarray(k)))
  exact = np.concatenate([cm.ops.to_python(cm.forward(k[s:s + chunk])['ids'])
                          for s in range(0, m, chunk)])
  exact_f = np.vectorize(lambda v: float(Fraction(int(v), cm.scale)))(exact)
  net = cm.network()
  for name in DTYPES:
    _, params = contextual_params.contextual_mapping_params(cm.grid, dtype=name)
    x = np.where(k < 0, -float(cm.out_of_range), k / N).astype(name)
    with jax.enable_x64(True):
      apply = modules.jit_apply(net)
      y = np.concatenate([np.asarray(apply(params, jnp.asarray(x[s:s + chunk])))
                          for s in range(0, m, chunk)])
    q = y.astype(np.float64) @ np.asarray(cm.u, np.float64)
    inside = np.all((q >= t_l) & (q <= t_r), axis=1)
    outside = np.all((q < t_l) | (q > t_r), axis=1)
    distinct = np.asarray([len(set(r.tolist())) == n for r in q])
    vals = q[cat == 1].reshape(-1)
    owners = np.repeat(np.arange(int(np.sum(cat == 1))), n)
    order = np.argsort(vals, kind='stable')
    collide = (vals[order][1:] == vals[order][:-1]) & (owners[order][1:] != owners[order][:-1])
    out[name] = {'points_with_inexact_ids': int(np.sum(np.any(q != exact_f, axis=1))),
                 '8.1_violations': int(np.sum((cat == 1) & ~distinct)),
                 '8.2_collisions': int(np.sum(collide)),
                 '8.3_violations': int(np.sum((cat == 1) & ~inside)),
                 '8.4_violations': int(np.sum((cat != 1) & ~outside))}
  return out
