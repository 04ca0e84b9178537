r"""Theorem 2 end to end: one softmax attention layer against Yun et al.'s N^d + 1.

For each (target, d, n, N) builds, plans, realizes with exact rational params and
certifies over every cube interior (margin delta/4 per side, arb box propagation):

  * paper      ``yun.build_approximator(..., contextual='paper')``: Lemma 8's N^d + 1
               hardmax layers -> softmax(lam .), lam / epsilon / bits from
               ``yun.plan_realization``;
  * one_layer  ``yun.build_approximator(..., contextual='one_layer')``: one softmax
               head with the proved lam (``yun.single_attention.one_layer.plan``);
  * one_layer (searched lam): the power-of-two lam with the largest certified id gap
               (``yun.single_attention.one_layer.search_lam``; certified, not proved).

and writes one_layer_compare.{md,json,png} to --output_dir:

    python experiments/one_layer_compare.py --output_dir=results/yun/one_layer --overwrite
"""

from __future__ import annotations

import os
import time
import warnings

from absl import flags

from transformer_ua import cli, construction, outputs, provenance
from transformer_ua.yun import approximator
from transformer_ua.yun.bounds import distances
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.single_attention import one_layer
from transformer_ua.yun.realization import plan
from transformer_ua.yun import build_approximator

FLAGS = flags.FLAGS
cli.define_output_dir('runs/one_layer_compare', 'Directory of one_layer_compare.{md,json,png}.',
                      old_names=('outdir',))
cli.define_overwrite()
WRITES = ('one_layer_compare.json', 'one_layer_compare.md', 'one_layer_compare.png')
flags.DEFINE_string('only', '', 'semicolon-separated row labels to run (default: all)')

#: (target, d, n, N): the grids of the comparison.
CONFIGS = (
    ('token_times_mean', 1, 3, 8),
    ('attention_map', 1, 3, 8),
    ('token_times_mean', 2, 2, 4),
    ('token_times_mean', 1, 3, 16),
    ('token_times_mean', 2, 3, 4),
    ('attention_map', 2, 3, 4),
    ('token_times_mean', 2, 4, 4),
)
METHODS = ('paper', 'one_layer', 'one_layer_search')
#: The d_p exponent of the exact d_p(f_bar, g_bar) column.
P = 2
#: Cube-interior samples (margin delta/4) of the float64 realizations (measured, not
#: certified).
FLOAT_SAMPLES = 512


def _label(target, d, n, N):
  return f'{target} ({d},{n},{N})'


def _load() -> float:
  return round(os.getloadavg()[0], 2)


def run_paper(target, d, n, N) -> dict:
  load = _load()
  t0 = time.perf_counter()
  net = build_approximator(target, d=d, n=n, resolution=N, contextual='paper')
  p = plan.plan_realization(net)
  g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact')
  build_s = time.perf_counter() - t0
  cert = g.certify_interiors()
  kinds = construction.kind_counts(net.layer_counts())
  dep = g.block_counts()
  bad = distances.bad_set_measure(Grid(d, n, N))
  try:
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      gf = net.realize(lam=float(p.lam), epsilon=float(p.epsilon), dtype='float64')
    float64 = approximator.realization_error(net, gf, samples=FLOAT_SAMPLES)['max_abs_error']
  except ValueError:     # ramps below float64's ulps of t_r: no float realization
    float64 = None
  return {'method': 'paper', 'float64_sampled_error': float64, 'load_1min': load,
          'attention_layers': kinds['attention'],
          'feedforward_layers': kinds['feedforward'], 'blocks': dep['blocks'],
          'attention_on': dep['attention_on'], 'params_g_bar': net.num_params(),
          'params_g': g.num_params(), 'lam': float(p.lam), 'epsilon': float(p.epsilon),
          'bits': cert['bits'], 'build_s': build_s, 'certify_s': cert['seconds'],
          'certified_max_abs_error': cert['max_abs_error'], 'certified': cert['certified'],
          'cubes': cert['cubes'], 'bad_set_measure': float(bad),
          'dp_f_bar_g_bar': distances.dp_on_bad_set(net.target, Grid(d, n, N), p=P)}


def run_one_layer(target, d, n, N, search: bool) -> dict:
  load = _load()
  t0 = time.perf_counter()
  net = (one_layer.build(target, d=d, n=n, resolution=N, lam='search') if search else
         build_approximator(target, d=d, n=n, resolution=N, contextual='one_layer'))
  g = net.realize(dtype='exact')
  build_s = time.perf_counter() - t0
  cert = g.certify_interiors()
  dep = g.block_counts()
  kinds = construction.kind_counts(net.layer_counts())
  float64 = net.realize(dtype='float64').sampled_error(FLOAT_SAMPLES)
  return {'method': 'one_layer_search' if search else 'one_layer', 'load_1min': load,
          'float64_sampled_error': float64,
          'attention_layers': kinds['attention'], 'feedforward_layers': kinds['feedforward'],
          'blocks': dep['blocks'], 'attention_on': dep['attention_on'],
          'params_g_bar': net.num_params(), 'params_g': g.num_params(),
          'lam': float(net.lam), 'epsilon': float(g.epsilon), 'bits': cert['bits'],
          'build_s': build_s, 'certify_s': cert['seconds'],
          'certified_max_abs_error': cert['max_abs_error'], 'certified': cert['certified'],
          'cubes': cert['cubes'], 'bad_set_measure': 0.0, 'dp_f_bar_g_bar': 0.0,
          'certified_min_id_gap': float(net.min_gap),
          'proved_min_id_gap': float(net.plan.gamma)}


def write_md(path, rows, prov):
  lines = [
      '# One softmax attention layer vs Yun et al.\'s N^d + 1 (Theorem 2, certified)', '',
      provenance.markdown_header(prov),
      'Each row: g_bar compiled for the target, realized as a standard Transformer in '
      'T^{2,1,4} blocks with exact rational params (`realize(dtype=\'exact\')`), and max '
      '|g - g_bar| *certified* over every point of every cube interior (margin delta/4 per '
      'side; one cube per multiset of cells) by arb box propagation. "attention" and "FF" '
      'count the modified network\'s layers; "blocks" the realized ones ("on": blocks '
      'whose attention writes to the residual stream). "bits" is the arb precision the '
      'certificate ran at (the plan\'s). "bad set": measure of the cubes where g_bar != '
      'f_bar (the paper: repeated cells; one layer: none), with the exact d_2(f_bar, '
      'g_bar). one_layer: proved lam; one_layer_search: the power-of-two lam with the '
      'largest certified id gap. "float64": max |g - g_bar| of the same network with its '
      f'params rounded to float64, on {FLOAT_SAMPLES} sampled cube-interior points '
      '(measured, not certified; "refused": ramps below float64\'s ulps). "load" is the '
      '1-minute load average when the row started (2 cores, shared).', '',
      '| configuration | method | attention (on) | FF | blocks | params g | lam | epsilon | '
      'bits | min id gap | build s | certify s | certified max abs error | bad set | '
      'd_2(f_bar, g_bar) | float64 | load |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
  for r in rows:
    gap = r.get('certified_min_id_gap')
    lines.append(
        f"| {r['label']} | {r['method']} | {r['attention_layers']} ({r['attention_on']}) | "
        f"{r['feedforward_layers']} | {r['blocks']} | {r['params_g']:,} | {r['lam']:.3g} | "
        f"{r['epsilon']:.3g} | {r['bits']} | {'-' if gap is None else f'{gap:.3g}'} | "
        f"{r['build_s']:.1f} | {r['certify_s']:.1f} | {r['certified_max_abs_error']:.3g}"
        f"{'' if r['certified'] else ' (NOT certified)'} | {r['bad_set_measure']:.3g} | "
        f"{r['dp_f_bar_g_bar']:.3g} | {_float_cell(r.get('float64_sampled_error'))} | "
        f"{r['load_1min']} |")
  lines += ['', 'Figure: `one_layer_compare.png` (attention layers, realized blocks, bits and '
            'certify seconds per configuration and method).', '']
  outputs.atomic_write(path, '\n'.join(lines))


def _float_cell(err) -> str:
  return 'refused' if err is None else f'{err:.3g}'


def write_png(path, rows):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  labels = list(dict.fromkeys(r['label'] for r in rows))
  fig, axes = plt.subplots(1, 4, figsize=(18, 4.5))
  width = 0.8 / len(METHODS)
  for ax, key, title, log in ((axes[0], 'attention_on', 'attention layers (writing)', True),
                              (axes[1], 'blocks', 'realized blocks', True),
                              (axes[2], 'bits', 'certificate bits', False),
                              (axes[3], 'certify_s', 'certify seconds (shared machine)', True)):
    for m, method in enumerate(METHODS):
      vals = [next((r[key] for r in rows if r['label'] == lab and r['method'] == method),
                   np.nan) for lab in labels]
      ax.bar(np.arange(len(labels)) + (m - 1) * width, vals, width, label=method)
    ax.set_xticks(np.arange(len(labels)))
    ax.set_xticklabels(labels, rotation=40, ha='right', fontsize=7)
    ax.set_title(title)
    if log:
      ax.set_yscale('log')
  axes[0].legend(fontsize=7)
  fig.tight_layout()
  outputs.atomic_savefig(fig, path, dpi=120)


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}')
  labels = {_label(*c) for c in CONFIGS}
  only = [s.strip() for s in FLAGS.only.split(';') if s.strip()]
  for s in only:
    if s not in labels:
      cli.fail(f'--only: unknown label {s!r}; allowed: {", ".join(sorted(labels))}.')
  outdir = cli.output_dir(FLAGS.output_dir, writes=WRITES)   # before the work
  prov = provenance.record()
  rows = []
  for cfg in CONFIGS:
    label = _label(*cfg)
    if only and label not in only:
      continue
    for method in METHODS:
      row = (run_paper(*cfg) if method == 'paper' else
             run_one_layer(*cfg, search=method == 'one_layer_search'))
      row.update(label=label, target=cfg[0], d=cfg[1], n=cfg[2], resolution=cfg[3])
      print(f"{label} {method}: {row['blocks']} blocks ({row['attention_on']} attention on), "
            f"{row['bits']} bits, build {row['build_s']:.1f} s, certify "
            f"{row['certify_s']:.1f} s, certified max |g - g_bar| "
            f"{row['certified_max_abs_error']:.3g} ({row['certified']}), load "
            f"{row['load_1min']}", flush=True)
      rows.append(row)
      outputs.atomic_json(os.path.join(outdir, WRITES[0]), {'provenance': prov, 'rows': rows},
                          indent=2, default=str)
  write_md(os.path.join(outdir, WRITES[1]), rows, prov)
  write_png(os.path.join(outdir, WRITES[2]), rows)


if __name__ == '__main__':
  cli.run(main)
