"""Sharding over 8 forced CPU devices equals the single-device run."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from transformer_ua import parallel

SCRIPT = os.path.join(os.path.dirname(__file__), 'scripts', 'parallel_check.py')
VERIFY_SCRIPT = os.path.join(os.path.dirname(__file__), 'scripts', 'sharded_verify_check.py')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, 'experiments', 'verify_contextual_mapping.py')
EIGHT = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count=8',
             JAX_PLATFORMS='cpu')


@pytest.fixture(scope='module')
def forced_eight_devices():
  env = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count=8',
             JAX_PLATFORMS='cpu')
  out = subprocess.run([sys.executable, SCRIPT], env=env, capture_output=True, text=True,
                       timeout=600, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_data_parallel_loss_curve_equals_single_device(forced_eight_devices):
  r = forced_eight_devices
  assert r['devices'] == 8
  np.testing.assert_allclose(r['loss_sharded'], r['loss_single'], rtol=1e-5, atol=1e-7)
  assert r['loss_sharded'][-1] < 0.1 * r['loss_sharded'][0]


def test_distributed_flags_are_validated():
  assert parallel.initialize_distributed(None, None, None) is False
  with pytest.raises(ValueError, match='need --coordinator_address'):
    parallel.initialize_distributed(None, 2, 0)
  with pytest.raises(ValueError, match='process_id must be in'):
    parallel.initialize_distributed('localhost:1234', 2, 5)


def test_shard_batch_refuses_indivisible_batch(forced_eight_devices):
  assert 'multiple of the device count' in forced_eight_devices['indivisible_error']


# ---------------------------------------------------------------------------
# The real grid verifier, sharded (tests/scripts/sharded_verify_check.py).
# ---------------------------------------------------------------------------


def _sharded_verify(case):
  out = subprocess.run([sys.executable, VERIFY_SCRIPT, case], env=EIGHT, capture_output=True,
                       text=True, timeout=600, check=True)
  r = json.loads(out.stdout.strip().splitlines()[-1])
  assert r['devices'] == 8 and r['sharded']['devices'] == 8 and r['single']['devices'] == 1
  assert r['sharded']['chunk_size'] % 8 == 0
  return r


def _same(r):
  a, b = dict(r['sharded']), dict(r['single'])
  for key in ('devices', 'chunk_size'):
    a.pop(key), b.pop(key)
  assert a == b


def test_sharded_verifier_equals_single_device_on_full_grid():
  r = _sharded_verify('full')
  _same(r)
  s = r['sharded']
  assert s['grid_points'] == 4 ** 3                      # (N+1)^(nd), N=3, d=1, n=3
  assert s['categories'] == {'1': 3 * 2 * 1, '2': 3 ** 3 - 6, '3': 4 ** 3 - 3 ** 3}
  assert 'lemma9_value_mapping' in s['violations']
  assert not any(s['violations'].values()), s['violations']
  # The per-point outputs of a chunk really live split over the 8 devices.
  c = r['chunk']
  assert c['q_devices'] == 8 and not c['q_fully_replicated'] and c['q_shard_rows'] == [8]
  assert c['points'] == 20


def test_sharded_verifier_counts_the_same_violations_on_a_broken_network():
  r = _sharded_verify('broken')
  _same(r)
  v = r['sharded']['violations']
  assert v['8.3_inside_interval'] > 0 and v['lemma10_bounds'] > 0


def test_sharded_verifier_equals_single_device_in_limb_arithmetic():
  r = _sharded_verify('limbs')
  _same(r)
  assert r['sharded']['multiset_points'] == math.comb(4 + 3 - 1, 3)
  assert not any(r['sharded']['violations'].values())


def test_binary_shards_over_all_devices(tmp_path):
  out = tmp_path / 'contextual_mapping_N2_d1_n2_full.json'
  proc = subprocess.run([sys.executable, BINARY, '--d=1', '--n=2', '--resolution=2',
                         '--grid=full', '--lemma7_samples=100', '--nolemma9', '--noprogress',
                         '--chunk_size=5', f'--output_dir={tmp_path}'], env=EIGHT,
                        capture_output=True, text=True, timeout=600, cwd=ROOT)
  assert proc.returncode == 0, proc.stderr[-2000:]
  r = json.loads(out.read_text())
  assert r['devices'] == 8 and r['chunk_size'] == 8 and r['grid_points'] == 9
  assert r['all_hold'] and '8 device(s)' in proc.stdout


#: Host devices the binary makes without XLA_FLAGS: one per core.
_CORES = os.cpu_count() or 1


@pytest.mark.parametrize('args,message', [
    (['--num_processes=2'], 'need --coordinator_address'),
    ([f'--num_devices={_CORES + 1}'], f'num_devices must be in [1, {_CORES}]'),
])
def test_binary_bad_distributed_flags_are_one_line_errors(args, message):
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env.pop('XLA_FLAGS', None)
  proc = subprocess.run([sys.executable, BINARY, '--d=1', '--n=2', '--resolution=2',
                         '--nolemma9', '--noprogress', *args], env=env, capture_output=True,
                        text=True, timeout=600, cwd=ROOT)
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = [l for l in proc.stderr.splitlines() if l.startswith('error:')]
  assert len(lines) == 1 and message in lines[0], proc.stderr
  assert 'Traceback' not in proc.stderr


# ---------------------------------------------------------------------------
# Data-parallel training loops (tests/scripts/data_parallel_check.py).
# ---------------------------------------------------------------------------

DP_SCRIPT = os.path.join(os.path.dirname(__file__), 'scripts', 'data_parallel_check.py')
# Measured on 8 forced CPU devices: largest relative loss difference 1.7e-7 (float32
# partial sums added in another order); the tolerance leaves ~10x headroom.
LOSS_RTOL = 2e-6


def _data_parallel(case, tmp_path):
  env = dict(EIGHT, PYTHONPATH=ROOT)  # the script imports experiments.configs
  out = subprocess.run([sys.executable, DP_SCRIPT, case, str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=600, check=True)
  r = json.loads(out.stdout.strip().splitlines()[-1])
  assert r['devices'] == 8
  return r['sharded'], r['single']


def test_fang_regression_data_parallel_equals_single_device(tmp_path):
  dp, one = _data_parallel('fang', tmp_path)
  assert len(dp['train_mse']) == len(one['train_mse']) == 2
  np.testing.assert_allclose(dp['train_mse'], one['train_mse'], rtol=LOSS_RTOL)
  np.testing.assert_allclose(dp['test_mse'], one['test_mse'], rtol=LOSS_RTOL)
  for name in ('F', 'beta', 'b'):
    np.testing.assert_allclose(dp['params'][name], one['params'][name], rtol=0, atol=1e-6)
  assert dp['train_mse'][1] < dp['train_mse'][0]       # it trained


def test_mixing_pretrain_data_parallel_equals_single_device(tmp_path):
  dp, one = _data_parallel('mixing', tmp_path)
  assert len(dp['loss']) == len(one['loss']) == 3 and dp['dropout'] > 0
  np.testing.assert_allclose(dp['loss'], one['loss'], rtol=LOSS_RTOL)
  np.testing.assert_allclose(dp['grad_norm'], one['grad_norm'], rtol=10 * LOSS_RTOL)
  for key, value in one['eval'].items():
    np.testing.assert_allclose(dp['eval'][key], value, rtol=LOSS_RTOL, atol=1e-6)


def test_binary_multi_host_two_processes(tmp_path):
  """Two processes x 4 forced CPU devices joined by jax.distributed: one 8-device mesh;
  process 0 writes the JSON, with the counts of the closed forms."""
  import socket  # pylint: disable=import-outside-toplevel
  with socket.socket() as s:
    s.bind(('localhost', 0))
    port = s.getsockname()[1]
  env = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count=4',
             JAX_PLATFORMS='cpu')
  procs = [subprocess.Popen(
      [sys.executable, BINARY, '--d=1', '--n=3', '--resolution=3', '--grid=full',
       '--nolemma9', '--lemma7_samples=100', '--noprogress', '--chunk_size=20',
       f'--coordinator_address=localhost:{port}', '--num_processes=2', f'--process_id={i}',
       f'--output_dir={tmp_path / f"p{i}"}'], env=env, cwd=ROOT,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (0, 1)]
  outs = [p.communicate(timeout=600) for p in procs]
  assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
  name = 'contextual_mapping_N3_d1_n3_full.json'
  r = json.loads((tmp_path / 'p0' / name).read_text())
  assert not (tmp_path / 'p1' / name).exists()
  assert r['devices'] == 8 and r['chunk_size'] == 24 and r['all_hold']
  assert r['grid_points'] == 4 ** 3
  assert r['categories'] == {'1': 6, '2': 3 ** 3 - 6, '3': 4 ** 3 - 3 ** 3}
