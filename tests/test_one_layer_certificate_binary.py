"""experiments/one_layer_certificate.py: tiny end to end, and its one-line refusals."""

import json
import math
import os
import subprocess
import sys

import pytest

from transformer_ua.studies import one_layer_certificate

from one_layer_fixtures import token_times_mean_d2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, 'experiments', 'one_layer_certificate.py')


def _run(*args):
  return subprocess.run([sys.executable, BINARY, *args], capture_output=True, text=True,
                        timeout=600, cwd=ROOT)


def test_tiny_end_to_end_and_no_silent_overwrite(tmp_path):
  r = _run(f'--output_dir={tmp_path}', '--configs=token_times_mean:1,2,3', '--margin_log2=10')
  assert r.returncode == 0, r.stderr
  res = json.loads((tmp_path / 'one_layer_certificate.json').read_text())
  rows = {row['method']: row for row in res['rows']}
  assert set(rows) == {'paper', 'one_layer'} and res['provenance']['git_revision']
  # d_p(f, f_bar) exactly (yun.bounds.f_term), below the Lipschitz bound L (delta / 2)
  # (nd nd / (nd + p))^(1/2) = 2 / 6 * sqrt(4 / 4) = 1/3 for token_times_mean (L = 2),
  # N = 3, nd = 2
  for row in rows.values():
    assert row['terms']['f_fbar'] == pytest.approx(token_times_mean_d2(2, 3), rel=1e-12)
    assert row['terms']['f_fbar'] < 1 / 3
    assert row['total'] >= sum(row['terms'].values()) - 1e-15
  assert rows['one_layer']['attention_layers'] == 1
  assert rows['one_layer']['terms']['fbar_gbar'] == 0.0
  # the paper's map at n = 2 has the repeated-cell cubes as its bad set
  assert rows['paper']['terms']['fbar_gbar'] > 0
  assert math.isfinite(rows['paper']['total'])
  md = (tmp_path / 'one_layer_certificate.md').read_text()
  assert '| token_times_mean (1,2,3) | one_layer | 1 |' in md
  again = _run(f'--output_dir={tmp_path}', '--configs=token_times_mean:1,2,3')
  assert again.returncode == 2 and 'pass --overwrite' in again.stderr
  assert 'Traceback' not in again.stderr


@pytest.mark.parametrize('args,fragment', [
    (('--configs=token_times_mean',), 'is not target:d,n,N'),
    (('--configs=;',), '--configs is empty'),
    (('--margin_log2=1',), 'must be >= 2'),
    (('--workers=0',), 'must be >= 1'),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, fragment):
  r = _run(f'--output_dir={tmp_path}', *args)
  assert r.returncode == 2 and fragment in r.stderr and 'Traceback' not in r.stderr
  assert not os.listdir(tmp_path)


def test_configs_parse_to_tuples():
  assert one_layer_certificate.parse_configs(' token_times_mean:1,3,8; attention_map:2,2,4;') == [
      ('token_times_mean', 1, 3, 8), ('attention_map', 2, 2, 4)]
  with pytest.raises(ValueError, match='is not target:d,n,N'):
    one_layer_certificate.parse_configs('token_times_mean:1,3')
