"""benchmarks/certify_scaling.py end to end at one tiny resolution; its refusals."""

import json
import os
import subprocess
import sys

import pytest

from transformer_ua import cli, provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'benchmarks', 'certify_scaling.py')


def _run(*args, timeout=600):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                        env=env, cwd=ROOT, timeout=timeout, check=False)


def test_certify_scaling_runs_on_a_tiny_setting(tmp_path):
  md = tmp_path / 'benchmarks.md'   # the log, appended in --output_dir
  proc = _run('--resolutions=2', '--workers=1', '--certify_lp_workers=1',
              f'--output_dir={tmp_path}')
  assert proc.returncode == 0, proc.stderr[-3000:]
  r = json.loads((tmp_path / 'certify_scaling.json').read_text())
  (row,) = r['rows']
  # N=2, n=3, Theorem 2: the multisets of 3 cells out of 2, C(4, 3) = 4 cube classes
  assert row['resolution'] == 2 and row['cubes'] == 4
  assert row['cube_layers'] == 4 * row['layers'] and row['layers'] > 1
  assert row['interiors']['1']['seconds'] > 0 and row['windows_seconds'] > 0
  assert row['interior_sup'] < 1e-9                    # the plan's tolerance, certified
  assert 0 < row['certify_lp']['total'] < 1
  assert r['provenance']['git_revision'] and 'reference' in r
  assert (tmp_path / 'certify_scaling.png').read_bytes()[:4] == b'\x89PNG'
  text = md.read_text()
  assert text.startswith(provenance.BENCHMARKS_HEADER) and 'certify_lp scaling' in text


@pytest.mark.parametrize('args,fragment', [
    (('--resolutions=1', '--output_dir={out}'), '--resolutions=1'),
    (('--workers=two', '--output_dir={out}'), '--workers=two'),
    (('--target=nope', '--output_dir={out}'), "--target='nope'"),
    (('--output_dir={file}',), 'is a file'),
])
def test_bad_flags_are_one_line_exit_2(args, fragment, tmp_path):
  a_file = tmp_path / 'a_file'
  a_file.write_text('x')
  out = tmp_path / 'out'
  proc = _run(*[a.format(file=a_file, out=out) for a in args], timeout=120)
  lines = [l for l in proc.stderr.splitlines() if l.strip()]
  assert proc.returncode == cli.USAGE_ERROR, proc.stderr
  assert 'Traceback' not in proc.stderr
  assert lines[0].startswith('error: ') and fragment in lines[0], proc.stderr
  assert sorted(os.listdir(tmp_path)) == ['a_file'], 'nothing is written before the refusal'
