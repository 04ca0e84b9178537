"""Sharding over 8 forced CPU devices equals the single-device run (issue 8)."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from transformer_ua import parallel

SCRIPT = os.path.join(os.path.dirname(__file__), 'scripts', 'parallel_check.py')


@pytest.fixture(scope='module')
def forced_eight_devices():
  env = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count=8',
             JAX_PLATFORMS='cpu')
  out = subprocess.run([sys.executable, SCRIPT], env=env, capture_output=True, text=True,
                       timeout=600, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_grid_reduction_sharded_equals_single_device(forced_eight_devices):
  r = forced_eight_devices
  assert r['devices'] == 8
  # Independent count: ordered triples of distinct tokens among 4**2 = 16 values.
  assert r['grid_sharded'] == r['grid_single'] == [16 * 15 * 14, 4**6]


def test_data_parallel_loss_curve_equals_single_device(forced_eight_devices):
  r = forced_eight_devices
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
