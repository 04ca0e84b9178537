r"""Size and certify time of the shallow-wide one-layer network against N.

What it measures: ``yun.single_attention.one_layer_wide`` keeps its depth constant (2 +
ceil(d/2) blocks) while the width 4P grows with the P ids, and its certificate is
designed to cost O(attention + log width) per cube class (``exact.wide_ball``), so that
the interiors' time grows like the number of cube classes, not classes x width. No run
of this script is recorded in results/benchmarks, so that scaling is the design's
expectation, not a measured claim; the size law's certify seconds
(results/yun/size_law/) are the recorded times of these networks. For each N (token_times_mean by default, d=1,
n=3), g is realized with the output clamp at margin 2^margin_log2, then:

    build          ``one_layer_wide.build`` (plan, certified id table, values, edges)
    realize        exact rational params
    ball build     ``WideRealized.ball_network`` (units sorted, exact prefix sums)
    interiors      ``certify_interiors`` (serial, in-process)
    windows        ``certificate.window_bound`` (one box, the whole unit cube)
    certify_lp     the whole certificate, as a user calls it (it repeats the interiors)

    python benchmarks/wide_certify_scaling.py --resolutions=4,8,16,32,40 \
        --output_dir=results/benchmarks

Writes wide_certify_scaling.json into --output_dir (default runs/benchmarks; an
existing file is refused before any work unless --overwrite) and appends one summary
line to the log benchmarks.md there.
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import os
import time
from fractions import Fraction

from absl import flags

from transformer_ua import outputs, provenance
from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun.bounds import certificate
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.single_attention import one_layer_wide
from transformer_ua.yun.variants.one_layer_wide import OneLayerWide
from transformer_ua.yun.variants.positional_wide import PositionalWide

JSON_NAME = 'wide_certify_scaling.json'
LOG_NAME = provenance.BENCHMARK_LOG

FLAGS = flags.FLAGS
flags.DEFINE_list('resolutions', ['4', '8', '16', '32'], 'resolutions N')
flags.DEFINE_string('target', 'token_times_mean', 'built-in target')
flags.DEFINE_bool('positional', False, 'Theorem 3 (every cube) instead of Theorem 2')
flags.DEFINE_integer('d', 1, 'token dimension')
flags.DEFINE_integer('n', 3, 'tokens')
flags.DEFINE_integer('margin_log2', -20, 'cube-interior margin 2^k delta per side')
cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME} and the log {LOG_NAME} '
                      '(appended; --output_dir=results/benchmarks: the record).')
cli.define_overwrite()


def bench_one(N, log) -> dict:
  margin = Fraction(2) ** FLAGS.margin_log2
  t0 = time.perf_counter()
  variant = (PositionalWide if FLAGS.positional else OneLayerWide)(Grid(FLAGS.d, FLAGS.n, N))
  net = variant.build(FLAGS.target)
  t1 = time.perf_counter()
  g = net.realize(margin=margin)
  t2 = time.perf_counter()
  bits = g.planned_bits()
  g.ball_network(bits)
  t3 = time.perf_counter()
  inter = g.certify_interiors(margin, bits)
  win = certificate.window_bound(net, g, bits)
  cert = certificate.certify_lp(net, g, p=2, margin=margin)
  size = g.size()
  if size != one_layer_wide.predicted_size(FLAGS.d, FLAGS.n, N, positional=FLAGS.positional):
    raise RuntimeError(f'N={N}: the built network {size} is not predicted_size\'s.')
  row = {'resolution': N, **size, 'bits': bits, 'build_seconds': t1 - t0,
         'realize_seconds': t2 - t1, 'ball_build_seconds': t3 - t2,
         'cubes': inter['cubes'], 'interiors_seconds': inter['seconds'],
         'ms_per_cube': 1e3 * inter['seconds'] / inter['cubes'],
         'interior_sup': inter['max_abs_error'], 'windows_seconds': win['seconds'],
         'certify_lp_seconds': cert.seconds, 'total': cert.total, 'terms': cert.terms}
  log(f'N={N}: {size["ids"]:,} ids, width {size["max_width"]:,}, {size["params"]:,} params, '
      f'{size["blocks"]} blocks, {bits} bits; build {row["build_seconds"]:.1f} s, realize '
      f'{row["realize_seconds"]:.1f} s, ball build {row["ball_build_seconds"]:.1f} s; '
      f'interiors {inter["seconds"]:.1f} s ({inter["cubes"]} classes, '
      f'{row["ms_per_cube"]:.2f} ms each), windows {win["seconds"]:.1f} s, certify_lp '
      f'{cert.seconds:.1f} s, d_p <= {cert.total:.4g}')
  return row


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  resolutions = cli.int_list('resolutions', FLAGS.resolutions, 2)
  if FLAGS.target not in targets_lib.BUILTIN_TARGETS:
    raise cli.BadInput(f'--target={FLAGS.target!r}; allowed: '
                       f'{sorted(targets_lib.BUILTIN_TARGETS)}.')
  if not -28 <= FLAGS.margin_log2 <= -2:
    raise cli.BadInput(f'--margin_log2={FLAGS.margin_log2}; it must be in [-28, -2].')
  out_dir = cli.output_dir(FLAGS.output_dir, writes=(JSON_NAME,))
  prov = provenance.record()
  rows = [bench_one(N, print) for N in resolutions]
  result = {'provenance': prov, 'target': FLAGS.target, 'd': FLAGS.d, 'n': FLAGS.n,
            'positional': FLAGS.positional, 'margin_log2': FLAGS.margin_log2, 'rows': rows}
  outputs.atomic_json(os.path.join(out_dir, JSON_NAME), result, indent=1, default=str)
  last = rows[-1]
  summary = (f'wide one-layer certify ({FLAGS.target}, d={FLAGS.d}, n={FLAGS.n}, N='
             f'{",".join(map(str, resolutions))}): at N={last["resolution"]} width '
             f'{last["max_width"]:,}, {last["blocks"]} blocks, interiors '
             f'{last["interiors_seconds"]:.1f} s ({last["ms_per_cube"]:.2f} ms per class), '
             f'certify_lp {last["certify_lp_seconds"]:.1f} s')
  provenance.append_benchmark_line(os.path.join(out_dir, LOG_NAME), summary, prov)
  print(summary)
  print(f'wrote {os.path.join(out_dir, JSON_NAME)}')


if __name__ == '__main__':
  cli.run(main)
