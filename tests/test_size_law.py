"""studies.size_law: the slope fit, the row grid, bad input, and one resumable row."""

import json
import os

import pytest

from transformer_ua.studies import size_law


def test_fit_slope_of_an_exact_power_law():
  eps = [0.5, 0.2, 0.1, 0.05]
  assert size_law.fit_slope(eps, [e ** -3 for e in eps]) == pytest.approx(-3.0, abs=1e-12)
  assert size_law.fit_slope(eps, [7.0] * 4) == pytest.approx(0.0, abs=1e-12)
  assert size_law.fit_slope([0.1], [5]) is None


def test_theorem3_target_gets_only_theorem3_constructions():
  specs = size_law.default_specs((('prefix_mean', 1, 2),), epsilons=(0.5,))
  assert {s.construction for s in specs} == {'positional', 'positional_wide',
                                             'positional_integer_ids'}
  assert {s.arithmetic for s in specs if s.construction == 'positional_integer_ids'} == \
      {'float64', 'float32'}
  specs = size_law.default_specs((('token_times_mean', 1, 2),), epsilons=(0.5, 0.2))
  assert {s.construction for s in specs} == {'paper', 'ties_complete', 'one_layer',
                                             'one_layer_wide', 'integer_ids'}
  assert len(specs) == 2 * (4 + 2)    # integer_ids twice: float64 and float32
  named = size_law.default_specs((('token_times_mean', 1, 2),), ('positional',), (0.5,))
  assert [s.construction for s in named] == ['positional']


@pytest.mark.parametrize('text', ['token_times_mean', 'token_times_mean:1', 'x:a:3', ''])
def test_bad_targets_are_one_line(text):
  with pytest.raises(ValueError, match='name:d:n'):
    size_law.parse_targets(text)


@pytest.mark.parametrize('eps', [0.0, -1.0, float('nan'), float('inf')])
def test_bad_epsilon_is_refused(eps):
  with pytest.raises(ValueError, match='positive finite'):
    size_law.default_specs((('token_times_mean', 1, 2),), epsilons=(eps,))


def test_unknown_construction_is_refused(tmp_path):
  spec = size_law.RowSpec('token_times_mean', 1, 2, 'nonesuch', 0.5)
  with pytest.raises(ValueError, match='construction'):
    size_law.study([spec], str(tmp_path))
  assert not os.listdir(tmp_path)


@pytest.mark.slow
def test_one_row_certifies_checks_and_resumes(tmp_path):
  spec = size_law.RowSpec('token_times_mean', 1, 2, 'one_layer_wide', 0.5)
  out = size_law.study([spec], str(tmp_path), row_minutes=5)
  (row,) = out['rows']
  assert row['status'] == 'certified'
  assert row['total'] <= 0.5
  assert row['params'] == row['params_closed_form']
  mc = row['monte_carlo']
  assert mc['points'] == {'interior': 1000, 'window': 1000}
  assert all(c['below'] for c in mc['compare'])
  assert mc['terms']['total']['ci_low'] <= row['total']
  lines = []
  size_law.study([spec], str(tmp_path), row_minutes=5, log=lines.append)
  assert '0 to run' in lines[0]
  with open(tmp_path / 'size_law.json') as f:
    assert json.load(f)['rows'][0]['total'] == row['total']


def test_report_only_runs_nothing_and_reports_missing_rows(tmp_path):
  spec = size_law.RowSpec('token_times_mean', 1, 2, 'one_layer_wide', 0.5)
  out = size_law.study([spec], str(tmp_path), report_only=True, log=lambda line: None)
  assert [r['status'] for r in out['rows']] == ['not run']
  assert not os.listdir(tmp_path / size_law.ROWS_DIR)
  text = (tmp_path / size_law.MARKDOWN).read_text()
  assert 'not run' in text and os.path.exists(tmp_path / size_law.FIGURE)


def test_fits_recover_a_power_law_over_all_and_the_smallest_epsilons():
  rows = [{'target': 't', 'd': 1, 'n': 3, 'construction': 'one_layer_wide',
           'status': 'certified', 'total': e, 'params': round(7 * e ** -3), 'blocks': 3}
          for e in (0.4, 0.2, 0.1, 0.05, 0.025)]
  (fit,) = size_law.fits(rows)
  assert fit['points'] == 5
  assert fit['params_slope'] == pytest.approx(-3, abs=1e-3)
  assert fit['params_slope_fine'] == pytest.approx(-3, abs=1e-3)
  assert fit['blocks_slope'] == pytest.approx(0, abs=1e-12)
  assert (fit['theory_params_slope'], fit['theory_blocks_slope']) == (-3, 0)


def test_grid_error_is_the_cube_mean_error_worked_by_hand():
  """token_times_mean (d=1, n=3): d_2(f, centre values)^2 by hand, less the 3 entries'
  squared mean shift (delta^2 / (12 n))^2; prefix_mean is linear (mean = centre)."""
  import math  # pylint: disable=import-outside-toplevel
  from one_layer_fixtures import token_times_mean_d2  # pylint: disable=import-outside-toplevel
  for N in (2, 3):
    want = math.sqrt(token_times_mean_d2(3, N) ** 2 - 3 * (1 / (36 * N * N)) ** 2)
    assert size_law.grid_error('token_times_mean', 1, 3, N) == pytest.approx(want, rel=1e-12)
  assert size_law.grid_error('attention_map', 1, 3, 2) is None
  rows = [{'target': 'token_times_mean', 'd': 1, 'n': 3, 'epsilon': 0.1, 'status': 'certified',
           'resolution': 5}]
  (b,) = size_law.grid_lower_bounds(rows)
  # E(N) ~ 0.378 / N by hand: E(3) ~ 0.126 > 0.1 >= E(4) ~ 0.0945
  assert (b['grid_lower_N'], b['smallest_N_certified']) == (4, 5)
