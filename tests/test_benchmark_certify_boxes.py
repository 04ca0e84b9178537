"""benchmarks/certify_boxes.py end to end at a tiny size (the hand-built network within its
closed-form error); bad flags in one line. auto_LiRPA is not a dependency: where it is
missing the CROWN rows say so; where present, its bounds stay above the sampled lower bound."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'benchmarks', 'certify_boxes.py')


def _run(tmp_path, *args):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  return subprocess.run([sys.executable, SCRIPT, *args, f'--output_dir={tmp_path}'],
                        capture_output=True, text=True, timeout=600, cwd=ROOT, env=env,
                        check=False)


def test_certify_boxes_runs_and_its_bounds_hold(tmp_path):
  proc = _run(tmp_path, '--boxes_per_axis=2,4', '--max_boxes=16', '--samples_per_box=16',
              '--methods=CROWN', '--certify_minutes=0.05')
  assert proc.returncode == 0, proc.stderr[-3000:]
  r = json.loads((tmp_path / 'certify_boxes_hand_built.json').read_text())
  assert [x['boxes'] for x in r['rows']] == [8, 16] and r['sup_error_closed_form'] == 1 / 256
  for row in r['rows']:
    assert row['certifier']['below_sampled'] == 0 and row['certifier']['boxes_per_second'] > 0
    assert row['certifier']['bound']['mean'] >= row['sampled_lower']['mean'] > 0
    crown = row['CROWN']
    assert 'not_run' in crown or crown['below_sampled'] == 0
  rows = r['rows']
  assert rows[1]['certifier']['bound']['mean'] < rows[0]['certifier']['bound']['mean']
  end_to_end = r['certify_network']       # the certified sup is at least the true one
  assert end_to_end['sup_bound'] >= r['sup_error_closed_form'] if 'sup_bound' in end_to_end \
      else 'estimate' in end_to_end['refused']
  assert 'certify_boxes (hand_built' in (tmp_path / 'benchmarks.md').read_text()
  # The hand-built network's closed form sup |f - g| = h^2/4 bounds the sampled error, and
  # it is an interpolation, not the exact product.
  worst = max(row['sampled_lower']['max'] for row in rows)
  assert 0.2 * r['sup_error_closed_form'] <= worst <= r['sup_error_closed_form']


@pytest.mark.parametrize('args, words', [
    (['--methods=CROWN,beta'], '--methods=CROWN,beta; allowed'),
    (['--network=hand_built', '--d=2'], '--network=hand_built is built for'),
    (['--boxes_per_axis=0'], 'boxes_per_axis'),
    (['--units=6'], 'units=6; it must be a positive multiple of 4'),
])
def test_bad_flags_are_one_line(tmp_path, args, words):
  proc = _run(tmp_path, *args)
  assert proc.returncode == 2 and words in proc.stderr, proc.stderr
  assert 'Traceback' not in proc.stderr
  assert not (tmp_path / 'certify_boxes_hand_built.json').exists()
