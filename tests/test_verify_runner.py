"""verify.runner: the resumable, logged loop (state saved atomically, resumed, refused)."""

import json

import pytest

from transformer_ua.verify import runner


def _step(t):
  return lambda: ({'items': 1, 'odd': t % 2}, t * 10)


def test_runs_every_item_once_and_logs_an_eta(capsys):
  out = runner.run(_step, 7, 2, key={'k': 1}, points_per_item=3, log_every=0.0)
  assert out['complete'] and out['items_done'] == 7 and out['resumed_from'] == 0
  assert out['counts'] == {'items': 4, 'odd': 0} and out['max_abs'] == 60
  err = capsys.readouterr().err
  assert 'ETA' in err and '21 / 21 points' in err


def test_resume_continues_where_the_state_stopped(tmp_path):
  state = str(tmp_path / 's.json')
  # max_seconds=0: no call is launched after the first is read; the one already in
  # flight (calls run one ahead) is read too.
  part = runner.run(_step, 12, 3, key={'k': 1}, state_path=state, max_seconds=0.0,
                    progress=False)
  assert not part['complete'] and part['items_done'] == 6
  assert json.loads(open(state).read())['completed_blocks'] == [[0, 6]]
  rest = runner.run(_step, 12, 3, key={'k': 1}, state_path=state, resume=True,
                    progress=False)
  whole = runner.run(_step, 12, 3, key={'k': 1}, progress=False)
  assert rest['resumed_from'] == 6 and rest['counts'] == whole['counts']
  assert rest['max_abs'] == whole['max_abs']
  with pytest.raises(ValueError, match='cannot resume'):
    runner.run(_step, 12, 3, key={'k': 2}, state_path=state, resume=True, progress=False)
  with pytest.raises(ValueError, match='resume needs a state file'):
    runner.run(_step, 12, 3, key={'k': 1}, resume=True)


def test_an_interrupt_keeps_the_completed_items(tmp_path):
  """Ctrl-C while the fourth step's results are awaited (the fifth already launched):
  the state holds the three steps done (saved before
  the interrupt propagates, not only at the last periodic save), and resuming from it
  gives the uninterrupted counts."""
  state = str(tmp_path / 's.json')

  def step(t):
    if t == 9:
      def interrupted():
        raise KeyboardInterrupt
      return interrupted
    return _step(t)

  with pytest.raises(KeyboardInterrupt):
    runner.run(step, 15, 3, key={'k': 1}, state_path=state, progress=False,
               save_every=1e9)
  saved = json.loads(open(state).read())
  assert saved['next_block'] == 9 and saved['counts'] == {'items': 3, 'odd': 1}
  rest = runner.run(_step, 15, 3, key={'k': 1}, state_path=state, resume=True,
                    progress=False)
  whole = runner.run(_step, 15, 3, key={'k': 1}, progress=False)
  assert rest['resumed_from'] == 9 and rest['counts'] == whole['counts']
  assert rest['max_abs'] == whole['max_abs']


def test_the_next_call_is_launched_before_a_call_is_read():
  """One call ahead: the devices get call t + stride before the host waits on call t."""
  events = []

  def step(t):
    events.append(('launch', t))

    def resolve():
      events.append(('read', t))
      return {'items': 1}, 0
    return resolve

  out = runner.run(step, 9, 3, key={'k': 1}, progress=False)
  assert out['counts'] == {'items': 3} and out['complete']
  assert events == [('launch', 0), ('launch', 3), ('read', 0), ('launch', 6), ('read', 3),
                    ('read', 6)]
