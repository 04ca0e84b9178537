"""The planted-fault suite (``planted_faults``, issue 55): every faulty network, state,
executor and callable is caught (refused in one line, or certified with a bound at or
above an independent float64 Monte Carlo of d_2(f, g)); and with each new check
reverted, a fault it catches slips through."""

import pytest

import planted_faults


def test_there_are_at_least_20_faults():
  assert len(planted_faults.FAULTS) >= 20


@pytest.mark.parametrize('name', list(planted_faults.FAULTS))
def test_every_planted_fault_is_caught(name):
  out = planted_faults.run(name)
  assert out.caught, out.how
  if out.how.startswith('refused'):
    assert '\n' not in out.how


@pytest.mark.parametrize('check, patch, fault', planted_faults.REVERTS,
                         ids=[f'{c} / {f}' for c, _, f in planted_faults.REVERTS])
def test_reverting_a_check_lets_a_fault_through(monkeypatch, check, patch, fault):
  assert planted_faults.run(fault).caught          # with the check: caught
  patch(monkeypatch)
  out = planted_faults.run(fault)
  assert not out.caught, f'{check}: {out.how}'


def test_every_new_check_has_a_revert():
  checks = {c.split(' (')[0] for c, _, _ in planted_faults.REVERTS}
  assert len(checks) >= 7


@pytest.mark.parametrize('check, patch, fault', [
    pytest.param(*row, marks=[pytest.mark.slow] if 'before building' in row[0] else [])
    for row in planted_faults.BACKED_UP],
    ids=[f'{c} / {f}' for c, _, f in planted_faults.BACKED_UP])
def test_checks_that_back_each_other_up(monkeypatch, check, patch, fault):
  """Reverting these alone does not let their fault through: another check catches it
  (the batch dependence moves the difference quotients; a lipschitz= refuted before
  building is refuted again in cubes)."""
  patch(monkeypatch)
  out = planted_faults.run(fault)
  assert out.caught and out.how.startswith('refused'), f'{check}: {out.how}'
