"""The paper's Appendix H claims, judged on the sweep's rows (``reports.mixing_sweep``).

A claim that a is above b is judged on d = mean_a - mean_b against its standard error
SE = sqrt(s_a^2 / n_a + s_b^2 / n_b): holds (d > 0, |d| >= SE_MULTIPLE SE), fails
(d < 0, |d| >= SE_MULTIPLE SE) or not resolved (see ``reports.mixing_sweep``'s doc for the
seed noise of single runs and ``own_seeds``).
"""

from __future__ import annotations

import numpy as np

from transformer_ua.reports.mixing_rows import NAMES, TABLE_MODELS


# Paper, Table 1 (BERT-base; MLM and MNLI accuracy %) and Figure 1's reading.
PAPER_TABLE1 = {'mlm_accuracy': {'average': 28, 'bilinear': 59, 'sepconv': 60, 'attention': 63},
                'mnli_accuracy': {'average': 66, 'bilinear': 72.3, 'sepconv': 73,
                                  'attention': 78.2}}
SE_MULTIPLE = 2   # a difference counts when |d| >= 2 standard errors
OWN_SEEDS_MIN = 2  # own_seeds: a side needs this many finished seeds to have a spread


def compare(a, b, own_seeds=False):
  """(mean_a - mean_b, its standard error or None) of two mean_std() summaries.

  SE = sqrt(s_a^2 / n_a + s_b^2 / n_b) with sample variances. One run has no spread of its
  own: it uses its ``seed_std`` when the summary carries one (a seed-noise estimate made
  elsewhere, e.g. from the same model's seeds under a shorter schedule), else it borrows
  the other side's variance (sample, or its ``seed_std``); SE is None when neither side
  has any. ``own_seeds``: only sample variances; SE is None unless both sides have
  >= OWN_SEEDS_MIN runs.
  """
  def var(x):
    if x['n'] > 1 and x['n'] >= (OWN_SEEDS_MIN if own_seeds else 2):
      return float(np.var(x['values'], ddof=1))
    if own_seeds:
      return None
    return float(x['seed_std']) ** 2 if x.get('seed_std') is not None else None
  va, vb = var(a), var(b)
  if own_seeds and (va is None or vb is None) or va is None and vb is None:
    return a['mean'] - b['mean'], None
  va, vb = (vb if va is None else va), (va if vb is None else vb)
  return a['mean'] - b['mean'], float(np.sqrt(va / a['n'] + vb / b['n']))


def verdict(d, se, sign):
  """'holds' / 'fails' / 'not resolved' for a claim that d has the sign ``sign``."""
  if se is None:
    return 'not judged (one run on each side, no spread)'
  if abs(d) < SE_MULTIPLE * se:
    return f'not resolved (|difference| < {SE_MULTIPLE} SE)'
  return 'holds' if d * sign > 0 else 'fails (the opposite, by >= 2 SE)'


def _lacking(missing, *sides):
  """'; missing: run/stage, ...' for the ``missing`` lists of ``sides`` (or '')."""
  runs = [x for side in sides for x in (missing or {}).get(side, ())]
  return f'; missing: {", ".join(runs)}' if runs else ''


def own_verdict(d, se, sign, n, missing_text):
  """claims()' verdict with ``own_seeds``: verdict(), or 'not judged' naming the runs
  that each side lacks; a judged claim with runs still missing names them too."""
  if se is None:
    return (f'not judged (n = {n}: needs >= {OWN_SEEDS_MIN} finished seeds a side, each side '
            f'its own{missing_text})')
  return verdict(d, se, sign) + (f' (at n = {n}{missing_text})' if missing_text else '')


def claims(table, figure, L, baselines, own_seeds=False, missing=None):
  """[(claim, measured, verdict)] of the paper's Appendix H claims, from finished runs
  (``figure=None``: Table 1's claims only).

  ``own_seeds``: every side is judged on its own seeds only (compare()), and every claim
  is listed, also one with no run on a side; ``missing`` ({('table', mixer, field) |
  ('figure', k, field): [run/stage, ...]}) names the runs a side lacks, in the verdict.
  """
  out = []
  empty = {'n': 0}

  def check(claim, a, b, sign, unit='points', sides=()):
    if own_seeds:
      a, b = a or empty, b or empty
      lack = _lacking(missing, *sides)
      if not (a['n'] and b['n']):
        out.append((claim, f'— (n = {a["n"]} vs {b["n"]})',
                    own_verdict(0, None, sign, f'{a["n"]} vs {b["n"]}', lack)))
        return
    if a and b:
      d, se = compare(a, b, own_seeds)
      pm = f' ± {se:.1f}' if se is not None else ''
      n = f'{a["n"]} vs {b["n"]}'
      out.append((claim, f'{d:+.1f}{pm} {unit} (n = {n})',
                  own_verdict(d, se, sign, n, lack) if own_seeds else verdict(d, se, sign)))

  for key, what in (('mlm_accuracy', 'MLM'), ('mnli_accuracy', 'MNLI analogue')):
    paper = PAPER_TABLE1[key]
    t = lambda m: ('table', m, key)
    for m in ('bilinear', 'sepconv', 'attention'):
      check(f'{what}: {NAMES[m]} above average attention (paper {paper[m]} vs '
            f'{paper["average"]})', table[m][key], table['average'][key], +1,
            sides=(t(m), t('average')))
    check(f'{what}: SepConv above BProj (paper {paper["sepconv"]} vs {paper["bilinear"]})',
          table['sepconv'][key], table['bilinear'][key], +1, sides=(t('sepconv'), t('bilinear')))
    check(f'{what}: Transformer above SepConv (paper {paper["attention"]} vs '
          f'{paper["sepconv"]})', table['attention'][key], table['sepconv'][key], +1,
          sides=(t('attention'), t('sepconv')))
  if 'mnli' in (baselines or {}):
    base = baselines['mnli']['majority_baseline_accuracy']
    for m in TABLE_MODELS:
      a = table[m]['mnli_accuracy']
      claim = f'MNLI analogue: {NAMES[m]} above the majority class ({base:.1f}%)'
      if own_seeds:
        lack = _lacking(missing, ('table', m, 'mnli_accuracy'))
        if not a:
          out.append((claim, '— (n = 0)', own_verdict(0, None, +1, '0', lack)))
          continue
        se = a['std'] / np.sqrt(a['n']) if a['n'] >= OWN_SEEDS_MIN and a['n'] > 1 else None
        d = a['mean'] - base
        pm = f' ± {se:.1f}' if se is not None else ''
        out.append((claim, f'{d:+.1f}{pm} points (n = {a["n"]})',
                    own_verdict(d, se, +1, str(a['n']), lack)))
      elif a:
        se = a['std'] / np.sqrt(a['n']) if a['n'] > 1 else a.get('seed_std')
        d = a['mean'] - base
        pm = f' ± {se:.1f}' if se is not None else ''
        out.append((claim, f'{d:+.1f}{pm} points (n = {a["n"]})',
                    verdict(d, se, +1) if se is not None else 'not judged (one run, no spread)'))
  for key, what in (('mlm_accuracy', 'MLM'), ('mnli_accuracy', 'MNLI analogue'),
                    ('squad_f1', 'SQuAD-analogue F1')) if figure else ():
    for k in range(1, L + 1):      # k = L: every layer SepConv (the table's SepConv)
      sign, how = (+1, 'better') if k <= 2 else (-1, 'worse')
      check(f'Figure 1, {what}: k = {k} SepConv layers {how} than the Transformer',
            figure[k][key], figure[0][key], sign, sides=(('figure', k, key), ('figure', 0, key)))
  return out
