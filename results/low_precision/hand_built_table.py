"""Certified total against emulated runs for the hand-built product network (issue 71).

  PYTHONPATH=$PWD python results/low_precision/hand_built_table.py --minutes 2 --out X.json

certify_network('token_times_mean', hand_built_product_network(20), d=1, n=3, p=2) in
float32, tf32 and bfloat16 under a budget of --minutes each, and the measured d_2 of NumPy
emulations of each arithmetic on --points uniform points: every matmul operand reduced to
the operand format (round to nearest and truncation), float32 accumulation in two orders
(forward and reverse sequential sums), the softmax and the residual additions in float32.
f is exact (float64 at the exact points). Prints and writes one JSON record.
"""

import argparse
import json
import math
import os
import subprocess
import time

import numpy as np

from transformer_ua import rounding
from transformer_ua.certify import certify_network, hand_built

ARITHMETICS = ('float32', 'tf32', 'bfloat16')


def _dot(a, b, order):
  """sum_i a[..., i] b[i, ...] in float32 one term at a time (a [..., K], b [K, N])."""
  acc = np.zeros(a.shape[:-1] + b.shape[1:], np.float32)
  idx = range(a.shape[-1]) if order == 'forward' else range(a.shape[-1] - 1, -1, -1)
  for i in idx:
    acc = (acc + (a[..., i, None] * b[i]).astype(np.float32)).astype(np.float32)
  return acc


def emulate(net, x, arithmetic, mode, order):
  model = rounding.MATMUL_MODELS[arithmetic]
  red = (lambda v: model.reduce_operand(np.asarray(v, np.float32), mode))   # noqa: E731
  f32 = (lambda v: np.asarray(v, np.float32))                              # noqa: E731
  mm = (lambda a, w: _dot(red(a), red(w).T, order))                       # noqa: E731 a @ w^T
  z = f32(x)
  z = mm(z, net.embed) if net.embed is not None else np.pad(
      z, [(0, 0), (0, 0), (0, net.D - net.d)])
  if net.positional is not None:
    z = f32(z + f32(net.positional))
  for blk in net.blocks:
    if blk.attention is not None:
      w_q, b_q, w_k, w_v, w_o = blk.attention
      out = z
      for i in range(w_q.shape[0]):
        q = f32(mm(z, w_q[i]) + f32(b_q[i]))
        k, v = mm(z, w_k[i]), mm(z, w_v[i])
        s = np.stack([_dot(red(q[b]), red(k[b]).T, order) for b in range(len(q))])
        e = np.exp(f32(s - s.max(axis=-1, keepdims=True)))
        w = f32(e / f32(e.sum(axis=-1, keepdims=True)))
        o = np.stack([_dot(red(w[b]), red(v[b]), order) for b in range(len(q))])
        out = f32(out + mm(o, w_o[i]))
      z = out
    if blk.ff is not None:
      w_1, b_1, w_2, b_2 = blk.ff
      act = np.maximum(f32(mm(z, w_1) + f32(b_1)), np.float32(0))
      z = f32(z + f32(mm(act, w_2) + f32(b_2)))
  return z @ net.readout.T if net.readout is not None else z[..., :net.d]


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument('--minutes', type=float, default=2.0)
  ap.add_argument('--points', type=int, default=20000)
  ap.add_argument('--units', type=int, default=20)
  ap.add_argument('--out', default=None)
  args = ap.parse_args()
  hb = hand_built.hand_built_product_network(args.units, n=3)
  net = hb.net
  rng = np.random.default_rng(0)
  x = rng.random((args.points, 3, 1))
  f = x * x.mean(axis=1, keepdims=True)
  rev = subprocess.run(['git', 'rev-parse', '--short=10', 'HEAD'], capture_output=True,
                       text=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
  record = {'revision': rev, 'loadavg_start': open('/proc/loadavg').read().split()[:3],
            'units': args.units, 'minutes': args.minutes, 'points': args.points,
            'exact_d2': math.sqrt(float(hb.l2_error_squared)), 'rows': []}
  for arithmetic in ARITHMETICS:
    t0 = time.perf_counter()
    cert = certify_network('token_times_mean', net, d=1, n=3, p=2, arithmetic=arithmetic,
                           max_minutes=args.minutes)
    seconds = time.perf_counter() - t0
    measured = {}
    modes = ('nearest',) if arithmetic == 'float32' else ('nearest', 'truncate')
    for mode in modes:
      for order in ('forward', 'reverse'):
        y = emulate(net, x, arithmetic, mode, order).astype(np.float64)
        measured[f'{mode}/{order}'] = math.sqrt(float(np.mean(np.sum((y - f) ** 2,
                                                                     axis=(1, 2)))))
    worst = max(measured.values())
    row = {'arithmetic': arithmetic, 'total': float(cert.total), 'seconds': round(seconds, 1),
           'boxes': cert.boxes, 'rounds': cert.rounds, 'float_sup': cert.float_sup,
           'measured_d2': measured, 'ratio': float(cert.total) / worst}
    record['rows'].append(row)
    print(json.dumps(row), flush=True)
  record['loadavg_end'] = open('/proc/loadavg').read().split()[:3]
  if args.out:
    with open(args.out, 'w', encoding='utf-8') as fh:
      json.dump(record, fh, indent=1)


if __name__ == '__main__':
  main()
