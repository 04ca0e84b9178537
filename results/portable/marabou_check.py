"""The recorded Marabou run on flat files (results/portable/README.md).

    PYTHONPATH=$PWD python results/portable/marabou_check.py [--timeout 120] [--overwrite]

Yun et al.'s Theorem 2 network of token_times_mean (ties='complete', output clamp, the
planned lam and ramp), certified by ``yun.certify_lp`` in exact arithmetic, on a ladder of
sizes (d=1; n, N growing): ``verify.marabou.check_flat`` writes its flat file (form
'single', float64) and the VNN-LIB property its certificate implies on one cube interior,
and Marabou must answer UNSAT there and SAT on the companion property; ``stopped_at``
names the first size where a query does not answer as expected (a timeout included). Then the
main job's kind of network (integer ids, certified in float64) gets the same check.
Writes results/portable/marabou.json (refuses to replace it without --overwrite).
"""

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from fractions import Fraction

from transformer_ua import outputs, provenance, yun
from transformer_ua.verify import marabou
from transformer_ua.yun.realization import plan

HERE = os.path.dirname(os.path.abspath(__file__))
LADDER = ((2, 2), (2, 3), (3, 2), (3, 3))
MARGIN = Fraction(1, 64)


def _row(net, g, cert, timeout, label):
  import numpy as np  # pylint: disable=import-outside-toplevel
  import onnxruntime as ort  # pylint: disable=import-outside-toplevel
  with tempfile.TemporaryDirectory() as tmp:
    out = marabou.check_flat(net, g, cert, tmp, timeout=timeout)
    lo, hi = (np.asarray(b) for b in out['box'])
    at_centre = ort.InferenceSession(os.path.join(tmp, 'g_flat.onnx')).run(
        None, {'X': (lo + hi) / 2})[0]
  row = {'network': label, 'blocks': out['blocks'], 'weights': out['weights'],
         'marabou_variables': out['variables'], 'certified_total': float(cert.total),
         'interior_sup': out['interior_sup'], 'cells': out['cells'], 'g_bar': out['g_bar'],
         'unsat_query': {k: out['unsat'][k] for k in ('status', 'seconds', 'message')},
         'sat_query': {k: out['sat'][k] for k in ('status', 'seconds', 'message')},
         'flat_file_in_onnxruntime_at_box_centre': at_centre.tolist(),
         'agrees': out['agrees']}
  print(json.dumps(row), flush=True)
  return row


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--timeout', type=int, default=120)
  parser.add_argument('--overwrite', action='store_true')
  args = parser.parse_args()
  out_json = os.path.join(HERE, 'marabou.json')
  outputs.check_new(out_json, overwrite=args.overwrite)
  prov = provenance.record()
  rows, stopped = [], None
  warnings.simplefilter('ignore')
  for n, N in LADDER:
    t0 = time.time()
    net = yun.build_approximator('token_times_mean', d=1, n=n, resolution=N, ties='complete')
    p = plan.plan_realization(net, tolerance=1e-6, margin=float(MARGIN))
    g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact', clamp=True)
    cert = yun.certify_lp(net, g, 2.0, margin=MARGIN)
    row = _row(net, g, cert, args.timeout, f'Theorem 2, ties=complete, d=1, n={n}, N={N}')
    row['build_and_certify_seconds'] = round(time.time() - t0, 1)
    rows.append(row)
    if not row['agrees'] and stopped is None:
      stopped = row['network']
  found = yun.approximate('token_times_mean', 0.2, d=1, n=2, arithmetic='float64')
  integer_ids = _row(found.net, found.g, found.certificate, args.timeout,
                     'integer ids (float64 certificate), d=1, n=2, N='
                     f'{found.certificate.resolution}')
  outputs.atomic_json(out_json, {'provenance': prov, 'marabou': marabou.MARABOU_VERSION,
                                 'timeout_s': args.timeout, 'ladder': rows,
                                 'stopped_at': stopped, 'integer_ids': integer_ids}, indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
