r"""Whole-grid verification, end to end: the project's binary vs a NumPy reference.

    python benchmarks/verify_throughput.py [--configs='3,2,6;4,2,5;8,2,4'] \
        [--output_dir=runs/benchmarks]

For each configuration (N, d, n), in the same run, one after the other:

* ``binary``    -- ``experiments/verify_contextual_mapping.py --grid=full --nolemma9``
  (kernel 'sweep', one XLA host device per core), wall time of the whole process:
  start-up, build, the multiset pass, every point of G+_delta, Lemma 7's checks. Run
  twice with a fresh JAX persistent compilation cache (``--compilation_cache``): *cold*
  (empty cache: every XLA program compiled) and *warm* (the second run reads them);
  both are reported, with each run's peak RSS;
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
operations per second per core (3 GHz x 4 AVX2 lanes). Writes ``verify_throughput.json``
into ``--output_dir`` (default runs/benchmarks) and appends one line per configuration
to the log ``benchmarks.md`` there (command, revision, machine, load);
``--output_dir=results/benchmarks`` updates the record (an existing JSON is refused
before the work unless --overwrite). Exit status 0 when both verifiers report no
violation on every configuration, 1 otherwise (2: bad input).
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import json
import os
import subprocess
import sys
import tempfile
import time

from absl import flags

from transformer_ua import outputs, provenance
from transformer_ua.exact import planner
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import contextual_params

FLAGS = flags.FLAGS
flags.DEFINE_string('configs', '3,2,6;4,2,5;8,2,4', 'Semicolon-separated N,d,n triples.')
flags.DEFINE_string('reference_max_chunks', '0;4;2',
                    'Per config: 2^20-point chunks the reference runs (0: all, then no '
                    'extrapolation).')
JSON_NAME = 'verify_throughput.json'
LOG_NAME = provenance.BENCHMARK_LOG   # the log every benchmark appends to
_OUT = cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME} and the log '
                             f'{LOG_NAME} (a line per configuration, appended; '
                             '--output_dir=results/benchmarks: the record).')
cli.define_overwrite()
flags.DEFINE_float('ops_per_second_per_core', 1.2e10, 'ALU rate assumed per core.')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, 'experiments', 'verify_contextual_mapping.py')
REFERENCE = os.path.join(ROOT, 'benchmarks', 'verify_reference.py')


def ops_per_point(N: int, d: int, n: int) -> int:
  """Integer operations per grid point of the sweep kernel (words: limbs of the final
  arithmetic; every final-arithmetic op counted once per word)."""
  bits = planner.bits_for(contextual_params.contextual_mapping_bound(Grid(d, n, N)))
  words = 1 if bits <= planner.INT64_BITS else planner.limb_layout(bits)[0]
  sweep = N ** d * (2 * (n - 1) + 2 + 5 * n)        # max, min, spread x gain; 2 cmp, and, add, select
  shift = 3 * (n - 1) + 2 + 4 * n                    # max, min, sum, mean; per token select x2, mul, add
  checks = (n * (n - 1) + 4 * n + 2 * n) * words     # distinct pairs, interval, equivariance compare
  index = n * (n - 1) + 6 * n                        # positions, rank and table indices
  return sweep + shift * words + checks + index


def _run(cmd):
  """(wall s, CPU s, peak RSS MB of the child, its return code, stdout, stderr)."""
  with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile('w+') as err:
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)   # this child's own rusage
    wall = time.time() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    err.seek(0)
    return (wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
            proc.returncode, out.read(), err.read())


def bench(N, d, n, ref_chunks, ops_rate):
  total = (N + 1) ** (n * d)
  binary = {}
  with tempfile.TemporaryDirectory() as tmp:
    cache = os.path.join(tmp, 'jax_cache')      # fresh: the first run is cold
    for kind in ('cold', 'warm'):
      out_dir = os.path.join(tmp, kind)
      wall, cpu, rss, rc, _, err = _run([
          sys.executable, BINARY, f'--d={d}', f'--n={n}', f'--resolution={N}', '--grid=full',
          '--nolemma9', '--noprogress', f'--output_dir={out_dir}',
          f'--compilation_cache={cache}'])
      if rc != 0:
        raise RuntimeError(f'binary failed: {err[-2000:]}')
      # the binary's fixed name in its --output_dir
      with open(os.path.join(out_dir, f'contextual_mapping_N{N}_d{d}_n{n}_full.json')) as fh:
        res = json.load(fh)
      binary[kind] = {'wall_s': round(wall, 2), 'cpu_s': round(cpu, 2),
                      'peak_rss_mb': round(rss), 'grid_check_s': res['grid_check_seconds'],
                      'phase_seconds': res['phase_seconds'],
                      'multiset_pass_s': res['multiset_pass_seconds'],
                      'all_hold': res['all_hold']}
  bin_s = binary['warm']['wall_s']
  cmd = [sys.executable, REFERENCE, f'--d={d}', f'--n={n}', f'--resolution={N}']
  if ref_chunks:
    cmd.append(f'--max_chunks={ref_chunks}')
  ref_s, ref_cpu, ref_rss, rc, rout, rerr = _run(cmd)
  if rc != 0:
    raise RuntimeError(f'reference failed: {rerr[-2000:]}')
  ref = json.loads(rout.strip().splitlines()[-1])
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
          'binary_cold_cache': binary['cold'], 'binary_warm_cache': binary['warm'],
          'binary_wall_s': bin_s, 'binary_grid_check_s': binary['warm']['grid_check_s'],
          'binary_all_hold': binary['cold']['all_hold'] and binary['warm']['all_hold'],
          'reference_arithmetic': ref['arithmetic'], 'reference_wall_s': round(ref_s, 2),
          'reference_points_checked': checked, 'reference_full_grid_s': round(ref_full_s, 2),
          'reference_extrapolated': extrapolated,
          'reference_violations': sum(v for k, v in ref['counts'].items()
                                      if not k.startswith('category') and k != 'points'),
          # End to end, warm compilation cache (the binary's default after its first
          # run of a configuration) and cold (first run).
          'speedup_end_to_end': round(ref_full_s / bin_s, 2),
          'speedup_end_to_end_cold': round(ref_full_s / binary['cold']['wall_s'], 2),
          # CPU seconds (user + sys) of each process: less sensitive to the other
          # processes on a shared machine than wall time.
          'binary_cpu_s': binary['warm']['cpu_s'], 'reference_cpu_s': round(ref_cpu, 2),
          'binary_peak_rss_mb': max(binary['cold']['peak_rss_mb'],
                                    binary['warm']['peak_rss_mb']),
          'reference_peak_rss_mb': round(ref_rss),
          'speedup_cpu': (round(ref_cpu / binary['warm']['cpu_s'], 2) if not extrapolated
                          else None),
          'ops_per_point': ops, 'alu_limit_s': round(alu_s, 3),
          'binary_vs_alu_limit': round(bin_s / alu_s, 1), 'counts_agree': agree}


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  try:
    configs = [tuple(int(v) for v in t.split(',')) for t in FLAGS.configs.split(';')]
    chunks = [int(c) for c in FLAGS.reference_max_chunks.split(';')]
  except ValueError:
    raise cli.BadInput(f'--configs={FLAGS.configs!r} / --reference_max_chunks='
                       f'{FLAGS.reference_max_chunks!r}: expected N,d,n triples and '
                       'integers separated by ";".') from None
  if any(len(c) != 3 for c in configs):
    raise cli.BadInput(f'--configs={FLAGS.configs!r}: each entry is N,d,n.')
  if any(N < 2 or d < 1 or n < 2 for N, d, n in configs):
    raise cli.BadInput(f'--configs={FLAGS.configs!r}: each N,d,n needs N >= 2, d >= 1, '
                       'n >= 2.')
  if any(c < 0 for c in chunks):
    raise cli.BadInput(f'--reference_max_chunks={FLAGS.reference_max_chunks!r}: each entry '
                       'must be >= 0 (0: all).')
  cli.output_dir(_OUT.value, writes=(JSON_NAME,))
  cmd = 'python ' + ' '.join(sys.argv)
  prov = provenance.record(command=cmd)
  rows = []
  for i, (N, d, n) in enumerate(configs):
    row = bench(N, d, n, chunks[i] if i < len(chunks) else 0, FLAGS.ops_per_second_per_core)
    row['load_1min'] = os.getloadavg()[0]
    rows.append(row)
    print(json.dumps(row), flush=True)
    print(f"N={N} d={d} n={n}: binary end to end {row['binary_wall_s']} s (warm compilation "
          f"cache; cold {row['binary_cold_cache']['wall_s']} s) vs reference "
          f"{row['reference_full_grid_s']} s{' (extrapolated)' if row['reference_extrapolated'] else ''}"
          f" = {row['speedup_end_to_end']}x warm, {row['speedup_end_to_end_cold']}x cold; "
          f"ALU limit {row['alu_limit_s']} s ({row['ops_per_point']} ops/point); binary peak "
          f"RSS {row['binary_peak_rss_mb']} MB", flush=True)
  result = {'benchmark': 'verify_throughput', 'rows': rows, 'provenance': prov}
  outputs.atomic_json(os.path.join(_OUT.value, JSON_NAME), result, indent=2)
  for r in rows:
    provenance.append_benchmark_line(os.path.join(_OUT.value, LOG_NAME), (
        f"verify_throughput N={r['N']} d={r['d']} n={r['n']} full grid "
        f"({r['grid_points']:,} points, {r['arithmetic']}, {r['sweep']}, {r['devices']} host "
        f"devices): binary end to end {r['binary_wall_s']} s with a warm compilation cache "
        f"(grid check {r['binary_grid_check_s']} s), {r['binary_cold_cache']['wall_s']} s "
        f"cold, vs NumPy reference (benchmarks/verify_reference.py, "
        f"{r['reference_arithmetic']}) {r['reference_full_grid_s']} s"
        f"{' extrapolated from ' + format(r['reference_points_checked'], ',') + ' points' if r['reference_extrapolated'] else ''}"
        f" = {r['speedup_end_to_end']}x warm, {r['speedup_end_to_end_cold']}x cold; ALU "
        f"limit {r['alu_limit_s']} s ({r['ops_per_point']} int ops/point, 1.2e10 ops/s/core); "
        f"binary peak RSS {r['binary_peak_rss_mb']} MB; violations 0 in both: "
        f"{r['binary_all_hold'] and r['reference_violations'] == 0}; load at end "
        f"{r['load_1min']:.1f}"), prov)
  sys.exit(0 if all(r['binary_all_hold'] and r['reference_violations'] == 0 for r in rows)
           else 1)


if __name__ == '__main__':
  cli.run(main)
