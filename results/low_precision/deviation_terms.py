"""Where the float deviation D of the hand-built network comes from, op by op, at points.

  PYTHONPATH=$PWD python results/low_precision/deviation_terms.py

For each row (tf32 both operand modes, tf32 and tf32-h100 probed nearest, bfloat16) and each
point X, network_enclosure.enclose(net, X, model) on the network with its weights reduced
(box_bound.reduced_networks, the worse of the two reductions), with float_deviation's ops
wrapped to print the largest D each one returns: the scores (pairwise), the mix, the
attention's output z + W_O o (coordinates x, m), the feed-forward's Jacobian form and the
feed-forward's output (coordinates x, m), and the network's D (the 3 tokens).
"""

import json

import numpy as np

from transformer_ua import rounding
from transformer_ua.certify import float_deviation as fd
from transformer_ua.certify import hand_built
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import network_enclosure as ne
from transformer_ua.certify.box_bound import reduced_networks

LOG = []


def _wrap(module, name):
  f = getattr(module, name)

  def g(*a, **k):
    out = f(*a, **k)
    d = out[1] if isinstance(out, tuple) else out
    LOG.append((name.strip('_'), np.asarray(d).reshape(-1, np.shape(d)[-1]).max(axis=0)))
    return out
  setattr(module, name, g)


def main():
  for name in ('pairwise', 'mix', 'ff_jacobian'):
    _wrap(fd, name)
  for name in ('_attention', '_feedforward'):
    _wrap(ne, name)
  net = hand_built.hand_built_product_network(20, n=3).net
  points = ([[0.97], [0.99], [0.999]], [[0.5], [0.3], [0.1]])
  for label, arithmetic, nearest in (('tf32', 'tf32', False), ('tf32 nearest', 'tf32', True),
                                     ('tf32-h100 nearest', 'tf32-h100', True),
                                     ('bfloat16', 'bfloat16', False)):
    model = rounding.MATMUL_MODELS[arithmetic]
    nets = reduced_networks(net, model)
    if nearest:
      model, nets = model.with_nearest_operands(), nets[:1]
    model = model.with_weights_reduced()
    for x in points:
      rows = []
      for variant in nets:
        LOG.clear()
        _, dev = ne.enclose(variant, iv.point(np.array([x])), model)
        rows.append((float(dev.max()), [(n, [float(f'{v:.3g}') for v in d]) for n, d in LOG]))
      total, terms = max(rows, key=lambda r: r[0])
      print(json.dumps({'row': label, 'X': [v[0] for v in x], 'D': float(f'{total:.4g}'),
                        'ops': terms}))


if __name__ == '__main__':
  main()
