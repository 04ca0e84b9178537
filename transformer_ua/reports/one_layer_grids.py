r"""The certified one-layer contextual-mapping runs as a table and a figure.

Reads every ``*.json`` that ``experiments/verify_contextual_mapping.py
--contextual=one_layer`` (``verify.entry`` on the ``OneLayer`` variant, ``verify.one_layer``)
wrote under the given folders and writes, each atomically:

    grids.md    one row per run: (d, n, N), M = N^d, contexts, ids (repeated), lam, bits,
                certified and proved min id gap, violations, mpmath, float64, seconds,
                command, revision, load
    grids.png   certified and proved log2 id gap against log2 M, per n
"""

from __future__ import annotations

import glob
import json
import math
import os

from transformer_ua import outputs

#: The files ``write`` makes in its output folder.
WRITES = ('grids.md', 'grids.png')


def rows_of(indirs) -> list[dict]:
  """The one-layer run JSONs (those with ``certified_min_id_gap``) under ``indirs``, planned
  lam first, then by n, M, d."""
  rows = []
  for d in indirs:
    for path in sorted(glob.glob(os.path.join(d, '*.json'))):
      with open(path) as f:
        r = json.load(f)
      if 'certified_min_id_gap' in r:
        rows.append(r)
  rows.sort(key=lambda r: (r['lam'] != r['planned_lam'], r['n'], r['M'], r['d']))
  return rows


def write_md(path, rows):
  lines = [
      '# One softmax attention layer: certified contextual mapping on whole grids', '',
      'One row per run of `experiments/verify_contextual_mapping.py --contextual=one_layer` '
      '(every context = multiset of n cells, repeated cells included; every token of it). '
      '"ids": (context, token) pairs, M C(M+n-2, n-1), M = N^d. "min id gap": the '
      'certified smallest distance between two distinct ids (arb enclosures, rounded '
      'outward; consecutive enclosures sorted per token, and the token windows); '
      '"proved": the bound gamma of `yun.single_attention.one_layer` at the planned lam. "lam": planned '
      '(proved) or searched (the power of two with the largest certified gap; its '
      'separation rests on the certificate). "mpmath": ids re-evaluated at higher '
      'precision, all inside their enclosures; "float64": adjacent pairs whose certified '
      'gap exceeds the float64 error bound, all ordered alike by a float64 brute force '
      '(the rest are below float64 resolution). Seconds: the whole check (enclosures, '
      'certificate, mpmath, float64); load: 1-minute load average at the start (2 cores, '
      'shared with other jobs).', '',
      '| (d, n, N) | M | contexts | ids (repeated) | lam | bits | min id gap | proved | '
      'violations | mpmath | float64 ok / below res. | seconds | command | revision | load |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
  for r in rows:
    prov = r['provenance']
    lam = (f"2^{r['log2_lam']:.0f}" if r['log2_lam'] is not None else '0')
    lam += '' if r['lam'] == r['planned_lam'] else ' (search)'
    f64 = r.get('float64') or {}
    lines.append(
        f"| ({r['d']}, {r['n']}, {r['resolution']}) | {r['M']} | {r['contexts']:,} | "
        f"{r['ids']:,} ({r['ids_with_repeated_tokens']:,}) | {lam} | {r['bits']} | "
        f"{r['certified_min_id_gap']:.3g} | {r['proved_min_id_gap']:.3g} | "
        f"{r['violations']} | {r['mpmath']['rows'] - r['mpmath']['outside']}/"
        f"{r['mpmath']['rows']} inside | {f64.get('pairs_checked', 0):,} / "
        f"{f64.get('pairs_below_float64_resolution', 0):,} | {r['seconds']:.1f} | "
        f"`{prov['command']}` | `{prov['git_revision'][:12]}` | "
        f"{prov['load_average_1min_at_start']} |")
  if rows:
    lines += ['', f"Machine: {rows[0]['provenance']['machine']}.", '',
              f'Figure: `{os.path.basename(path)[:-3]}.png` (certified and proved '
              'log2 id gap against log2 M, per n).', '']
  with outputs.atomic_open(path) as f:
    f.write('\n'.join(lines))


def write_png(path, rows):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for i, n in enumerate(sorted({r['n'] for r in rows})):
    color = f'C{i}'   # one color per n; marker and line style per kind
    for searched, style in ((False, 'o-'), (True, 's:')):
      sel = sorted((r for r in rows
                    if r['n'] == n and (r['lam'] != r['planned_lam']) == searched),
                   key=lambda r: r['M'])
      sel = list({r['M']: r for r in sel}.values())
      if not sel:
        continue
      x = [math.log2(r['M']) for r in sel]
      ax.plot(x, [math.log2(r['certified_min_id_gap']) for r in sel], style, color=color,
              label=f"n={n} certified ({'searched' if searched else 'planned'} lam)")
      if not searched:
        ax.plot(x, [math.log2(r['proved_min_id_gap']) for r in sel], 'x--', alpha=0.5,
                color=color, label=f'n={n} proved bound')
  ax.set_xlabel('log2 M  (M = N^d cells)')
  ax.set_ylabel('log2 min id gap')
  ax.legend(fontsize=6, ncol=2)
  ax.set_title('one softmax attention layer: certified vs proved id gap')
  fig.tight_layout()
  outputs.atomic_savefig(fig, path, dpi=120)


def write(indirs, out_dir: str) -> tuple[int, str, str]:
  """``WRITES`` in ``out_dir`` from the runs under ``indirs``; returns (runs, md, png).

  Raises:
    ValueError: no one-layer run JSON under ``indirs``.
  """
  rows = rows_of(indirs)
  if not rows:
    raise ValueError(f'--indirs: no one-layer run JSON in {", ".join(indirs)}.')
  md, png = (os.path.join(out_dir, name) for name in WRITES)
  write_md(md, rows)
  write_png(png, rows)
  return len(rows), md, png
