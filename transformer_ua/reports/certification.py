r"""Report and figures of ``studies.certification`` (Theorems 2 and 3 certified; its binary
is experiments/certify_approximation.py).

``write(result, output_dir)`` writes, from the study's result dict (the JSON next to it):

  certify_approximation.md         the tables: certified approximations with their
                                   Monte Carlo term by term, the ladder, the Lemma 6 sweep,
                                   the clamp, and every term's comparison
  certify_approximation_ladder.png certified total and Monte Carlo d_p(f, g) against N
                                   (log-log), with the rates the theory predicts
  certify_approximation_lemma6.png certified d_p(g_bar, g) against the ramp epsilon and
                                   against lambda, with and without the output clamp

Every file is written atomically (``transformer_ua.outputs``).
"""

from __future__ import annotations

import math
import os

from transformer_ua import outputs, provenance

MARKDOWN_NAME = 'certify_approximation.md'
LADDER_PNG = 'certify_approximation_ladder.png'
LEMMA6_PNG = 'certify_approximation_lemma6.png'

SERIES_LABELS = {'paper': "Theorem 2, the paper's g_c (ties='paper')",
                 'complete': "Theorem 2, ties='complete'",
                 'theorem3': 'Theorem 3 (prefix_mean, positional)'}


def _g(v, digits=4) -> str:
  if v is None:
    return '—'
  if isinstance(v, float) and not math.isfinite(v):
    return 'inf'
  return f'{v:.{digits}g}'


def _p2(v) -> str:
  """2^k for a power of two, else %.3g."""
  if not v or not math.isfinite(v):
    return _g(v)
  k = math.log2(v)
  return f'2^{k:.0f}' if abs(k - round(k)) < 1e-9 else f'{v:.3g}'


#: The d_p terms of a certificate, in order: (key of the bound, key of the Monte Carlo
#: term, column name).
DP_TERMS = (('f_fbar', 'f_fbar', 'd_p(f, f_bar)'), ('fbar_gbar', 'fbar_gbar', 'd_p(f_bar, g_bar)'),
            ('gbar_g', 'gbar_g', 'd_p(g_bar, g)'), ('total', 'total', 'd_p(f, g)'))
#: Every compared term's name in the report (``certificate_mc.compare``'s 'term'; the
#: bars escaped for a markdown table cell).
TERM_NAMES = {'f_fbar': 'd_p(f, f_bar)', 'fbar_gbar': 'd_p(f_bar, g_bar)',
              'gbar_g_interior': r'int_I \|g_bar - g\|^p (interiors)',
              'gbar_g_window': r'int_W \|g_bar - g\|^p (windows)', 'gbar_g': 'd_p(g_bar, g)',
              'total': 'd_p(f, g) (certified total)'}


def checked_rows(result) -> list:
  """The rows of the table and the ladder that carry a Monte Carlo."""
  return [r for r in result.get('table', []) + result.get('ladder', []) if 'monte_carlo' in r]


def contradictions(result) -> list:
  """(row, comparison) for every compared term whose Monte Carlo 95% interval lies wholly
  above its certified bound ('below' false in ``certificate_mc.compare``)."""
  return [(r, c) for r in checked_rows(result) for c in r['monte_carlo']['compare']
          if not c['below']]


def row_name(r) -> str:
  """'token_times_mean epsilon=0.5 N=3' (a table row) or 'ladder paper N=3'."""
  if 'series' in r:
    return f'ladder {r["series"]} N={r["resolution"]}'
  return f'{r["target"]} epsilon={r["epsilon"]:g} N={r["resolution"]}'


def _terms_head() -> str:
  return ' | '.join(f'{name} <= | MC {name} [95%]' if key != 'total' else
                    f'certified {name} <= | MC {name} [95%]' for key, _, name in DP_TERMS)


def _terms_cells(r, bold_total=False) -> str:
  """'bound | MC | ...' cells of the four d_p's of a certified row with its Monte Carlo."""
  c, mc = r['certificate'], r['monte_carlo']['terms']
  cells = []
  for key, mkey, _ in DP_TERMS:
    bound = _g(c['total'] if key == 'total' else c['terms'][key])
    cells += ['**' + bound + '**' if key == 'total' and bold_total else bound,
              _mc_cell(mc[mkey])]
  return ' | '.join(cells)


def _points(mc) -> str:
  return f'{mc["points"]["interior"]} + {mc["points"]["window"]}'


def table_markdown(rows) -> str:
  head = ('| target | theorem | epsilon | N | depth (layers) | params | bits | '
          f'{_terms_head()} | MC points (I + W) | certify s | approximate s | MC s | '
          'total / MC |\n' + '|---' * 20 + '|\n')
  lines = []
  for r in rows:
    if r.get('status') != 'certified':
      lines.append(f'| {r["target"]} | {r["theorem"]} | {r["epsilon"]:g} | out of reach: '
                   f'{r["reason"]} ' + '|' * 17 + '\n')
      continue
    mc, c = r['monte_carlo'], r['certificate']
    lines.append(
        f'| {r["target"]} | {r["theorem"]} | {r["epsilon"]:g} | {r["resolution"]} | '
        f'{r["layers"]} | {r["params"]} | {c["bits"]} | {_terms_cells(r, bold_total=True)} | '
        f'{_points(mc)} | {c["seconds"]:.1f} | {r["approximate_seconds"]:.1f} | '
        f'{mc["seconds"]:.0f} | {r["ratio"]:.3g} |\n')
  return head + ''.join(lines)


def _mc_cell(t) -> str:
  """'estimate [ci_low, ci_high]' of a Monte Carlo term."""
  return f'{_g(t["estimate"])} [{_g(t["ci_low"])}, {_g(t["ci_high"])}]'


def ladder_markdown(rows) -> str:
  head = (f'| series | N | layers | params | bits | {_terms_head()} | MC points (I + W) | '
          'certify s | MC s | total / MC |\n' + '|---' * 17 + '|\n')
  lines = []
  for r in rows:
    mc, c = r['monte_carlo'], r['certificate']
    lines.append(f'| {r["series"]} | {r["resolution"]} | {r["layers"]} | {r["params"]} | '
                 f'{c["bits"]} | {_terms_cells(r)} | {_points(mc)} | {c["seconds"]:.1f} | '
                 f'{mc["seconds"]:.0f} | {r["ratio"]:.3g} |\n')
  return head + ''.join(lines)


def comparison_markdown(rows) -> str:
  """Every compared term of every row: the bound, the Monte Carlo and the verdict."""
  out = ['| row | term | certified bound <= | MC estimate [95%] | MC points (I + W) | '
         'verdict |\n|---|---|---|---|---|---|\n']
  for r in rows:
    mc = r['monte_carlo']
    for c in mc['compare']:
      verdict = ('consistent' if c['below'] else
                 '**CONTRADICTED** (whole 95% interval above the bound)')
      out.append(f'| {row_name(r)} | {TERM_NAMES.get(c["term"], c["term"])} | '
                 f'{_g(c["bound"])} | {_mc_cell(c)} | {_points(mc)} | {verdict} |\n')
  return ''.join(out)


MC_TEXT = (
    'Monte Carlo (`verify.certificate_mc`), independent of the certificate: g evaluated by '
    'the mpmath oracle (`transformer_ua.oracle`, no code shared with `exact.ball`), f by '
    'the target, f_bar by its table, g_bar by the approximator; points drawn uniformly on '
    'the cube interiors I and on the ramp windows W separately (the "I + W" counts) and '
    'weighted by their exact measures. Each term is compared with its bound: d_p(f, f_bar), '
    'd_p(f_bar, g_bar), int_I |g_bar - g|^p, int_W |g_bar - g|^p, d_p(g_bar, g) and d_p(f, g). '
    'A bound inside its 95% interval is consistent (a tight bound lies there); a '
    'certificate is contradicted only when a whole 95% interval lies above its bound '
    '(ci_low > bound, beyond the float64 resolution of the sampled values).')


def lemma6_markdown(lemma6) -> str:
  head = ('| N | ties | clamp | margin (x delta) | ramp epsilon | lambda | bits | interior sup '
          '| window sup | window measure | certified d_p(g_bar, g) | seconds |\n'
          '|---|---|---|---|---|---|---|---|---|---|---|---|\n')
  out = ['### Against the ramp epsilon (the plan\'s epsilon follows margin x delta)\n\n',
         head]
  for r in lemma6['ramp']:
    out.append(_lemma6_line(r, f'2^{r["margin_log2"]}'))
  out.append('\nFitted slope of log d_p(g_bar, g) against log epsilon, over the points whose '
             'cube interiors certified (interior sup <= the plan\'s tolerance):\n\n'
             '| N | ties | clamp | slope | points | smallest ramp fitted | interiors not '
             'certified |\n|---|---|---|---|---|---|---|\n')
  for f in lemma6['fits']:
    out.append(f'| {f["resolution"]} | {f["ties"]} | {"yes" if f["clamp"] else "no"} | '
               f'{_g(f["slope"], 3)} | {f["points"]} | {_p2(f.get("smallest_ramp_fitted"))} | '
               f'{f.get("interiors_failed", 0)} |\n')
  out.append('\n### Against lambda (the plan\'s lambda times 2^k, margin fixed)\n\n')
  out.append(head.replace('margin (x delta)', 'lambda / plan'))
  for r in lemma6['lam']:
    out.append(_lemma6_line(r, f'2^{r["lam_shift_log2"]}'))
  return ''.join(out)


def _lemma6_line(r, col) -> str:
  return (f'| {r["resolution"]} | {r["ties"]} | {"yes" if r["clamp"] else "no"} | {col} | '
          f'{_p2(r["ramp"])} | {_p2(r["lam"])} | {r["bits"]} | {_g(r["interior_sup"], 3)} | '
          f'{_g(r["window_sup"], 3)} | {_g(r["window_measure"], 3)} | '
          f'{_g(r["gbar_g"])} | {r["seconds"]:.1f} |\n')


def _searched(au) -> str:
  if au['certified'] is None:
    return 'not run'
  return (f'certified at N={au["resolution"]}, total {_g(au["total"])}' if au['certified']
          else 'no certificate: ' + au['message'])


def clamp_markdown(cl) -> str:
  c = cl['clamp']
  out = [f'Target {cl["target"]}, epsilon = {cl["epsilon"]:g}.\n\n',
         '| network | N | layers | lambda | ramp epsilon | bits | window sup | certified '
         'total | certify s |\n|---|---|---|---|---|---|---|---|---|\n',
         f'| with the output clamp (`approximate`) | {c["resolution"]} | {c["layers"]} | '
         f'{_p2(c["lam"])} | {_p2(c["ramp"])} | {c["bits"]} | {_g(c["window_sup"], 3)} | '
         f'{_g(c["total"])} | {c["certify_seconds"]:.1f} |\n']
  for t in cl['unclamped_same_n']['tries']:
    out.append(f'| no clamp, margin 2^{t["margin_log2"]} | '
               f'{cl["unclamped_same_n"]["resolution"]} | {t["layers"]} | {_p2(t["lam"])} | '
               f'{_p2(t["ramp"])} | {t["bits"]} | {_g(t["window_sup"], 3)} | '
               f'{_g(t["total"])} | {t["seconds"]:.1f} |\n')
  floor = cl['unclamped_same_n'].get('smallest_margin_log2')
  if floor is not None and not cl['unclamped_same_n']['certified']:
    out.append(f'\nThe unclamped rows stop at margin 2^{floor}: smaller margins are below '
               '`certificate.MIN_MARGIN` (arb balls, 30-bit radii, cannot hold a cube '
               'interior off the cell edges there), so they are refused, not certified.\n')
  au = cl['approximate_unclamped']
  out.append('\n`approximate(..., clamp=False)` (the library search, windows of margin '
             f'2^-20): {_searched(au)} '
             f'({au["seconds"]:.0f} s).\n')
  for a in au.get('attempts', []):
    out.append(f'\n- {a}')
  return ''.join(out) + '\n'


def markdown(result) -> str:
  prov = result['provenance']
  checked = checked_rows(result)
  bad = contradictions(result)
  table, ladder = result.get('table', []), result.get('ladder', [])
  terms = sum(len(r['monte_carlo']['compare']) for r in checked)
  parts = [
      '# Theorems 2 and 3 as a certificate: d_p(f, g) <= epsilon, proved\n\n',
      provenance.markdown_header(prov), '\n',
      f'd = {result["d"]}, n = {result["n"]}, p = {result["p"]:g}. Every certified number is '
      'an upper bound over the whole unit cube (`yun.bounds.certificate.certify_lp`: exact '
      'rationals and arb balls), marked "<=". ' + MC_TEXT + '\n\n',
      ('' if not checked else
       f'**Check: no certified bound is contradicted ({len(checked)} certificates, {terms} '
       'terms compared).**\n\n' if not bad else
       f'**CHECK FAILED: {len(bad)} certified bound(s) contradicted by the Monte Carlo '
       f'(first: {row_name(bad[0][0])}, {TERM_NAMES.get(bad[0][1]["term"], bad[0][1]["term"])}'
       '): a bug in the certificate.**\n\n')]
  if table:
    parts += ['## Certified approximations (`certificate.approximate`, output clamp)\n\n',
              table_markdown(table), '\n']
  if ladder:
    parts += ['## Against N (`certify_lp`, the plan\'s lambda, ramp and bits)\n\n',
              f'![ladder]({LADDER_PNG})\n\n', ladder_markdown(ladder), '\n']
  if result.get('lemma6', {}).get('ramp'):
    parts += ['## Lemma 6, certified: d_p(g_bar, g) against the ramp epsilon and lambda\n\n',
              f'![lemma6]({LEMMA6_PNG})\n\n', lemma6_markdown(result['lemma6']), '\n']
  if 'clamp' in result:
    parts += ['## What the output clamp buys\n\n', clamp_markdown(result['clamp'])]
  if checked:
    parts += ['\n## The Monte Carlo, term by term\n\n', comparison_markdown(checked)]
  missing = [p for p in ('table', 'ladder', 'lemma6', 'clamp') if not result.get(p)
              or (p == 'lemma6' and not result[p].get('ramp'))]
  if missing:
    parts.append(f'\nParts not run: {", ".join(missing)}.\n')
  parts.append(f'\nTotal run time {result["seconds"]:.0f} s.\n')
  return ''.join(parts)


def _plt():
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  return plt


def ladder_figure(result, path) -> str:
  plt = _plt()
  fig, ax = plt.subplots(figsize=(7.5, 5.2))
  colors = {'paper': 'tab:red', 'complete': 'tab:blue', 'theorem3': 'tab:green'}
  series = []
  for r in result['ladder']:
    if r['series'] not in series:
      series.append(r['series'])
  allN = sorted({r['resolution'] for r in result['ladder']})
  for s in series:
    rows = sorted((r for r in result['ladder'] if r['series'] == s),
                  key=lambda r: r['resolution'])
    N = [r['resolution'] for r in rows]
    col = colors.get(s, None)
    label = SERIES_LABELS.get(s, s)
    ax.plot(N, [r['certificate']['total'] for r in rows], 'o-', color=col,
            label=f'{label}: certified total')
    mc = [r['monte_carlo']['terms']['total'] for r in rows]
    est = [t['estimate'] for t in mc]
    lo = [e - t['ci_low'] for e, t in zip(est, mc)]
    hi = [t['ci_high'] - e for e, t in zip(est, mc)]
    ax.errorbar(N, est, yerr=[lo, hi], fmt='x--', color=col, capsize=2,
                label=f'{label}: Monte Carlo, stratified, mpmath oracle (95% CI)')
    if s == 'paper':
      bad = [r['certificate']['terms']['fbar_gbar'] for r in rows]
      ax.plot(N, bad, 's:', color=col, alpha=0.6, mfc='none',
              label="paper's bad-set term d_p(f_bar, g_bar) (certified, exact)")
  # Theory's rates, anchored at the first complete (or first) series' first point.
  ref = [r for r in result['ladder'] if r['series'] == 'complete'] or result['ladder']
  if ref and allN:
    n0 = min(r['resolution'] for r in ref)
    r0 = next(r for r in ref if r['resolution'] == n0)
    y0 = r0['certificate']['terms']['f_fbar']
    xs = [min(allN), max(allN)]
    ax.plot(xs, [y0 * n0 / x for x in xs], color='0.3', lw=1,
            label='rate delta = 1/N (slope -1): d_p(f, f_bar)')
  paper = [r for r in result['ladder'] if r['series'] == 'paper'
           and r['certificate']['terms']['fbar_gbar'] > 0]
  if paper:
    r0 = min(paper, key=lambda r: r['resolution'])
    n0, y0 = r0['resolution'], r0['certificate']['terms']['fbar_gbar']
    d, p = result['d'], result['p']
    xs = [min(allN), max(allN)]
    ax.plot(xs, [y0 * (n0 / x) ** (d / p) for x in xs], color='0.3', lw=1, ls='--',
            label=f'rate delta^(d/p) (slope -{d / p:g}): the bad set')
  ax.set_xscale('log')
  ax.set_yscale('log')
  ax.set_xticks(allN)
  ax.set_xticklabels([str(v) for v in allN])
  ax.set_xlabel('resolution N = 1/delta (cells per axis)')
  ax.set_ylabel('d_p(f, g), p = %g (L_p distance, units of f)' % result['p'])
  ax.set_title('Certified d_p(f, g) vs Monte Carlo, token_times_mean / prefix_mean, '
               f'd={result["d"]}, n={result["n"]}', fontsize=9)
  ax.grid(True, which='both', alpha=0.3)
  ax.legend(fontsize=6.5, loc='lower left')
  fig.tight_layout()
  outputs.atomic_savefig(fig, path, dpi=130)
  plt.close(fig)
  return path


#: Bounds below this are drawn as absent (a certified 0 comes out as the smallest
#: subnormal float after rounding up).
PLOT_FLOOR = 1e-100


def _plottable(v) -> bool:
  return math.isfinite(v) and v > PLOT_FLOOR


def _gbar_g_axes(ax, xlabel, title, xbase=10):
  """Log-log axes of certified d_p(g_bar, g) (p = 2) against ``xlabel``."""
  ax.set_xscale('log', base=xbase)
  ax.set_yscale('log')
  ax.set_xlabel(xlabel)
  ax.set_ylabel('certified d_p(g_bar, g), p = 2')
  ax.set_title(title, fontsize=9)
  ax.grid(True, which='both', alpha=0.3)
  ax.legend(fontsize=6)


def lemma6_figure(result, path) -> str:
  plt = _plt()
  l6 = result['lemma6']
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.6))
  groups = {}
  for r in l6['ramp']:
    groups.setdefault((r['resolution'], r['ties'], r['clamp']), []).append(r)
  marks = {'paper': 'o', 'complete': 's'}
  res = sorted({k[0] for k in groups})
  cmap = plt.get_cmap('viridis')
  color = {N: cmap(i / max(1, len(res) - 1) * 0.8) for i, N in enumerate(res)}
  fits = {(f['resolution'], f['ties'], f['clamp']): f['slope'] for f in l6['fits']}
  for (N, ties, clamp), rows in sorted(groups.items()):
    rows = [r for r in sorted(rows, key=lambda r: r['ramp']) if _plottable(r['gbar_g'])]
    if not rows:
      continue
    slope = fits.get((N, ties, clamp))
    a1.plot([r['ramp'] for r in rows], [r['gbar_g'] for r in rows],
            marks.get(ties, 'o') + ('-' if clamp else ':'), color=color[N],
            mfc=None if clamp else 'none',
            label=f'N={N}, {ties}, {"clamp" if clamp else "no clamp"}'
                  + (f' (slope {slope:.2f})' if slope is not None else ''))
  ramps = [r['ramp'] for r in l6['ramp'] if _plottable(r['gbar_g'])]
  clamped = [r for r in l6['ramp'] if r['clamp'] and _plottable(r['gbar_g'])]
  if clamped:
    r0 = max(clamped, key=lambda r: r['ramp'])
    xs = [min(ramps), max(ramps)]
    a1.plot(xs, [r0['gbar_g'] * (x / r0['ramp']) ** 0.5 for x in xs], color='0.3', lw=1,
            ls='--', label='epsilon^(1/2) (windows of measure ~ epsilon, p = 2)')
  _gbar_g_axes(a1, 'ReLU ramp width epsilon (input units; plan epsilon ~ margin x delta)',
               'Lemma 6: d_p(g_bar, g) -> 0 as epsilon -> 0')
  lgroups = {}
  for r in l6['lam']:
    lgroups.setdefault((r['resolution'], r['ties'], r['clamp']), []).append(r)
  for (N, ties, clamp), rows in sorted(lgroups.items()):
    rows = [r for r in sorted(rows, key=lambda r: r['lam']) if _plottable(r['gbar_g'])]
    if not rows:
      continue
    a2.plot([r['lam'] for r in rows], [r['gbar_g'] for r in rows],
            marks.get(ties, 'o') + ('-' if clamp else ':'), color=color.get(N, 'k'),
            mfc=None if clamp else 'none',
            label=f'N={N}, {ties}, {"clamp" if clamp else "no clamp"}')
  _gbar_g_axes(a2, 'softmax scale lambda (margin fixed)',
               'Lemma 6: d_p(g_bar, g) against lambda', xbase=2)
  fig.tight_layout()
  outputs.atomic_savefig(fig, path, dpi=130)
  plt.close(fig)
  return path


def write(result, output_dir) -> list:
  """Writes the markdown and both figures into ``output_dir``; returns their paths."""
  md = os.path.join(output_dir, MARKDOWN_NAME)
  paths = []
  if result.get('ladder'):
    paths.append(ladder_figure(result, os.path.join(output_dir, LADDER_PNG)))
  if result.get('lemma6', {}).get('ramp'):
    paths.append(lemma6_figure(result, os.path.join(output_dir, LEMMA6_PNG)))
  outputs.atomic_write(md, markdown(result))
  return [md] + paths
