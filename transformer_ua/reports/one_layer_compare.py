r"""Report of experiments/one_layer_compare.py (Theorem 2: one softmax attention layer
against Yun et al.'s N^d + 1 hardmax layers, both realized and certified).

From the study's rows (``studies.one_layer_compare``; the JSON next to the report):

  ``write_md``   one_layer_compare.md: per (configuration, method) the layer counts,
                 params, lam, epsilon, bits, min id gap, seconds, the certified
                 max |g - g_bar| over every cube interior, the bad set and d_2(f_bar,
                 g_bar), the float64 sampled error and the load
  ``write_png``  one_layer_compare.png: attention layers (writing), realized blocks,
                 certificate bits and certify seconds per configuration and method

Every file is written atomically (``transformer_ua.outputs``).
"""

from __future__ import annotations

from transformer_ua import outputs, provenance


def write_md(path: str, rows: list, prov: dict, float_samples: int) -> None:
  """one_layer_compare.md from the rows; ``float_samples``: points of the float64 column."""
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
      f'params rounded to float64, on {float_samples} sampled cube-interior points '
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


def write_png(path: str, rows: list, methods: tuple) -> None:
  """one_layer_compare.png: four bar charts, one bar per method (in ``methods``' order)."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  labels = list(dict.fromkeys(r['label'] for r in rows))
  fig, axes = plt.subplots(1, 4, figsize=(18, 4.5))
  width = 0.8 / len(methods)
  for ax, key, title, log in ((axes[0], 'attention_on', 'attention layers (writing)', True),
                              (axes[1], 'blocks', 'realized blocks', True),
                              (axes[2], 'bits', 'certificate bits', False),
                              (axes[3], 'certify_s', 'certify seconds (shared machine)', True)):
    for m, method in enumerate(methods):
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
