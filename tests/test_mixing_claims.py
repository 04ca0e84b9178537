"""transformer_ua.reports.mixing_claims: the paper's Appendix H claims judged on seeds."""

import numpy as np
import pytest

from transformer_ua.reports import mixing_claims, mixing_rows


def test_claims_compare_means_against_two_standard_errors():
  ms = mixing_rows.mean_std
  # a - b = 3, SE = sqrt(1/3 + 1/3) = 0.816: 3 >= 2 SE -> the sign decides.
  d, se = mixing_claims.compare(ms([20.0, 21.0, 22.0]), ms([17.0, 18.0, 19.0]))
  assert (d, se) == (pytest.approx(3.0), pytest.approx(np.sqrt(2 / 3)))
  assert mixing_claims.verdict(d, se, +1) == 'holds'
  assert mixing_claims.verdict(-d, se, +1).startswith('fails')
  assert mixing_claims.verdict(1.0, se, +1).startswith('not resolved')
  # one run borrows the other side's variance (1): SE = sqrt(1/3 + 1/1).
  assert mixing_claims.compare(ms([25.0]), ms([20.0, 21.0, 22.0]))[1] == pytest.approx(
      np.sqrt(4 / 3))
  assert mixing_claims.compare(ms([25.0]), ms([20.0]))[1] is None
  assert mixing_claims.verdict(5.0, None, +1).startswith('not judged')
  empty = dict.fromkeys(('mlm_accuracy', 'mnli_accuracy', 'squad_f1'))
  table = {m: dict(empty) for m in mixing_rows.TABLE_MODELS}
  table['average']['mlm_accuracy'] = ms([18.0, 18.2, 18.4])
  table['attention']['mlm_accuracy'] = ms([21.0, 21.2, 21.4])
  table['sepconv']['mlm_accuracy'] = ms([25.0, 25.2, 25.4])
  table['attention']['mnli_accuracy'] = ms([40.0, 41.0, 42.0])
  figure = {k: dict(empty) for k in range(5)}
  figure[0]['mlm_accuracy'] = table['attention']['mlm_accuracy']
  figure[1]['mlm_accuracy'] = ms([21.3])
  rows = {c: (m, v) for c, m, v in mixing_claims.claims(
      table, figure, 4, {'mnli': {'majority_baseline_accuracy': 36.0}})}
  assert rows['MLM: Transformer above average attention (paper 63 vs 28)'][1] == 'holds'
  assert rows['MLM: Transformer above SepConv (paper 63 vs 60)'][1].startswith('fails')
  m, v = rows['MNLI analogue: Transformer above the majority class (36.0%)']
  assert m.startswith('+5.0 ± 0.6 points') and v == 'holds'   # SE = 1 / sqrt(3)
  m, v = rows['Figure 1, MLM: k = 1 SepConv layers better than the Transformer']
  assert m.startswith('+0.1 ± 0.2') and v.startswith('not resolved')
  assert not any('BProj' in c for c in rows)                   # no BProj runs: no claim
  assert not any('k = 2' in c for c in rows)


def test_own_seeds_claims_borrow_no_noise_and_name_the_missing_runs():
  ms = mixing_rows.mean_std
  three = ms([20.0, 21.0, 22.0])
  # one run has no spread of its own: no SE, whatever the other side or its seed_std
  assert mixing_claims.compare(ms([25.0]), three, own_seeds=True)[1] is None
  assert mixing_claims.compare(dict(ms([25.0]), seed_std=1.0), three, own_seeds=True)[1] is None
  # two seeds (var 2) against three (var 1): SE = sqrt(2/2 + 1/3) = sqrt(4/3)
  d, se = mixing_claims.compare(ms([23.0, 25.0]), three, own_seeds=True)
  assert (d, se) == (pytest.approx(3.0), pytest.approx(np.sqrt(4 / 3)))
  empty = dict.fromkeys(('mlm_accuracy', 'mnli_accuracy', 'squad_f1'))
  table = {m: dict(empty) for m in mixing_rows.TABLE_MODELS}
  table['average']['mlm_accuracy'] = ms([18.0])
  table['sepconv']['mlm_accuracy'] = ms([23.0, 25.0])
  table['attention']['mlm_accuracy'] = three
  table['attention']['mnli_accuracy'] = ms([40.0])
  figure = {k: dict(empty) for k in range(5)}
  figure[0]['mlm_accuracy'], figure[4]['mlm_accuracy'] = three, table['sepconv']['mlm_accuracy']
  missing = {('table', 'average', 'mlm_accuracy'): ['average_s1/pretrain', 'average_s2/pretrain'],
             ('table', 'sepconv', 'mlm_accuracy'): ['sepconv_s2/pretrain'],
             ('figure', 4, 'mlm_accuracy'): ['sepconv_s2/pretrain'],     # k = L: SepConv
             ('table', 'attention', 'mnli_accuracy'): ['attention_s1/mnli'],
             ('figure', 1, 'mlm_accuracy'): ['hybrid_k1_s0/pretrain']}
  rows = {c.split(' (')[0]: (m, v) for c, m, v in mixing_claims.claims(
      table, figure, 4, {'mnli': {'majority_baseline_accuracy': 36.0}}, True, missing)}
  # the borrowing report would judge this one (SE sqrt(1/3 + 1)); here it names what is missing
  assert rows['MLM: Transformer above average attention'] == (
      '+3.0 points (n = 3 vs 1)', 'not judged (n = 3 vs 1: needs >= 2 finished seeds a side, '
      'each side its own; missing: average_s1/pretrain, average_s2/pretrain)')
  assert rows['MLM: SepConv above BProj'][0] == '— (n = 2 vs 0)'
  # judged on 2 vs 3 seeds (d = 3 >= 2 sqrt(4/3) = 2.31), the seed still missing named
  assert rows['Figure 1, MLM: k = 4 SepConv layers worse than the Transformer'] == (
      '+3.0 ± 1.2 points (n = 2 vs 3)', 'fails (the opposite, by >= 2 SE) (at n = 2 vs 3; '
      'missing: sepconv_s2/pretrain)')
  assert rows['MLM: Transformer above SepConv'][1] == (
      'fails (the opposite, by >= 2 SE) (at n = 3 vs 2; missing: sepconv_s2/pretrain)')
  # every claim is listed, also one without any run on a side
  assert rows['Figure 1, MLM: k = 1 SepConv layers better than the Transformer'] == (
      '— (n = 0 vs 3)', 'not judged (n = 0 vs 3: needs >= 2 finished seeds a side, each side '
      'its own; missing: hybrid_k1_s0/pretrain)')
  assert 'Figure 1, SQuAD-analogue F1: k = 2 SepConv layers better than the Transformer' in rows
  assert rows['MNLI analogue: Transformer above the majority class'] == (
      '+4.0 points (n = 1)', 'not judged (n = 1: needs >= 2 finished seeds a side, each side '
      'its own; missing: attention_s1/mnli)')
  assert rows['MNLI analogue: BProj above the majority class'][0] == '— (n = 0)'
  assert len(rows) == 10 + 4 + 12
