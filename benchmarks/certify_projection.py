r"""The cost model's projections (certify/cost_model.py) against runs let finish.

What it measures: for the hand-built token_times_mean network (certify/hand_built.py) at
(d=1, n) for each n, ``certify_network`` runs until the total reaches epsilon = factor x
the network's closed-form d_2 error (float32, p=2). Then, from the first k rounds of that
run's record (k at a quarter, half and three quarters of its rounds, and its next-to-last
round), the cost model projects the boxes and minutes to epsilon, with and without the
floor; each row gives projected / actual:

    ratio_boxes = projected boxes / the boxes the run needed
    ratio_minutes = projected minutes / the minutes it took

    python benchmarks/certify_projection.py --ns=4,5 --output_dir=results/benchmarks

Writes certify_projection.json into --output_dir (default runs/benchmarks; an existing file
is refused before any work unless --overwrite) and appends one summary line to the log
benchmarks.md there. Timings are wall-clock on a shared machine: the load is recorded.
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import math
import os

from absl import flags

from transformer_ua import outputs, provenance
from transformer_ua.certify import cost_model, hand_built
from transformer_ua.certify import network_certificate

JSON_NAME = 'certify_projection.json'
LOG_NAME = provenance.BENCHMARK_LOG

FLAGS = flags.FLAGS
flags.DEFINE_list('ns', ['4', '5'], 'numbers of tokens n (d = 1)')
flags.DEFINE_integer('units', 4, 'hand-built product units (knots)')
flags.DEFINE_float('factor', 1.4, 'epsilon = factor x the closed-form d_2 error')
flags.DEFINE_string('arithmetic', 'float32', 'the arithmetic g runs in')
flags.DEFINE_float('max_minutes', 20.0, 'budget of each run (it must finish within it)')
cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME} and the log {LOG_NAME} '
                      '(appended; --output_dir=results/benchmarks: the record).')
cli.define_overwrite()


def bench_one(n: int, log) -> dict:
  hb = hand_built.hand_built_product_network(FLAGS.units, n=n)
  true = math.sqrt(hb.l2_error_squared)
  eps = FLAGS.factor * true
  cert = network_certificate.certify_network(
      'token_times_mean', hb.net, d=1, n=n, p=2, arithmetic=FLAGS.arithmetic, epsilon=eps,
      max_minutes=FLAGS.max_minutes, progress=False)
  hist = cert.history
  rounds = len(hist)
  actual_min = hist[-1][1] / 60
  rows = []
  for k in sorted({max(cost_model.MIN_POINTS + 1, rounds * q // 4) for q in (1, 2, 3)}
                  | {rounds - 1}):
    if k >= rounds:
      continue
    row = {'rounds_used': k, 'boxes_at': hist[k - 1][0], 'minutes_at': hist[k - 1][1] / 60}
    for name, floor in (('floor', True), ('plain', False)):
      proj = cost_model.project(hist[:k], eps, 2, use_floor=floor)
      row[name] = None if proj is None else {
          'boxes': proj.boxes, 'minutes': proj.minutes, 'exponent': proj.exponent,
          'floor': proj.floor, 'ratio_boxes': proj.boxes / cert.boxes,
          'ratio_minutes': proj.minutes / actual_min if actual_min > 0 else None,
          'text': proj.text()}
    rows.append(row)
    fl = row['floor']
    log(f'n={n}: from {k} of {rounds} rounds ({row["boxes_at"]:,} boxes): projected '
        f'{fl["boxes"]:.3g} boxes ({fl["ratio_boxes"]:.2f}x), {fl["minutes"]:.3g} min '
        f'({fl["ratio_minutes"]:.2f}x); plain fit {row["plain"]["ratio_boxes"]:.2f}x boxes')
  log(f'n={n}: {cert.line()}')
  return {'n': n, 'units': FLAGS.units, 'closed_form_d2': true, 'epsilon': eps,
          'reached': bool(cert.reached), 'boxes': cert.boxes, 'rounds': rounds,
          'minutes': actual_min, 'total': float(cert.total), 'history': [list(h) for h in hist],
          'projections': rows}


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  ns = cli.int_list('ns', FLAGS.ns, 1)
  if FLAGS.factor <= 1:
    raise cli.BadInput(f'--factor={FLAGS.factor}; it must be above 1 (epsilon above the '
                       "network's own error).")
  out_dir = cli.output_dir(FLAGS.output_dir, writes=(JSON_NAME,))
  prov = provenance.record()
  with open('/proc/loadavg') as fh:
    load_before = fh.read().strip()
  runs = [bench_one(n, print) for n in ns]
  with open('/proc/loadavg') as fh:
    load_after = fh.read().strip()
  result = {'provenance': prov, 'arithmetic': FLAGS.arithmetic, 'factor': FLAGS.factor,
            'loadavg_before': load_before, 'loadavg_after': load_after, 'runs': runs}
  outputs.atomic_json(os.path.join(out_dir, JSON_NAME), result, indent=1, default=str)
  parts = []
  for r in runs:
    mid = r['projections'][len(r['projections']) // 2]['floor']
    parts.append(f'(1, {r["n"]}): {r["boxes"]:,} boxes, {r["minutes"]:.2f} min to '
                 f'{r["epsilon"]:.4g}; projected from round '
                 f'{r["projections"][len(r["projections"]) // 2]["rounds_used"]} '
                 f'{mid["ratio_boxes"]:.2f}x the boxes, {mid["ratio_minutes"]:.2f}x the minutes')
  summary = (f'certify_projection (hand-built {FLAGS.units} units, {FLAGS.arithmetic}, p=2, '
             f'epsilon {FLAGS.factor:g} x its d_2; load {load_before.split()[0]}): '
             + '; '.join(parts))
  provenance.append_benchmark_line(os.path.join(out_dir, LOG_NAME), summary, prov)
  print(summary)
  print(f'wrote {os.path.join(out_dir, JSON_NAME)}')


if __name__ == '__main__':
  cli.run(main)
