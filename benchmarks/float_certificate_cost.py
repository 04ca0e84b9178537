r"""Cost of the float certificate of the integer-id network, per cube class, against width.

``yun.single_attention.integer_ids`` proves its float deviation |fl(g) - g| with global
inequalities (the quantization's and the head's snaps, integer partial sums below 2^p, the
value layer's exact or any-order bound per id) and its interiors by evaluating the code and
value layers at every symbol and id from the parameters (prefix sums over the sorted kinks)
and looking up each class's ids. The design's claim: the cost per class stays O(n + log P)
while the width 2(P - 1) grows. For each N (token_times_mean, d=1, n=3 by default):

    build        ``integer_ids.build`` (B_n code, ids, the b-bit table)
    realize      exact parameters
    float term   ``IntegerIdsRealized.float_proof`` (binary64 or binary32)
    interiors    ``certify_interiors`` (every class, in process)
    certify_lp   the whole certificate as a user calls it (``arithmetic=`` the format)

    python benchmarks/float_certificate_cost.py --resolutions=9,22,43 \
        --output_dir=results/benchmarks

Writes float_certificate_cost.json and float_certificate_cost.png into --output_dir
(default runs/benchmarks; an existing file is refused before any work unless --overwrite)
and appends one summary line to the log benchmarks.md there.
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import os
import time
from fractions import Fraction

from absl import flags
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position

from transformer_ua import outputs, provenance  # pylint: disable=wrong-import-position
from transformer_ua.targets import functions as targets_lib  # pylint: disable=wrong-import-position
from transformer_ua.yun.bounds import certificate  # pylint: disable=wrong-import-position
from transformer_ua.yun.grid import Grid  # pylint: disable=wrong-import-position
from transformer_ua.yun.variants.integer_ids import IntegerIds  # pylint: disable=wrong-import-position

JSON_NAME = 'float_certificate_cost.json'
FIGURE_NAME = 'float_certificate_cost.png'
LOG_NAME = provenance.BENCHMARK_LOG

FLAGS = flags.FLAGS
flags.DEFINE_list('resolutions', ['4', '9', '16'], 'resolutions N')
flags.DEFINE_string('target', 'token_times_mean', 'built-in target (permutation equivariant)')
flags.DEFINE_integer('d', 1, 'token dimension')
flags.DEFINE_integer('n', 3, 'tokens')
flags.DEFINE_enum('arithmetic', 'float64', ['float64', 'float32'], 'the format certified')
flags.DEFINE_integer('margin_log2', -20, 'cube-interior margin 2^k delta per side')
cli.define_output_dir('runs/benchmarks', f'Directory of {JSON_NAME}, {FIGURE_NAME} and the log '
                      f'{LOG_NAME} (appended; --output_dir=results/benchmarks: the record).')
cli.define_overwrite()


def bench_one(N, log) -> dict:
  margin = Fraction(2) ** FLAGS.margin_log2
  t0 = time.perf_counter()
  net = IntegerIds(Grid(FLAGS.d, FLAGS.n, N)).build(FLAGS.target, number_format=FLAGS.arithmetic)
  t1 = time.perf_counter()
  g = net.realize(margin=margin)
  t2 = time.perf_counter()
  proof = g.float_proof
  t3 = time.perf_counter()
  inter = g.certify_interiors(margin)
  t4 = time.perf_counter()
  cert = certificate.certify_lp(net, g, p=2, margin=margin, arithmetic=FLAGS.arithmetic)
  size = g.size()
  classes = inter['classes']
  row = {'resolution': N, **size, 'classes': classes, 'build_seconds': t1 - t0,
         'realize_seconds': t2 - t1, 'float_term_seconds': t3 - t2,
         'interiors_seconds': t4 - t3, 'certify_lp_seconds': cert.seconds,
         'float_term_ms_per_class': 1e3 * (t3 - t2) / classes,
         'interiors_ms_per_class': 1e3 * (t4 - t3) / classes,
         'float_deviation': proof['interior'], 'total': cert.total}
  log(f'N={N}: {size["ids"]:,} ids, width {size["max_width"]:,}, {size["params"]:,} params; '
      f'build {row["build_seconds"]:.2f} s, realize {row["realize_seconds"]:.2f} s, float term '
      f'{row["float_term_seconds"]:.2f} s ({row["float_term_ms_per_class"]:.3f} ms per class), '
      f'interiors {row["interiors_seconds"]:.2f} s ({classes:,} classes, '
      f'{row["interiors_ms_per_class"]:.3f} ms each), certify_lp {cert.seconds:.2f} s')
  return row


def figure(rows, path: str) -> None:
  fig, ax = plt.subplots(figsize=(6, 4))
  w = [r['max_width'] for r in rows]
  for key, label in (('float_term_ms_per_class', 'float term'),
                     ('interiors_ms_per_class', 'interiors (exact)')):
    ax.loglog(w, [r[key] for r in rows], 'o-', label=label)
  ax.set_xlabel('widest feed-forward layer (units)')
  ax.set_ylabel('ms per cube class')
  ax.set_title(f'integer-id certificate cost, {FLAGS.target} d={FLAGS.d} n={FLAGS.n}, '
               f'{FLAGS.arithmetic}', fontsize=9)
  ax.grid(True, which='both', alpha=0.3)
  ax.legend()
  fig.tight_layout()
  with outputs.atomic_open(path, 'wb') as fh:
    fig.savefig(fh, format='png', dpi=110)
  plt.close(fig)


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  resolutions = cli.int_list('resolutions', FLAGS.resolutions, 2)
  if FLAGS.target not in targets_lib.BUILTIN_TARGETS:
    raise cli.BadInput(f'--target={FLAGS.target!r}; allowed: '
                       f'{sorted(targets_lib.BUILTIN_TARGETS)}.')
  if not -28 <= FLAGS.margin_log2 <= -2:
    raise cli.BadInput(f'--margin_log2={FLAGS.margin_log2}; it must be in [-28, -2].')
  out_dir = cli.output_dir(FLAGS.output_dir, writes=(JSON_NAME, FIGURE_NAME))
  prov = provenance.record()
  rows = [bench_one(N, print) for N in resolutions]
  result = {'provenance': prov, 'target': FLAGS.target, 'd': FLAGS.d, 'n': FLAGS.n,
            'arithmetic': FLAGS.arithmetic, 'margin_log2': FLAGS.margin_log2, 'rows': rows}
  outputs.atomic_json(os.path.join(out_dir, JSON_NAME), result, indent=1, default=str)
  figure(rows, os.path.join(out_dir, FIGURE_NAME))
  first, last = rows[0], rows[-1]
  summary = (f'integer-id float certificate ({FLAGS.target}, d={FLAGS.d}, n={FLAGS.n}, '
             f'{FLAGS.arithmetic}, N={",".join(map(str, resolutions))}): width '
             f'{first["max_width"]:,} -> {last["max_width"]:,}; float term '
             f'{first["float_term_ms_per_class"]:.3f} -> {last["float_term_ms_per_class"]:.3f} '
             f'ms per class, interiors {first["interiors_ms_per_class"]:.3f} -> '
             f'{last["interiors_ms_per_class"]:.3f} ms per class; certify_lp at N='
             f'{last["resolution"]} {last["certify_lp_seconds"]:.1f} s')
  provenance.append_benchmark_line(os.path.join(out_dir, LOG_NAME), summary, prov)
  print(summary)
  print(f'wrote {os.path.join(out_dir, JSON_NAME)}')


if __name__ == '__main__':
  cli.run(main)
