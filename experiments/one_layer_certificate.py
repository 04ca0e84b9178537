r"""Whole-domain certificates of d_p(f, g): one softmax attention layer against the paper's.

For each (target, d, n, N) builds both Theorem 2 networks, realizes each as a standard
Transformer in T^{2,1,4} blocks with exact rational params and the output clamp
(``realize(..., clamp=True)``), and runs ``yun.certify_lp`` on it: a proved upper bound
on d_p(f, g) over the whole unit cube, as the sum of d_p(f, f_bar) (Lipschitz),
d_p(f_bar, g_bar) (exact, over the grid classes) and d_p(g_bar, g) (cube interiors by box
propagation + ramp windows by one enclosure of g on [0, 1]^{n x d}).

  * paper      ``yun.build_approximator(..., contextual='paper')`` (Lemma 8, N^d + 1
               attention layers; its bad set enters d_p(f_bar, g_bar)); lam, ramp and
               bits from ``yun.plan_realization`` at the margin;
  * one_layer  ``yun.build_approximator(..., contextual='one_layer')`` (one softmax head,
               the proved lam); ramps from its own planner at the margin.

Both are certified at cube-interior margin 2^-margin_log2 (fraction of delta per side),
and write one_layer_certificate.{json,md} to --output_dir:

    python experiments/one_layer_certificate.py --output_dir=results/yun/one_layer
"""

from __future__ import annotations

import os
import time
from fractions import Fraction

from absl import flags

from transformer_ua import cli, executor, outputs, provenance
from transformer_ua.yun import build_approximator
from transformer_ua.yun.bounds import certificate
from transformer_ua.yun.realization import plan

FLAGS = flags.FLAGS
cli.define_output_dir('runs/one_layer_certificate', 'Directory of '
                      'one_layer_certificate.{json,md}.')
flags.DEFINE_string('configs', 'token_times_mean:1,3,8;token_times_mean:1,3,16',
                    'semicolon-separated target:d,n,N')
flags.DEFINE_integer('margin_log2', 20, 'cube-interior margin 2^-margin_log2 (of delta)')
flags.DEFINE_float('p', 2.0, 'exponent of d_p (>= 1)')
flags.DEFINE_integer('workers', 1, 'processes for the cube interiors')
cli.define_overwrite()
executor.define_flags()

METHODS = ('paper', 'one_layer')
WRITES = ('one_layer_certificate.json', 'one_layer_certificate.md')


def _parse_configs(text: str) -> list:
  out = []
  for item in (s.strip() for s in text.split(';')):
    if not item:
      continue
    try:
      target, dims = item.split(':')
      d, n, N = (int(v) for v in dims.split(','))
    except ValueError:
      cli.fail(f'--configs: {item!r} is not target:d,n,N (e.g. token_times_mean:1,3,8).')
    out.append((target, d, n, N))
  if not out:
    cli.fail('--configs is empty; give at least one target:d,n,N.')
  return out


def run(method: str, target: str, d: int, n: int, N: int, margin: Fraction, p: float,
        workers) -> dict:
  load = round(os.getloadavg()[0], 2)
  t0 = time.perf_counter()
  net = build_approximator(target, d=d, n=n, resolution=N, contextual=method)
  if method == 'paper':
    planned = plan.plan_realization(net, tolerance=1e-6, margin=float(margin))
    g = net.realize(lam=planned.lam, epsilon=planned.epsilon, dtype='exact', clamp=True)
  else:
    g = net.realize(dtype='exact', margin=margin, clamp=True)
  build_s = time.perf_counter() - t0
  cert = certificate.certify_lp(net, g, p, margin=margin, workers=workers)
  dep = g.block_counts()
  return {'method': method, 'target': target, 'd': d, 'n': n, 'resolution': N,
          'attention_layers': dep['attention_on'], 'blocks': dep['blocks'],
          'params_g': g.num_params(), 'bits': cert.bits, 'lam': cert.lam,
          'epsilon': cert.epsilon, 'margin': cert.margin, 'terms': cert.terms,
          'total': cert.total, 'interior_sup': cert.interior_sup,
          'window_sup': cert.window_sup, 'window_measure': cert.window_measure,
          'output_range': cert.details['output_range'],
          'fbar_gbar_cubes_differing': cert.details['fbar_gbar']['cubes_differing'],
          'cubes': cert.details['interior']['cubes'], 'build_s': build_s,
          'certify_s': cert.seconds, 'load_1min': load, 'describe': cert.describe()}


def write_md(path: str, rows: list, prov: dict) -> None:
  lines = [
      '# Whole-domain certificate of d_p(f, g): one attention layer vs the paper', '',
      provenance.markdown_header(prov),
      'Each row: g realized as a standard Transformer (T^{2,1,4} blocks, exact rational '
      'params, output clamp) and `yun.certify_lp`: a proved upper bound on d_p(f, g) over '
      'the whole unit cube, p = 2, as d_p(f, f_bar) + d_p(f_bar, g_bar) + d_p(g_bar, g). '
      '"attention": blocks whose attention writes to the residual stream; "bits": the arb '
      'precision of the certificate (the plan\'s); "margin": cube interiors shrunk by '
      'margin delta per side, the rest (the windows, of volume "windows") bounded by one '
      'enclosure of g on the whole cube; "window sup" <= the range of f_bar by the clamp. '
      'Seconds are certify_lp\'s on a shared 2-core machine ("load": 1-minute load when '
      'the row started).', '',
      '| configuration | method | attention | blocks | bits | margin | d(f, f_bar) | '
      'd(f_bar, g_bar) | d(g_bar, g) | total | interior sup | window sup | windows | '
      'build s | certify s | load |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
  for r in rows:
    t = r['terms']
    lines.append(
        f"| {r['target']} ({r['d']},{r['n']},{r['resolution']}) | {r['method']} | "
        f"{r['attention_layers']} | {r['blocks']} | {r['bits']} | 2^{r['margin_log2']} | "
        f"{t['f_fbar']:.4g} | {t['fbar_gbar']:.4g} | {t['gbar_g']:.4g} | {r['total']:.4g} | "
        f"{r['interior_sup']:.3g} | {r['window_sup']:.3g} | {r['window_measure']:.3g} | "
        f"{r['build_s']:.1f} | {r['certify_s']:.1f} | {r['load_1min']} |")
  lines.append('')
  outputs.atomic_write(path, '\n'.join(lines))


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}')
  configs = _parse_configs(FLAGS.configs)
  if FLAGS.margin_log2 < 2:
    cli.fail(f'--margin_log2={FLAGS.margin_log2}; it must be >= 2 (margin <= 1/4).')
  if FLAGS.workers < 1:
    cli.fail(f'--workers={FLAGS.workers}; it must be >= 1.')
  if not FLAGS.p >= 1:
    cli.fail(f'--p={FLAGS.p}; it must be >= 1.')
  outdir = cli.output_dir(FLAGS.output_dir, writes=WRITES)
  try:
    workers = executor.from_flags(FLAGS.workers, FLAGS.dask_scheduler, FLAGS.state_dir,
                                  ('--overwrite',))
  except ValueError as e:
    cli.fail(str(e))
  margin = Fraction(1, 2 ** FLAGS.margin_log2)
  prov = provenance.record()
  rows = []
  for cfg in configs:
    for method in METHODS:
      try:
        row = run(method, *cfg, margin=margin, p=FLAGS.p, workers=workers)
      except ValueError as e:
        cli.fail(f'{cfg[0]} {cfg[1:]} {method}: {e}')
      row['margin_log2'] = -FLAGS.margin_log2
      print(f"{cfg} {method}: {row['describe']}", flush=True)
      rows.append(row)
      outputs.atomic_json(os.path.join(outdir, WRITES[0]),
                          {'provenance': prov, 'rows': rows}, indent=2, default=str)
  write_md(os.path.join(outdir, WRITES[1]), rows, prov)


if __name__ == '__main__':
  cli.run(main)
