r"""The trained line on the size law: certified parameters against epsilon, beside the
constructions.

Inputs: the size law's rows (``results/yun/size_law/size_law.json``: the project's
constructions, each the smallest it could certify) and the records of
``experiments/train_and_certify.py`` (one ``record.json`` per trained row: the smallest
trained network whose ``certify_network`` certificate reached epsilon). For each target
(f, d, n) and arithmetic the figure plots parameters against the certified epsilon, one
marker per certified row, log-log (the smallest reached per epsilon; the ladder's rows and
the stock encoder blocks' (``family`` 'stock_*', certify/stock_candidates.py) as two
lines); the table gives each row's parameters, non-zero
parameters, bits, certified total and sampled d_2.

Parameters are counted the same way on both sides (every weight entry, zeros included);
bits are 53 per float64 parameter and 24 per float32 one.
"""

from __future__ import annotations

import glob
import json
import os

import matplotlib
import matplotlib.ticker

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

from transformer_ua import outputs, provenance  # noqa: E402
from transformer_ua.decimal_text import bound_text  # noqa: E402

#: What ``write`` puts into its output directory.
OUTPUT_FILES = ('trained_size_law.png', 'trained_size_law.md')


def trained_rows(rows_dir: str) -> list[dict]:
  """The rows (a certificate, reached or not) of every ``record.json`` under ``rows_dir``,
  at any depth, with provenance."""
  out = []
  for path in sorted(glob.glob(os.path.join(rows_dir, '**', 'record.json'), recursive=True)):
    with open(path) as f:
      rec = json.load(f)
    row = rec.get('row')
    if row is None:
      continue
    out.append({**row, 'seconds': rec['seconds'], 'provenance': rec['provenance'],
                'record': os.path.relpath(path, rows_dir)})
  return out


def is_stock(row: dict) -> bool:
  """Whether a trained row is a stock encoder block (``family`` 'stock_*'; rows written
  before the stock candidates have no family: the ladder)."""
  return str(row.get('family', 'ladder')).startswith('stock')


def construction_rows(size_law_json: str) -> list[dict]:
  with open(size_law_json) as f:
    rows = json.load(f)['rows']
  return [r for r in rows if r.get('status') == 'certified']


def figure(trained: list[dict], constructions: list[dict], path: str) -> None:
  """Parameters against epsilon per target: the smallest certified construction and the
  smallest trained network whose certificate reached epsilon (PNG)."""
  keys = sorted({(r['target'], r['d'], r['n']) for r in trained})
  fig, axes = plt.subplots(1, len(keys), figsize=(5.2 * len(keys), 4.4), squeeze=False)
  for ax, (t, d, n) in zip(axes[0], keys):
    for arithmetic, marker in (('float64', 'o'), ('float32', 's'), ('exact', '^')):
      cons = sorted((r['epsilon'], r['params']) for r in constructions
                    if (r['target'], r['d'], r['n'], r['arithmetic']) == (t, d, n, arithmetic))
      best = {}
      for eps, params in cons:                        # the smallest construction per epsilon
        best[eps] = min(params, best.get(eps, params))
      if best:
        xs = sorted(best)
        ax.plot(xs, [best[x] for x in xs], marker + '--', alpha=0.6,
                label=f'construction, {arithmetic}')
      for stock in (False, True):   # the ladder's line, and the stock blocks' beside it
        reached = {}
        for r in trained:         # the smallest certified (reached) network per epsilon
          if (r['target'], r['d'], r['n'], r['arithmetic']) == (t, d, n, arithmetic) and \
              r.get('reached') and is_stock(r) == stock:
            reached[r['epsilon']] = min(r['parameters'],
                                        reached.get(r['epsilon'], r['parameters']))
        tr = sorted(reached.items())
        if tr:                # float64 and float32 rows often coincide: thick and hollow
          ax.plot([e for e, _ in tr], [p for _, p in tr], ('D' if stock else marker) + '-',
                  lw=3.5 if arithmetic == 'float64' else 1.5,
                  mfc='none' if arithmetic == 'float32' else None, ms=9,
                  label=f'trained{" stock block" if stock else ""}, {arithmetic}')
    ax.set_xscale('log')
    ax.set_yscale('log')
    ticks = (0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005)
    ax.set_xticks(ticks, [f'{t:g}' for t in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.invert_xaxis()
    ax.set_xlabel('certified epsilon (d_2)')
    ax.set_ylabel('parameters')
    ax.set_title(f'{t} (d={d}, n={n})')
    ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def table(trained: list[dict]) -> str:
  """One markdown row per trained certificate."""
  lines = ['| target | d | n | arithmetic | family | epsilon | reached | parameters | '
           'non-zero | bits | certified d_2 | sampled d_2 (JAX) | sampled d_2 (onnxruntime) | '
           'seconds | revision | load | record |', '|' + '---|' * 17]
  for r in sorted(trained, key=lambda r: (r['target'], r['d'], r['arithmetic'],
                                          -r['epsilon'])):
    runs = r.get('independent_check', {})
    def dp(name):
      row = runs.get(name, {})
      return f"{row['d_p']:.4g}" if 'd_p' in row else row.get('skipped', '-')
    prov = r['provenance']
    lines.append(
        f"| {r['target']} | {r['d']} | {r['n']} | {r['arithmetic']} | "
        f"{r.get('family', 'ladder')} | {r['epsilon']:g} | "
        f"{'yes' if r.get('reached') else '**no** (best total)'} | {r['parameters']:,} | {r['nonzero_parameters']:,} | "
        f"{r['parameters'] * r['bits_per_parameter']:,} | {bound_text(r['certified_total'], 4)} | "
        f"{dp('jax')} | {dp('onnxruntime')} | {r['seconds']:.0f} | "
        f"{str(prov.get('git_revision', ''))[:7]} | "
        f"{prov.get('load_average_1min_at_start', '')} | {r['record']} |")
  return '\n'.join(lines) + '\n'


def write(rows_dir: str, size_law_json: str, output_dir: str, *, command: str | None = None
          ) -> int:
  """The figure and the table into ``output_dir`` (which exists); returns the row count."""
  trained = trained_rows(rows_dir)
  if not trained:
    raise ValueError(f'no certified trained row (record.json with a row) under {rows_dir}.')
  prov = provenance.record(command)         # before the figure: the tree as it was asked
  figure(trained, construction_rows(size_law_json),
         os.path.join(output_dir, 'trained_size_law.png'))
  text = ('# Trained networks on the size law\n\n' + provenance.markdown_header(prov, 'report command')
          + '\n' + table(trained)
          + '\nEach row: the smallest trained network whose `certify_network` certificate '
            'reached epsilon (its record.json holds its own command, revision and load).\n')
  outputs.atomic_write(os.path.join(output_dir, 'trained_size_law.md'), text)
  return len(trained)
