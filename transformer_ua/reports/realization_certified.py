r"""Report of experiments/realization_certified.py (Lemma 6 at scale, certified).

From the study's rows (``studies.realization_certified``; the JSON next to the report):

  ``write_md``   realization_certified.md: per configuration the blocks, t_r, planned
                 lam = 2^a, epsilon = 2^b and bits, the smallest certifying bits, the
                 certified max |g - g_bar| over every cube interior, seconds, and the
                 float64 sampled error at the same lam, epsilon
  ``write_png``  realization_certified.png: bits against t_r (log), the plan at
                 tolerance 1e-6 and 1e-4 and the smallest certifying bits, with the
                 float32 (24) and float64 (53) significands drawn in

Every file is written atomically (``transformer_ua.outputs``).
"""

from __future__ import annotations

import numpy as np

from transformer_ua import outputs, provenance


def _float_cell(f) -> str:
  if f.get('refused'):
    return 'refused (epsilon below 4 ulps of t_r)'
  return (f'{f["max_abs_error_sampled"]:.3g} '
          f'({"reproduces" if f["reproduces"] else "does not reproduce"})')


def write_md(path: str, rows: list, prov: dict, float_samples: int) -> None:
  """realization_certified.md from the rows; ``float_samples``: points of the float64
  column."""
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
           f'lam, epsilon ({float_samples} interior points, tolerance 1e-4 max(1, max|A|)). '
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


def write_png(path: str, rows: list) -> None:
  """realization_certified.png: the working precision against t_r."""
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
