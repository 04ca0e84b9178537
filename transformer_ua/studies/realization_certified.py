r"""Lemma 6 at scale: planned, exact-parameter, certified standard Transformers.

For each configuration of ``CONFIGS`` (target, Theorem 2 or 3, d, n, N, ties):

  g_bar = yun.build_approximator(target, d, n, N, positional, ties)
  (lam, epsilon, bits) = yun.realization.plan.plan_realization(g_bar)   (tolerance 1e-6)
  g = g_bar.realize(lam, epsilon, dtype='exact')          (exact rational params)
  sup over every cube interior (delta/4 per side) of |g - g_bar|  <=  certified bound
                                                          (arb box propagation)

then (``search``) the smallest working precision that still certifies
(``yun.realization.certified_eval.min_certifying_bits``), and whether float64 at the
planned lam, epsilon reproduces g_bar on ``FLOAT_SAMPLES`` sampled interiors (measured,
for comparison; refused where epsilon falls below float64's ulps of t_r). ``study``
writes realization_certified.json after every row, then the report
(``reports.realization_certified``: .md and .png).
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np

from transformer_ua import outputs, provenance
from transformer_ua.reports import realization_certified as report
from transformer_ua.yun import build_approximator
from transformer_ua.yun.realization import certified_eval, plan
from transformer_ua.yun.bounds import decomposition

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
#: The files ``study`` writes: the rows, the table, the figure.
WRITES = tuple(f'realization_certified.{x}' for x in ('json', 'md', 'png'))


def select(only: str) -> list:
  """The configurations whose label contains one of ``only``'s ','-separated parts
  (empty: all of them). Raises ValueError (one line) for a part in no label."""
  parts = [s.strip() for s in only.split(',') if s.strip()]
  unknown = [o for o in parts if not any(o in cfg[0] for cfg in CONFIGS)]
  if unknown:
    raise ValueError(f'--only: {unknown[0]!r} is in no row label; allowed: parts of '
                     + '; '.join(repr(cfg[0]) for cfg in CONFIGS))
  return [cfg for cfg in CONFIGS if not parts or any(o in cfg[0] for o in parts)]


def run_config(label, target, positional, d, n, N, ties, search, log):
  """One row: build, plan, realize exactly, certify; the bits search; the float64 check."""
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
  tol = plan.REPRODUCE_RTOL * max(1.0, float(np.max(np.abs(net.values))))
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
    rep = decomposition.realization_error(net, gf, samples=FLOAT_SAMPLES)
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


def study(configs, output_dir: str, *, search: bool = True, command: str | None = None,
          log=print) -> list:
  """Every configuration in turn; writes ``WRITES`` into ``output_dir`` (the JSON after
  each row). ``command``: the provenance's (default: this process's). Returns the rows."""
  prov = provenance.record(command)
  rows = []
  for cfg in configs:
    rows.append(run_config(*cfg, search=search, log=log))
    outputs.atomic_json(os.path.join(output_dir, WRITES[0]),
                        {'provenance': prov, 'rows': rows}, indent=1, default=str)
  report.write_md(os.path.join(output_dir, WRITES[1]), rows, prov, FLOAT_SAMPLES)
  report.write_png(os.path.join(output_dir, WRITES[2]), rows)
  log(f'wrote {output_dir}/realization_certified.{{md,json,png}}')
  return rows
