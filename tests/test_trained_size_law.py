"""reports.trained_size_law: rows read from records, the table rounds bounds up, the figure
is written; the binary refuses bad paths in one line."""

import json
import os
import subprocess
import sys

import pytest

from transformer_ua.reports import trained_size_law

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _record(path, eps, params, total, arithmetic='float64', family=None):
  os.makedirs(path)
  row = {} if family is None else {'family': family}
  row.update({'target': 'token_times_mean', 'd': 1, 'n': 3, 'p': 2.0, 'epsilon': eps,
         'arithmetic': arithmetic, 'reached': True, 'parameters': params,
         'nonzero_parameters': params - 3, 'bits_per_parameter': 53,
         'certified_total': total, 'independent_check': {
             'jax': {'d_p': total / 3}, 'onnxruntime': {'skipped': 'no writer'}}})
  prov = {'command': 'python x', 'git_revision': 'abcdef123', 'machine': 'm',
          'load_average_1min_at_start': 1.5, 'utc_time': 't', 'python': '3.11'}
  with open(os.path.join(path, 'record.json'), 'w') as f:
    json.dump({'row': row, 'seconds': 12.0, 'provenance': prov}, f)


def test_table_and_figure(tmp_path):
  rows = tmp_path / 'rows'
  _record(str(rows / 'a'), 0.05, 120, 0.04123456)
  _record(str(rows / 'b'), 0.01, 400, 0.0091, 'float32')
  os.makedirs(rows / 'c')
  with open(rows / 'c' / 'record.json', 'w') as f:
    json.dump({'row': None, 'seconds': 1.0, 'provenance': {}}, f)     # no certificate
  law = tmp_path / 'law.json'
  law.write_text(json.dumps({'rows': [
      {'target': 'token_times_mean', 'd': 1, 'n': 3, 'arithmetic': 'float64',
       'epsilon': 0.05, 'params': 9000, 'status': 'certified'}]}))
  out = tmp_path / 'out'
  os.makedirs(out)
  assert trained_size_law.write(str(rows), str(law), str(out)) == 2
  text = (out / 'trained_size_law.md').read_text()
  assert '0.04124' in text            # 0.04123456 rounded UP to 4 digits, not 0.04123
  assert os.path.getsize(out / 'trained_size_law.png') > 2000


def test_stock_rows_beside_the_ladder(tmp_path):
  """A stock encoder block's row is its own family in the table (and its own line in the
  figure); a row written before families is the ladder's."""
  rows = tmp_path / 'rows'
  _record(str(rows / 'a'), 0.05, 51, 0.045)
  _record(str(rows / 'b'), 0.05, 489, 0.041, 'float32', family='stock_post_relu')
  assert [trained_size_law.is_stock(r) for r in trained_size_law.trained_rows(str(rows))] \
      == [False, True]
  law = tmp_path / 'law.json'
  law.write_text(json.dumps({'rows': []}))
  out = tmp_path / 'out'
  os.makedirs(out)
  assert trained_size_law.write(str(rows), str(law), str(out)) == 2
  lines = (out / 'trained_size_law.md').read_text().splitlines()
  assert any('| float32 | stock_post_relu | 0.05 | yes | 489 |' in x for x in lines)
  assert any('| float64 | ladder | 0.05 | yes | 51 |' in x for x in lines)


def test_binary_refuses_missing_rows_dir(tmp_path):
  proc = subprocess.run([sys.executable, os.path.join(ROOT, 'experiments', 'trained_size_law.py'),
                         f'--rows_dir={tmp_path}/nope', f'--size_law_json={tmp_path}/x.json',
                         f'--output_dir={tmp_path}/out'],
                        capture_output=True, text=True, cwd=ROOT)
  assert proc.returncode != 0
  assert 'not a directory' in proc.stderr and 'Traceback' not in proc.stderr
  assert not os.path.exists(tmp_path / 'out')
