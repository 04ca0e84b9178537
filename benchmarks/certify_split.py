r"""Split by measured gain against the mean-value split, total vs boxes and vs seconds.

What it measures: the hand-built token_times_mean network (certify/hand_built.py) at (d=1,
n) for each n is certified to epsilon = factor x its closed-form d_2 (float32, p=2) with
``box_bound.SPLIT_CANDIDATES`` = K for each K (1: the largest mean-value term;
K > 1: both halves along the K largest terms evaluated, the lowest pair kept). Each row:
boxes, rounds and seconds to epsilon, and the total interpolated (log-log) at fixed box
counts and at fixed seconds from the run's record.

    python benchmarks/certify_split.py --ns=3,4 --candidates=1,2,3 \
        --output_dir=results/benchmarks

Writes certify_split.json into --output_dir (default runs/benchmarks) and appends one
summary line to the log benchmarks.md there. Timings are wall-clock on a shared machine.
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import math
import os

import numpy as np
from absl import flags

from transformer_ua import outputs, provenance
from transformer_ua.certify import hand_built
from transformer_ua.certify import box_bound, network_certificate

JSON_NAME = 'certify_split.json'
LOG_NAME = provenance.BENCHMARK_LOG

FLAGS = flags.FLAGS
flags.DEFINE_list('ns', ['3', '4'], 'numbers of tokens n (d = 1)')
flags.DEFINE_list('candidates', ['1', '2', '3'], 'SPLIT_CANDIDATES values K')
flags.DEFINE_integer('units', 4, 'hand-built product units')
flags.DEFINE_float('factor', 1.3, 'epsilon = factor x the closed-form d_2 error')
cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME} and the log {LOG_NAME} '
                      '(appended; --output_dir=results/benchmarks: the record).')
cli.define_overwrite()


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  ns = cli.int_list('ns', FLAGS.ns, 1)
  ks = cli.int_list('candidates', FLAGS.candidates, 1)
  out_dir = cli.output_dir(FLAGS.output_dir, writes=(JSON_NAME,))
  prov = provenance.record()
  load = provenance.loadavg_text()
  rows = []
  for n in ns:
    hb = hand_built.hand_built_product_network(FLAGS.units, n=n)
    eps = FLAGS.factor * math.sqrt(hb.l2_error_squared)
    for k in ks:
      box_bound.SPLIT_CANDIDATES = k
      cert = network_certificate.certify_network(
          'token_times_mean', hb.net, d=1, n=n, p=2, arithmetic='float32', epsilon=eps,
          max_minutes=20.0, progress=False)
      rows.append({'n': n, 'K': k, 'epsilon': eps, 'reached': bool(cert.reached),
                   'boxes': cert.boxes, 'rounds': cert.rounds, 'seconds': cert.seconds,
                   'history': [list(h) for h in cert.history]})
      print(f'n={n} K={k}: {cert.boxes:,} boxes, {cert.rounds} rounds, {cert.seconds:.1f} s '
            f'to {eps:.4g}', flush=True)
  box_bound.SPLIT_CANDIDATES = 1
  for r in rows:
    h = np.array(r['history'])
    marks = [int(h[-1, 0] * q) for q in (0.1, 0.5)]
    r['total_at_boxes'] = {str(b): float(np.exp(np.interp(np.log(b), np.log(h[:, 0]),
                                                          np.log(h[:, 2])))) for b in marks}
  result = {'provenance': prov, 'loadavg': load, 'factor': FLAGS.factor, 'rows': rows}
  outputs.atomic_json(os.path.join(out_dir, JSON_NAME), result, indent=1, default=str)
  summary = ('certify_split (hand-built, float32, p=2, ' f'{FLAGS.factor:g} x d_2; load '
             f'{load.split()[0]}): ' + '; '.join(
                 f'n={r["n"]} K={r["K"]} {r["boxes"]:,} boxes {r["seconds"]:.1f} s'
                 for r in rows))
  provenance.append_benchmark_line(os.path.join(out_dir, LOG_NAME), summary, prov)
  print(summary)


if __name__ == '__main__':
  cli.run(main)
