"""The id-only kernel and the block pass vs the literal layers; the NumPy reference; memory
caps and refusals; resumable, logged full-grid runs."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua.verify import contextual_mapping as vc
from transformer_ua.verify import grid_pass, sweep_kernel, theorem2
from transformer_ua.yun import enumeration
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.stages import sweep
from transformer_ua.yun.stages import contextual

from grid_helpers import class_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, 'experiments', 'verify_contextual_mapping.py')


def _reference():
  spec = importlib.util.spec_from_file_location(
      'verify_reference', os.path.join(ROOT, 'benchmarks', 'verify_reference.py'))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def _whole_grid(d, n, N):
  with jax.enable_x64(True):
    return np.asarray(enumeration.make_codec(Grid(d, n, N))['decode_full'](
        jnp.arange(enumeration.grid_size(Grid(d, n, N), 'full'))))


# (N, d, n, mapping arithmetic, sweep arithmetic): int32 / int64 sweeps, int64 and
# multi-limb global shifts, and a limb sweep.
CONFIGS = [(2, 2, 3, 'auto', 'auto'), (3, 1, 4, 'auto', 'int64'), (3, 1, 3, 'limbs:3', 'auto'),
           (2, 2, 2, 'limbs:3', 'limbs'), (2, 1, 3, 'auto', 'limbs')]


@pytest.mark.parametrize('N,d,n,arithmetic,sweep_arith', CONFIGS)
def test_sweep_kernel_equals_literal_layers_on_whole_grid(N, d, n, arithmetic, sweep_arith):
  cm = contextual.ContextualMapping.build(Grid(d, n, N), arithmetic=arithmetic)
  k = _whole_grid(d, n, N)
  with jax.enable_x64(True):
    lit = jax.jit(cm.forward_fn('core'))(cm.exact_params, jnp.asarray(k))
    fast = jax.jit(sweep.forward_fn(cm, sweep_arith))(cm.exact_params, jnp.asarray(k))
  for key in ('sweep_ids', 'ids', 'z'):
    assert np.array_equal(np.asarray(lit[key]), np.asarray(fast[key])), key
  assert int(lit['inexact']) == int(fast['inexact']) == 0
  assert sweep.read_program(cm, sweep_arith).kind == (
      sweep_arith if sweep_arith != 'auto' else 'int32')


@pytest.mark.parametrize('N,d,n,arithmetic,chunk', [(2, 2, 3, 'auto', 100),
                                                    (3, 1, 4, 'auto', 20),
                                                    (3, 1, 3, 'limbs:3', 10)])
def test_block_pass_equals_literal_verifier(N, d, n, arithmetic, chunk):
  cm = contextual.ContextualMapping.build(Grid(d, n, N), arithmetic=arithmetic)
  lit = vc.verify_contextual_mapping(cm, enumeration='full', chunk_size=chunk, progress=False,
                                     kernel='core')
  fast = vc.verify_contextual_mapping(cm, enumeration='full', chunk_size=chunk, progress=False,
                                      kernel='sweep')
  assert fast['full_pass']['num_blocks'] > 1
  assert fast['violations'] == lit['violations'] and fast['all_hold']
  assert fast['categories'] == lit['categories']
  assert fast['max_abs_output'] == lit['max_abs_output']


def test_sweep_kernel_detects_a_broken_network():
  cm = contextual.ContextualMapping.build(Grid(1, 3, 3))
  with jax.enable_x64(True):
    att = dict(cm.exact_params['segment_0']['attention'])
    att['W_O'] = att['W_O'].at[1].set(0)   # layer for column id 1 shifts nothing
    broken = dict(cm.exact_params, segment_0={'attention': att})
  cm_broken = type(cm)(**{**cm.__dict__, 'exact_params': broken})
  r = vc.verify_contextual_mapping(cm_broken, enumeration='full', chunk_size=16, progress=False,
                                   kernel='sweep')
  assert r['violations']['8.3_inside_interval'] > 0 and not r['all_hold']


def test_sweep_kernel_detects_a_broken_equivariance_table():
  cm = contextual.ContextualMapping.build(Grid(1, 3, 2))
  table = class_table(cm)
  good = grid_pass.full_pass(cm, table, chunk_size=9, progress=False)
  table[3, 1] += 2
  bad = grid_pass.full_pass(cm, table, chunk_size=9, progress=False)
  assert good['counts']['permutation_equivariance'] == 0
  assert bad['counts']['permutation_equivariance'] > 0


@pytest.mark.parametrize('N,d,n', [(2, 2, 3), (3, 1, 4), (2, 1, 2)])
def test_reference_agrees_with_layers_and_verifier(N, d, n):
  ref = _reference()
  cm = contextual.ContextualMapping.build(Grid(d, n, N))
  cfg = ref.Config(d, n, N)
  total = enumeration.grid_size(Grid(d, n, N), 'full')
  _, k = ref.decode(cfg, np.arange(total))
  assert np.array_equal(k, _whole_grid(d, n, N))
  lt, q, _ = ref.g_c(cfg, k)
  with jax.enable_x64(True):
    out = jax.jit(cm.forward_fn('core'))(cm.exact_params, jnp.asarray(k))
  assert np.array_equal(np.asarray(out['ids']), q)
  assert np.array_equal(np.asarray(out['sweep_ids']), lt)
  r = ref.verify(d, n, N, chunk=7)
  v = vc.verify_contextual_mapping(cm, enumeration='full', progress=False, kernel='core')
  for key, count in r['counts'].items():
    if key.startswith('category'):
      assert count == v['categories'][key[-1]]
    elif key != 'points':
      assert count == v['violations'][key] == 0, key
  assert r['counts']['points'] == total and r['max_abs'] == int(v['max_abs_output'])


def test_reference_beyond_int64_matches_limb_layers():
  ref = _reference()
  cm = contextual.ContextualMapping.build(Grid(1, 3, 3), arithmetic='limbs:3')
  cfg = ref.Config(1, 3, 3)
  cfg.sweep_int64 = cfg.final_int64 = False   # Python ints throughout
  _, k = ref.decode(cfg, np.arange(64))
  _, q, _ = ref.g_c(cfg, k)
  with jax.enable_x64(True):
    out = jax.jit(cm.forward_fn('core'))(cm.exact_params, jnp.asarray(k))
  assert q.dtype == object and np.array_equal(cm.ops.to_python(out['ids']), q)


def test_chunk_is_capped_at_grid_size_and_budget():
  cm = contextual.ContextualMapping.build(Grid(2, 3, 3))   # 4,096 points
  for kernel in ('sweep', 'fast'):
    r = vc.verify_contextual_mapping(cm, enumeration='full', chunk_size=10 ** 12, progress=False,
                                     kernel=kernel)
    assert r['all_hold'] and r['chunk_size'] <= enumeration.grid_size(Grid(2, 3, 3), 'full')
  assert vc.chunk_cap(cm, 10 ** 12, 10 ** 15) * vc.LITERAL_POINT_BYTES <= vc.CHUNK_BUDGET
  _, block, _ = sweep_kernel.layout(contextual.ContextualMapping.build(Grid(1, 19, 2)),
                                    10 ** 12)
  assert block <= sweep_kernel.block_points_cap(
      contextual.ContextualMapping.build(Grid(1, 19, 2)))


def test_binary_caps_chunk_and_refuses_in_one_line(tmp_path):
  out = tmp_path / 'contextual_mapping_N3_d2_n3_full.json'
  ok = subprocess.run([sys.executable, BINARY, '--d=2', '--n=3', '--resolution=3',
                       '--chunk_size=1000000000000', '--nolemma9', '--noprogress',
                       '--lemma7_samples=10', f'--output_dir={tmp_path}'],
                      capture_output=True, text=True, timeout=600, cwd=ROOT)
  assert ok.returncode == 0, ok.stderr[-2000:]
  r = json.loads(out.read_text())
  assert r['all_hold'] and r['kernel'] == 'sweep' and r['chunk_size'] <= 4096
  assert os.path.exists(str(out) + '.state')
  bad = subprocess.run([sys.executable, BINARY, '--d=2', '--n=4', '--resolution=9',
                        '--grid=multiset'], capture_output=True, text=True, timeout=600,
                       cwd=ROOT)
  assert bad.returncode == 2 and 'Traceback' not in bad.stderr
  lines = [l for l in bad.stderr.splitlines() if l.startswith('error:')]
  assert len(lines) == 1 and 'GiB' in lines[0], bad.stderr


@pytest.mark.parametrize('N,d,n,arithmetic', [(2, 2, 3, 'auto'), (3, 1, 4, 'auto'),
                                              (3, 1, 3, 'limbs:3')])
def test_in_kernel_representative_equals_class_table(N, d, n, arithmetic):
  """Without a table (each point's sorted-column representative run through g_c in the
  same call) the block pass gives the counts of the table pass, on whole enumeration."""
  cm = contextual.ContextualMapping.build(Grid(d, n, N), arithmetic=arithmetic)
  with_table = grid_pass.full_pass(cm, class_table(cm), chunk_size=20, progress=False)
  without = grid_pass.full_pass(cm, None, chunk_size=20, progress=False)
  assert with_table['num_blocks'] > 1
  assert without['counts'] == with_table['counts'] and without['max_abs'] == with_table['max_abs']
  assert with_table['counts']['permutation_equivariance'] == 0
  assert without['equivariance'] == 'representative recomputed in-kernel'


def test_in_kernel_representative_detects_a_position_dependent_kernel(monkeypatch):
  """The recomputed check can fail: a global shift that adds the token's position."""
  cm = contextual.ContextualMapping.build(Grid(1, 3, 2))
  shift = sweep.global_shift

  def skewed(cm_, prog, ids):
    q, lt, inexact = shift(cm_, prog, ids)
    return q + jnp.arange(q.shape[0], dtype=q.dtype)[:, None], lt, inexact

  monkeypatch.setattr(sweep, 'global_shift', skewed)
  bad = grid_pass.full_pass(cm, None, chunk_size=9, progress=False)
  assert bad['counts']['permutation_equivariance'] > 0


def test_large_class_table_is_not_held():
  """N=3, d=3, n=5: the 1.2 GiB table is replaced by the in-kernel representative, so the
  run is planned within the memory budget instead of refused."""
  res = theorem2.plan_resources(Grid(3, 5, 3), 'full', lemma9=False)
  assert res['bytes'] <= theorem2.MAX_BYTES
  assert sweep_kernel.table_bytes(Grid(3, 5, 3), 3) > sweep_kernel.TABLE_BUDGET
  assert theorem2.plan_resources(Grid(3, 5, 3), 'full', lemma9=False, kernel='core')['bytes'] > \
      theorem2.MAX_BYTES


def test_ops_per_point_counts_the_representative_run_without_a_table(monkeypatch):
  """The roofline's count: N=2, d=2, n=3, int64 -- by hand from the docstring: sweep
  4 (2*2 + 2 + 5*3) = 84, shift 3*2 + 2 + 4*3 = 20, checks 6 + 12 + 6 = 24, index
  6 + 18 = 24; with a class table 84 + 20 + 24 + 24, without one the sweep and shift twice."""
  from transformer_ua.verify import sweep_kernel as sk
  cm = contextual.ContextualMapping.build(Grid(2, 3, 2))
  assert not cm.limbs and sk.uses_table(cm)
  assert sk.ops_per_point(cm) == 84 + 20 + 24 + 24
  monkeypatch.setattr(sk, 'uses_table', lambda cm, budget=0: False)
  assert sk.ops_per_point(cm) == 2 * (84 + 20) + 24 + 24


@pytest.mark.parametrize('N,d,n,arithmetic,chunk', [(2, 1, 5, 'auto', 9), (2, 1, 5, 'auto', 54),
                                                    (2, 1, 4, 'limbs:3', 9)])
def test_table_parts_give_the_counts_of_the_whole_table(monkeypatch, N, d, n, arithmetic,
                                                        chunk):
  """With SUBTABLE_BUDGET below the whole table, each call reads the part for its fixed
  top columns (one window per call, chunk 9; two per call, chunk 54): the same counts,
  and a planted wrong entry is found by both."""
  cm = contextual.ContextualMapping.build(Grid(d, n, N), arithmetic=arithmetic)
  monkeypatch.setattr(sweep_kernel, 'CACHE_POINTS', 9)   # blocks of 9 points (m = 2)
  table = class_table(cm)
  whole = grid_pass.full_pass(cm, table, chunk_size=chunk, progress=False)
  m = sweep_kernel.layout(cm, chunk)[0]
  v = enumeration.num_column_values(d, N)
  part_bytes = 8 * sweep_kernel.num_words(cm) * n * math.comb(v + m, m + 1)
  monkeypatch.setattr(sweep_kernel, 'SUBTABLE_BUDGET', part_bytes)
  assert sweep_kernel.free_columns(cm, m) == m + 1 < n
  window = sweep_kernel.window_blocks(cm, m, table)
  blocks = grid_pass.Blocks(cm, table, chunk_size=chunk)
  assert window == v ** (m + 1 - m) and blocks.steps == (6 if chunk == 54 else 1)
  parts = grid_pass.full_pass(cm, table, chunk_size=chunk, progress=False)
  assert parts['counts'] == whole['counts'] and parts['max_abs'] == whole['max_abs']
  assert parts['counts']['permutation_equivariance'] == 0
  table[len(table) // 2, 1] += 1
  monkeypatch.setattr(sweep_kernel, 'SUBTABLE_BUDGET', 10 ** 9)
  bad_whole = grid_pass.full_pass(cm, table, chunk_size=chunk, progress=False)
  monkeypatch.setattr(sweep_kernel, 'SUBTABLE_BUDGET', part_bytes)
  bad_parts = grid_pass.full_pass(cm, table, chunk_size=chunk, progress=False)
  assert bad_parts['counts'] == bad_whole['counts']
  assert bad_parts['counts']['permutation_equivariance'] > 0


def test_free_multisets_are_in_colex_order_and_stable_positions_sort():
  """The part's classes in the table's rank order (the multiset codec's), and the
  positions of equal columns in order of appearance (numpy's stable argsort)."""
  v, u = 4, 3
  sets = sweep_kernel._free_multisets(v, u)
  with jax.enable_x64(True):
    k = enumeration.make_codec(Grid(1, u, v - 1))['decode_multiset'](jnp.arange(len(sets)))
  assert np.array_equal(np.asarray(k)[:, :, 0] + 1, sets)   # d = 1: column = grid index + 1
  cols = np.random.default_rng(0).integers(0, 3, size=(5, 200))
  expected = np.argsort(np.argsort(cols, axis=0, kind='stable'), axis=0)
  assert np.array_equal(np.asarray(enumeration.stable_positions(jnp.asarray(cols))), expected)
  assert np.array_equal(enumeration.stable_positions(cols), expected)     # NumPy in, out


def test_a_resume_off_the_window_grid_is_refused():
  cm = contextual.ContextualMapping.build(Grid(1, 5, 2))
  blocks = grid_pass.Blocks(cm, class_table(cm), chunk_size=54)
  blocks.window = 3
  with pytest.raises(ValueError, match='resume with the first'):
    blocks.step(blocks.steps + 1)
