r"""Fang et al. 2022, Sections 3 and 6 measured: the report of ``fang.measure``.

``write(results_dir, f2_literal_points=..., corollary=..., prov=...)`` runs
``fang.measure.measure`` and writes, each file atomically, in ``results_dir``:

    fang_construction.json   the numbers: provenance, accuracy, error_vs_bound, directions,
                             exact, corollary_3_7 (if run), seconds
    fang_construction.md     ``render(json)``: the record rebuilds from its JSON alone
    fang_corollary37.png     sup|p_q - f|, sup|C^q - f|, sup|C^q - p_q| vs q per target

``write_certificates(results_dir, prov=...)`` adds the certified float64 sup
(``fang.measure.certify``) to the record already in ``results_dir`` without
re-measuring it, and rewrites the JSON (with ``certificate_provenance``) and the Markdown.

Error measure of every table: max_x |C(x) - Q(x)| / max(1, sum_a |c_a| |x^a|); beside it,
the certified sup of |C(x) - Q(x)| (absolute) and the measured max.
"""

from __future__ import annotations

import json
import os
import time

from transformer_ua import outputs, provenance
from transformer_ua.fang import measure as construction

OUTPUTS = ('fang_construction.json', 'fang_construction.md', 'fang_corollary37.png')


def write(results_dir: str, *, f2_literal_points: int, corollary: bool, prov: dict) -> dict:
  """Measures the construction and writes the JSON, the Markdown and the figure."""
  t0 = time.perf_counter()
  out = {'provenance': prov, **construction.measure(f2_literal_points, corollary)}
  if corollary:
    corollary_figure(out['corollary_3_7'], os.path.join(results_dir, OUTPUTS[2]))
  out['seconds'] = time.perf_counter() - t0
  outputs.atomic_json(os.path.join(results_dir, OUTPUTS[0]), out, indent=1, default=str)
  outputs.atomic_write(os.path.join(results_dir, OUTPUTS[1]), render(out))
  return out


def write_certificates(results_dir: str, *, prov: dict) -> dict:
  """Adds ``certificate`` to every accuracy row of the record in ``results_dir`` and
  rewrites its JSON and Markdown (the figure is left as it is)."""
  path = os.path.join(results_dir, OUTPUTS[0])
  if not os.path.isfile(path):
    raise ValueError(f'{path} does not exist; run the study first.')
  with open(path) as f:
    out = json.load(f)
  t0 = time.perf_counter()
  out['accuracy'] = construction.certify(out['accuracy'])
  out['certificate_provenance'] = {**prov, 'seconds': time.perf_counter() - t0}
  outputs.atomic_json(path, out, indent=1, default=str)
  outputs.atomic_write(os.path.join(results_dir, OUTPUTS[1]), render(out))
  return out


def _certificate_header(out) -> list:
  """The provenance of certificates added later by ``write_certificates`` (if any)."""
  cp = out.get('certificate_provenance')
  if cp is None:
    return []
  return ['The certified columns (`fang.float_bound`) were added to this record, at the '
          'recorded inputs, by:', '', provenance.markdown_header(cp),
          f"Certificates time {cp['seconds']:.0f} s.", '']


def _certified(a) -> tuple:
  """(measured max abs err, certified sup) cells of one accuracy row."""
  c = a.get('certificate')
  if c is None:
    return 'not run', 'not run'
  measured = c.get('literal_max_abs_err')
  return ('not re-measured' if measured is None else f'{measured:.3g}',
          f"{c['certified_abs']:.3g}")


def corollary_figure(rows, path):
  """One log panel per target: the fit's, the transformer's and float64's sup errors."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, len(rows), figsize=(5 * len(rows), 3.8))
  for ax, (name, rs) in zip(axes, rows.items()):
    qs = [r['q'] for r in rs]
    ax.semilogy(qs, [r['sup_fit_minus_f'] for r in rs], 'o-', label='sup|p_q - f| (fit)')
    ax.semilogy(qs, [r['sup_transformer_minus_f'] for r in rs], 's--',
                label='sup|C^q - f| (literal transformer)')
    ax.semilogy(qs, [max(r['sup_transformer_minus_fit'], 1e-17) for r in rs], '^:',
                label='sup|C^q - p_q| (float64)')
    ax.set_title(name)
    ax.set_xlabel('q = blocks = degree')
  axes[0].legend(fontsize=7)
  fig.tight_layout()
  outputs.atomic_savefig(fig, path, dpi=110)
  plt.close(fig)


def _fmt(values, spec='{:.3g}'):
  return ', '.join(spec.format(v) for v in values)


def render(out) -> str:
  """fang_construction.md from ``write``'s record (as written, or read back from JSON)."""
  md = ['# Fang et al. 2022: the construction measured (Lemma 3.1, Lemma 3.3, Theorem 3.5, '
        'Corollary 3.7)', '', provenance.markdown_header(out['provenance']),
        f"Total time {out['seconds']:.0f} s (shared machine).", '',
        *_certificate_header(out),
        '## Float64 accuracy of the literal network', '',
        'Max over points of |C(x) - Q(x)| / max(1, sum_a |c_a||x^a|), Q evaluated exactly '
        '(Fractions). Points on spheres of radius (1e-3, 0.1, 0.5, 0.9, 1.0) B, the last '
        'being the boundary ||x|| = B. M_k^2: the default "product" rule (smallest power of '
        'two >= (1+1/16) X_k Y_k). The error model is the heuristic (not a proof) '
        'sum_k ||beta_k||_1 k 2^-50 T^k (absolute); measured errors are far below it because '
        'the per-token rounding errors cancel.', '',
        'Certified (abs): `fang.float_bound`, a proof that |C(x) - Q(x)| stays below it for '
        'every x that `apply` accepts (||x|| <= B (1 + 1e-12)), in float64 with any summation '
        'order, FMA or not: the one-hot maximum keeps the diagonal (its float margin is '
        'checked in rationals), rounding propagates block by block, the read-out sum pays '
        'gamma_m, and |P - Q| counts the float parameters exactly. It also bounds the '
        'relative error (denominator >= 1). Literal max abs err: the same points as the '
        'relative column, exact; "not re-measured": `--certify_only` re-measures only '
        'networks of at most 64 tokens (the d = 10 ones cost ~1 min per point).', '',
        '| polynomial | d | q | B | tokens | M_k^2 | literal pts (boundary) | literal max rel. '
        'err | at boundary | literal max abs err | certified sup abs err | compact max rel. '
        'err (pts) | error model (abs) | <= 1e-9 | s/point literal |', '|' + '---|' * 15]
  for a in out['accuracy']:
    md.append(f"| {a['name']} | {a['d']} | {a['q']} | {a['B']} | {a['tokens']} | "
              f"{_fmt(a['m_squared'], '{:g}')} | {a['literal_points']} "
              f"({a['boundary_points']}) | {a['literal_max_rel_err']:.3g} | "
              f"{a['literal_max_rel_err_boundary']:.3g} | {' | '.join(_certified(a))} | "
              f"{a['compact_max_rel_err']:.3g} "
              f"({a['compact_points']}) | {a['error_model_abs_bound']:.3g} | "
              f"{'yes' if a['within_1e-9'] else 'NO'} | {a['literal_seconds_per_point']:.3g} |")
  md += ['', 'Counts (Theorem 3.5 bounds in brackets):', '']
  for a in out['accuracy']:
    tb = a['theorem_bounds']
    md.append(f"- {a['name']}: free parameters {a['free_params']} (< {tb['free_params']}), "
              f"non-zeros {a['nonzeros']} (< {tb['nonzeros']}); ridge cond_2 per degree "
              f"{_fmt([r['cond_2'] for r in a['ridge']])}, max rel. residual "
              f"{max(r['relative_residual'] for r in a['ridge']):.2g}")
  md += ['', '## Error vs B (d = 2, q = 5, random dense Q, 200 points per B)', '',
         'The offsets 2M_k^2 ~ B^k are added and cancelled in every block, so the absolute '
         'error is ~ 2^-50 B^q |beta| wherever x is, while the scale max(1, sum|c||x^a|) is '
         'small near 0: the relative bound degrades like B^q. The paper\'s own |x|,|y| < M '
         '(paper_strict, M^2 ~ B^(2k-2)) is worse by B^(k-2).', '',
         '| B | M rule | max M^2 | max rel. err | median rel. err |', '|---|---|---|---|---|']
  for r in out['error_vs_bound']:
    md.append(f"| {r['B']:g} | {r['m_rule']} | {r['max_m_squared']:.3g} | "
              f"{r['max_rel_err']:.3g} | {r['median_rel_err']:.3g} |")
  md += ['', '## Ridge directions for d = 10, q = 5 (f2)', '',
         '| directions | tokens | cond_2 of the Bombieri system, degrees 1..5 | max rel. '
         'residual | max abs beta for f2 |', '|---|---|---|---|---|']
  for r in out['directions']:
    md.append(f"| {r['directions']} | {r['tokens']} | "
              f"{_fmt(r['cond_2_per_degree'])} | "
              f"{r['max_rel_residual']:.2g} | {r['max_abs_beta_f2']:.3g} |")
  e = out['exact']
  md += ['', '## Exact mode (f1 with exact=True, B = 45)', '',
         f"Rational unit directions {e['directions']}; inputs {e['points']} (two on the "
         f"boundary). Q = {e['Q']}. Literal network in Fractions == Q: "
         f"{e['literal_fraction_equal']}; the JAX network in int64 (scale S = {e['scale_S']}, "
         f"{e['int64_bits_needed']} bits) == Q: {e['jax_int64_equal']}.", '']
  if 'corollary_3_7' in out:
    md += ['## Corollary 3.7: sup error on [0,1]^d vs q', '',
           'p_q: least-squares fit in the total-degree Chebyshev basis (d = 1: '
           'interpolation), rewritten in monomials and compiled with bound sqrt(d). Grid: '
           '2001 points (d = 1), 101^2 (d = 2).', '',
           '| f | q | tokens | free params | sup abs p_q - f | sup abs C^q - f | sup abs C^q - '
           'p_q | max monomial coef |', '|---|---|---|---|---|---|---|---|']
    for name, rs in out['corollary_3_7'].items():
      for r in rs:
        md.append(f"| {name.replace('|', chr(92) + '|')} | {r['q']} | {r['tokens']} | "
                  f"{r['free_params']} | "
                  f"{r['sup_fit_minus_f']:.3g} | {r['sup_transformer_minus_f']:.3g} | "
                  f"{r['sup_transformer_minus_fit']:.3g} | {r['max_abs_monomial_coef']:.3g} |")
    md += ['', '![Corollary 3.7](fang_corollary37.png)', '',
           'The transformer follows the fit until the float64 error of the monomial '
           'expansion (coefficients growing like ~5.8^q on [0,1]) and of the blocks catches '
           'up with the approximation error; beyond that q the limit of the corollary is not '
           'observable in float64.', '']
  return '\n'.join(md)
