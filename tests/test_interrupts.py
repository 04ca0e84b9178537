"""SIGINT / SIGTERM at several moments of a binary's life, as a user sends them.

Whenever the signal lands (while the modules load, in training, between two runs, inside
a weakref callback where Python would swallow the KeyboardInterrupt, in the verifier's
block loop), the binary stops promptly with exit status 130 / 143, prints no traceback,
and says in its last line either the exact command that resumes (a resumable state
exists) or that nothing needs resuming.
"""

import glob
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from transformer_ua import cli
from transformer_ua import binary_interrupts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, 'tests', 'scripts', 'cli_probe.py')
FANG = [os.path.join('experiments', 'fang_regression.py'),
        '--config=experiments/configs/fang_f1.py', '--config.epochs=30',
        '--config.seeds=(0,)', '--config.checkpoint_every=1', '--progress=false']
#: Seconds a signalled binary may take to exit (a training unit, a checkpoint).
STOP_SECONDS = 120


def _start(args):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for(proc, ready, timeout=600):
  """Polls ``ready()`` until true; False if the process ended first."""
  t0 = time.time()
  while not ready():
    if proc.poll() is not None or time.time() - t0 > timeout:
      return False
    time.sleep(0.05)
  return True


def _stop(proc, sig):
  proc.send_signal(sig)
  out, err = proc.communicate(timeout=STOP_SECONDS)
  return proc.returncode, out, err


def _clean(status, err, sig):
  """Exit status of the signal, no traceback, no 'Exception ignored', one last line."""
  assert status == (binary_interrupts.TERMINATED if sig == signal.SIGTERM
                    else binary_interrupts.INTERRUPTED), err
  assert 'Traceback' not in err and 'Exception ignored' not in err, err
  last = err.strip().splitlines()[-1]
  assert last.startswith('interrupted (' + signal.Signals(sig).name + ')'), err
  return last


def _resume_command(last):
  assert 'resume with: python ' in last, last
  return last.split('resume with: ', 1)[1]


def test_swallowed_interrupt_is_raised_again():
  """The signal lands inside a weakref callback: Python can only print "Exception ignored
  in ..." there; cli re-raises it, so the probe stops before it would print 'ok'."""
  proc = subprocess.run([sys.executable, PROBE, '--mode=weakref'], capture_output=True,
                        text=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=600,
                        check=False)
  last = _clean(proc.returncode, proc.stderr, signal.SIGINT)
  assert 'ok' not in proc.stdout
  assert last.endswith('nothing needs resuming (no resumable state was written)')


@pytest.mark.parametrize('write, sig', [(True, signal.SIGINT), (False, signal.SIGINT),
                                        (True, signal.SIGTERM)])
def test_interrupt_names_the_resume_command_only_with_state(tmp_path, write, sig):
  state = tmp_path / 'state'
  args = [PROBE, '--mode=wait', f'--state={state}'] + (['--write'] if write else [])
  proc = _start(args)
  assert _wait_for(proc, lambda: proc.stdout.readline().strip() == 'waiting')
  last = _clean(*_stop(proc, sig)[::2], sig)
  if write:
    assert _resume_command(last) == 'python ' + shlex.join(args)
    assert f'state kept in {state}' in last
  else:
    assert 'nothing needs resuming' in last and 'resume with' not in last


def test_interrupt_while_the_modules_load(tmp_path):
  """SIGINT from 0.5 s on, while the binary imports JAX (or parses flags), resent every
  0.25 s: the child starts with SIGINT ignored, as a shell's background job (or an xdist
  worker's child) does, so signals before cli arms its handler are lost, and one after it
  must stop the binary at once: one line, 130, no traceback."""
  # SIGINT ignored through an exec (an ignored disposition survives it) rather than a
  # preexec_fn, whose Python-level fork in this JAX process would warn about threads
  ignore_then_exec = ('import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); '
                      'os.execv(sys.executable, [sys.executable] + sys.argv[1:])')
  proc = subprocess.Popen(
      [sys.executable, '-c', ignore_then_exec, *FANG, f'--workdir={tmp_path / "w"}'],
      cwd=ROOT, text=True, env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu'),
      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  time.sleep(0.5)
  t0 = time.time()
  while proc.poll() is None and time.time() - t0 < STOP_SECONDS:
    proc.send_signal(signal.SIGINT)
    time.sleep(0.25)
  _, err = proc.communicate(timeout=STOP_SECONDS)
  last = _clean(proc.returncode, err, signal.SIGINT)
  assert 'nothing needs resuming' in last or 'resume with' in last


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM])
def test_interrupt_in_training_checkpoints_and_names_the_command(tmp_path, sig):
  work = tmp_path / 'w'
  proc = _start([*FANG, f'--workdir={work}'])
  assert _wait_for(proc, lambda: glob.glob(str(work / 'f1' / '*' / 'checkpoints' / '*')))
  status, _, err = _stop(proc, sig)
  last = _clean(status, err, sig)
  assert _resume_command(last).startswith('python experiments/fang_regression.py ')
  assert f'--workdir={work}' in last


@pytest.mark.slow  # one finished run first (~1 min of CPU), then the signal
def test_interrupt_between_runs_names_the_command_and_resumes(tmp_path):
  work = tmp_path / 'w'
  args = [*FANG, f'--workdir={work}', f'--output_dir={tmp_path / "r"}']
  proc = _start(args)
  assert _wait_for(proc, lambda: glob.glob(str(work / 'f1' / '*' / 'result.json')))
  status, _, err = _stop(proc, signal.SIGINT)
  last = _clean(status, err, signal.SIGINT)
  assert _resume_command(last) == 'python ' + shlex.join(args)
  done = glob.glob(str(work / 'f1' / '*' / 'result.json'))
  again = subprocess.run([sys.executable, *args, '--only=attention:10'], cwd=ROOT,
                         capture_output=True, text=True, timeout=900, check=False,
                         env=dict(os.environ, PYTHONPATH=ROOT))
  assert again.returncode == 0, again.stderr[-2000:]
  assert set(done) <= set(glob.glob(str(work / 'f1' / '*' / 'result.json')))


def test_interrupt_in_the_verifier_names_the_resume_flag(tmp_path):
  out = tmp_path / 'cm' / 'contextual_mapping_N4_d2_n5_full.json'
  args = [os.path.join('experiments', 'verify_contextual_mapping.py'), '--d=2', '--n=5',
          '--resolution=4', '--grid=full', '--chunk_size=64', '--nolemma9', '--noprogress',
          '--lemma7_samples=10', f'--output_dir={out.parent}']
  proc = _start(args)
  state = out.parent / (out.name + '.state')
  assert _wait_for(proc, lambda: state.exists() and state.stat().st_size > 0)
  last = _clean(*_stop(proc, signal.SIGINT)[::2], signal.SIGINT)
  assert _resume_command(last) == 'python ' + shlex.join(args + ['--resume'])
  assert not out.exists()
