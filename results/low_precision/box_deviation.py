"""D of the hand-built network over a grid of boxes, with and without the one-signed
operand reductions (rounding.py (****), certify/signed_reduction.py).

  PYTHONPATH=$PWD python results/low_precision/box_deviation.py [--k 16] [--rows tf32 bfloat16]

The cube [0, 1]^3 cut into k^3 boxes of side 1/k; for each row network_enclosure.enclose on
the network with its weights reduced (box_bound.reduced_networks, the worse of the two
reductions per box), D's max over the tokens per box, and its sup, mean and root mean square
over the boxes: 'magnitudes' with signed_reduction.parts replaced by the magnitude bound
(every operand of unknown sign: L = H = sum |c| rho^t, the bound before 767f2a7),
'one-signed' as committed. Prints JSON lines.
"""

import argparse
import json

import numpy as np

from transformer_ua import rounding
from transformer_ua.certify import hand_built
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import network_enclosure as ne
from transformer_ua.certify import signed_reduction as sr
from transformer_ua.certify.box_bound import reduced_networks

SIGNED = sr.parts


def magnitudes(model, lo, hi, c_lo, c_hi, up_fn, xp, *, cap=None, nonneg=False):
  """``parts`` with no sign known: L = H = sum_i max|c_i| rho^t_i (S unchanged)."""
  _, _, s = SIGNED(model, lo, hi, c_lo, c_hi, up_fn, xp, cap=cap)
  if model.operand_mode == 'nearest':
    return s * 0, s * 0, s
  rho_t = model.with_truncated_operands().operand_error(lo, hi, xp)
  rho_t = rho_t if cap is None else xp.minimum(rho_t, cap)
  t = up_fn((xp.maximum(xp.abs(c_lo), xp.abs(c_hi)) * rho_t[..., None, :]).sum(axis=-1))
  return t, t, s


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument('--k', type=int, default=16)
  ap.add_argument('--rows', nargs='*', default=['tf32', 'bfloat16'])
  args = ap.parse_args()
  net = hand_built.hand_built_product_network(20, n=3).net
  k = args.k
  g = np.stack(np.meshgrid(*[np.arange(k)] * 3, indexing='ij'), -1).reshape(-1, 3, 1)
  lo, hi = g / k, (g + 1) / k
  for name in args.rows:
    model = rounding.MATMUL_MODELS[name]
    nets = reduced_networks(net, model)
    model = model.with_weights_reduced()
    for label, bound in (('magnitudes', magnitudes), ('one-signed', SIGNED)):
      sr.parts = bound
      d = np.max([ne.enclose(v, iv.box(lo, hi), model)[1].max(axis=(1, 2)) for v in nets],
                 axis=0)
      print(json.dumps({'row': name, 'bound': label, 'k': k, 'sup': float(f'{d.max():.4g}'),
                        'mean': float(f'{d.mean():.4g}'),
                        'rms': float(f'{np.sqrt(np.mean(d * d)):.4g}')}))
  sr.parts = SIGNED


if __name__ == '__main__':
  main()
