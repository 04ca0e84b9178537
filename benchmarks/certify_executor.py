r"""Where the executor pays: certify time against workers, local and on a Dask cluster.

Claim measured: ``certified_eval.certify_interiors`` (one arb box per cube class pushed through
g) over ``transformer_ua.executor`` in-process, on a local spawn pool of --processes,
and on a Dask ``LocalCluster`` of --processes worker processes (1 thread each), gives
the same certificate (bound, worst cube, bits) everywhere, and this much time. Reference,
in the same run: the in-process certification.

Per backend b (local pool, Dask) the fixed cost and the per-chunk round trip are timed
with ``executor.empty_chunk`` (no work) and the certification's own shipment (the exact
network, built once in each worker):

    A_b   = T_b(2 empty chunks)                 start + ship + build in each worker
    o_b   = (t_K - t_1) / (K - 1)               one chunk's round trip: t_i the wall
                                                clock at which the i-th of K = 100
                                                slots empty chunks ran
    T_b(W) ~ A_b + k o_b + W / slots            (W: in-process seconds of the work;
                                                 k = CHUNKS_PER_WORKER slots chunks)

so with an idle core per slot the pool pays above the crossover
W* = (A_b + k o_b) / (1 - 1 / slots) seconds of in-process work;
``executor.MIN_POOL_SECONDS`` is the local one. On loaded cores the measured speedup
(in the JSON) is lower and the crossover higher.

    python benchmarks/certify_executor.py --resolution=16 --output_dir=results/benchmarks

Writes certify_executor.json into --output_dir (default runs/benchmarks; an existing file
is refused before any work unless --overwrite) and appends one summary line to the log
benchmarks.md there.
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import logging
import os
import time
from fractions import Fraction

from absl import flags

from transformer_ua import executor, outputs, provenance
from transformer_ua.yun import build_approximator
from transformer_ua.yun.realization import certified_eval, plan as plan_lib
from transformer_ua.yun.realization import ids

JSON_NAME = 'certify_executor.json'
#: Empty chunks per worker slot timed for the per-chunk round trip.
EMPTY_CHUNKS = 100
LOG_NAME = provenance.BENCHMARK_LOG

FLAGS = flags.FLAGS
flags.DEFINE_integer('resolution', 16, 'resolution N')
flags.DEFINE_integer('d', 1, 'token dimension')
flags.DEFINE_integer('n', 3, 'tokens')
flags.DEFINE_string('target', 'token_times_mean', 'built-in target')
flags.DEFINE_enum('ties', 'complete', ['complete', 'paper'], "Theorem 2's contextual map")
flags.DEFINE_integer('processes', 2, 'local pool processes and Dask worker processes')
flags.DEFINE_bool('dask', True, 'also time a Dask LocalCluster (needs the cluster extra)')
flags.DEFINE_integer('margin_log2', -20, 'cube-interior margin 2^k delta per side')
flags.DEFINE_float('tolerance', 1e-9, "the plan's interior tolerance")
cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME} and the log {LOG_NAME} '
                      '(appended; --output_dir=results/benchmarks: the record).')
cli.define_overwrite()


def _timed(fn):
  t0 = time.perf_counter()
  out = fn()
  return time.perf_counter() - t0, out


def overheads(name, workers_of, work_args) -> dict:
  """A_b, o_b of one backend (module doc); fresh shipments, so each build is timed."""
  slots = workers_of().slots()

  def empty(chunks, tag):
    return _timed(lambda: executor.map_spans(
        executor.empty_chunk, executor.ship(certified_eval.interior_work, *work_args, tag), chunks,
        workers_of(), chunks_per_worker=EMPTY_CHUNKS))
  t2, _ = empty(2, -1.0)
  k = EMPTY_CHUNKS * slots
  tk, out = empty(k, -2.0)
  ran = sorted(r for _, r in out.results)      # when each empty chunk ran (wall clock)
  per_chunk = (ran[-1] - ran[0]) / (k - 1)
  fixed = t2 + executor.CHUNKS_PER_WORKER * slots * per_chunk
  crossover = fixed / (1 - 1 / slots) if slots > 1 else float('inf')
  print(f'{name}: start + ship + build {t2:.2f} s, per chunk {1e3 * per_chunk:.2f} ms, '
        f'crossover {crossover:.1f} s of in-process work')
  return {'slots': slots, 'two_empty_chunks_seconds': t2, f'{k}_empty_chunks_seconds': tk,
          'per_chunk_seconds': per_chunk, 'crossover_seconds': crossover}


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  if FLAGS.resolution < 2 or FLAGS.processes < 2:
    raise cli.BadInput(f'--resolution={FLAGS.resolution}, --processes={FLAGS.processes}: '
                       'both must be >= 2.')
  distributed = None
  if FLAGS.dask:
    try:
      import distributed  # pylint: disable=import-outside-toplevel,redefined-outer-name
    except ImportError:
      raise cli.BadInput("--dask needs dask.distributed: pip install -e '.[cluster]' (or "
                         '--nodask).') from None
  out_dir = cli.output_dir(FLAGS.output_dir, writes=(JSON_NAME,))
  logging.getLogger('distributed').setLevel(logging.WARNING)
  prov = provenance.record()
  N, w = FLAGS.resolution, FLAGS.processes
  t_build, net = _timed(lambda: build_approximator(FLAGS.target, d=FLAGS.d, n=FLAGS.n,
                                                   resolution=N, ties=FLAGS.ties))
  margin = Fraction(2) ** FLAGS.margin_log2
  pl = plan_lib.plan_realization(net, tolerance=FLAGS.tolerance, margin=float(margin))
  g = net.realize(lam=pl.lam, epsilon=pl.epsilon, dtype='exact', clamp=True)
  bits = certified_eval.resolve_bits(g, None, check_plan=False, margin=float(margin))
  classes = ids.grid_classes(net)
  targets = net.apply((classes + 0.5) / N)          # compiles g_bar outside the timings
  layers = int(sum(s.depth for s in g.segments))
  print(f'N={N}: {len(classes)} cube classes x {layers} layers, {bits} bits')

  def run(workers):
    return certified_eval.certify_interiors(g, float(margin), bits, check_plan=False,
                                     tolerance=1.0, workers=workers)

  rows = {}
  here = run(executor.Workers(1))
  rows['in-process'] = {'seconds': here['seconds'], 'workers': 1}
  print(f'in-process: {here["seconds"]:.1f} s, max |g - g_bar| <= {here["max_abs_error"]:.3g}')
  pool = run(executor.Workers(w, min_pool_seconds=0))
  rows[f'local {w} processes'] = {'seconds': pool['seconds'], 'workers': pool['workers']}
  print(f'local pool of {w}: {pool["seconds"]:.1f} s')
  work_args = (g.segments, g.params, g.positional, bits, N, margin, classes, targets)
  over = {f'local {w} processes': overheads(
      'local pool', lambda: executor.Workers(w, min_pool_seconds=0), work_args)}
  results = [pool]
  if distributed is not None:
    t_cluster, cluster = _timed(lambda: distributed.LocalCluster(
        n_workers=w, threads_per_worker=1, processes=True, dashboard_address=None))
    with cluster, distributed.Client(cluster) as client:
      ex = client.get_executor()
      dask = run(executor.Workers(executor=ex))
      name = f'Dask LocalCluster {w} processes'
      rows[name] = {'seconds': dask['seconds'], 'workers': dask['workers'],
                    'cluster_start_seconds': t_cluster}
      print(f'{name}: {dask["seconds"]:.1f} s (cluster start {t_cluster:.1f} s, not counted)')
      over[name] = overheads('Dask', lambda: executor.Workers(executor=ex), work_args)
      results.append(dask)
  for r in results:
    if (r['max_abs_error'], r['worst_cube'], r['bits']) != \
        (here['max_abs_error'], here['worst_cube'], here['bits']):
      raise RuntimeError(f'{r["workers"]} workers certified {r["max_abs_error"]!r} at '
                         f'{r["worst_cube"]}, not {here["max_abs_error"]!r} at '
                         f'{here["worst_cube"]}: the executor changed the answer.')
  per_cube = here['seconds'] / len(classes)
  for name, row in rows.items():
    row['speedup'] = here['seconds'] / row['seconds']
  for o in over.values():
    o['crossover_cubes_this_network'] = o['crossover_seconds'] / per_cube
  result = {'provenance': prov, 'target': FLAGS.target, 'd': FLAGS.d, 'n': FLAGS.n,
            'ties': FLAGS.ties,
            'resolution': N, 'cubes': len(classes), 'layers': layers, 'bits': bits,
            'margin_log2': FLAGS.margin_log2, 'network_build_seconds': t_build,
            'max_abs_error': here['max_abs_error'], 'worst_cube': here['worst_cube'],
            'seconds_per_cube_in_process': per_cube,
            'min_pool_seconds_in_code': executor.MIN_POOL_SECONDS,
            'chunks_per_worker': executor.CHUNKS_PER_WORKER,
            'reference': 'certify_interiors in-process; the same certificate (bound, worst '
                         'cube, bits) from each backend is checked',
            'certify': rows, 'overheads': over}
  outputs.atomic_json(os.path.join(out_dir, JSON_NAME), result, indent=1, default=str)
  summary = (f'certify executor ({FLAGS.target}, d={FLAGS.d}, n={FLAGS.n}, ties={FLAGS.ties}, N={N}: '
             f'{len(classes)} cube classes x {layers} layers): '
             + ', '.join(f'{k} {v["seconds"]:.1f} s' for k, v in rows.items())
             + '; per chunk ' + ', '.join(f'{k} {1e3 * o["per_chunk_seconds"]:.1f} ms'
                                          for k, o in over.items())
             + '; pool pays above ' + ', '.join(f'{k} {o["crossover_seconds"]:.1f} s'
                                                 for k, o in over.items())
             + ' of in-process work')
  provenance.append_benchmark_line(os.path.join(out_dir, LOG_NAME), summary, prov)
  print(summary)
  print(f'wrote {os.path.join(out_dir, JSON_NAME)}')


if __name__ == '__main__':
  cli.run(main)
