r"""Theorem 2 end to end: one softmax attention layer against Yun et al.'s N^d + 1.

For each (target, d, n, N) of ``CONFIGS``, every method of ``METHODS`` builds, plans,
realizes with exact rational params and certifies over every cube interior (margin
delta/4 per side, arb box propagation):

  * paper      ``yun.build_approximator(..., contextual='paper')``: Lemma 8's N^d + 1
               hardmax layers -> softmax(lam .), lam / epsilon / bits from
               ``yun.realization.plan.plan_realization``; its bad set (repeated cells)
               enters d_2(f_bar, g_bar);
  * one_layer  ``yun.build_approximator(..., contextual='one_layer')``: one softmax
               head with the proved lam (``yun.single_attention.one_layer_ids.plan``);
  * one_layer_search: the power-of-two lam with the largest certified id gap
               (``yun.single_attention.one_layer.build(..., lam='search')``; certified,
               not proved).

Each row also measures the float64 realization on ``FLOAT_SAMPLES`` cube-interior points
(max |g - g_bar|, not certified; None where the ramps fall below float64's ulps).
``study`` writes one_layer_compare.json after every row, then the report
(``reports.one_layer_compare``: .md and .png).
"""

from __future__ import annotations

import os
import time
import warnings

from transformer_ua import construction, outputs, provenance
from transformer_ua.reports import one_layer_compare as report
from transformer_ua.yun import build_approximator
from transformer_ua.yun.bounds import bad_set
from transformer_ua.yun.bounds import decomposition
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.realization import plan
from transformer_ua.yun.variants.one_layer import OneLayer

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
#: The files ``study`` writes: the rows, the table, the figure.
WRITES = ('one_layer_compare.json', 'one_layer_compare.md', 'one_layer_compare.png')


def label(target: str, d: int, n: int, N: int) -> str:
  return f'{target} ({d},{n},{N})'


def select(only: str) -> list:
  """The configurations named in ``only`` (';'-separated labels; empty: all of them).

  Raises ValueError (one line) for a label that is not one of ``CONFIGS``."""
  labels = {label(*c) for c in CONFIGS}
  names = [s.strip() for s in only.split(';') if s.strip()]
  for s in names:
    if s not in labels:
      raise ValueError(f'--only: unknown label {s!r}; allowed: {", ".join(sorted(labels))}.')
  return [c for c in CONFIGS if not names or label(*c) in names]


def run_paper(target, d, n, N) -> dict:
  """One row of the paper's construction (N^d + 1 attention layers), certified."""
  load = provenance.load_1min()
  t0 = time.perf_counter()
  net = build_approximator(target, d=d, n=n, resolution=N, contextual='paper')
  p = plan.plan_realization(net)
  g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact')
  build_s = time.perf_counter() - t0
  cert = g.certify_interiors()
  kinds = construction.kind_counts(net.layer_counts())
  dep = g.block_counts()
  bad = bad_set.bad_set_measure(Grid(d, n, N))
  try:
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      gf = net.realize(lam=float(p.lam), epsilon=float(p.epsilon), dtype='float64')
    float64 = decomposition.realization_error(net, gf, samples=FLOAT_SAMPLES)['max_abs_error']
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
          'dp_f_bar_g_bar': bad_set.dp_on_bad_set(net.target, Grid(d, n, N), p=P)}


def run_one_layer(target, d, n, N, search: bool) -> dict:
  """One row of the one-layer map (proved lam, or the searched one), certified."""
  load = provenance.load_1min()
  t0 = time.perf_counter()
  variant = OneLayer(Grid(d, n, N))
  net = variant.build(target, lam='search' if search else None)
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


def _print(line: str) -> None:
  print(line, flush=True)


def study(configs, outdir: str, log=_print) -> list:
  """Every method on every configuration; writes ``WRITES`` into ``outdir`` (the JSON
  after each row, so an interrupted study keeps what it certified). Returns the rows."""
  prov = provenance.record()
  rows = []
  for cfg in configs:
    name = label(*cfg)
    for method in METHODS:
      row = (run_paper(*cfg) if method == 'paper' else
             run_one_layer(*cfg, search=method == 'one_layer_search'))
      row.update(label=name, target=cfg[0], d=cfg[1], n=cfg[2], resolution=cfg[3])
      log(f"{name} {method}: {row['blocks']} blocks ({row['attention_on']} attention on), "
          f"{row['bits']} bits, build {row['build_s']:.1f} s, certify "
          f"{row['certify_s']:.1f} s, certified max |g - g_bar| "
          f"{row['certified_max_abs_error']:.3g} ({row['certified']}), load "
          f"{row['load_1min']}")
      rows.append(row)
      outputs.atomic_json(os.path.join(outdir, WRITES[0]), {'provenance': prov, 'rows': rows},
                          indent=2, default=str)
  report.write_md(os.path.join(outdir, WRITES[1]), rows, prov, FLOAT_SAMPLES)
  report.write_png(os.path.join(outdir, WRITES[2]), rows, METHODS)
  return rows
