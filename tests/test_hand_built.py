"""The hand-built token_times_mean network at any (d, n) (certify/hand_built.py) and its
record (certify/hand_built_certificate.py, benchmarks/certify_hand_built.py).

Oracles: targets' NumPy token_times_mean and network_apply.apply on samples (the closed
forms against dense sampling, the sup attained where the module doc says), the d = 1
params_hash values of the network as built before d was added (pinned), the parameter
count by hand."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from transformer_ua.targets import functions as targets
from transformer_ua.certify import hand_built, hand_built_certificate
from transformer_ua.networks import network_apply, network_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: params_hash of the d = 1 network before the generalization, computed then at (units, n)
#: = (4, 3), (8, 2), (20, 3), (16, 8): unchanged (the arrays do not depend on n, only the
#: closed forms do, so (16, 8) is checked at n = 2, whose exact d_2 is quick).
D1_HASHES = {
    (4, 3): 'sha256:f77f85889b3e5a0e372b86904a7c04dd44ddab3154878c0b72df8d151e444479',
    (8, 2): 'sha256:93044cad5a877c23b8c2f288443ea2c2ec6e856a5a17fb760e8c16fd6b54634d',
    (20, 3): 'sha256:571a7305ad47aedae7d59991295729c4e84eb71004549498b1de38f124a1c391',
    (16, 2): 'sha256:3308911f9a9fd4d769fd880a2b01fcfca657688e1a58fb5690a580f915509210',
}


@pytest.mark.parametrize('units,n', sorted(D1_HASHES))
def test_the_d1_network_is_unchanged(units, n):
  hb = hand_built.hand_built_product_network(units, n)
  assert hb.d == 1
  assert network_dict.params_hash(hb.net) == D1_HASHES[units, n]
  assert network_dict.params_hash(hand_built.hand_built_product_network(units, n, 1).net) \
      == D1_HASHES[units, n]


@pytest.mark.parametrize('units,n,d', [(4, 2, 2), (8, 3, 2), (4, 3, 3), (8, 2, 4)])
def test_closed_forms_against_sampling(units, n, d):
  hb = hand_built.hand_built_product_network(units, n, d)
  h = 2 / units
  assert float(hb.sup_error) == h * h / 4
  assert hb.net.count_params() == 4 * d * d * (units + 2) + d * units + 3 * d
  f = targets.get_target('token_times_mean', d=d, n=n)
  x = np.random.default_rng(units + 10 * n + 100 * d).random((100000, n, d))
  err = network_apply.apply(hb.net, x) - f(x)
  s = np.sum(err ** 2, axis=(1, 2))
  se = np.std(s) / math.sqrt(len(s))
  assert abs(np.mean(s) - float(hb.l2_error_squared)) <= 4 * se      # the exact d_2^2
  assert np.max(np.abs(err)) <= float(hb.sup_error) * (1 + 1e-9)
  # attained (module doc): every token of a column at the midpoint of a piece
  t = np.full((1, n, d), h / 2)
  assert abs(network_apply.apply(hb.net, t) - f(t)).max() == pytest.approx(h * h / 4,
                                                                          rel=1e-9)


def test_d_columns_are_d_independent_copies_of_the_d1_network():
  """Column c of g(X) is the d = 1 network applied to column c of X (no mixing), so the
  d-column error is d copies of the d = 1 one: d_2^2 scales by d."""
  n, units = 3, 8
  one = hand_built.hand_built_product_network(units, n)
  three = hand_built.hand_built_product_network(units, n, 3)
  x = np.random.default_rng(0).random((500, n, 3))
  y = network_apply.apply(three.net, x)
  for c in range(3):
    np.testing.assert_allclose(y[..., c:c + 1], network_apply.apply(one.net, x[..., c:c + 1]),
                               rtol=0, atol=1e-15)
  assert three.l2_error_squared == 3 * one.l2_error_squared
  assert three.l2_error == pytest.approx(math.sqrt(3) * one.l2_error, rel=1e-15)


@pytest.mark.parametrize('kwargs,match', [({'d': 0}, 'd=0'), ({'d': 1.5}, 'd=1.5'),
                                          ({'d': True}, 'd=True'), ({'n': 1}, 'n=1'),
                                          ({'units': 6}, 'units=6')])
def test_bad_input_one_line(kwargs, match):
  args = {'units': 8, 'n': 3, 'd': 2, **kwargs}
  with pytest.raises(ValueError, match=match) as e:
    hand_built.hand_built_product_network(**args)
  assert '\n' not in str(e.value)


def test_the_record_of_a_small_certificate():
  rec = hand_built_certificate.certify_hand_built(2, 2, 4, 0.2, max_minutes=1, points=2000)
  assert rec['reached'] and rec['total'] <= 0.2 and rec['projection'] == ''
  assert rec['params'] == 4 * 4 * 6 + 8 + 6 and rec['boxes'] > 0
  # a proof: at least the closed-form d_2 of g less what fl(g) can move it
  assert rec['total'] >= rec['closed_form_d2'] - rec['float_sup'] * math.sqrt(4)
  jax_row = rec['sampled']['jax']
  assert not jax_row['contradicted'] and jax_row['d_p'] <= rec['total']
  assert abs(jax_row['d_p'] - rec['closed_form_d2']) <= 0.1 * rec['closed_form_d2']
  row = hand_built_certificate.row_text(rec)
  assert row.startswith('| (2, 2) | 4 | 110 | 0.2 |') and '| yes |' in row


def test_the_binary_refuses_an_existing_out_before_any_work(tmp_path):
  out = tmp_path / 'r.json'
  out.write_text('{}')
  env = {**os.environ, 'PYTHONPATH': ROOT}
  r = subprocess.run([sys.executable, os.path.join(ROOT, 'benchmarks', 'certify_hand_built.py'),
                      f'--out={out}'], capture_output=True, text=True, env=env, timeout=60,
                     check=False)
  assert r.returncode == 2 and 'already exists' in r.stderr and 'Traceback' not in r.stderr
  assert out.read_text() == '{}'


def test_a_dask_run_gets_the_local_total_at_the_same_boxes():
  """Through the executor on a Dask LocalCluster of 2 workers, stopped at max_boxes, the
  certificate equals the in-process NumPy run's exactly (the same boxes, the same Fraction),
  and the record says where it ran."""
  args = dict(max_boxes=800, max_minutes=2, points=1000, box_kernel=False)
  local = hand_built_certificate.certify_hand_built(1, 3, 8, 0.005, **args)
  dask = hand_built_certificate.certify_hand_built(1, 3, 8, 0.005, dask_workers=2, **args)
  assert not local['reached'] and local['rounds'] >= 2 and local['boxes'] <= 800
  assert (dask['total_exact'], dask['boxes'], dask['rounds']) == (
      local['total_exact'], local['boxes'], local['rounds'])
  assert 'Dask LocalCluster of 2' in dask['where'] and local['where'] == 'this process'


@pytest.mark.parametrize('bad', [-1, 1.5, True])
def test_bad_dask_workers_is_one_line(bad):
  with pytest.raises(ValueError, match='dask_workers=') as err:
    hand_built_certificate.certify_hand_built(1, 3, 8, 0.1, dask_workers=bad)
  assert '\n' not in str(err.value)
