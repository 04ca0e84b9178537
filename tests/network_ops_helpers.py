"""Random untrained networks for the certifier's tests: with every stock-layer op
(``random_net``), and a small v1 block (``small_relu_net``)."""

from __future__ import annotations

import math

import numpy as np

from transformer_ua.networks import network_dict


def random_net(seed, *, norm='post', activation='gelu', causal=True, d=1, n=3, width=4, h=2,
               m=2, r=5, blocks=1, scale=0.5, positional=True, final_ln=True, eps=1e-5):
  """An untrained net with every option (weights N(0, scale^2))."""
  rng = np.random.default_rng(seed)
  g = lambda *s: rng.normal(0, scale, s)  # noqa: E731

  def ln():
    return {'gamma': rng.uniform(0.5, 1.5, width), 'beta': g(width), 'eps': eps}

  out = {'embed': g(width, d) * 3, 'embed_bias': g(width), 'blocks': [],
         'readout': g(d, width), 'readout_bias': g(d)}
  for _ in range(blocks):
    blk = {'W_Q': g(h, m, width), 'b_Q': g(h, m), 'W_K': g(h, m, width), 'b_K': g(h, m),
           'W_V': g(h, m, width), 'b_V': g(h, m), 'W_O': g(h, width, m), 'b_O': g(width),
           'scale': 1 / math.sqrt(m), 'W_1': g(r, width), 'b_1': g(r), 'W_2': g(width, r),
           'b_2': g(width), 'activation': activation}
    if causal:
      blk['mask'] = 'causal'
    if norm is not None:
      blk.update(ln_attn=ln(), ln_ff=ln(), norm=norm)
    out['blocks'].append(blk)
  if positional:
    out['positional'] = g(n, width)
  if final_ln:
    out['final_ln'] = ln()
  return network_dict.check(out, d=d, n=n)


def boxes(rng, count, n, d, width):
  lo = rng.uniform(0, 1 - width, (count, n, d))
  return lo, lo + width


def small_relu_net(seed: int, scale: float):
  """One attention head (m = 2, with b_Q) and 4 ReLUs at D = 3, d = 1, n = 3: weights
  N(0, scale^2), W_O and W_2 halved."""
  rng = np.random.default_rng(seed)
  h, m, D, r = 1, 2, 3, 4
  return network_dict.check({'blocks': [{
      'W_Q': rng.normal(size=(h, m, D)) * scale, 'b_Q': rng.normal(size=(h, m)) * scale,
      'W_K': rng.normal(size=(h, m, D)) * scale, 'W_V': rng.normal(size=(h, m, D)) * scale,
      'W_O': rng.normal(size=(h, D, m)) * scale / 2,
      'W_1': rng.normal(size=(r, D)) * scale, 'b_1': rng.normal(size=r) * scale,
      'W_2': rng.normal(size=(D, r)) * scale / 2, 'b_2': rng.normal(size=D) * scale}]},
      d=1, n=3)
