r"""Whole-grid verification, end to end: the project's binary vs a NumPy reference.

    python benchmarks/verify_throughput.py [--configs='3,2,6'] [--repeats=5] \
        [--output_dir=runs/benchmarks]

For each configuration (N, d, n), in the same run, each side a fresh process:

* ``binary``    -- ``experiments/verify_contextual_mapping.py --grid=full --nolemma9``
  (kernel 'sweep', one XLA host device per core), wall time of the whole process:
  start-up and imports, build, the multiset pass, every point of G+_delta, Lemma 7's
  checks, the JSON. With a fresh JAX persistent compilation cache
  (``--compilation_cache``): first *cold* (empty cache: every XLA program compiled),
  then *warm* (the cache as the first run left it: what a user's second run finds);
* ``reference`` -- ``benchmarks/verify_reference.py`` (vectorized NumPy, int64 where the
  proven bounds allow, Python-int object arrays beyond; one process), wall time of the
  whole process. When ``--reference_max_chunks`` limits it, the time of the full grid
  is extrapolated from the chunks run (start-up and class table + per-point time x
  points) and marked ``extrapolated``.

After the cold run the two alternate, warm binary then reference, ``--repeats`` times
(interleaved: a drift of the machine's speed -- other users' jobs on a shared machine
-- hits both sides of a pair alike); the speed-up is reference / binary wall time per
pair, reported as the median pair (and min, max), with the 1-minute load before each
run. CPU seconds (user + sys) of both processes are recorded too. The binary's JSON
gives its time split (import, compile, checks; ``verify.entry.verify_and_record``) and
its full-grid rate against the ALU roofline (``verify.sweep_kernel.ops_per_point``:
int64 operations per point, 1.2e10 per second per core).

Both check Properties 8.1-8.4, Lemma 10 (bounds, one-to-one), permutation equivariance
and the category counts on every point, and must report no violation. Writes
``verify_throughput.json`` into ``--output_dir`` (default runs/benchmarks) and appends one
line per configuration to the log ``benchmarks.md`` there (command, revision, machine,
load); ``--output_dir=results/benchmarks`` updates the record (an existing JSON is
refused before the work unless --overwrite). Exit status 0 when both verifiers report no
violation on every configuration, 1 otherwise (2: bad input).
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import flags

from transformer_ua import outputs, provenance

FLAGS = flags.FLAGS
flags.DEFINE_string('configs', '3,2,6', 'Semicolon-separated N,d,n triples.')
flags.DEFINE_integer('repeats', 5, 'Interleaved (warm binary, reference) pairs per '
                     'configuration.', lower_bound=1)
flags.DEFINE_string('reference_max_chunks', '0',
                    'Per config: 2^20-point chunks the reference runs (0: all, then no '
                    'extrapolation).')
JSON_NAME = 'verify_throughput.json'
LOG_NAME = provenance.BENCHMARK_LOG   # the log every benchmark appends to
_OUT = cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME} and the log '
                             f'{LOG_NAME} (a line per configuration, appended; '
                             '--output_dir=results/benchmarks: the record).')
cli.define_overwrite()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, 'experiments', 'verify_contextual_mapping.py')
REFERENCE = os.path.join(ROOT, 'benchmarks', 'verify_reference.py')


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


def _binary(N, d, n, out_dir, cache):
  """One binary run: its whole-process figures and its JSON's timings."""
  wall, cpu, rss, rc, _, err = _run([
      sys.executable, BINARY, f'--d={d}', f'--n={n}', f'--resolution={N}', '--grid=full',
      '--nolemma9', '--noprogress', f'--output_dir={out_dir}', '--overwrite',
      f'--compilation_cache={cache}'])
  if rc != 0:
    raise RuntimeError(f'binary failed: {err[-2000:]}')
  # the binary's fixed name in its --output_dir
  with open(os.path.join(out_dir, f'contextual_mapping_N{N}_d{d}_n{n}_full.json')) as fh:
    res = json.load(fh)
  return {'wall_s': round(wall, 2), 'cpu_s': round(cpu, 2), 'peak_rss_mb': round(rss),
          'time_split': res['time_split'], 'compiling': res['compiling'],
          'grid_check_s': res['grid_check_seconds'], 'phase_seconds': res['phase_seconds'],
          'full_pass': res['full_pass'], 'all_hold': res['all_hold']}, res


def _reference(N, d, n, ref_chunks, total):
  cmd = [sys.executable, REFERENCE, f'--d={d}', f'--n={n}', f'--resolution={N}']
  if ref_chunks:
    cmd.append(f'--max_chunks={ref_chunks}')
  ref_s, ref_cpu, ref_rss, rc, rout, rerr = _run(cmd)
  if rc != 0:
    raise RuntimeError(f'reference failed: {rerr[-2000:]}')
  ref = json.loads(rout.strip().splitlines()[-1])
  checked = ref['points_checked']
  full_s = ref_s
  if checked < total:  # start-up + table, then per point
    fixed = ref_s - ref['seconds'] + ref['table_seconds']
    full_s = fixed + (ref['seconds'] - ref['table_seconds']) * total / checked
  return {'wall_s': round(ref_s, 2), 'full_grid_s': round(full_s, 2), 'cpu_s': round(ref_cpu, 2),
          'peak_rss_mb': round(ref_rss)}, ref


def _spread(values):
  return {'median': round(statistics.median(values), 2), 'min': round(min(values), 2),
          'max': round(max(values), 2)}


def bench(N, d, n, ref_chunks, repeats):
  total = (N + 1) ** (n * d)
  pairs = []
  with tempfile.TemporaryDirectory() as tmp:
    cache = os.path.join(tmp, 'jax_cache')      # fresh: the first run is cold
    out_dir = os.path.join(tmp, 'out')
    load = os.getloadavg()[0]
    cold, res = _binary(N, d, n, out_dir, cache)
    cold['load_1min'] = load
    for _ in range(repeats):
      pair = {'load_1min_binary': os.getloadavg()[0]}
      pair['binary'], res = _binary(N, d, n, out_dir, cache)
      pair['load_1min_reference'] = os.getloadavg()[0]
      pair['reference'], ref = _reference(N, d, n, ref_chunks, total)
      pair['speedup'] = round(pair['reference']['full_grid_s'] / pair['binary']['wall_s'], 2)
      pair['speedup_cold'] = round(pair['reference']['full_grid_s'] / cold['wall_s'], 2)
      pair['speedup_cpu'] = round(pair['reference']['cpu_s'] / pair['binary']['cpu_s'], 2)
      pairs.append(pair)
  extrapolated = ref['points_checked'] < total
  agree = all(res['violations'][k] == ref['counts'][k]
              for k in ref['counts'] if k in res['violations']) and \
      all(res['categories'][str(c)] == ref['counts'][f'category_{c}'] for c in (1, 2, 3)
          if not extrapolated)
  warm = [p['binary'] for p in pairs]
  return {'N': N, 'd': d, 'n': n, 'grid_points': total,
          'arithmetic': res['arithmetic_detail'], 'sweep': res['full_pass']['sweep'],
          'devices': res['devices'], 'repeats': repeats,
          'binary_cold_cache': cold, 'pairs': pairs,
          'binary_warm_wall_s': _spread([b['wall_s'] for b in warm]),
          'binary_warm_cpu_s': _spread([b['cpu_s'] for b in warm]),
          'binary_time_split': {k: _spread([b['time_split'][k] for b in warm])
                                for k in warm[0]['time_split']},
          'binary_full_pass_points_per_s': _spread([b['full_pass']['points_per_second']
                                                    for b in warm]),
          'alu_limit_points_per_s': warm[0]['full_pass']['alu_limit_points_per_second'],
          'ops_per_point': warm[0]['full_pass']['ops_per_point'],
          'binary_all_hold': cold['all_hold'] and all(b['all_hold'] for b in warm),
          'reference_arithmetic': ref['arithmetic'],
          'reference_wall_s': _spread([p['reference']['full_grid_s'] for p in pairs]),
          'reference_cpu_s': _spread([p['reference']['cpu_s'] for p in pairs]),
          'reference_points_checked': ref['points_checked'],
          'reference_extrapolated': extrapolated,
          'reference_violations': sum(v for k, v in ref['counts'].items()
                                      if not k.startswith('category') and k != 'points'),
          # End to end, warm compilation cache (a user's second run), per interleaved pair.
          'speedup_end_to_end': _spread([p['speedup'] for p in pairs]),
          'speedup_end_to_end_cold': _spread([p['speedup_cold'] for p in pairs]),
          'speedup_cpu': _spread([p['speedup_cpu'] for p in pairs]),
          'load_1min': _spread([p[k] for p in pairs
                                for k in ('load_1min_binary', 'load_1min_reference')]),
          'binary_peak_rss_mb': max([cold['peak_rss_mb']] + [b['peak_rss_mb'] for b in warm]),
          'counts_agree': agree}


def _line(r: dict) -> str:
  sp, ts = r['speedup_end_to_end'], r['binary_time_split']
  return (
      f"verify_throughput N={r['N']} d={r['d']} n={r['n']} full grid ({r['grid_points']:,} "
      f"points, {r['arithmetic']}, {r['sweep']}, {r['devices']} host devices), "
      f"{r['repeats']} interleaved pairs of fresh processes: binary end to end (warm "
      f"compilation cache, as a second run finds it) median {r['binary_warm_wall_s']['median']}"
      f" s vs NumPy reference (benchmarks/verify_reference.py, {r['reference_arithmetic']}) "
      f"median {r['reference_wall_s']['median']} s"
      + (f" extrapolated from {r['reference_points_checked']:,} points"
         if r['reference_extrapolated'] else '')
      + f" = {sp['median']}x (pairs {sp['min']}-{sp['max']}x; cold cache "
      f"{r['binary_cold_cache']['wall_s']} s = {r['speedup_end_to_end_cold']['median']}x; CPU "
      f"seconds {r['speedup_cpu']['median']}x); binary time split (medians): import "
      f"{ts['import']['median']} s, compile {ts['compile']['median']} s, checks "
      f"{ts['checks']['median']} s; full-grid pass "
      f"{r['binary_full_pass_points_per_s']['median'] / 1e6:.1f}M points/s vs ALU roofline "
      f"{r['alu_limit_points_per_s'] / 1e6:.1f}M ({r['ops_per_point']} int ops/point); peak "
      f"RSS {r['binary_peak_rss_mb']} MB; violations 0 in both: "
      f"{r['binary_all_hold'] and r['reference_violations'] == 0}; 1-min load "
      f"{r['load_1min']['min']}-{r['load_1min']['max']}")


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
    row = bench(N, d, n, chunks[i] if i < len(chunks) else 0, FLAGS.repeats)
    rows.append(row)
    print(json.dumps(row), flush=True)
    print(_line(row), flush=True)
  result = {'benchmark': 'verify_throughput', 'rows': rows, 'provenance': prov}
  outputs.atomic_json(os.path.join(_OUT.value, JSON_NAME), result, indent=2)
  for r in rows:
    provenance.append_benchmark_line(os.path.join(_OUT.value, LOG_NAME), _line(r), prov)
  sys.exit(0 if all(r['binary_all_hold'] and r['reference_violations'] == 0 for r in rows)
           else 1)


if __name__ == '__main__':
  cli.run(main)
