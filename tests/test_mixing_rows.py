"""transformer_ua.reports.mixing_rows: what the Appendix H sweep report reads."""

from transformer_ua.reports import mixing_rows


def test_last_quarter_gain_uses_the_eval_at_three_quarters():
  per_seed = {0: [(100, 5.0), (1400, 15.0), (1500, 16.0), (2000, 18.5)],
              1: [(100, 4.0), (1500, 20.0), (1900, 20.5)]}     # seed 1 did not finish
  assert mixing_rows.last_quarter_gain(per_seed, 2000) == [2.5]
  # 1900 steps: seed 0 has no eval there; seed 1's newest eval <= 1425 is step 100.
  assert mixing_rows.last_quarter_gain(per_seed, 1900) == [16.5]
