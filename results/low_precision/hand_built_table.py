"""Certified total against emulated runs for the hand-built product network.

  PYTHONPATH=$PWD python results/low_precision/hand_built_table.py --minutes 2 --out X.json \
      [--rows float32 'tf32, probed nearest']

certify_network('token_times_mean', hand_built_product_network(20), d=1, n=3, p=2) under a
budget of --minutes per row, and the measured d_2 of emulated runs (tests/low_precision_runs
.py: every matmul operand reduced to the operand format, by round to nearest and by
truncation where the row allows both, float32 accumulation forward and reverse, rounded to
nearest or toward zero where the model allows it, or the hardware accumulator of
tests/tensor_core_models.py; the softmax and the residual additions in float32) on --points
uniform points, f exact. The rows 'probed nearest' pass certify_network the runtime
probe's report of an emulated H100 runtime (TF32 operands rounded to nearest, blocks of 8,
2 alignment bits), whose operand rounding the probe reads as 'nearest'. Prints and writes
one JSON record.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'tests'))
import low_precision_runs  # noqa: E402
import tensor_core_models  # noqa: E402

from transformer_ua import rounding  # noqa: E402
from transformer_ua.certify import certify_network, hand_built  # noqa: E402
from transformer_ua.certify.runtime_probe import check_runtime  # noqa: E402
from transformer_ua.certify.runtimes import NumpyRuntime  # noqa: E402

# (row label, arithmetic, probed, the emulated ways: (mode, order, accumulate))
ROWS = (
    ('float32', 'float32', False, [('nearest', o, 'nearest') for o in ('forward', 'reverse')]),
    ('tf32', 'tf32', False, None),
    ('bfloat16', 'bfloat16', False, None),
    ('tf32, probed nearest', 'tf32', True,
     [('nearest', o, a) for o in ('forward', 'reverse') for a in ('nearest', 'toward_zero')]),
    ('tf32-a100', 'tf32-a100', False,
     [(m, 'forward', 'block:4:1') for m in ('nearest', 'truncate')]),
    ('tf32-h100, probed nearest', 'tf32-h100', True, [('nearest', 'forward', 'block:8:2')]),
)


class EmulatedH100(NumpyRuntime):
  """TF32 operands rounded to nearest, tensor_core_models.block_dot(8, 2)."""

  name = 'NumPy emulation of the H100 TF32 model (blocks of 8, 2 alignment bits)'

  def matmul(self, a, b):
    tf32 = rounding.MATMUL_MODELS['tf32']
    ra = tf32.reduce_operand(a.astype(np.float32), 'nearest').astype(np.float64)
    rb = tf32.reduce_operand(b.astype(np.float32), 'nearest').astype(np.float64)
    prods = ra[:, None, :] * rb.T[None, :, :]
    m, n, k = prods.shape
    flat = tensor_core_models.block_dot(prods.reshape(m * n, k), np.ones(k), 8, 2)
    return flat.reshape(m, n).astype(a.dtype)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument('--minutes', type=float, default=2.0)
  ap.add_argument('--points', type=int, default=20000)
  ap.add_argument('--units', type=int, default=20)
  ap.add_argument('--out', default=None)
  ap.add_argument('--rows', nargs='*', default=None, help='row labels to run (default all)')
  args = ap.parse_args()
  unknown = set(args.rows or ()) - {r[0] for r in ROWS}
  if unknown:
    ap.error(f'unknown rows {sorted(unknown)}; allowed: {[r[0] for r in ROWS]}')
  hb = hand_built.hand_built_product_network(args.units, n=3)
  net = hb.net
  rng = np.random.default_rng(0)
  x = rng.random((args.points, 3, 1))
  f = x * x.mean(axis=1, keepdims=True)
  rev = subprocess.run(['git', 'rev-parse', '--short=10', 'HEAD'], capture_output=True,
                       text=True, cwd=HERE).stdout.strip()
  dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'],
                         capture_output=True, text=True, cwd=HERE).stdout.strip()
  record = {'revision': rev + (' (uncommitted changes)' if dirty else ''),
            'loadavg_start': open('/proc/loadavg').read().split()[:3],
            'units': args.units, 'minutes': args.minutes, 'points': args.points,
            'exact_d2': math.sqrt(float(hb.l2_error_squared)), 'rows': []}
  report = check_runtime(EmulatedH100(), arithmetic='float32', samples=10000)
  record['probe'] = report.line()
  for label, arithmetic, probed, ways in ROWS:
    if args.rows is not None and label not in args.rows:
      continue
    t0 = time.perf_counter()
    cert = certify_network('token_times_mean', net, d=1, n=3, p=2, arithmetic=arithmetic,
                           max_minutes=args.minutes, runtime=report if probed else None)
    seconds = time.perf_counter() - t0
    if ways is None:
      ways = low_precision_runs.ways(arithmetic)
    measured = {}
    for mode, order, acc in ways:
      y = low_precision_runs.run(net, x, 'tf32' if arithmetic.startswith('tf32') else
                                 arithmetic, mode=mode, order=order, accumulate=acc)
      measured[f'{mode}/{order}/{acc}'] = math.sqrt(float(np.mean(np.sum((y - f) ** 2,
                                                                          axis=(1, 2)))))
    worst = max(measured.values())
    row = {'row': label, 'arithmetic': arithmetic, 'total': float(cert.total),
           'seconds': round(seconds, 1), 'boxes': cert.boxes, 'rounds': cert.rounds,
           'float_sup': cert.float_sup, 'measured_d2': measured, 'ratio': float(cert.total) / worst,
           'model': cert.assumptions[0]}
    record['rows'].append(row)
    print(json.dumps({k: v for k, v in row.items() if k != 'model'}), flush=True)
  record['loadavg_end'] = open('/proc/loadavg').read().split()[:3]
  if args.out:
    with open(args.out, 'w', encoding='utf-8') as fh:
      json.dump(record, fh, indent=1)


if __name__ == '__main__':
  main()
