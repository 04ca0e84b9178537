"""D of the hand-built network over a grid of boxes, with and without the one-signed
reduction of its ReLU outputs (rounding.py (****)).

  PYTHONPATH=$PWD python results/low_precision/box_deviation.py [--k 16] [--rows tf32 bfloat16]

The cube [0, 1]^3 cut into k^3 boxes of side 1/k; for each row network_enclosure.enclose on
the network with its weights reduced (box_bound.reduced_networks, the worse of the two
reductions per box), D's max over the tokens per box, and its sup, mean and root mean square
over the boxes: 'magnitudes' with float_deviation.relu_reduction replaced by the magnitude
bound sum |W_2| rho (the revision before), 'one-signed' as committed. Prints JSON lines.
"""

import argparse
import json

import numpy as np

from transformer_ua import rounding
from transformer_ua.certify import float_deviation as fd
from transformer_ua.certify import hand_built
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import network_enclosure as ne
from transformer_ua.certify.box_bound import reduced_networks


def magnitudes(model, lo, hi, w, up_fn, xp):
  """The bound before: sum_i |W_i| rho_i (rho over both modes)."""
  return up_fn(model.operand_error(lo, hi, xp) @ np.abs(w).T)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument('--k', type=int, default=16)
  ap.add_argument('--rows', nargs='*', default=['tf32', 'bfloat16'])
  args = ap.parse_args()
  net = hand_built.hand_built_product_network(20, n=3).net
  k = args.k
  g = np.stack(np.meshgrid(*[np.arange(k)] * 3, indexing='ij'), -1).reshape(-1, 3, 1)
  lo, hi = g / k, (g + 1) / k
  signed = fd.relu_reduction
  for name in args.rows:
    model = rounding.MATMUL_MODELS[name]
    nets = reduced_networks(net, model)
    model = model.with_weights_reduced()
    for label, bound in (('magnitudes', magnitudes), ('one-signed', signed)):
      fd.relu_reduction = bound
      d = np.max([ne.enclose(v, iv.box(lo, hi), model)[1].max(axis=(1, 2)) for v in nets],
                 axis=0)
      print(json.dumps({'row': name, 'bound': label, 'k': k, 'sup': float(f'{d.max():.4g}'),
                        'mean': float(f'{d.mean():.4g}'),
                        'rms': float(f'{np.sqrt(np.mean(d * d)):.4g}')}))
  fd.relu_reduction = signed


if __name__ == '__main__':
  main()
