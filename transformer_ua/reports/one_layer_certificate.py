r"""Report of experiments/one_layer_certificate.py (whole-domain certificates of d_p(f, g):
one softmax attention layer against the paper's N^d + 1).

``write_md`` writes one_layer_certificate.md from the study's rows
(``studies.one_layer_certificate``; the JSON next to it): per (configuration, method)
the attention layers, blocks, bits, margin, the three certified terms

  d_p(f, g) <= d_p(f, f_bar) + d_p(f_bar, g_bar) + d_p(g_bar, g) = total,

the interior and window sups, the window volume, and seconds. Written atomically
(``transformer_ua.outputs``).
"""

from __future__ import annotations

from transformer_ua import outputs, provenance


def write_md(path: str, rows: list, prov: dict) -> None:
  """one_layer_certificate.md: the table of the rows."""
  lines = [
      '# Whole-domain certificate of d_p(f, g): one attention layer vs the paper', '',
      provenance.markdown_header(prov),
      'Each row: g realized as a standard Transformer (T^{2,1,4} blocks, exact rational '
      'params, output clamp) and `yun.certify_lp`: a proved upper bound on d_p(f, g) over '
      'the whole unit cube, p = 2, as d_p(f, f_bar) + d_p(f_bar, g_bar) + d_p(g_bar, g). '
      '"attention": blocks whose attention writes to the residual stream; "bits": the arb '
      'precision of the certificate (the plan\'s); "margin": cube interiors shrunk by '
      'margin delta per side, the rest (the windows, of volume "windows") bounded by one '
      'enclosure of g on the whole cube; "window sup" <= the range of f_bar by the clamp. '
      'Seconds are certify_lp\'s on a shared 2-core machine ("load": 1-minute load when '
      'the row started).', '',
      '| configuration | method | attention | blocks | bits | margin | d(f, f_bar) | '
      'd(f_bar, g_bar) | d(g_bar, g) | total | interior sup | window sup | windows | '
      'build s | certify s | load |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
  for r in rows:
    t = r['terms']
    lines.append(
        f"| {r['target']} ({r['d']},{r['n']},{r['resolution']}) | {r['method']} | "
        f"{r['attention_layers']} | {r['blocks']} | {r['bits']} | 2^{r['margin_log2']} | "
        f"{t['f_fbar']:.4g} | {t['fbar_gbar']:.4g} | {t['gbar_g']:.4g} | {r['total']:.4g} | "
        f"{r['interior_sup']:.3g} | {r['window_sup']:.3g} | {r['window_measure']:.3g} | "
        f"{r['build_s']:.1f} | {r['certify_s']:.1f} | {r['load_1min']} |")
  lines.append('')
  outputs.atomic_write(path, '\n'.join(lines))
