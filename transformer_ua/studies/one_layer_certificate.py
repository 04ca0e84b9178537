r"""Whole-domain certificates of d_p(f, g): one softmax attention layer against the paper's.

For each (target, d, n, N) and each method of ``METHODS``, build the Theorem 2 network,
realize it as a standard Transformer in T^{2,1,4} blocks with exact rational params and
the output clamp (``realize(..., clamp=True)``), and run
``yun.bounds.certificate.certify_lp`` on it: a proved upper bound over the whole unit cube

  d_p(f, g) <= d_p(f, f_bar)       (Lipschitz, or exact for a polynomial target)
             + d_p(f_bar, g_bar)   (exact, over the grid classes)
             + d_p(g_bar, g)       (cube interiors by box propagation + ramp windows by
                                    one enclosure of g on [0, 1]^{n x d})

  * paper      ``yun.build_approximator(..., contextual='paper')`` (Lemma 8, N^d + 1
               attention layers; its bad set enters d_p(f_bar, g_bar)); lam, ramp and
               bits from ``yun.realization.plan.plan_realization`` at the margin;
  * one_layer  ``yun.build_approximator(..., contextual='one_layer')`` (one softmax head,
               the proved lam); ramps from its own planner at the margin.

Both are certified at cube-interior margin 2^-margin_log2 (fraction of delta per side).
``study`` writes one_layer_certificate.json after every row, then the table
(``reports.one_layer_certificate``).
"""

from __future__ import annotations

import os
import time
from fractions import Fraction

from transformer_ua import outputs, provenance
from transformer_ua.reports import one_layer_certificate as report
from transformer_ua.yun import build_approximator
from transformer_ua.yun.bounds import certificate
from transformer_ua.yun.realization import plan

METHODS = ('paper', 'one_layer')
#: The files ``study`` writes: the rows, the table.
WRITES = ('one_layer_certificate.json', 'one_layer_certificate.md')


def parse_configs(text: str) -> list:
  """'target:d,n,N;...' -> [(target, d, n, N), ...]; ValueError (one line) otherwise."""
  out = []
  for item in (s.strip() for s in text.split(';')):
    if not item:
      continue
    try:
      target, dims = item.split(':')
      d, n, N = (int(v) for v in dims.split(','))
    except ValueError:
      raise ValueError(f'--configs: {item!r} is not target:d,n,N (e.g. '
                       'token_times_mean:1,3,8).') from None
    out.append((target, d, n, N))
  if not out:
    raise ValueError('--configs is empty; give at least one target:d,n,N.')
  return out


def run(method: str, target: str, d: int, n: int, N: int, margin: Fraction, p: float,
        workers) -> dict:
  """One row: ``method``'s network on (target, d, n, N), realized and certified."""
  load = provenance.load_1min()
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


def _print(line: str) -> None:
  print(line, flush=True)


def study(configs, outdir: str, *, margin_log2: int, p: float, workers, log=_print) -> list:
  """Every method on every configuration at margin 2^-margin_log2; writes ``WRITES`` into
  ``outdir`` (the JSON after each row). Returns the rows.

  Raises ValueError '<target> <(d, n, N)> <method>: <why>' when a row cannot be built."""
  margin = Fraction(1, 2 ** margin_log2)
  prov = provenance.record()
  rows = []
  for cfg in configs:
    for method in METHODS:
      try:
        row = run(method, *cfg, margin=margin, p=p, workers=workers)
      except ValueError as e:
        raise ValueError(f'{cfg[0]} {cfg[1:]} {method}: {e}') from e
      row['margin_log2'] = -margin_log2
      log(f"{cfg} {method}: {row['describe']}")
      rows.append(row)
      outputs.atomic_json(os.path.join(outdir, WRITES[0]),
                          {'provenance': prov, 'rows': rows}, indent=2, default=str)
  report.write_md(os.path.join(outdir, WRITES[1]), rows, prov)
  return rows
