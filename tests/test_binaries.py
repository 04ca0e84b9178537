"""Every binary in experiments/ and benchmarks/, as a user meets it.

* Its default outputs never land in the checked-in ``results/`` (that takes an explicit
  flag value): read from the flag definitions themselves.
* It runs under ``transformer_ua.cli`` (one-line errors, clean interrupts).
* A bad output path is refused in one line *before* any work: each subprocess below
  would run for minutes (or train) if the check came after the work.
"""

import ast
import glob
import os
import subprocess
import sys

import pytest

from transformer_ua import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARIES = sorted(glob.glob(os.path.join(ROOT, 'experiments', '*.py'))
                  + glob.glob(os.path.join(ROOT, 'benchmarks', '*.py')))
#: Modules under benchmarks/ that the binaries import (not binaries themselves).
LIBRARIES = ('__init__.py', 'roofline.py')
BINARIES = [b for b in BINARIES if os.path.basename(b) not in LIBRARIES]
#: Seconds a refusal may take: imports plus flag parsing, no work (the runs themselves
#: take minutes to hours). Generous, for a loaded machine.
REFUSAL_SECONDS = 90


def _string_defaults(path):
  """(flag name, default) of every flags.DEFINE_string / DEFINE_list and
  cli.define_output_dir (the flag --output_dir, its default first) in a binary."""
  tree = ast.parse(open(path, encoding='utf-8').read())
  out = []
  for node in ast.walk(tree):
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr == 'define_output_dir' and node.args
        and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
      out.append(('output_dir', node.args[0].value))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr in ('DEFINE_string', 'define_config_file', 'DEFINE_config_file')
        and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
      out.append((node.args[0].value, node.args[1].value))
  return out


def test_binaries_are_found():
  names = {os.path.basename(b) for b in BINARIES}
  assert {'approximate.py', 'fang_regression.py', 'fang_construction.py',
          'verify_throughput.py'} <= names


@pytest.mark.parametrize('path', BINARIES, ids=os.path.basename)
def test_no_default_output_under_results(path):
  for name, default in _string_defaults(path):
    norm = os.path.normpath(default) if default else ''
    assert not (norm == 'results' or norm.startswith('results' + os.sep)), (
        f'{os.path.basename(path)} --{name} defaults to {default!r}: binaries must not '
        'write into the checked-in results/ unless asked to.')


@pytest.mark.parametrize('path', BINARIES, ids=os.path.basename)
def test_binary_runs_under_cli(path):
  src = open(path, encoding='utf-8').read()
  assert 'cli.run(' in src and 'app.run(' not in src, os.path.basename(path)
  assert 'config_flags.DEFINE_config' not in src, (
      f'{os.path.basename(path)}: define config flags with cli.define_config_* so that '
      'override typos are one line')


def _run(script, *args):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  return subprocess.run([sys.executable, os.path.join(ROOT, script), *args],
                        capture_output=True, text=True, env=env, cwd=ROOT,
                        timeout=REFUSAL_SECONDS, check=False)


def _one_line(proc, fragment):
  lines = [l for l in proc.stderr.splitlines() if l.strip()]
  assert proc.returncode != 0, proc.stdout + proc.stderr
  assert 'Traceback' not in proc.stderr, proc.stderr
  assert lines and lines[0].startswith('error: ') and fragment in lines[0], proc.stderr
  assert len(lines) <= 2, proc.stderr


@pytest.fixture(scope='module')
def a_file(tmp_path_factory):
  path = tmp_path_factory.mktemp('bin') / 'a_file'
  path.write_text('x')
  return str(path)


CASES = [
    ('experiments/approximate.py', ('--output_dir=/proc/x',), '--output_dir=/proc/x'),
    ('experiments/approximate.py', ('--output_dir={file}',), 'is a file'),
    ('experiments/approximate.py', ('--config.resoluton=8',), 'resolution'),
    ('experiments/fang_regression.py', ('--config=experiments/configs/fang_f1.py',
                                        '--workdir=/proc/x'), '--workdir=/proc/x'),
    ('experiments/fang_regression.py', ('--config=experiments/configs/fang_f1.py',
                                        '--workdir={file}'), 'is a file'),
    ('experiments/fang_regression.py', ('--config=experiments/configs/fang_f1.py',
                                        '--workdir={tmp}', '--output_dir={file}'),
     'is a file'),
    ('experiments/fang_construction.py', ('--output_dir=/proc/x',), '--output_dir'),
    ('experiments/verify_contextual_mapping.py', ('--output_dir=/proc/x',),
     '--output_dir=/proc/x'),
    ('experiments/verify_contextual_mapping.py', ('--output_dir={file}',), 'is a file'),
    ('experiments/verify_contextual_mapping.py', ('--compilation_cache={file}',),
     'is a file'),
    ('experiments/mixing_pretrain.py', ('--config=experiments/configs/mixing_tiny.py',
                                        '--workdir=/proc/x'), '--workdir=/proc/x'),
    ('experiments/mixing_sweep.py', ('--config=experiments/configs/mixing_tiny.py',
                                     '--workdir={file}'), 'is a file'),
    ('benchmarks/fang_literal_vs_compact.py', ('--output_dir=/proc/x',), '--output_dir=/proc/x'),
    ('benchmarks/verify_throughput.py', ('--output_dir={file}',), 'is a file'),
    ('benchmarks/bert_throughput.py', ('--reference=none', '--output_dir=/proc/x'),
     '--output_dir=/proc/x'),
    ('benchmarks/build_compile_vs_depth.py', ('--output_dir={file}',), 'is a file'),
    ('benchmarks/certify_scaling.py', ('--output_dir=/proc/x',), '--output_dir=/proc/x'),
    ('experiments/verify_ties.py', ('--output_dir={file}',), 'is a file'),
    ('experiments/realization_certified.py', ('--output_dir={file}',), 'is a file'),
    ('benchmarks/realization_certified.py', ('--output_dir={file}',), 'is a file'),
    ('experiments/one_layer_compare.py', ('--output_dir={file}',), 'is a file'),
    ('experiments/one_layer_certificate.py', ('--output_dir=/proc/x',), '--output_dir=/proc/x'),
    ('benchmarks/fang_epoch_cost.py', ('--output_dir=/proc/x',), '--output_dir=/proc/x'),
    ('experiments/fang_optimum.py', ('--config=experiments/configs/fang_f1.py',
                                     '--output_dir={tmp}', '--resume'), '--resume'),
]


@pytest.mark.parametrize('script, args, fragment', CASES,
                         ids=[f'{os.path.basename(c[0])}:{c[1][-1]}' for c in CASES])
def test_bad_output_is_refused_before_the_work(script, args, fragment, a_file, tmp_path):
  args = [a.format(file=a_file, tmp=tmp_path) for a in args]
  proc = _run(script, *args)
  _one_line(proc, fragment)
  assert proc.returncode == cli.USAGE_ERROR, proc.stderr
  assert os.listdir(tmp_path) == [], 'nothing is written before the refusal'
