"""benchmarks/wide_certify_scaling.py end to end at one tiny resolution; a refusal."""

import json
import os
import subprocess
import sys

from transformer_ua import provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'benchmarks', 'wide_certify_scaling.py')


def _run(*args, timeout=600):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                        env=env, cwd=ROOT, timeout=timeout, check=False)


def test_wide_certify_scaling_runs_on_a_tiny_setting(tmp_path):
  proc = _run('--resolutions=3', f'--output_dir={tmp_path}')
  assert proc.returncode == 0, proc.stderr[-3000:]
  (row,) = json.loads((tmp_path / 'wide_certify_scaling.json').read_text())['rows']
  # N=3, n=3, d=1: C(5, 3) = 10 cube classes; P = 3 C(4, 2) = 18 ids, width 4P = 72
  assert row['cubes'] == 10 and row['ids'] == 18 and row['max_width'] == 72
  assert row['blocks'] == 3 and row['interior_sup'] < 1e-12 and 0 < row['total'] < 1
  text = (tmp_path / 'benchmarks.md').read_text()
  assert text.startswith(provenance.BENCHMARKS_HEADER) and 'wide one-layer certify' in text


def test_wide_certify_scaling_refuses_bad_resolutions(tmp_path):
  proc = _run('--resolutions=1', f'--output_dir={tmp_path}')
  assert proc.returncode != 0 and 'expected integers >= 2' in proc.stderr
