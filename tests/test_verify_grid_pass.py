"""verify.grid_pass: one driver, chunks or in-kernel blocks; the resumable full pass."""

import json

import jax
import jax.numpy as jnp
import pytest

from transformer_ua.verify import contextual_mapping as vc
from transformer_ua.verify import grid_pass
from transformer_ua.yun import enumeration
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import contextual

from grid_helpers import class_table


def test_chunks_and_blocks_give_the_same_counts():
  """The full grid as chunks of a literal kernel and as in-kernel blocks: same counts."""
  cm = contextual.ContextualMapping.build(Grid(1, 3, 3))
  with jax.enable_x64(True):
    _, full_chunk = vc._make_chunk_fns(cm, 16, kernel='core')  # pylint: disable=protected-access
    table = jnp.asarray(class_table(cm))
  total = enumeration.grid_size(Grid(1, 3, 3), 'full')
  chunks = grid_pass.run(grid_pass.Chunks(
      cm, lambda s, t: full_chunk(cm.exact_params, s, t, table), total, 16), progress=False)
  blocks = grid_pass.full_pass(cm, class_table(cm), chunk_size=16, progress=False)
  keys = set(blocks['counts'])
  assert keys <= set(chunks['counts']) and chunks['counts']['points'] == total
  assert {k: chunks['counts'][k] for k in keys} == blocks['counts']
  assert chunks['chunk_size'] == 16 and blocks['num_blocks'] > 1


def test_a_chunk_pass_has_no_state():
  cm = contextual.ContextualMapping.build(Grid(1, 2, 2))
  fn = lambda s, t: ({'points': jnp.int64(1)}, (), None)  # noqa: E731
  with pytest.raises(ValueError, match='cannot be resumed'):
    grid_pass.run(grid_pass.Chunks(cm, fn, 4, 2), progress=False, state_path='x.json')


def test_resume_continues_from_the_state_file(tmp_path, capsys):
  cm = contextual.ContextualMapping.build(Grid(2, 3, 2))
  table = class_table(cm)
  whole = grid_pass.full_pass(cm, table, chunk_size=9, progress=False)
  state = str(tmp_path / 'state.json')
  part = grid_pass.full_pass(cm, table, chunk_size=9, progress=True, state_path=state,
                             max_seconds=0.0, log_every=0.0)
  assert not part['complete'] and 0 < part['blocks_done'] < part['num_blocks']
  saved = json.loads(open(state).read())
  assert saved['completed_blocks'] == [[0, part['blocks_done']]]
  assert 'ETA' in capsys.readouterr().err
  rest = grid_pass.full_pass(cm, table, chunk_size=9, progress=False, state_path=state,
                             resume=True)
  assert rest['complete'] and rest['resumed_from'] == part['blocks_done']
  assert rest['counts'] == whole['counts'] and rest['max_abs'] == whole['max_abs']
  # Each run's rate counts its own points only; the roofline is the same for both.
  block = whole['block']
  assert part['points_run'] == part['blocks_done'] * block
  assert rest['points_run'] == (rest['num_blocks'] - part['blocks_done']) * block
  assert whole['points_run'] == enumeration.grid_size(Grid(2, 3, 2), 'full')
  assert whole['points_per_second'] == round(whole['points_run'] / whole['seconds'])
  assert rest['alu_limit_points_per_second'] == whole['alu_limit_points_per_second'] == round(
      whole['cores'] * 1.2e10 / whole['ops_per_point'])
  assert whole['cpu_seconds'] > 0 and whole['points_per_cpu_second'] == pytest.approx(
      whole['points_run'] / whole['cpu_seconds'], rel=5e-2)
  assert json.loads(open(state).read())['cpu_seconds'] >= 0
  assert whole['fraction_of_alu_limit'] == round(
      whole['points_per_second'] / whole['alu_limit_points_per_second'], 3)
  other = contextual.ContextualMapping.build(Grid(1, 3, 2))
  with pytest.raises(ValueError, match='cannot resume'):
    grid_pass.full_pass(other, table, chunk_size=9, progress=False, state_path=state,
                        resume=True)
