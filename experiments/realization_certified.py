r"""Lemma 6 at scale: planned, exact-parameter, certified standard Transformers.

For each configuration (target, Theorem 2 or 3, d, n, N): build g_bar, plan lam,
epsilon and bits from the construction's exact bounds (``yun.realization.plan``), realize g with
exact rational params, certify max |g - g_bar| over every cube interior (margin
delta/4 per side) by arb box propagation, search the smallest working precision that
still certifies, and check whether float64 at the planned lam, epsilon reproduces
g_bar on sampled interiors (measured, for comparison). Writes
realization_certified.{md,json,png} to --output_dir (default: a run directory, never
results/ unless asked).

    python experiments/realization_certified.py --output_dir=results/yun/realization
"""

from __future__ import annotations

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

import os
import sys
import time
import warnings

from absl import flags
import numpy as np

from transformer_ua import outputs, provenance
from transformer_ua.yun import approximator, build_approximator
from transformer_ua.yun.realization import certified_eval, plan

FLAGS = flags.FLAGS
cli.define_output_dir('runs/realization_certified', 'Directory of '
                      'realization_certified.{md,json,png}.')
flags.DEFINE_bool('search', True, 'search the smallest certifying bits')
flags.DEFINE_string('only', '', 'comma-separated row labels to run (default: all)')
cli.define_overwrite()

# (label, target, positional, d, n, N, ties): Theorem 2 on two equivariant targets,
# Theorem 3, and Theorem 2 with the tie-complete contextual mapping (no bad set: every
# multiset of cells, repeats included, is its own class).
CONFIGS = (
    ('T2 token_times_mean (1,3,8)', 'token_times_mean', False, 1, 3, 8, 'paper'),
    ('T2 token_times_mean (2,2,4)', 'token_times_mean', False, 2, 2, 4, 'paper'),
    ('T2 token_times_mean (1,3,16)', 'token_times_mean', False, 1, 3, 16, 'paper'),
    ('T2 attention_map (1,3,8)', 'attention_map', False, 1, 3, 8, 'paper'),
    ('T2 attention_map (2,2,4)', 'attention_map', False, 2, 2, 4, 'paper'),
    ('T3 prefix_mean (1,3,4)', 'prefix_mean', True, 1, 3, 4, 'paper'),
    ('T2 ties=complete token_times_mean (1,3,2)', 'token_times_mean', False, 1, 3, 2,
     'complete'),
    ('T2 ties=complete token_times_mean (1,3,4)', 'token_times_mean', False, 1, 3, 4,
     'complete'),
    ('T2 ties=complete token_times_mean (1,3,8)', 'token_times_mean', False, 1, 3, 8,
     'complete'),
    ('T2 ties=complete attention_map (1,3,8)', 'attention_map', False, 1, 3, 8, 'complete'),
    ('T2 ties=complete token_times_mean (2,2,4)', 'token_times_mean', False, 2, 2, 4,
     'complete'),
)
#: Interior samples for the float64 comparison.
FLOAT_SAMPLES = 512


def run_config(label, target, positional, d, n, N, ties, search, log):
  t0 = time.perf_counter()
  net = build_approximator(target, d=d, n=n, resolution=N, positional=positional, ties=ties)
  build_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  p = plan.plan_realization(net)
  plan_s = time.perf_counter() - t0
  g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact')
  cert = g.certify_interiors()
  row = {'label': label, 'target': target, 'theorem': 3 if positional else 2, 'd': d, 'n': n,
         'resolution': N, 'ties': ties, 'layers': sum(s.depth for s in g.segments),
         't_r': float(net.g_bar.contextual.t_r), 'plan': p.as_dict(), 'plan_s': plan_s,
         'build_s': build_s, 'certified': cert}
  if search:
    t0 = time.perf_counter()
    row['min_bits'] = certified_eval.min_certifying_bits(g)
    row['min_bits']['seconds'] = time.perf_counter() - t0
  tol = approximator.REPRODUCE_RTOL * max(1.0, float(np.max(np.abs(net.values))))
  row['float64'] = {'bits_needed_at_tolerance': plan.plan_realization(net, tol).bits,
                    'tolerance': tol}
  try:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always', plan.FloatRealizationWarning)
      gf = net.realize(lam=float(p.lam), epsilon=float(p.epsilon), dtype='float64')
  except ValueError as e:  # epsilon below float64's ulps of t_r: no float realization
    row['float64'].update(refused=str(e), max_abs_error_sampled=None, reproduces=False,
                          warned=False)
    float_msg = 'float64 refused (ramps below the ulps of t_r)'
  else:
    rep = approximator.realization_error(net, gf, samples=FLOAT_SAMPLES)
    row['float64'].update(max_abs_error_sampled=rep['max_abs_error'],
                          reproduces=rep['reproduces'], warned=bool(caught))
    float_msg = (f'float64 sampled error {rep["max_abs_error"]:.3g} (reproduces '
                 f'{rep["reproduces"]})')
  mb = row.get('min_bits', {}).get('bits')
  log(f'{label}: {row["layers"]} blocks, t_r={row["t_r"]:.3g}; {p.describe()}; certified '
      f'max |g - g_bar| <= {cert["max_abs_error"]:.3g} over {cert["cubes"]} cube interiors '
      f'({cert["certified"]}) in {cert["seconds"]:.1f} s; smallest certifying bits {mb}; '
      f'{float_msg}')
  return row


def _float_cell(f) -> str:
  if f.get('refused'):
    return 'refused (epsilon below 4 ulps of t_r)'
  return (f'{f["max_abs_error_sampled"]:.3g} '
          f'({"reproduces" if f["reproduces"] else "does not reproduce"})')


def write_md(path, rows, prov):
  lines = ['# Lemma 6 at scale: certified standard Transformers', '',
           provenance.markdown_header(prov),
           'Each row: g_bar compiled for the target, lam, epsilon and bits planned from the '
           "construction's exact bounds (`yun.plan_realization`, tolerance 1e-6), g realized "
           "with exact rational params (`realize(dtype='exact')`), and max |g - g_bar| "
           '*certified* over every point of every cube interior (each cube shrunk by delta/4 '
           'per side; Theorem 2: one cube per multiset of cells, by equivariance; Theorem 3: '
           'every cube) by arb box propagation (`certify_interiors`). "min bits" is the '
           'smallest arb precision at which the certificate still holds (bisection); '
           '"plan bits" is what a literal op-by-op evaluation needs by the plan\'s bound. '
           'The float64 column is a *sampled* check of the float realization at the same '
           f'lam, epsilon ({FLOAT_SAMPLES} interior points, tolerance 1e-4 max(1, max|A|)). '
           "Rows marked ties=complete use the tie-complete contextual mapping "
           "(`yun.stages.contextual_ties`: offset layer, sweep with shift N^d + 2n, global min "
           'head, max + counting heads): its cubes are *all* multisets of cells, repeated '
           'cells included, and g_bar = f_bar on each of them (no bad set). Its counting '
           'head ties every score exactly, so softmax averages exactly whatever lam.',
           '',
           '| configuration | blocks | t_r | lam | epsilon | plan bits | min bits | certified '
           'max abs error | cubes | certify s | search s | float64 sampled error |',
           '|---|---|---|---|---|---|---|---|---|---|---|---|']
  for r in rows:
    c, p = r['certified'], r['plan']
    mb = r.get('min_bits', {})
    lines.append(
        f'| {r["label"]} | {r["layers"]} | {r["t_r"]:.3g} | 2^{np.log2(p["lam"]):.0f} | '
        f'2^{np.log2(p["epsilon"]):.0f} | {p["bits"]} | {mb.get("bits", "-")} | '
        f'{c["max_abs_error"]:.3g} ({"certified" if c["certified"] else "NOT certified"}) | '
        f'{c["cubes"]} | {c["seconds"]:.1f} | '
        f'{mb.get("seconds", float("nan")):.1f} | '
        f'{_float_cell(r["float64"])} |')
  lines += ['', 'Figure: `realization_certified.png` (bits against t_r; float32 and float64 '
            'significands drawn in).', '']
  outputs.atomic_write(path, '\n'.join(lines) + '\n')


def write_png(path, rows):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(6.5, 4.2))
  tr = [r['t_r'] for r in rows]
  ax.scatter(tr, [r['plan']['bits'] for r in rows], marker='o',
             label='plan: literal evaluation (tolerance 1e-6)')
  ax.scatter(tr, [r['float64']['bits_needed_at_tolerance'] for r in rows], marker='s',
             label='plan: literal evaluation (tolerance 1e-4)')
  mb = [(r['t_r'], r['min_bits']['bits']) for r in rows if r.get('min_bits', {}).get('bits')]
  if mb:
    ax.scatter(*zip(*mb), marker='^', label='smallest bits that certify (arb, exact pieces)')
  ax.axhline(53, color='k', ls='--', lw=1, label='float64 significand (53)')
  ax.axhline(24, color='gray', ls=':', lw=1, label='float32 significand (24)')
  ax.set_xscale('log')
  ax.set_xlabel('t_r (largest id of the contextual mapping)')
  ax.set_ylabel('bits')
  ax.legend(fontsize=7)
  ax.set_title('Working precision for the realized standard Transformer', fontsize=9)
  fig.tight_layout()
  outputs.atomic_savefig(fig, path, dpi=130)


def main(argv):
  if len(argv) > 1:
    raise cli.BadInput(f'unexpected arguments: {argv[1:]}')
  only = [s.strip() for s in FLAGS.only.split(',') if s.strip()]
  unknown = [o for o in only if not any(o in cfg[0] for cfg in CONFIGS)]
  if unknown:
    raise cli.BadInput(f'--only: {unknown[0]!r} is in no row label; allowed: parts of '
                       + '; '.join(repr(cfg[0]) for cfg in CONFIGS))
  cli.output_dir(FLAGS.output_dir, writes=[f'realization_certified.{x}'
                                                  for x in ('json', 'md', 'png')])
  prov = provenance.record(' '.join(['python'] + sys.argv))
  rows = []
  for cfg in CONFIGS:
    if only and not any(o in cfg[0] for o in only):
      continue
    rows.append(run_config(*cfg, search=FLAGS.search, log=print))
    outputs.atomic_json(os.path.join(FLAGS.output_dir, 'realization_certified.json'),
                        {'provenance': prov, 'rows': rows}, indent=1, default=str)
  write_md(os.path.join(FLAGS.output_dir, 'realization_certified.md'), rows, prov)
  write_png(os.path.join(FLAGS.output_dir, 'realization_certified.png'), rows)
  print(f'wrote {FLAGS.output_dir}/realization_certified.{{md,json,png}}')


if __name__ == '__main__':
  cli.run(main)
