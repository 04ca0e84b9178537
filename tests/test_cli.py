"""transformer_ua.cli: one-line errors, checked paths, clean interrupts (as a user sees them)."""

import os
import subprocess
import sys

import pytest

from transformer_ua import cli
from transformer_ua import binary_interrupts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, 'tests', 'scripts', 'cli_probe.py')


def _run(*args):
  env = dict(os.environ, PYTHONPATH=ROOT)
  return subprocess.run([sys.executable, PROBE, *args], capture_output=True, text=True,
                        env=env, timeout=600, check=False)


def _one_line_error(proc, fragment):
  assert proc.returncode == cli.USAGE_ERROR, proc.stderr
  lines = [l for l in proc.stderr.splitlines() if l.strip()]
  assert lines[0].startswith('error: ') and fragment in lines[0], proc.stderr
  assert 'Traceback' not in proc.stderr
  assert len(lines) == 2 and '--help' in lines[1], proc.stderr


def test_good_run_prints_no_backend_probe():
  proc = _run('--config.resolution=8')
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.strip() == 'ok resolution=8'
  assert "backend 'tpu'" not in proc.stderr


@pytest.mark.parametrize('args, fragment', [
    (('--counnt=3',), 'counnt'),
    (('--count=abc',), 'count'),
    (('--config.resoluton=8',), 'Did you mean "resolution"'),
    (('--config.resolution=abc',), 'resolution'),
    (('--count=0',), '--count=0 must be >= 1'),
])
def test_bad_flags_are_one_line(args, fragment):
  _one_line_error(_run(*args), fragment)


def test_output_dir_that_is_a_file_is_refused(tmp_path):
  path = tmp_path / 'a_file'
  path.write_text('x')
  _one_line_error(_run(f'--output_dir={path}'), 'is a file')


def test_output_dir_that_cannot_be_created_is_refused():
  _one_line_error(_run('--output_dir=/proc/x'), 'cannot be created')


@pytest.mark.parametrize('mode, status', [('sigint', binary_interrupts.INTERRUPTED),
                                          ('sigterm', binary_interrupts.TERMINATED)])
def test_interrupt_is_one_line(mode, status):
  proc = _run(f'--mode={mode}')
  assert proc.returncode == status, proc.stderr
  assert 'Traceback' not in proc.stderr
  assert proc.stderr.strip().startswith('interrupted')


def test_output_file_checks_its_directory(tmp_path):
  target = tmp_path / 'new' / 'x.json'
  assert cli.output_file(str(target), '--output_json') == str(target)
  assert target.parent.is_dir() and not target.exists()
  with pytest.raises(cli.BadInput, match='is a directory'):
    cli.output_file(str(tmp_path), '--output_json')
  with pytest.raises(cli.BadInput, match='cannot be created'):
    cli.output_file('/proc/x/y.json', '--output_json')


FANG_BINARY = os.path.join(ROOT, 'experiments', 'fang_regression.py')
CONFIGS = sorted(f for f in os.listdir(os.path.join(ROOT, 'experiments', 'configs'))
                 if f.endswith('.py') and f != '__init__.py')


@pytest.mark.parametrize('text, fragment', [
    ('import no_such_module\n\ndef get_config():\n  return None\n', 'No module named'),
    ('def get_config(:\n', 'SyntaxError'),
])
def test_config_file_that_does_not_load_is_one_line(tmp_path, text, fragment):
  config = tmp_path / 'config.py'
  config.write_text(text)
  proc = subprocess.run([sys.executable, FANG_BINARY, f'--config={config}',
                         f'--workdir={tmp_path / "w"}'], capture_output=True, text=True,
                        env=dict(os.environ, PYTHONPATH=ROOT), timeout=600, check=False)
  _one_line_error(proc, fragment)
  assert not (tmp_path / 'w').exists()


def test_config_file_that_does_not_exist_is_one_line(tmp_path):
  proc = subprocess.run([sys.executable, FANG_BINARY, f'--config={tmp_path / "nope.py"}',
                         f'--workdir={tmp_path / "w"}'], capture_output=True, text=True,
                        env=dict(os.environ, PYTHONPATH=ROOT), timeout=600, check=False)
  _one_line_error(proc, 'nope.py')
  assert not (tmp_path / 'w').exists()


@pytest.mark.parametrize('name', CONFIGS)
def test_every_config_loads_as_a_file(tmp_path, name):
  """absl loads --config=path as a file: the repo root is not importable then (only the
  installed package is), so a config may not import ``experiments``."""
  os.symlink(os.path.join(ROOT, 'transformer_ua'), tmp_path / 'transformer_ua')
  code = ('import inspect, runpy, sys\n'
          'g = runpy.run_path(sys.argv[1])["get_config"]\n'
          'if not any(p.default is p.empty for p in inspect.signature(g).parameters.values()):\n'
          '  print(type(g()).__name__)\n'
          'else:\n'
          '  print("ConfigDict")\n')
  path = os.path.join(ROOT, 'experiments', 'configs', name)
  proc = subprocess.run([sys.executable, '-c', code, path], capture_output=True, text=True,
                        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(tmp_path)),
                        timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.strip() == 'ConfigDict', proc.stdout


def _binary(script, *args, env=None):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu', **(env or {}))
  return subprocess.run([sys.executable, os.path.join(ROOT, script), *args],
                        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600,
                        check=False)


FANG_F1 = '--config=experiments/configs/fang_f1.py'


@pytest.mark.parametrize('script, out_flag, args, fragment', [
    ('experiments/fang_regression.py', '--workdir',
     (FANG_F1, '--config.optimizer.learning_rat=0.1'),
     "--config.optimizer.learning_rat: config.optimizer is a str ('sgd'), not a group"),
    ('experiments/fang_regression.py', '--workdir', (FANG_F1, '--config.lr_peek=0.1'),
     "config has no field 'lr_peek'; did you mean 'lr_peak'?"),
    ('experiments/fang_regression.py', '--workdir', (FANG_F1 + ':laddr',),
     "fang_f1.py takes no variant after \":\" (got 'laddr')"),
    ('experiments/approximate.py', '--output_dir',
     ('--config=experiments/configs/approximate.py:laddr',),
     "unknown config variant 'laddr'; allowed: 'default', 'ladder'."),
    ('experiments/realization_certified.py', '--output_dir', ('--only=T9',),
     "--only: 'T9' is in no row label; allowed: parts of 'T2 token_times_mean (1,3,8)'"),
    # Bad input the binaries check themselves (cli.BadInput, not sys.exit): status 2.
    ('experiments/mixing_sweep.py', '--workdir',
     ('--config=experiments/configs/mixing_tiny.py', '--seeds=0'), '--seeds must be >= 1'),
    ('experiments/mixing_pretrain.py', '--workdir', (), '--config is required'),
    ('experiments/verify_ties.py', '--output_dir', ('--grid=foo',),
     '--grid=foo; allowed: full, multiset'),
    ('experiments/verify_contextual_mapping.py', '--output_dir', ('--kernel=foo',),
     '--kernel=foo: allowed values are sweep, fast and core'),
    ('experiments/fang_optimum.py', '--output_dir', (), '--config is required'),
    ('experiments/one_layer_grids_report.py', '--output_dir', (), '--indirs is required'),
    # The benchmarks: the same contract (cli.BadInput, checked before --output_dir is made).
    ('benchmarks/bert_throughput.py', '--output_dir', ('--hidden=10', '--heads=3'),
     '--hidden=10 is not divisible by --heads=3'),
    ('benchmarks/fang_literal_vs_compact.py', '--output_dir', ('--tokens=100',),
     '--tokens: each n must be >= n_q = 2002'),
    ('benchmarks/verify_throughput.py', '--output_dir', ('--configs=3,2',),
     "--configs='3,2': each entry is N,d,n"),
    ('benchmarks/fang_epoch_cost.py', '--output_dir', ('--only_entries=nope',),
     '--only_entries: nope not in the sweep'),
])
def test_bad_input_is_one_line_with_status_2(tmp_path, script, out_flag, args, fragment):
  out = tmp_path / 'out'
  proc = _binary(script, *args, f'{out_flag}={out}')
  _one_line_error(proc, fragment)
  assert len(proc.stderr.splitlines()[0]) < 500   # no quoted traceback
  assert not out.exists(), 'nothing is written before the refusal'


def test_missing_corpus_is_one_line_with_status_2(tmp_path):
  proc = _binary('experiments/mixing_pretrain.py', '--config=experiments/configs/mixing_tiny.py',
                 f'--workdir={tmp_path / "w"}', env={'WORDNET_DIR': str(tmp_path / 'none')})
  _one_line_error(proc, 'WordNet corpus not found')


def test_existing_outputs_are_refused_unless_overwrite(tmp_path):
  """A file the binary did not write is never replaced silently: an explicit output path
  that exists is refused before the work (exit 2); --overwrite replaces it."""
  notes = tmp_path / 'notes.json'
  notes.write_text('mine')
  _one_line_error(_run(f'--output_file={notes}'),
                  f'--output_file={notes} already exists; pass --overwrite')
  assert notes.read_text() == 'mine'
  assert _run(f'--output_file={notes}', '--overwrite').returncode == 0
  record = tmp_path / 'record'
  record.mkdir()
  (record / 'fang_construction.md').write_text('the record')
  proc = _binary('experiments/fang_construction.py', f'--output_dir={record}')
  _one_line_error(proc, 'already holds fang_construction.md; pass --overwrite')
  assert (record / 'fang_construction.md').read_text() == 'the record'


def test_atomic_writes_leave_the_old_file_on_failure(tmp_path):
  from transformer_ua import outputs
  path = tmp_path / 'r.json'
  outputs.atomic_json(str(path), {'a': 1})
  assert path.read_text() == '{"a": 1}\n'
  with pytest.raises(TypeError):
    outputs.atomic_json(str(path), {'a': object()})   # not serializable, half written
  assert path.read_text() == '{"a": 1}\n' and os.listdir(tmp_path) == ['r.json']
  with pytest.raises(outputs.OutputExists, match='already exists'):
    outputs.check_new(str(path))
  assert outputs.check_new(str(path), overwrite=True) == str(path)


def test_archive_copies_finished_runs_at_any_depth_and_refuses_a_rerun(tmp_path):
  from transformer_ua import outputs
  root, dest = tmp_path / 'runs', tmp_path / 'archive'
  done = root / 'f2' / 'nn_width' / 'tuned' / 'adam' / 'seed0'
  gone = root / 'f2' / 'nn_depth' / 'grid' / 'sgd' / 'seed0'        # ended by diverging
  busy = root / 'f2' / 'nn_depth' / 'grid' / 'adam' / 'seed0'       # still training
  for d in (done, gone, busy):
    (d / 'checkpoints' / '50').mkdir(parents=True)
  (done / 'result.json').write_text('{"mse_test": 2.8}\n')
  (done / 'params.npz').write_bytes(b'\0')
  (gone / 'diverged.json').write_text('{"epoch": 18}\n')
  (busy / 'metrics.jsonl').write_text('{"epoch": 1}\n')
  kw = dict(markers=('result.json', 'diverged.json'), files=('result.json', 'diverged.json'))
  assert outputs.archive(str(root), str(dest), **kw) == 2
  copied = sorted(str(p.relative_to(dest)) for p in dest.rglob('*') if p.is_file())
  assert copied == ['f2/nn_depth/grid/sgd/seed0/diverged.json',
                    'f2/nn_width/tuned/adam/seed0/result.json']
  assert (dest / done.relative_to(root) / 'result.json').read_text() == '{"mse_test": 2.8}\n'
  assert outputs.archive(str(root), str(dest), **kw) == 0          # nothing new
  assert outputs.archive(str(root), str(dest), depth='*', **kw) == 0   # too shallow: none
  (busy / 'result.json').write_text('{"mse_test": 7.0}\n')         # finishes later
  (done / 'result.json').write_text('{"mse_test": 3.1}\n')         # and a rerun
  with pytest.raises(outputs.OutputExists, match='different record'):
    outputs.archive(str(root), str(dest), **kw)
  assert not (dest / busy.relative_to(root)).exists()              # nothing copied
  assert (dest / done.relative_to(root) / 'result.json').read_text() == '{"mse_test": 2.8}\n'


def test_claim_gives_a_run_to_one_live_process_at_a_time(tmp_path):
  import subprocess
  from transformer_ua import outputs
  run = tmp_path / 'run'
  with outputs.claim(str(run)) as mine:
    assert mine and (run / 'running.lock').read_text() == str(os.getpid())
    with outputs.claim(str(run)) as again:          # held by a live process (this one)
      assert not again
    assert (run / 'running.lock').exists()          # the refused claim left it alone
  assert not (run / 'running.lock').exists()        # released at the end of the block
  dead = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                        capture_output=True, text=True, check=True).stdout.strip()
  for stale in (dead, ''):                          # a dead process's lock, an empty one
    (run / 'running.lock').write_text(stale)
    with outputs.claim(str(run)) as mine:
      assert mine
  with pytest.raises(RuntimeError):                 # released when the work fails too
    with outputs.claim(str(run)) as mine:
      raise RuntimeError('training failed')
  assert not (run / 'running.lock').exists()
