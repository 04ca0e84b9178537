"""Report and figure writers of the main job (``studies.approximation``; its binary is
experiments/approximate.py).

``write_report(result, path)`` writes approximate.md from the job's result dict (the
JSON written next to it); ``make_figures(result, net, outdir)`` draws error vs delta,
error vs (lambda, epsilon) and the contextual-mapping values u^T g_c(L) of the grid.
"""

from __future__ import annotations

import math
import os

import numpy as np

from transformer_ua import outputs, provenance
from transformer_ua.targets import distances
from transformer_ua.yun.bounds import bad_set
from transformer_ua.yun.bounds import decomposition
from transformer_ua.yun.realization import plan


def contextual_values(net):
  """u^T g_c(L) for the whole grid (or all class representatives), with categories."""
  cm = net.g_bar.contextual
  k = cm.grid_points(limit=200_000)  # every ordered point of G+ (Theorem 3: of G)
  if k is None:
    return None
  q = cm.ops.to_python(cm.column_ids_batch(k)) / cm.scale  # unscaled u^T g_c(L)
  in_range = np.all(k >= 0, axis=(1, 2))
  good = bad_set.distinct_columns(k) & in_range
  return {'q': q.astype(float), 'good': good, 'out_of_range': ~in_range,
          't_l': float(cm.t_l), 't_r': float(cm.t_r)}


#: How the sweep figure marks each verdict (``verdict_tag``).
VERDICT_STYLE = {
    'reproduces': {'color': 'tab:green', 'filled': True,
                   'label': 'reproduces g_bar on the interiors'},
    'windows': {'color': 'tab:olive', 'filled': True,
                'label': 'reproduces; d_p from the ramp windows'},
    'off: interiors': {'color': 'tab:purple', 'filled': False,
                       'label': 'off: ramps reach the interiors'},
    'off: lambda': {'color': 'tab:red', 'filled': False,
                    'label': "off: lambda below the plan's"},
    'off: bits': {'color': 'tab:brown', 'filled': False,
                  'label': 'off: more bits needed than the dtype has'},
    'off': {'color': 'tab:gray', 'filled': False, 'label': 'off'},
}


def verdict_tag(row) -> str:
  """The short verdict of a sweep row (a key of ``VERDICT_STYLE``)."""
  verdict = row.get('verdict')
  if verdict is None:   # a JSON from before the verdicts named their cause
    if not row['reproduces']:
      return 'off'
    return ('windows' if (row.get('window_share') or 0) > decomposition.WINDOW_DOMINANCE
            else 'reproduces')
  if verdict.startswith('reproduces'):
    return 'windows' if 'windows' in verdict else 'reproduces'
  first = verdict.split(';')[0]   # the first reason
  for tag, word in (('off: interiors', 'interiors'), ('off: lambda', 'lambda'),
                    ('off: bits', 'bits')):
    if word in first:
      return tag
  return 'off'


def make_figures(result, net, outdir):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  paths = []
  # 1. Error vs delta.
  fig, ax = plt.subplots(figsize=(7, 5))
  drawn = set()   # (target, term, values): a curve identical to one drawn is not redrawn
  for lad in result['ladders']:
    rows = lad['rows']
    deltas = [r['delta'] for r in rows]
    complete = lad.get('ties') == 'complete'
    no_bad_set = lad['positional'] or complete
    tag = f'{lad["target"]}' + (' (Thm 3)' if lad['positional'] else
                                ' (ties=complete)' if complete else ' (paper)')
    for key, style in (('f|f_bar', 'o-'), ('f_bar|g_bar', 's--'), ('f|g_bar', '^-.')):
      vals = [r[key]['value'] for r in rows]
      if key == 'f_bar|g_bar' and no_bad_set:
        continue          # 0: no bad set
      if key == 'f|g_bar' and no_bad_set:
        continue          # = d_p(f, f_bar) when g_bar = f_bar on every cube
      ident = (lad['target'], key, tuple(round(v, 12) for v in vals))
      if ident in drawn:
        continue
      drawn.add(ident)
      lo = [r[key]['value'] - r[key]['ci_low'] for r in rows]
      hi = [r[key]['ci_high'] - r[key]['value'] for r in rows]
      slope = lad['slopes'][key]
      who = lad['target'] if key == 'f|f_bar' else tag
      ax.errorbar(deltas, vals, yerr=[lo, hi], fmt=style, capsize=2, ms=5,
                  label=f'{who}: d_p({key.replace("|", ", ")})'
                        + (f', slope {slope:.2f}' if slope is not None else '')
                        + (' (= d_p(f, g_bar) without bad set)' if key == 'f|f_bar' else ''))
  theo = result['ladders'][0]
  if theo['theory_slope_f_bar_g_bar'] is not None:
    rows = theo['rows']
    x0, y0 = rows[0]['delta'], rows[0]['f_bar|g_bar']['value']
    xs = np.array([rows[-1]['delta'], x0])
    ax.plot(xs, y0 * (xs / x0) ** theo['theory_slope_f_bar_g_bar'], 'k:',
            label=f'slope d/p = {theo["theory_slope_f_bar_g_bar"]:.2f}')
  ax.set_xscale('log')
  ax.set_yscale('log')
  ax.set_xlabel('cell width delta = 1/N (input units)')
  ax.set_ylabel(f'd_p, p = {result["config"]["p"]:g} (output units)')
  ax.set_title('Approximation error vs resolution (Monte Carlo, 95% CI)')
  ax.legend(fontsize=7)
  fig.tight_layout()
  paths.append(os.path.join(outdir, 'error_vs_delta.png'))
  outputs.atomic_savefig(fig, paths[-1], dpi=120)
  plt.close(fig)
  # 2. Error vs lambda and epsilon, each point marked with its verdict.
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
  for ax, key in zip(axes, ('lam', 'epsilon')):
    rows = result['sweeps'][key]
    xs = [r[key] for r in rows]
    ax.plot(xs, [max(r['dp_g_bar_g']['value'], 1e-17) for r in rows], '-', color='tab:blue',
            lw=1, label='d_p(g_bar, g), uniform X (sampled)')
    ax.plot(xs, [max(r['max_interior_error'], 1e-17) if math.isfinite(r['max_interior_error'])
                 else np.nan for r in rows], '--', color='tab:orange', lw=1,
            label='max |g - g_bar|, cube interiors')
    for r, x in zip(rows, xs):
      tag = verdict_tag(r)
      style = VERDICT_STYLE[tag]
      for y, marker in ((r['dp_g_bar_g']['value'], 'o'), (r['max_interior_error'], 's')):
        if math.isfinite(y):
          ax.plot([x], [max(y, 1e-17)], marker, ms=7, color=style['color'],
                  mfc=style['color'] if style['filled'] else 'white')
      ax.annotate(tag, (x, max(r['dp_g_bar_g']['value'], 1e-17)), textcoords='offset points',
                  xytext=(0, 10), ha='center', fontsize=6.5, color=style['color'])
    for tag, style in VERDICT_STYLE.items():
      if any(verdict_tag(r) == tag for r in rows):
        ax.plot([], [], 'o', color=style['color'],
                mfc=style['color'] if style['filled'] else 'white', label=style['label'])
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xlabel('softmax scale lambda' if key == 'lam' else
                  'ReLU ramp width epsilon (input units of each unit)')
    ax.set_ylabel('error of the float g against g_bar (output units)')
    fixed = result['config']['epsilon'] if key == 'lam' else result['config']['lam']
    clamp = ', output clamp' if result['config'].get('clamp') else ''
    ax.set_title(f'{"epsilon" if key == "lam" else "lambda"} = {fixed:g}, '
                 f'{result["config"]["dtype"]}{clamp}', fontsize=10)
    ax.legend(fontsize=6.5, loc='best')
  fig.suptitle('Sweeps of the float network: circles d_p(g_bar, g), squares the interior '
               'error; colour = verdict on the cube interiors', fontsize=9)
  fig.tight_layout()
  paths.append(os.path.join(outdir, 'error_vs_lambda_epsilon.png'))
  outputs.atomic_savefig(fig, paths[-1], dpi=120)
  plt.close(fig)
  # 3. Contextual-mapping values.
  cv = contextual_values(net)
  if cv is not None:
    from matplotlib.lines import Line2D  # pylint: disable=import-outside-toplevel
    fig, ax = plt.subplots(figsize=(8, 5.6))
    q = cv['q']
    idx = np.repeat(np.arange(q.shape[0])[:, None], q.shape[1], axis=1)
    good = np.repeat(cv['good'][:, None], q.shape[1], axis=1)
    out = np.repeat(cv['out_of_range'][:, None], q.shape[1], axis=1)
    groups = ((good, 'tab:blue', 'in G~: in range, columns distinct (ids in [t_l, t_r])'),
              (~good & ~out, 'tab:red', 'in range, a column repeated (the bad set)'),
              (out, 'tab:gray', 'an entry out of range (-delta^-nd)'))
    handles = []
    for mask, color, label in groups:
      if not mask.any():
        continue
      for sign, marker in ((1, 'o'), (-1, 'x')):
        m = mask & (np.sign(q) == sign)
        if m.any():
          ax.scatter(idx[m], np.abs(q[m]), s=7, color=color, marker=marker)
      handles.append(Line2D([], [], ls='', marker='o', color=color, label=label))
    handles += [Line2D([], [], ls='', marker='o', color='k', mfc='none', label='id > 0'),
                Line2D([], [], ls='', marker='x', color='k', label='id < 0, drawn as |id|')]
    for t, name in ((cv['t_l'], 't_l'), (cv['t_r'], 't_r')):
      ax.axhline(t, color='k', lw=0.8, ls='--')
      ax.annotate(f'{name} = {t:.3g}', xy=(1.01, t), xycoords=('axes fraction', 'data'),
                  ha='left', va='center', fontsize=8)
    ax.set_yscale('log')
    ax.set_xlabel(f'point L of the extended grid G+ (index; all {q.shape[0]} points, '
                  'one mark per token)')
    ax.set_ylabel('|id| = |u^T g_c(L)_j|, every token j')
    ax.set_title(f'Contextual mapping (Lemma 8), d={net.d}, n={net.n}, N={net.resolution}')
    ax.legend(handles=handles, fontsize=7.5, loc='upper center', bbox_to_anchor=(0.5, -0.14),
              ncol=2, frameon=False)
    fig.tight_layout()
    paths.append(os.path.join(outdir, 'contextual_mapping_values.png'))
    outputs.atomic_savefig(fig, paths[-1], dpi=120)
    plt.close(fig)
  return paths


def _exact_or_estimate(row) -> float:
  """d_p(f_bar, g_bar) of a ladder row: the exact value when computed, else the estimate."""
  return (row.get('exact') or {}).get('dp_f_bar_g_bar', row['f_bar|g_bar']['value'])


def _no_bad_set_note(lad) -> str:
  largest = max(_exact_or_estimate(r) for r in lad['rows'])
  if largest == 0:
    return '(exactly 0: no bad set).'
  return f'(no bad set: 0 up to the float64 rounding of the values, largest {largest:.1e}).'


def _ci(e) -> str:
  return f'{e["value"]:.4g} [{e["ci_low"]:.4g}, {e["ci_high"]:.4g}]'


def _certificate_lines(certified) -> list:
  """The headline section: the certified d_p(f, g) (``yun.bounds.certificate``)."""
  if not certified:
    return []
  head = certified['headline']
  cert = head['certificate']
  t = cert['terms']
  arith = head.get('arithmetic', 'exact')
  runs = ('run in IEEE ' + ('binary64' if arith == 'float64' else 'binary32') + ' by a '
          'runtime that meets the model below (any summation order, with or without FMA; '
          'no TF32 or bfloat16 passes)' if arith != 'exact'
          else 'with exact rational weights')
  lines = ['## Certified: d_p(f, g) over the whole unit cube', '',
           f'**d_p(f, g) <= {cert["total"]:.4g} <= {head["epsilon"]:g}** (p = {cert["p"]:g}) '
           f'for a standard Transformer g {runs} (softmax attention, ReLU feed-forward, '
           f'{head["blocks"]} blocks, {head["weights"]:,} weights of '
           f'{head.get("bits_per_param", cert["bits"])} bits, construction '
           f'`{head["construction"]}`) at N = {cert["resolution"]}, found by `yun.approximate` in '
           f'{head["seconds"]:.1f} s. Every number below is a rigorous upper bound (exact '
           'rationals or arb balls rounded up), not a sample.'
           + (f' Float deviation |fl(g) - g| <= {cert["float_interior_sup"]:.3g} (interiors) '
              f'and {cert["float_window_sup"]:.3g} (windows), assuming '
              f'{cert["details"]["float"]["assumes"]}.' if arith != 'exact' else ''), '',
           '| term | bound |', '|---|---|',
           f'| d_p(f, f_bar) ({cert["f_term_method"]}; assuming {cert["assumes"]}) | '
           f'<= {t["f_fbar"]:.4g} |',
           f'| d_p(f_bar, g_bar) | <= {t["fbar_gbar"]:.4g} |',
           f'| d_p(g_bar, g): cube interiors ({100 * cert["interior_fraction"]:.6g}% of the '
           f'volume, sup <= {cert["interior_sup"]:.3g}) and ramp windows (measure '
           f'{cert["window_measure"]:.3g}, sup <= {cert["window_sup"]:.3g}) | <= {t["gbar_g"]:.4g} |',
           f'| total | <= {cert["total"]:.4g} |', '',
           f'Planned: lambda = {cert["lam"]:g}, ramp epsilon = {cert["epsilon"]:.3g}, '
           f'{cert["bits"]} bits, margin {cert["margin"]:.3g} delta.', '']
  if 'onnx' in head:
    o = head['onnx']
    lines += [f'The network is written beside this report as `{o["file"]}` ({arith}, '
              f'{o.get("layout", "scan")} layout). onnxruntime on {o["points"]:,} uniform '
              f'points: max |onnxruntime - JAX| = {o["max_abs_onnx_minus_jax"]:.3g}, sampled '
              f'd_p(f, g) = {o["sampled_dp"]:.4g} (certified <= {cert["total"]:.4g}). Check it '
              'yourself:', '', '```bash', o['command'], '```', '']
    pt = o.get('pytorch')
    if pt is not None and 'skipped' in pt:
      lines += [f'PyTorch: not run here ({pt["skipped"]}). With torch and onnx2torch '
                'installed:', '', '```bash', pt['command'], '```', '']
    elif pt is not None:
      lines += [f'PyTorch {pt["torch"]} (the file converted by onnx2torch) on '
                f'{pt["points"]:,} uniform points: max |PyTorch - JAX| = '
                f'{pt["max_abs_pytorch_minus_jax"]:.3g}'
                f'{" (bit-identical)" if pt["bit_identical_to_jax"] else ""}, sampled d_p(f, g) '
                f'= {pt["sampled_dp"]:.4g}. Check it yourself:', '', '```bash', pt['command'],
                '```', '']
  if 'saved' in head:
    sv = head['saved']
    lines += [f'The network and its certificate are saved beside this report as `{sv["file"]}` '
              f'(parameters hash `{sv["params_hash"]}`; `saved_network.load` checks it and '
              'refuses a changed file; docs/portable.md):', '', '```bash', sv['command'], '```',
              '']
  lines += [
           f'The paper\'s network at the main resolution, certified the same way (as the paper '
           'builds it, with the output clamp, and the tie-complete contextual map with the '
           'clamp). Every number is an upper bound; the paper\'s network as built has no bound '
           'on g in the ramp windows (its window sup is the certified enclosure of g there), '
           'which the clamp removes:', '',
           '| network | blocks | bits | d_p(f, f_bar) | d_p(f_bar, g_bar) | d_p(g_bar, g) | '
           'window sup | d_p(f, g) | s |', '|---|---|---|---|---|---|---|---|---|']
  for row in certified['main_resolution']:
    c = row['certificate']
    lines.append(f'| {row["label"]} | {row["blocks"]} | {c["bits"]} | '
                 f'<= {c["terms"]["f_fbar"]:.3g} | <= {c["terms"]["fbar_gbar"]:.3g} | '
                 f'<= {c["terms"]["gbar_g"]:.3g} | <= {c["window_sup"]:.3g} | '
                 f'<= {c["total"]:.4g} | {row["seconds"]:.1f} |')
  return lines + ['']


def write_report(result, path) -> None:
  """Markdown summary of a run (results/yun/approximation/default/approximate.md)."""
  c, prov = result['config'], result['provenance']
  lines = ['# Yun et al. Theorems 2/3 end to end: certified d_p(f, g), error decomposition', '',
           provenance.markdown_header(prov), '',
           f'Run time {result["seconds"]} s. Target `{c["target"]}`, d={c["d"]}, n={c["n"]}, '
           f'N={c["resolution"]}, p={c["p"]}, {c["samples"]} Monte Carlo samples (95% CI), '
           f'{"Theorem 3 (positional)" if result["positional"] else "Theorem 2"}.', '',
           *_certificate_lines(result.get('certified')),
           '## Depth (built vs the paper\'s formulas)', '',
           '| stage | built | formula |', '|---|---|---|']
  for key in ('quantization', 'contextual', 'value', 'total'):
    lines.append(f'| {key} | {result["depth"]["built"][key]} | {result["depth"]["formula"][key]} |')
  rd = result['realized_depth']
  dec = result['decomposition']
  lines += ['', f'## The {c["dtype"]} network: sampled error decomposition (not certified)', '',
            f'The paper\'s network realized in {c["dtype"]}: {rd["blocks"]} blocks of '
            f'T^{{2,1,4}} ({rd["attention_on"]} with attention on, {rd["feedforward_on"]} with '
            f'feed-forward on), lambda={c["lam"]:g}, epsilon={c["epsilon"]:g}'
            + (', output clamp' if c.get('clamp') else '') + f'. Each d_p is sampled on '
            f'{dec["samples"]} uniform points (95% CI).', '',
            '| term | d_p [95% CI] |', '|---|---|']
  for key, e in dec['estimates'].items():
    a, b = key.split('|')
    lines.append(f'| d_p({a}, {b}) | {_ci(e)} |')
  ex = dec.get('exact')
  if ex:
    lines += ['', f'Exact (whole grid): bad-set measure {ex["bad_set_measure"]:.6g}, '
              f'd_p(f_bar, g_bar) = {ex["dp_f_bar_g_bar"]:.6g}.']
    if not result['positional']:
      lines += ['', 'd_p(f, g_bar) is mostly d_p(f_bar, g_bar): the bad set (inputs with '
                'repeated columns, measure above) is where Theorem 2\'s g_bar is 0 instead '
                'of f_bar; elsewhere g_bar = f_bar.']
  if dec.get('precision_failure'):
    lines += ['', f'**Precision failure, not a measurement:** the {c["dtype"]} network g '
              'does not represent g_bar at this size (see the cube-interior check below), '
              'so d_p(g_bar, g) and d_p(f, g) measure rounding, not Lemma 6.']
    if dec.get('g_note'):
      lines += ['', dec['g_note']]
    lines += ['', 'The certified rows at the top hold instead.']
  elif dec.get('g_note'):
    lines += ['', 'Note: ' + dec['g_note']]
  rep = result['realization']
  lines += ['', f'On cube interiors ({rep["samples"]} points, {rep["margin"]} delta off each '
            f'edge): max |g - g_bar| = {rep["max_abs_error"]:.3g}, reproduces g_bar (within '
            f'{rep.get("tolerance", 0):g}): {rep["reproduces"]}.']
  lesson = result.get('lesson')
  if lesson:
    e, w = lesson['dp_g_bar_g'], lesson['windows']
    lines += ['', f'The lesson: the same {c["dtype"]} g without the output clamp (as the '
              f'paper builds it) has d_p(g_bar, g) = {_ci(e)} on the same samples; on a '
              f'second draw of {w.get("samples")} samples, {w.get("off_samples")} miss g_bar, '
              f'each within {w.get("max_edge_distance") or 0:.2g} of a cell edge (the ramp '
              f'windows), where g reaches {w.get("max_off", float("nan")):.3g}, the size of '
              'the contextual ids.']
  lines += ['', '## Resolution ladders', '']
  for lad in result['ladders']:
    thm = ('Theorem 3' if lad['positional'] else
           'Theorem 2, ties=complete' if lad.get('ties') == 'complete' else 'Theorem 2')
    lines += [f'### {lad["target"]} ({thm})', '',
              '| N | layers | d_p(f, f_bar) | d_p(f_bar, g_bar) | exact d_p(f_bar, g_bar) | '
              'd_p(f, g_bar) | build s |', '|---|---|---|---|---|---|---|']
    for r in lad['rows']:
      exact = r['exact']['dp_f_bar_g_bar'] if r['exact'] else float('nan')
      lines.append(f'| {r["resolution"]} | {r["layers"]} | {_ci(r["f|f_bar"])} | '
                   f'{_ci(r["f_bar|g_bar"])} | {exact:.4g} | {_ci(r["f|g_bar"])} | '
                   f'{r["build_seconds"]} |')
    fmt = lambda v: 'n/a' if v is None else f'{v:.3f}'  # noqa: E731
    sl, ts = lad['slopes'], lad['tail_slopes']
    lines += ['', f'Log-log slopes vs delta (all points / N in {lad["tail_resolutions"]}): '
              f'd_p(f, f_bar) {fmt(sl["f|f_bar"])} / {fmt(ts["f|f_bar"])} (theory 1 for a '
              f'Lipschitz f); d_p(f_bar, g_bar) {fmt(sl["f_bar|g_bar"])} / '
              f'{fmt(ts["f_bar|g_bar"])} '
              + (_no_bad_set_note(lad) if lad['theory_slope_f_bar_g_bar'] is None else
                 f'(theory d/p = {lad["theory_slope_f_bar_g_bar"]:g}).')
              + f' d_p(f, g_bar) {fmt(sl["f|g_bar"])} / {fmt(ts["f|g_bar"])}.', '']
  sw = result['sweeps']
  lines += ['## Lambda and epsilon sweeps (main configuration, float g, sampled)', '',
            f'd_p(g_bar, g) sampled on {c["sweep_samples"]} uniform points (95% CI); max '
            f'|g - g_bar| on {c["map_samples"]} cube-interior points. Verdict: "reproduces '
            'g_bar" = within the interior tolerance on every sampled interior point ("d_p '
            'from the ramp windows": and the windows carry most of the sampled d_p); "off" = '
            'not, with the cause: ramps wider than the interior margin, a softmax scale below '
            'the plan\'s, or the dtype\'s rounding amplified by the 1/epsilon ramps (more '
            'bits than the dtype has).', '',
            '| lambda | epsilon | d_p(g_bar, g) | samples off g_bar | max interior error | '
            'verdict |', '|---|---|---|---|---|---|']
  for key in ('lam', 'epsilon'):
    for r in sw[key]:
      verdict = r.get('verdict') or (
          'off' if not r['reproduces'] else
          'windows' if (r.get('window_share') or 0) > decomposition.WINDOW_DOMINANCE
          else 'reproduces')
      lines.append(f'| {r["lam"]:g} | {r["epsilon"]:g} | {_ci(r["dp_g_bar_g"])} | '
                   f'{r.get("off_samples", "-")} of {c["sweep_samples"]} | '
                   f'{r["max_interior_error"]:.3g} | {verdict} |')
  for why in sw.get('skipped_why') or []:
    lines += ['', f'Skipped epsilon={why}.']
  if result.get('precision_map'):
    lines += ['', '## Precision map (token_times_mean, Theorem 2)', '',
              'g "reproduces" g_bar when max |g - g_bar| <= '
              f'{plan.REPRODUCE_RTOL:g} max(1, max|A|) on {c["map_samples"]} cube-interior '
              f'points; lambda ladder {list(c["map_lams"])}, epsilon in {list(c["map_epsilons"])}.',
              '', '| d | n | N | layers | t_r | dtype | works | smallest lambda | epsilon | '
              'best max error |', '|---|---|---|---|---|---|---|---|---|---|']
    for r in result['precision_map']:
      lam = '-' if r['smallest_lam'] is None else f'{r["smallest_lam"]:g}'
      eps = '-' if r['epsilon'] is None else f'{r["epsilon"]:g}'
      lines.append(f'| {r["d"]} | {r["n"]} | {r["resolution"]} | {r["layers"]} | '
                   f'{r["t_r"]:.3g} | {r["dtype"]} | {"yes" if r["works"] else "no"} | {lam} | '
                   f'{eps} | {r["best_error"]:.3g} |')
  lines += ['', '## Figures', ''] + [f'![{os.path.basename(p)}]({os.path.basename(p)})'
                                     for p in result['figures']]
  outputs.atomic_write(path, '\n'.join(lines) + '\n')
