"""Issue 71, hole 3: the network certificate's trust boundaries. An independent run that
returns NaN or inf contradicts a certificate; f is evaluated at the exact X; a resumed state
whose chunk was edited is refused (HMAC-SHA256 under a key outside the state directory);
the inputs that used to raise a traceback get one accurate line."""

import glob
import json
import os
from fractions import Fraction

import numpy as np
import pytest

from transformer_ua import executor, executor_state
from transformer_ua.certify import certify_network, hand_built, independent_check


@pytest.fixture(autouse=True)
def _key_outside(tmp_path, monkeypatch):
  monkeypatch.setenv(executor_state.STATE_KEY_ENV, str(tmp_path / 'keys' / 'state_key'))


@pytest.fixture(scope='module')
def net():
  return hand_built.hand_built_product_network(8, n=3).net


def _cert(net, **kw):
  return certify_network('token_times_mean', net, d=1, n=3, arithmetic='float32',
                         epsilon=1.0, max_minutes=0.5, **kw)


def test_a_nan_in_an_independent_run_contradicts(net, monkeypatch):
  cert = _cert(net)
  real = independent_check.jax_apply

  def one_nan(n_, x, dtype='float64', precision='highest'):
    y = real(n_, x, dtype, precision)
    y[5, 0, 0] = np.nan
    return y
  monkeypatch.setattr(independent_check, 'jax_apply', one_nan)
  rows = independent_check.check('token_times_mean', net, cert, points=500)
  assert rows['jax']['contradicted'] and rows['jax']['non_finite'] == 1
  assert rows['jax']['sup'] == np.inf
  assert not rows['onnxruntime']['contradicted'] and rows['onnxruntime']['non_finite'] == 0


def test_f_is_evaluated_at_the_exact_points(net):
  cert = _cert(net)
  seen = []

  def f(x):
    seen.append(np.array(x))
    return x * x.mean(axis=-2, keepdims=True)
  independent_check.check(f, net, cert, points=300, seed=4)
  exact = np.random.default_rng(4).random((300, 3, 1))
  main = [s for s in seen if len(s) == 300 + len(cert.worst_centres)]
  assert main and np.array_equal(main[-1][:300], exact)
  assert not np.array_equal(exact.astype(np.float32).astype(np.float64), exact)


def _chunks(state):
  return sorted(glob.glob(os.path.join(state, '**', 'chunk_*.json'), recursive=True))


def test_an_edited_resumed_chunk_is_refused(net, tmp_path):
  state = str(tmp_path / 'state')
  first = _cert(net, state_dir=state)
  again = _cert(net, state_dir=state)
  assert again.total == first.total and 'HMAC-SHA256 signed' in again.line()
  path = _chunks(state)[0]
  with open(path, encoding='utf-8') as f:
    rec = json.load(f)
  rec['result']['e'] = [[0.0] * len(r) for r in rec['result']['e']]   # zero error
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(rec, f)
  with pytest.raises(ValueError, match='does not carry a valid signature') as err:
    _cert(net, state_dir=state)
  assert '\n' not in str(err.value)


def test_a_chunk_signed_under_another_key_is_refused(net, tmp_path, monkeypatch):
  state = str(tmp_path / 'state')
  _cert(net, state_dir=state)
  monkeypatch.setenv(executor_state.STATE_KEY_ENV, str(tmp_path / 'other_key'))
  with pytest.raises(ValueError, match='does not carry a valid signature'):
    _cert(net, state_dir=state)


def test_a_key_inside_the_state_directory_is_refused(net, tmp_path, monkeypatch):
  state = tmp_path / 'state'
  monkeypatch.setenv(executor_state.STATE_KEY_ENV, str(state / 'key'))
  with pytest.raises(ValueError, match='lies inside the state directory'):
    _cert(net, state_dir=str(state))


def test_tracebacks_become_one_line(net, tmp_path):
  path = tmp_path / 'a_file'
  path.write_text('x')

  def raising(x):
    raise ZeroDivisionError('division by zero')

  def f_ok(x):
    return x * x.mean(axis=-2, keepdims=True)
  cases = [
      (dict(f='token_times_mean', runtime='jax'), "runtime='jax' is a str; give the report"),
      (dict(f='token_times_mean', state_dir=str(path)), 'is a file, not a directory'),
      (dict(f=raising, lipschitz=1.0), 'f raised ZeroDivisionError'),
      (dict(f=f_ok, modulus=lambda c, r: 1 / 0), 'ZeroDivisionError'),
  ]
  for kw, message in cases:
    f = kw.pop('f')
    with pytest.raises(ValueError, match=message) as err:
      certify_network(f, net, d=1, n=3, max_minutes=0.2, **kw)
    assert '\n' not in str(err.value)


def test_a_numpy_epsilon_is_accepted(net):
  cert = certify_network('token_times_mean', net, d=1, n=3, epsilon=np.float32(0.1),
                         max_minutes=0.5)
  assert cert.epsilon == Fraction(float(np.float32(0.1)))
