"""benchmarks/float_certificate_cost.py end to end at tiny sizes; bad flags in one line."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'benchmarks', 'float_certificate_cost.py')


def test_float_certificate_cost_runs_and_records_per_class_costs(tmp_path):
  proc = subprocess.run([sys.executable, SCRIPT, '--resolutions=3,4', f'--output_dir={tmp_path}'],
                        capture_output=True, text=True, timeout=600, cwd=ROOT)
  assert proc.returncode == 0, proc.stderr[-3000:]
  r = json.loads((tmp_path / 'float_certificate_cost.json').read_text())
  assert [x['resolution'] for x in r['rows']] == [3, 4]
  for x in r['rows']:
    assert x['float_term_ms_per_class'] > 0 and x['interiors_ms_per_class'] > 0
    assert x['total'] > 0 and x['float_deviation'] < 1e-300
  assert r['rows'][1]['max_width'] > r['rows'][0]['max_width']
  assert (tmp_path / 'float_certificate_cost.png').stat().st_size > 0
  assert 'integer-id float certificate' in (tmp_path / 'benchmarks.md').read_text()


def test_bad_resolutions_are_one_line(tmp_path):
  proc = subprocess.run([sys.executable, SCRIPT, '--resolutions=1', f'--output_dir={tmp_path}'],
                        capture_output=True, text=True, timeout=600, cwd=ROOT)
  assert proc.returncode == 2 and 'resolutions' in proc.stderr
  assert 'Traceback' not in proc.stderr
  assert not (tmp_path / 'float_certificate_cost.json').exists()
