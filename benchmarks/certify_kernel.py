r"""Boxes per second of the per-box bound: NumPy (network_enclosure) against the jit kernel.

What it measures: for each case (a network at (d=1, n)), one set of boxes (the sorted
region's initial partition, then random dyadic bisections until --boxes boxes), evaluated in
the same run by ``box_bound.Evaluator`` (E_B, D, split, centre value: what a round
of certify_network computes) on the NumPy path and with the kernel (box_kernel.py):

    numpy_boxes_per_s, kernel_boxes_per_s   (best of --repeats, after one warm-up call)
    kernel_compile_s                        (the kernel's build and first call)
    max_rel_diff                            max |E_kernel - E_numpy| / E_numpy
    kernel_contains                         E_kernel >= E_numpy on every box and entry

and, end to end, ``certify_network`` with box_kernel=False and True at --rounds rounds
(seconds and totals). Cases: the hand-built token_times_mean network (certify/hand_built.py)
at n = 4 and 6, and a random 2-head network at n = 6, in float32.

    python benchmarks/certify_kernel.py --output_dir=results/benchmarks

Writes certify_kernel.json into --output_dir (default runs/benchmarks) and appends one
summary line to the log benchmarks.md there. Timings are wall-clock on a shared machine
(the load is recorded).
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import os
import time

import numpy as np
from absl import flags

from transformer_ua import outputs, provenance, rounding
from transformer_ua.certify import hand_built
from transformer_ua.certify import box_bound, box_sums, network_certificate
from transformer_ua.networks import network_apply, network_dict

JSON_NAME = 'certify_kernel.json'
LOG_NAME = provenance.BENCHMARK_LOG

FLAGS = flags.FLAGS
flags.DEFINE_integer('boxes', 8192, 'boxes per case')
flags.DEFINE_integer('repeats', 3, 'timed evaluations per path (the best is kept)')
flags.DEFINE_integer('rounds', 12, 'rounds of the end-to-end certify_network runs')
flags.DEFINE_string('arithmetic', 'float32', 'the arithmetic g runs in')
cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME} and the log {LOG_NAME} '
                      '(appended; --output_dir=results/benchmarks: the record).')
cli.define_overwrite()


def random_net(seed: int, n: int):
  rng = np.random.default_rng(seed)
  h, m, D, r = 2, 2, 3, 8
  return network_dict.check({'blocks': [{
      'W_Q': rng.normal(size=(h, m, D)) * 0.5, 'b_Q': rng.normal(size=(h, m)) * 0.5,
      'W_K': rng.normal(size=(h, m, D)) * 0.5, 'W_V': rng.normal(size=(h, m, D)) * 0.5,
      'W_O': rng.normal(size=(h, D, m)) * 0.25, 'W_1': rng.normal(size=(r, D)) * 0.5,
      'b_1': rng.normal(size=r) * 0.5, 'W_2': rng.normal(size=(D, r)) * 0.25,
      'b_2': rng.normal(size=D) * 0.5}]}, d=1, n=n)


def boxes_for(n: int, count: int, rng):
  lo, hi = box_sums.initial_boxes(n, 1, True)
  while len(lo) < count:
    pick = rng.integers(len(lo), size=min(len(lo), count - len(lo)))
    axis = rng.integers(n, size=len(pick))
    c_lo, c_hi = box_sums.bisect(lo[pick], hi[pick], axis)
    keep = np.ones(len(lo), bool)
    keep[pick] = False
    lo, hi = np.concatenate([lo[keep], c_lo]), np.concatenate([hi[keep], c_hi])
    from transformer_ua.certify import sorted_volume
    ok = sorted_volume.meets_sorted(lo, hi)
    lo, hi = lo[ok], hi[ok]
  return lo[:count], hi[:count]


def timed(fn, repeats: int):
  fn()
  best = np.inf
  for _ in range(repeats):
    t0 = time.perf_counter()
    out = fn()
    best = min(best, time.perf_counter() - t0)
  return best, out


def bench_case(name: str, net, n: int, log) -> dict:
  rng = np.random.default_rng(0)
  lo, hi = boxes_for(n, FLAGS.boxes, rng)
  run_net = net if FLAGS.arithmetic == 'exact' else network_apply.cast(
      net, rounding.MATMUL_MODELS[FLAGS.arithmetic].dtype)
  _, ev = box_bound.build_evaluator(run_net.as_dict(), 1, n, 'token_times_mean',
                                              FLAGS.arithmetic)
  numpy_s, ref = timed(lambda: ev.evaluate(lo, hi), FLAGS.repeats)
  t0 = time.perf_counter()
  ev.use_kernel()
  ev.evaluate(lo[:8], hi[:8])
  compile_s = time.perf_counter() - t0
  kernel_s, got = timed(lambda: ev.evaluate(lo, hi), FLAGS.repeats)
  e_ref, e_got = ref[0], got[0]
  finite = np.isfinite(e_ref) & (e_ref > 0)
  row = {'case': name, 'n': n, 'boxes': len(lo), 'numpy_boxes_per_s': len(lo) / numpy_s,
         'kernel_boxes_per_s': len(lo) / kernel_s, 'kernel_compile_s': compile_s,
         'max_rel_diff': float(np.max(np.abs(e_got - e_ref)[finite] / e_ref[finite])),
         'kernel_contains': bool(np.all(e_got >= e_ref)),
         'same_split': float(np.mean(got[2] == ref[2]))}
  ends = {}
  for use in (False, True):
    cert = network_certificate.certify_network(
        'token_times_mean', net, d=1, n=n, p=2, arithmetic=FLAGS.arithmetic,
        max_rounds=FLAGS.rounds, max_minutes=30.0, progress=False, box_kernel=use)
    ends['kernel' if use else 'numpy'] = {'seconds': cert.seconds, 'boxes': cert.boxes,
                                          'total': float(cert.total)}
  row['certify'] = ends
  log(f'{name} (1, {n}), {len(lo):,} boxes: NumPy {row["numpy_boxes_per_s"]:,.0f} boxes/s, '
      f'kernel {row["kernel_boxes_per_s"]:,.0f} boxes/s (compile {compile_s:.1f} s), max '
      f'relative difference of E {row["max_rel_diff"]:.2g}, kernel contains NumPy: '
      f'{row["kernel_contains"]}; certify_network {FLAGS.rounds} rounds: NumPy '
      f'{ends["numpy"]["seconds"]:.1f} s ({ends["numpy"]["boxes"]:,} boxes, total '
      f'{ends["numpy"]["total"]:.6g}), kernel {ends["kernel"]["seconds"]:.1f} s '
      f'({ends["kernel"]["boxes"]:,} boxes, total {ends["kernel"]["total"]:.6g})')
  return row


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  out_dir = cli.output_dir(FLAGS.output_dir, writes=(JSON_NAME,))
  prov = provenance.record()
  with open('/proc/loadavg') as fh:
    load = fh.read().strip()
  cases = [('hand-built', hand_built.hand_built_product_network(4, n=4).net, 4),
           ('hand-built', hand_built.hand_built_product_network(4, n=6).net, 6),
           ('random 2-head', random_net(0, 6), 6)]
  rows = [bench_case(name, net, n, print) for name, net, n in cases]
  with open('/proc/loadavg') as fh:
    load_after = fh.read().strip()
  result = {'provenance': prov, 'arithmetic': FLAGS.arithmetic, 'loadavg_before': load,
            'loadavg_after': load_after, 'rows': rows}
  outputs.atomic_json(os.path.join(out_dir, JSON_NAME), result, indent=1, default=str)
  summary = (f'certify_kernel ({FLAGS.arithmetic}, {FLAGS.boxes:,} boxes, load '
             f'{load.split()[0]}): ' + '; '.join(
                 f'{r["case"]} (1, {r["n"]}) NumPy {r["numpy_boxes_per_s"]:,.0f} vs kernel '
                 f'{r["kernel_boxes_per_s"]:,.0f} boxes/s (compile {r["kernel_compile_s"]:.0f} s)'
                 for r in rows))
  provenance.append_benchmark_line(os.path.join(out_dir, LOG_NAME), summary, prov)
  print(summary)


if __name__ == '__main__':
  cli.run(main)
