r"""The project's own networks as a ``network_dict.Net``: a ``modules.Network`` with its
params, and a realized approximator g.

    from_network(network, params)   segment i, layer l  ->  one block:
        W_Q = lam_i W_Q^{i,l},  b_Q = lam_i b_Q^{i,l}      (the softmax scale lam folded in)
        W_K, W_V, W_O, W_1, b_1, W_2, b_2 as stored;  E -> 'positional'
      softmax attention and ReLU feed-forward only (anything else is refused in one line);
      d= is the token width where the network pads its input to embed_width.
    from_realized(g)                g.segments, g.params (exact rationals rounded to nearest
                                    float64), g.positional, g.n, g.d, g.model_width
                                    -> from_network, checked at (d, n)

Duck-typed: this module imports nothing of ``yun`` or ``modules``.
"""

from __future__ import annotations

import numpy as np

from transformer_ua.networks import network_dict

def from_network(network, params, *, d: int | None = None) -> network_dict.Net:
  """The project's ``modules.Network`` with its params as a ``Net`` (softmax attention and
  ReLU feed-forward only; a segment's softmax scale lam is folded into W_Q and b_Q).

  ``d``: the token width, needed when the network pads its input (``embed_width``)."""
  blocks = []
  for i, seg in enumerate(network.segments):
    p = params[f'segment_{i}']
    if seg.has_attention and seg.normalizer != 'softmax':
      raise ValueError(f'segment {i} uses {seg.normalizer} attention; only softmax attention '
                       'can be certified as a standard Transformer.')
    if seg.has_feedforward and seg.activation != 'relu':
      raise ValueError(f'segment {i} uses the {seg.activation} activation; only ReLU '
                       'feed-forward layers can be certified.')
    for layer in range(seg.depth):
      blk = {}
      if seg.has_attention:
        a = {k: np.asarray(v[layer], np.float64) for k, v in p['attention'].items()}
        blk.update(W_Q=a['W_Q'] * seg.lam, b_Q=a['b_Q'] * seg.lam, W_K=a['W_K'],
                   W_V=a['W_V'], W_O=a['W_O'])
      if seg.has_feedforward:
        blk.update({k: np.asarray(v[layer], np.float64) for k, v in p['feedforward'].items()})
      blocks.append(blk)
  out = {'blocks': blocks}
  if network.positional:
    out['positional'] = np.asarray(params['E'], np.float64)
  width = np.shape(blocks[0].get('W_Q', blocks[0].get('W_1')))[-1]
  if network.embed_width is None:
    d = width
  elif d is None:
    raise ValueError('this Network pads its input to embed_width; pass d= (the token width).')
  return network_dict.check(out, d=d)


def from_realized(g) -> network_dict.Net:
  """The project's realized network g (any approximator's ``realize``: ``segments``,
  ``params``, ``positional``, ``n``, ``d`` and, for a residual stream wider than the tokens,
  ``model_width``) as a ``Net``: the float64 numbers of its params (exact rationals rounded
  to nearest), each segment's softmax scale folded into W_Q and b_Q (``from_network``).
  Duck-typed: this module imports nothing of ``yun``."""
  for name in ('segments', 'params', 'positional', 'n', 'd'):
    if not hasattr(g, name):
      raise ValueError(f'from_realized needs a realized network (segments, params, '
                       f'positional, n, d); {type(g).__name__} has no {name!r}.')
  width = getattr(g, 'model_width', None)

  class _Shape:  # what from_network reads of a modules.Network
    segments = tuple(g.segments)
    positional = bool(g.positional)
    embed_width = width if width is not None and width > g.d else None

  params = {k: (v if k != 'E' else np.asarray(v, np.float64)) for k, v in g.params.items()}
  return network_dict.check(from_network(_Shape, params, d=g.d).as_dict(), d=g.d, n=g.n)
