"""Whole-grid verification: properties hold, violations are detected, the binary's I/O."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_ua.verify import contextual_mapping as vc
from transformer_ua.verify import entry
from transformer_ua.yun import enumeration
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.variants import registry
from transformer_ua.yun.stages import contextual

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, 'experiments', 'verify_contextual_mapping.py')


def _families(max_points=10 ** 6, max_cost=4 * 10 ** 7):
  """For every (d, n) with a grid of <= max_points ordered points: the smallest N and
  the largest N whose literal run costs <= max_cost (points x attention layers)."""
  out = []
  for d in range(1, 8):
    for n in range(2, 21):
      ok = []
      for N in range(2, 1001):
        points = (N + 1) ** (n * d)
        if points > max_points:
          break
        if points * (N ** d + 1) <= max_cost:
          ok.append(N)
      out += [(N, d, n) for N in sorted({ok[0], ok[-1]})] if ok else []
  return out


FAST = [(2, 2, 3), (3, 1, 4), pytest.param(2, 1, 2, marks=pytest.mark.slow),
        pytest.param(2, 3, 2, marks=pytest.mark.slow)]


@pytest.mark.parametrize('N,d,n', FAST)
def test_all_properties_hold_on_full_grid(N, d, n):
  cm = contextual.ContextualMapping.build(Grid(d, n, N))
  r = entry.verify(cm, enumeration='full', chunk_size=4096, progress=False)
  assert r['grid_points'] == (N + 1) ** (n * d)
  assert r['violations'] and not any(r['violations'].values()), r['violations']
  assert 'permutation_equivariance' in r['violations']
  assert r['max_abs_output_bits'] < r['bits_required']


def test_limbs_and_int64_verifications_agree():
  for arithmetic in ('int64', 'limbs'):
    cm = contextual.ContextualMapping.build(Grid(1, 3, 3), arithmetic=arithmetic)
    r = entry.verify(cm, enumeration='multiset', chunk_size=64, progress=False)
    assert r['arithmetic'] == arithmetic.split(':')[0] and r['all_hold']
    assert r['grid_points'] == enumeration.grid_size(Grid(1, 3, 3), 'multiset')


def test_detects_a_broken_network():
  """Corrupt one sweep layer (skip column id 1): Properties 8.x / Lemma 10 must fail."""
  cm = contextual.ContextualMapping.build(Grid(1, 3, 3))
  with jax.enable_x64(True):
    att = dict(cm.exact_params['segment_0']['attention'])
    att['W_O'] = att['W_O'].at[1].set(0)
    broken = dict(cm.exact_params, segment_0={'attention': att})
  cm_broken = type(cm)(**{**cm.__dict__, 'exact_params': broken})
  r = entry.verify(cm_broken, enumeration='full', chunk_size=256, progress=False)
  v = r['violations']
  assert v['8.3_inside_interval'] > 0 and v['lemma10_bounds'] > 0
  assert not r['all_hold']


def test_detects_broken_equivariance_table():
  """The equivariance check compares every point with its class representative."""
  cm = contextual.ContextualMapping.build(Grid(1, 2, 2))
  _, full_chunk = vc._make_chunk_fns(cm, 16)  # pylint: disable=protected-access
  m = enumeration.grid_size(Grid(1, 2, 2), 'multiset')
  with jax.enable_x64(True):
    reps = enumeration.make_codec(Grid(1, 2, 2))['decode_multiset'](jnp.arange(m))
    table = cm.forward(np.asarray(reps))['ids']
    good, _, _ = full_chunk(cm.exact_params, jnp.int64(0), jnp.int64(9), table)
    bad, _, _ = full_chunk(cm.exact_params, jnp.int64(0), jnp.int64(9),
                           table.at[2, 0].add(2))
  assert int(good['permutation_equivariance']) == 0
  assert int(bad['permutation_equivariance']) > 0


@pytest.mark.slow
@pytest.mark.parametrize('N,d,n', _families())
def test_every_family_up_to_1e6_points_verifies(N, d, n):
  """All 23 (d, n) families with <= 10^6 ordered points, at their smallest N and at
  the largest N affordable here; full grid, Lemma 9 included."""
  r = entry.verify(registry.choose(d, n, N), enumeration='full', lemma7_samples=2000,
                   lemma9_literal_points=32, progress=False)
  assert r['all_hold'], r['violations']


def _run_binary(*args):
  return subprocess.run([sys.executable, BINARY, *args, '--noprogress'], capture_output=True,
                        text=True, timeout=600, cwd=ROOT)


def test_binary_writes_json_and_exits_zero(tmp_path):
  out = tmp_path / 'contextual_mapping_N2_d1_n2_full.json'
  proc = _run_binary('--d=1', '--n=2', '--resolution=2', '--grid=full', '--lemma7_samples=500',
                     '--nolemma9', f'--output_dir={tmp_path}')
  assert proc.returncode == 0, proc.stderr[-2000:]
  r = json.loads(out.read_text())
  for key in ('d', 'n', 'resolution', 'grid', 'grid_points', 'violations', 'arithmetic',
              'bits_required', 'seconds', 'provenance'):
    assert key in r
  assert r['grid_points'] == 9 and r['arithmetic'] == 'int64'
  assert set(r['violations']) >= {'8.1_distinct_entries', '8.2_distinct_across_classes',
                                  '8.3_inside_interval', '8.4_outside_interval',
                                  'lemma10_bounds', 'lemma10_one_to_one',
                                  'permutation_equivariance', 'lemma7_real_inputs'}
  assert 'ALL PROPERTIES HOLD' in proc.stdout


@pytest.mark.parametrize('args,message', [
    (['--resolution=1'], '--resolution=1: must be an integer >= 2'),
    (['--n=1'], '--n=1: must be an integer >= 2'),
    (['--d=0'], '--d=0: must be an integer >= 1'),
    (['--d=1.5'], '--d=1.5: must be an integer >= 1'),
    (['--grid=sparse'], 'allowed values are full and multiset'),
    (['--d=9', '--n=9', '--resolution=9'], 'at most'),
    (['--d=2', '--n=4', '--resolution=8', '--grid=multiset', '--arithmetic=int64'],
     'needs 81 bits'),
])
def test_binary_bad_input_is_one_line_exit_2(args, message):
  proc = _run_binary(*args)
  assert proc.returncode == 2
  lines = [l for l in proc.stderr.splitlines() if l.startswith('error:')]
  assert len(lines) == 1 and message in lines[0], proc.stderr
  assert 'Traceback' not in proc.stderr


def test_binary_loads_only_what_verification_needs():
  """Start-up is part of every run's wall time: the binary's imports leave out the
  certificate stack, the search, training (optax, orbax), mpmath (one_layer only) and
  Flax (``modules``: the constructions import it where they build a network)."""
  code = ('import sys; sys.argv = ["verify_contextual_mapping.py"]; '
          f'sys.path.insert(0, {os.path.dirname(BINARY)!r}); '
          'import verify_contextual_mapping; print(" ".join(sorted(sys.modules)))')
  env = {**os.environ, 'PYTHONPATH': ROOT}
  loaded = set(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                              check=True, env=env, cwd=ROOT).stdout.split())
  assert 'transformer_ua.verify.theorem2' in loaded      # the scan sees the binary's imports
  for name in ('transformer_ua.yun.bounds.certificate', 'transformer_ua.yun.search',
               'transformer_ua.train', 'transformer_ua.verify.one_layer', 'optax', 'orbax',
               'mpmath', 'torch', 'transformer_ua.modules', 'flax'):
    assert not any(m == name or m.startswith(name + '.') for m in loaded), name
