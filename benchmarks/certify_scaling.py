r"""How the whole-domain certificate's time grows: ``certify_lp`` against N and depth.

Claim measured: the time of ``yun.bounds.certificate.certify_lp`` (Theorems 2/3 certified,
d_p(f, g) <= total) is dominated by the cube interiors (one box per cube class pushed
through every layer in arb balls, ``certified_eval.certify_interiors``), so it grows like
(cube classes) x (layers); the windows (``certificate.window_bound``: one box, the whole
unit cube) cost one forward pass. Reference, in the same run: the interiors on 1 worker
(in-process) against the spawned pool of ``--workers`` processes.

For each N (token_times_mean by default, d=1, n=3, ties='complete'), g is realized with
the output clamp at the plan's lam, ramp and bits (tolerance 1e-9, margin 2^-20), then:

    ball network build   ``certified_eval.ball_network`` (exact params -> arb), once
    (untimed warm-up)    g_bar at the cube centres, so JAX compiles it outside the timings
    interiors            ``certify_interiors`` with 1 worker and with each --workers
                         (a spawn pool above ``executor.MIN_POOL_SECONDS`` of
                         estimated in-process work; below that it runs in-process)
    windows              ``certificate.window_bound`` (network already built)
    certify_lp           the whole certificate (--certify_lp_workers), as a user calls it

    python benchmarks/certify_scaling.py --resolutions=2,3,4,6,8,12 --workers=1,2 \
        --output_dir=results/benchmarks

Writes certify_scaling.json and certify_scaling.png into --output_dir (default
runs/benchmarks; existing files are refused before any work unless --overwrite) and
appends one summary line to the log benchmarks.md there.
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import math
import os
import time
from fractions import Fraction

from absl import flags
import numpy as np

from transformer_ua import executor, outputs, provenance
from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun import build_approximator
from transformer_ua.yun.bounds import certificate
from transformer_ua.yun.realization import certified_eval, plan as plan_lib
from transformer_ua.yun.realization import ids

JSON_NAME = 'certify_scaling.json'
PNG_NAME = 'certify_scaling.png'
LOG_NAME = provenance.BENCHMARK_LOG   # the log every benchmark appends to

FLAGS = flags.FLAGS
flags.DEFINE_list('resolutions', ['2', '3', '4', '6', '8', '12'], 'resolutions N')
flags.DEFINE_string('target', 'token_times_mean', 'built-in target')
flags.DEFINE_bool('positional', False, 'Theorem 3 (every cube) instead of Theorem 2')
flags.DEFINE_enum('ties', 'complete', ['complete', 'paper'], "Theorem 2's contextual map")
flags.DEFINE_integer('d', 1, 'token dimension')
flags.DEFINE_integer('n', 3, 'tokens')
flags.DEFINE_list('workers', ['1', '2'], 'worker counts for the interiors (1 = in-process)')
flags.DEFINE_integer('certify_lp_workers', 2, 'workers of the end-to-end certify_lp (0: skip)')
flags.DEFINE_integer('margin_log2', -20, 'cube-interior margin 2^k delta per side')
flags.DEFINE_float('tolerance', 1e-9, "the plan's interior tolerance")
cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME}, {PNG_NAME} and the log '
                      f'{LOG_NAME} (appended; --output_dir=results/benchmarks: the record).')
cli.define_overwrite()


def bench_one(N, workers, log) -> dict:
  t0 = time.perf_counter()
  net = build_approximator(FLAGS.target, d=FLAGS.d, n=FLAGS.n, resolution=N,
                           positional=FLAGS.positional, ties=FLAGS.ties)
  margin = Fraction(2) ** FLAGS.margin_log2
  pl = plan_lib.plan_realization(net, tolerance=FLAGS.tolerance, margin=float(margin))
  g = net.realize(lam=pl.lam, epsilon=pl.epsilon, dtype='exact', clamp=True)
  build = time.perf_counter() - t0
  bits = certified_eval.resolve_bits(g, None, check_plan=False, margin=float(margin))
  t0 = time.perf_counter()
  certified_eval.ball_network(g, bits)
  ball_build = time.perf_counter() - t0
  # g_bar at the cube centres (the interiors' targets) is a jitted JAX call: compile it
  # here, not inside the first timed certification.
  t0 = time.perf_counter()
  classes = ids.grid_classes(net)
  net.apply((classes + 0.5) / N)
  warmup = time.perf_counter() - t0
  row = {'resolution': N, 'layers': int(sum(s.depth for s in g.segments)),
         'params': int(g.num_params()), 'bits': bits, 'lam': float(pl.lam),
         'ramp': float(pl.epsilon), 'build_seconds': build, 'ball_build_seconds': ball_build,
         'g_bar_compile_seconds': warmup,
         'interiors': {}}
  worst = None
  for w in workers:
    res = certified_eval.certify_interiors(g, float(margin), bits, check_plan=False, workers=w,
                                    tolerance=1.0)
    row['cubes'] = res['cubes']
    row['interiors'][str(w)] = {'seconds': res['seconds'], 'workers_used': res['workers']}
    if worst is not None and res['max_abs_error'] != worst:
      raise RuntimeError(f'N={N}: {w} workers certified {res["max_abs_error"]!r}, not '
                         f'{worst!r}: the pool changed the answer.')
    worst = res['max_abs_error']
  row['interior_sup'] = worst
  win = certificate.window_bound(net, g, bits)
  row['windows_seconds'] = win['seconds']
  if FLAGS.certify_lp_workers:
    cert = certificate.certify_lp(net, g, margin=margin, workers=FLAGS.certify_lp_workers)
    row['certify_lp'] = {'seconds': cert.seconds, 'total': cert.total,
                         'workers': cert.details['interior']['workers']}
  row['cube_layers'] = row['cubes'] * row['layers']
  log(f'N={N}: {row["cubes"]} cube classes x {row["layers"]} layers, {bits} bits: interiors '
      + ', '.join(f'{w} worker(s) {v["seconds"]:.2f} s' for w, v in row['interiors'].items())
      + f'; windows {win["seconds"]:.3f} s; ball build {ball_build:.2f} s'
      + (f'; certify_lp {row["certify_lp"]["seconds"]:.2f} s' if 'certify_lp' in row else ''))
  return row


def _slope(xs, ys):
  pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
  return float(np.polyfit(*zip(*pts), 1)[0]) if len(pts) >= 2 else None


def fits(rows, workers) -> dict:
  """Log-log slopes of the interior time against N, layers and cubes x layers (last
  half of the ladder, where fixed costs matter least), and seconds per cube-layer."""
  tail = rows[len(rows) // 2:] if len(rows) >= 4 else rows
  out = {}
  for w in workers:
    t = [r['interiors'][str(w)]['seconds'] for r in tail]
    out[str(w)] = {
        'slope_vs_N': _slope([r['resolution'] for r in tail], t),
        'slope_vs_layers': _slope([r['layers'] for r in tail], t),
        'slope_vs_cube_layers': _slope([r['cube_layers'] for r in tail], t),
        'us_per_cube_layer': [1e6 * r['interiors'][str(w)]['seconds'] / r['cube_layers']
                              for r in rows]}
  if len(workers) > 1:
    a, b = str(workers[0]), str(workers[-1])
    out['speedup'] = [r['interiors'][a]['seconds'] / r['interiors'][b]['seconds']
                      for r in rows]
  return out


def figure(result, path) -> str:
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  import matplotlib.ticker  # pylint: disable=import-outside-toplevel,unused-import
  rows = result['rows']
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
  for ax, key, label in ((axes[0], 'resolution', 'resolution N = 1/delta'),
                         (axes[1], 'layers', 'depth of g (Transformer blocks)')):
    xs = [r[key] for r in rows]
    for w in result['workers']:
      ax.plot(xs, [r['interiors'][str(w)]['seconds'] for r in rows], 'o-',
              label=f'interiors, {w} worker{"s" if w > 1 else ""}'
                    + (' (in-process)' if w == 1 else ' (spawn pool above '
                       f'{executor.MIN_POOL_SECONDS:g} s of work; in-process below)'))
    ax.plot(xs, [r['windows_seconds'] for r in rows], 's--', label='windows (one box)')
    ax.plot(xs, [r['ball_build_seconds'] for r in rows], 'v:', label='ball network build')
    if all('certify_lp' in r for r in rows):
      ax.plot(xs, [r['certify_lp']['seconds'] for r in rows], 'k^-',
              label=f'certify_lp end to end ({result["certify_lp_workers"]} workers)')
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel(label)
    ax.set_ylabel('wall time (s)')
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=7)
  axes[0].set_xticks([r['resolution'] for r in rows])
  axes[0].set_xticklabels([str(r['resolution']) for r in rows])
  fig.suptitle(f'certify_lp time, {result["target"]}, d={result["d"]}, n={result["n"]}, '
               f'ties={result["ties"]} (2 shared CPU cores, load '
               f'{result["provenance"]["load_average_1min_at_start"]})', fontsize=9)
  fig.tight_layout()
  outputs.atomic_savefig(fig, path, dpi=120)
  plt.close(fig)
  return path


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  resolutions = cli.int_list('resolutions', FLAGS.resolutions, 2)
  workers = cli.int_list('workers', FLAGS.workers, 1)
  if FLAGS.target not in targets_lib.BUILTIN_TARGETS:
    raise cli.BadInput(f'--target={FLAGS.target!r}; allowed: '
                       f'{sorted(targets_lib.BUILTIN_TARGETS)}.')
  if FLAGS.margin_log2 > -2:
    raise cli.BadInput(f'--margin_log2={FLAGS.margin_log2}; it must be <= -2.')
  if FLAGS.certify_lp_workers < 0:
    raise cli.BadInput(f'--certify_lp_workers={FLAGS.certify_lp_workers}; it must be >= 0.')
  out_dir = cli.output_dir(FLAGS.output_dir, writes=(JSON_NAME, PNG_NAME))
  prov = provenance.record()
  rows = []
  for N in resolutions:
    rows.append(bench_one(N, workers, print))
  result = {'provenance': prov, 'target': FLAGS.target, 'd': FLAGS.d, 'n': FLAGS.n,
            'ties': FLAGS.ties, 'positional': FLAGS.positional, 'workers': workers,
            'certify_lp_workers': FLAGS.certify_lp_workers,
            'margin_log2': FLAGS.margin_log2, 'tolerance': FLAGS.tolerance,
            'reference': 'certify_interiors on 1 worker (in-process) vs the spawned pool; '
                         'time against cube classes x layers',
            'rows': rows, 'fits': fits(rows, workers)}
  outputs.atomic_json(os.path.join(out_dir, JSON_NAME), result, indent=1, default=str)
  figure(result, os.path.join(out_dir, PNG_NAME))
  last = rows[-1]
  summary = (f'certify_lp scaling ({FLAGS.target}, d={FLAGS.d}, n={FLAGS.n}, N='
             f'{",".join(map(str, resolutions))}): at N={last["resolution"]} ({last["cubes"]} '
             f'cube classes x {last["layers"]} layers) interiors '
             + ', '.join(f'{w} worker(s) {last["interiors"][str(w)]["seconds"]:.1f} s'
                         for w in workers)
             + f', windows {last["windows_seconds"]:.2f} s')
  provenance.append_benchmark_line(os.path.join(out_dir, LOG_NAME), summary, prov)
  print(summary)
  print(f'wrote {os.path.join(out_dir, JSON_NAME)}, {os.path.join(out_dir, PNG_NAME)}')


if __name__ == '__main__':
  cli.run(main)
