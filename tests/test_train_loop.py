"""transformer_ua.train.loop: nothing is lost on an interrupt, a crash or a kill.

A toy task (state = a counter and a running sum, one unit adds ``unit``) makes the
resumed result checkable by hand: after units 0..U-1 the sum is U (U - 1) / 2.
"""

import os
import signal
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import pytest

from transformer_ua import cli, interrupts
from transformer_ua import binary_interrupts
from transformer_ua.train import loop
from transformer_ua.train.checkpointing import Checkpointer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNITS = 12


class Toy:
  """One unit adds ``unit`` to the sum; ``on_unit`` hooks a unit (to interrupt it)."""

  def __init__(self, on_unit=None):
    self.on_unit, self.units_run = on_unit, []

  def train_epoch(self, state, unit):
    if self.on_unit is not None:
      self.on_unit(unit)
    self.units_run.append(unit)
    state = {'sum': state['sum'] + unit, 'count': state['count'] + 1}
    return state, {'sum': state['sum']}

  def evaluate(self, state):
    return {'count': float(state['count'])}


def _state():
  return {'sum': jnp.zeros((), jnp.int32), 'count': jnp.zeros((), jnp.int32)}


def _schedule(**kw):
  kw = {'num_units': UNITS, 'eval_every': 1, 'checkpoint_every': 100, 'progress': False,
        'tensorboard': False, 'unit': 'epoch', 'desc': 'toy', **kw}
  return loop.Schedule(**kw)


def _latest(workdir):
  ck = Checkpointer(os.path.join(workdir, 'checkpoints'))
  step = ck.latest_step()
  ck.close()
  return step


def _resume_and_check(workdir, first_unit):
  task = Toy()
  out = loop.run(task, _state(), workdir=str(workdir), schedule=_schedule())
  assert task.units_run == list(range(first_unit, UNITS))
  assert int(out.state['sum']) == UNITS * (UNITS - 1) // 2
  assert [r['epoch'] for r in out.history] == list(range(1, UNITS + 1))


def test_sigint_finishes_the_unit_saves_and_says_how_to_resume(tmp_path):
  def on_unit(unit):
    if unit == 4:
      os.kill(os.getpid(), signal.SIGINT)  # arrives during unit 4

  before = signal.getsignal(signal.SIGINT)
  with pytest.raises(interrupts.Interrupted) as info:
    loop.run(Toy(on_unit), _state(), workdir=str(tmp_path), schedule=_schedule())
  e = info.value
  assert e.signal_name == 'SIGINT'
  assert 'checkpoint at epoch 5 of 12' in e.note and 'resume' in e.note
  assert _latest(tmp_path) == 5  # unit 4 was finished, then saved (period is 100)
  assert signal.getsignal(signal.SIGINT) is before  # the caller's handler is restored
  _resume_and_check(tmp_path, first_unit=5)


def test_sigterm_is_handled_like_sigint(tmp_path):
  def on_unit(unit):
    if unit == 2:
      os.kill(os.getpid(), signal.SIGTERM)

  with pytest.raises(interrupts.Interrupted) as info:
    loop.run(Toy(on_unit), _state(), workdir=str(tmp_path), schedule=_schedule())
  assert info.value.signal_name == 'SIGTERM'
  assert _latest(tmp_path) == 3
  _resume_and_check(tmp_path, first_unit=3)


def test_keyboard_interrupt_inside_a_unit_saves_the_last_finished_unit(tmp_path):
  def on_unit(unit):
    if unit == 7:
      raise KeyboardInterrupt

  with pytest.raises(interrupts.Interrupted) as info:
    loop.run(Toy(on_unit), _state(), workdir=str(tmp_path), schedule=_schedule())
  assert 'checkpoint at epoch 7 of 12' in info.value.note
  assert _latest(tmp_path) == 7
  _resume_and_check(tmp_path, first_unit=7)


def test_time_based_checkpoint_before_the_first_periodic_one(tmp_path):
  def on_unit(unit):
    if unit == 6:
      raise RuntimeError('crash')  # not an interrupt: nothing is saved at the crash

  with pytest.raises(RuntimeError):
    loop.run(Toy(on_unit), _state(), workdir=str(tmp_path),
             schedule=_schedule(checkpoint_seconds=0.0))
  assert _latest(tmp_path) == 6  # every unit was due by time; the period (100) never was
  _resume_and_check(tmp_path, first_unit=6)


def test_no_time_based_checkpoint_within_the_interval(tmp_path):
  with pytest.raises(RuntimeError):
    loop.run(Toy(lambda u: (_ for _ in ()).throw(RuntimeError()) if u == 6 else None),
             _state(), workdir=str(tmp_path), schedule=_schedule(checkpoint_seconds=3600))
  assert _latest(tmp_path) is None


def test_schedule_is_validated():
  with pytest.raises(ValueError, match='checkpoint_seconds'):
    _schedule(checkpoint_seconds=-1)
  with pytest.raises(ValueError, match='eval_every'):
    _schedule(eval_every=0)


PROGRAM = textwrap.dedent('''
    import os, signal, sys
    import jax.numpy as jnp
    from transformer_ua import cli
    from transformer_ua.train import loop

    class Task:
      def train_epoch(self, state, unit):
        if unit == 3:
          os.kill(os.getpid(), signal.{sig})
        return {{'sum': state['sum'] + unit}}, {{}}
      def evaluate(self, state):
        return {{}}

    def main(argv):
      loop.run(Task(), {{'sum': jnp.zeros((), jnp.int32)}}, workdir=argv[1],
               schedule=loop.Schedule(num_units=10, eval_every=100, checkpoint_every=100,
                                      progress=False, tensorboard=False))
      print('finished')

    cli.run(main)
''')


@pytest.mark.parametrize('sig, status', [('SIGINT', binary_interrupts.INTERRUPTED),
                                         ('SIGTERM', binary_interrupts.TERMINATED)])
def test_binary_interrupt_is_one_line_with_the_resume_command(tmp_path, sig, status):
  script = tmp_path / 'train_toy.py'
  script.write_text(PROGRAM.format(sig=sig))
  workdir = tmp_path / 'run'
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  proc = subprocess.run([sys.executable, str(script), str(workdir)], capture_output=True,
                        text=True, env=env, timeout=600, check=False)
  assert proc.returncode == status, proc.stderr
  assert 'Traceback' not in proc.stderr and 'finished' not in proc.stdout
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith(f'interrupted ({sig}); train: checkpoint at step 4 of 10'), last
  assert f'resume with: python {script} {workdir}' in last
  assert _latest(workdir) == 4
