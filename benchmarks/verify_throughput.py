r"""Whole-grid verification, end to end: the project's binary vs a NumPy reference.

    python benchmarks/verify_throughput.py --output_json=results/verify_throughput.json

For each configuration (N, d, n), in the same run, one after the other:

* ``binary``    -- ``experiments/verify_contextual_mapping.py --grid=full --nolemma9``
  (kernel 'sweep', one XLA host device per core), wall time of the whole process:
  start-up, build, the multiset pass, every point of G+_delta, Lemma 7's checks;
* ``reference`` -- ``benchmarks/verify_reference.py`` (vectorized NumPy, int64 where the
  proven bounds allow, Python-int object arrays beyond; one process), wall time of the
  whole process. When ``--reference_max_chunks`` limits it, the time of the full grid
  is extrapolated from the chunks run (start-up and class table + per-point time x
  points) and marked ``extrapolated``.

CPU seconds (user + sys) of both processes are recorded too: on a shared machine the
wall-time ratio moves with the other processes' load. Both check Properties 8.1-8.4, Lemma 10 (bounds, one-to-one), permutation
equivariance and the category counts on every point, and must report no violation.
Beside the measurement the script prints the ALU limit of the sweep kernel,

    ops_per_point x points / (cores x ops per second per core),

with ops_per_point counted from the kernel (``ops_per_point``) and 1.2e10 int64
operations per second per core (3 GHz x 4 AVX2 lanes). Appends one line per
configuration to runs/benchmarks/benchmarks.md (command, revision, machine, load;
``--markdown=results/benchmarks.md`` updates the record).
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from transformer_ua import cli, provenance
from transformer_ua.exact import planner
from transformer_ua.yun import contextual

FLAGS = flags.FLAGS
flags.DEFINE_string('configs', '3,2,6;4,2,5;8,2,4', 'Semicolon-separated N,d,n triples.')
flags.DEFINE_string('reference_max_chunks', '0;4;2',
                    'Per config: 2^20-point chunks the reference runs (0: all, then no '
                    'extrapolation).')
flags.DEFINE_string('output_json', '', 'Write results here.')
flags.DEFINE_string('markdown', 'runs/benchmarks/benchmarks.md',
                    'Append a line per configuration (results/benchmarks.md for the record).')
flags.DEFINE_float('ops_per_second_per_core', 1.2e10, 'ALU rate assumed per core.')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, 'experiments', 'verify_contextual_mapping.py')
REFERENCE = os.path.join(ROOT, 'benchmarks', 'verify_reference.py')


def ops_per_point(N: int, d: int, n: int) -> int:
  """Integer operations per grid point of the sweep kernel (words: limbs of the final
  arithmetic; every final-arithmetic op counted once per word)."""
  bits = planner.bits_for(contextual.contextual_mapping_bound(d, n, N))
  words = 1 if bits <= planner.INT64_BITS else planner.limb_layout(bits)[0]
  sweep = N ** d * (2 * (n - 1) + 2 + 5 * n)        # max, min, spread x gain; 2 cmp, and, add, select
  shift = 3 * (n - 1) + 2 + 4 * n                    # max, min, sum, mean; per token select x2, mul, add
  checks = (n * (n - 1) + 4 * n + 2 * n) * words     # distinct pairs, interval, equivariance compare
  index = n * (n - 1) + 6 * n                        # positions, rank and table indices
  return sweep + shift * words + checks + index


def _run(cmd):
  """(wall s, CPU s of the child, completed process)."""
  t0, r0 = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
  proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
  r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
  return time.time() - t0, cpu, proc


def bench(N, d, n, ref_chunks, ops_rate):
  total = (N + 1) ** (n * d)
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, 'r.json')
    bin_s, bin_cpu, proc = _run([sys.executable, BINARY, f'--d={d}', f'--n={n}', f'--resolution={N}',
                        '--grid=full', '--nolemma9', '--noprogress', f'--output_json={out}'])
    if proc.returncode != 0:
      raise RuntimeError(f'binary failed: {proc.stderr[-2000:]}')
    with open(out) as fh:
      res = json.load(fh)
  cmd = [sys.executable, REFERENCE, f'--d={d}', f'--n={n}', f'--resolution={N}']
  if ref_chunks:
    cmd.append(f'--max_chunks={ref_chunks}')
  ref_s, ref_cpu, rproc = _run(cmd)
  if rproc.returncode != 0:
    raise RuntimeError(f'reference failed: {rproc.stderr[-2000:]}')
  ref = json.loads(rproc.stdout.strip().splitlines()[-1])
  checked = ref['points_checked']
  extrapolated = checked < total
  ref_full_s = ref_s
  if extrapolated:  # start-up + table, then per point
    fixed = ref_s - ref['seconds'] + ref['table_seconds']
    ref_full_s = fixed + (ref['seconds'] - ref['table_seconds']) * total / checked
  ops = ops_per_point(N, d, n)
  alu_s = ops * total / (os.cpu_count() * ops_rate)
  agree = all(res['violations'][k] == ref['counts'][k]
              for k in ref['counts'] if k in res['violations']) and \
      all(res['categories'][str(c)] == ref['counts'][f'category_{c}'] for c in (1, 2, 3)
          if not extrapolated)
  return {'N': N, 'd': d, 'n': n, 'grid_points': total,
          'arithmetic': res['arithmetic_detail'], 'sweep': res.get('full_pass', {}).get('sweep'),
          'devices': res['devices'],
          'binary_wall_s': round(bin_s, 2), 'binary_grid_check_s': res['grid_check_seconds'],
          'binary_all_hold': res['all_hold'],
          'reference_arithmetic': ref['arithmetic'], 'reference_wall_s': round(ref_s, 2),
          'reference_points_checked': checked, 'reference_full_grid_s': round(ref_full_s, 2),
          'reference_extrapolated': extrapolated,
          'reference_violations': sum(v for k, v in ref['counts'].items()
                                      if not k.startswith('category') and k != 'points'),
          'speedup_end_to_end': round(ref_full_s / bin_s, 2),
          # CPU seconds (user + sys) of each process: less sensitive to the other
          # processes on a shared machine than wall time.
          'binary_cpu_s': round(bin_cpu, 2), 'reference_cpu_s': round(ref_cpu, 2),
          # Largest peak RSS of any child process so far (getrusage RUSAGE_CHILDREN).
          'children_max_rss_mb': round(
              resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
          'speedup_cpu': (round(ref_cpu / bin_cpu, 2) if not extrapolated else None),
          'ops_per_point': ops, 'alu_limit_s': round(alu_s, 3),
          'binary_vs_alu_limit': round(bin_s / alu_s, 1), 'counts_agree': agree}


def _markdown_path() -> str:
  return FLAGS.markdown if os.path.isabs(FLAGS.markdown) else os.path.join(ROOT, FLAGS.markdown)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if FLAGS.output_json:
    cli.output_file(FLAGS.output_json, '--output_json')
  if FLAGS.markdown:
    cli.output_file(_markdown_path(), '--markdown')
  try:
    configs = [tuple(int(v) for v in t.split(',')) for t in FLAGS.configs.split(';')]
    chunks = [int(c) for c in FLAGS.reference_max_chunks.split(';')]
  except ValueError:
    raise app.UsageError(f'--configs={FLAGS.configs!r} / --reference_max_chunks='
                         f'{FLAGS.reference_max_chunks!r}: expected N,d,n triples and '
                         'integers separated by ";".') from None
  if any(len(c) != 3 for c in configs):
    raise app.UsageError(f'--configs={FLAGS.configs!r}: each entry is N,d,n.')
  cmd = 'python ' + ' '.join(sys.argv)
  prov = provenance.record(command=cmd)
  rows = []
  for i, (N, d, n) in enumerate(configs):
    row = bench(N, d, n, chunks[i] if i < len(chunks) else 0, FLAGS.ops_per_second_per_core)
    row['load_1min'] = os.getloadavg()[0]
    rows.append(row)
    print(json.dumps(row), flush=True)
    print(f"N={N} d={d} n={n}: binary {row['binary_wall_s']} s end to end vs reference "
          f"{row['reference_full_grid_s']} s{' (extrapolated)' if row['reference_extrapolated'] else ''}"
          f" = {row['speedup_end_to_end']}x; ALU limit {row['alu_limit_s']} s "
          f"({row['ops_per_point']} ops/point)", flush=True)
  result = {'benchmark': 'verify_throughput', 'rows': rows, 'provenance': prov}
  if FLAGS.output_json:
    with open(FLAGS.output_json, 'w') as f:
      json.dump(result, f, indent=2)
  if FLAGS.markdown:
    path = _markdown_path()
    for r in rows:
      provenance.append_benchmark_line(path, (
          f"verify_throughput N={r['N']} d={r['d']} n={r['n']} full grid "
          f"({r['grid_points']:,} points, {r['arithmetic']}, {r['sweep']}, {r['devices']} host "
          f"devices): binary end to end {r['binary_wall_s']} s (grid check "
          f"{r['binary_grid_check_s']} s) vs NumPy reference (benchmarks/verify_reference.py, "
          f"{r['reference_arithmetic']}) {r['reference_full_grid_s']} s"
          f"{' extrapolated from ' + format(r['reference_points_checked'], ',') + ' points' if r['reference_extrapolated'] else ''}"
          f" = {r['speedup_end_to_end']}x; ALU limit {r['alu_limit_s']} s "
          f"({r['ops_per_point']} int ops/point, 1.2e10 ops/s/core); violations 0 in both: "
          f"{r['binary_all_hold'] and r['reference_violations'] == 0}; load at end "
          f"{r['load_1min']:.1f}"), prov)
  sys.exit(0 if all(r['binary_all_hold'] and r['reference_violations'] == 0 for r in rows)
           else 1)


if __name__ == '__main__':
  cli.run(main)
