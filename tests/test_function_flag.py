"""cli.function_flag and experiments/train_and_certify.py's --config.target=module:function:
a callable named on the command line is imported, and every way it can be wrong is one line.

Oracles: functions written into a module file by the test and evaluated by hand, and the
binary's stderr and exit status.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from transformer_ua import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, 'experiments', 'train_and_certify.py')
MODULE = 'function_flag_targets'
SOURCE = '''
import numpy as np

VALUE = 3


def square_mean(x):
    return x * np.mean(x, axis=-2, keepdims=True)


class Holder:
    @staticmethod
    def double(x):
        return 2 * x
'''


@pytest.fixture
def in_module_dir(tmp_path, monkeypatch):
  (tmp_path / f'{MODULE}.py').write_text(SOURCE)
  (tmp_path / 'function_flag_broken.py').write_text('x = 1 / 0\n')
  monkeypatch.chdir(tmp_path)
  yield tmp_path
  for name in (MODULE, 'function_flag_broken'):
    sys.modules.pop(name, None)


def test_a_function_in_the_working_directory_is_imported(in_module_dir):
  path_before = list(sys.path)
  f = cli.function_flag('config.target', f'{MODULE}:square_mean')
  x = np.array([[[1.0], [3.0]]])
  assert np.array_equal(f(x), [[[2.0], [6.0]]])          # x_j * mean(x) = x_j * 2
  assert cli.function_flag('config.target', f'{MODULE}:Holder.double')(5) == 10
  assert sys.path == path_before


def test_a_name_without_a_colon_is_a_built_in_and_passes_through():
  assert cli.function_flag('config.target', 'token_times_mean') == 'token_times_mean'
  assert cli.function_flag('config.target', None) is None


@pytest.mark.parametrize('spec, message', [
    ('no_such_module_zz:f', "no module named 'no_such_module_zz'"),
    (f'{MODULE}:missing', f"module {MODULE} has no 'missing'"),
    (f'{MODULE}:VALUE', 'VALUE is a int, not a function'),
    (':square_mean', 'expected a built-in name or module:function'),
    (f'{MODULE}:', 'expected a built-in name or module:function'),
    ('function_flag_broken:f', 'importing function_flag_broken failed: ZeroDivisionError'),
])
def test_a_bad_module_function_is_one_line(in_module_dir, spec, message):
  with pytest.raises(cli.BadInput, match=message) as e:
    cli.function_flag('config.target', spec)
  assert '\n' not in str(e.value) and str(e.value).startswith(f'--config.target={spec}: ')


def _binary(cwd, *args):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  return subprocess.run([sys.executable, BINARY, *args], capture_output=True, text=True,
                        env=env, cwd=cwd, timeout=300, check=False)


def test_the_binary_says_what_is_wrong_with_a_target_in_one_line(in_module_dir):
  for args, fragment in (
      (('--config.target=no_such_module_zz:f',), "no module named 'no_such_module_zz'"),
      ((f'--config.target={MODULE}:square_mean',), 'give --config.lipschitz=L')):
    proc = _binary(in_module_dir, *args)
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert proc.returncode == cli.USAGE_ERROR and 'Traceback' not in proc.stderr, proc.stderr
    assert lines[0].startswith('error: ') and fragment in lines[0], proc.stderr
  written = sorted(set(os.listdir(in_module_dir)) - {'__pycache__'})
  assert written == ['function_flag_broken.py', f'{MODULE}.py']      # no output_dir made
