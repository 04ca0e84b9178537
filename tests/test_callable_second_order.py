"""A callable target with a stated second-order bound (jacobian= and hessian=): sound against
dense samples, tighter than lipschitz= at the same boxes, and every wrong statement refused
in one line (certify/callable_enclosures.py, targets/callable_checks.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_ua.certify import box_bound, callable_enclosures, hand_built
from transformer_ua.certify import network_certificate as nc
from transformer_ua.networks import network_apply

from tests.test_certify_network import random_net


def product(x):
  """f_jk = x_jk m_k, m_k = mean_l x_lk. Quadratic, so f(c + h) - f(c) - J_f(c) h =
  h_jk mean_l h_lk exactly, and |h_jk mean_l h_lk| <= max|h|^2 (equality at h = t 1):
  H = 2 is the exact constant in the max norm."""
  return x * x.mean(axis=-2, keepdims=True)


def product_jacobian(x):
  """d f_jk / d x_lm = [l = j][m = k] m_k + [m = k] x_jk / n."""
  b, n, d = x.shape
  eye_d = np.eye(d)
  jac = (x[:, :, :, None, None] / n) * eye_d[None, None, :, None, :] * np.ones((1, 1, 1, n, 1))
  m = x.mean(axis=-2)                                            # [b, d]
  for j in range(n):
    jac[:, j, :, j, :] += m[:, :, None] * eye_d
  return jac


def wave(x):
  """f = sin(3x) / 2 entrywise: J diagonal 3/2 cos(3x), f'' = -9/2 sin(3x), so the Taylor
  remainder is at most 9/4 max|h|^2: H = 9/2."""
  return np.sin(3 * x) / 2


def wave_jacobian(x):
  b, n, d = x.shape
  diag = (1.5 * np.cos(3 * x)).reshape(b, n * d)
  return np.einsum('bq,qr->bqr', diag, np.eye(n * d)).reshape(b, n, d, n, d)


def test_the_hand_built_network_beats_lipschitz_and_stays_above_the_samples():
  net = hand_built.hand_built_product_network(8).net
  x = np.random.default_rng(3).random((20000, 3, 1))
  sampled = math.sqrt(((network_apply.apply(net, x) - product(x)) ** 2).sum(axis=(1, 2)).mean())
  second = nc.certify_network(product, net, d=1, n=3, p=2, max_boxes=2000, max_minutes=1,
                              jacobian=product_jacobian, hessian=2)
  first = nc.certify_network(product, net, d=1, n=3, p=2, max_boxes=2000, max_minutes=1,
                             lipschitz=2)
  assert sampled <= float(second.total) < float(first.total) / 4
  line = second.line()
  assert 'second order' in line and 'H = 2' in line and 'central differences' in line
  assert '\n' not in line


@pytest.mark.parametrize('which,f,jac,h', [('hand_built', product, product_jacobian, 2),
                                            ('random', wave, wave_jacobian, 4.5)])
def test_each_box_bound_holds_on_dense_samples(which, f, jac, h):
  """E_B >= |f - fl(g)| at 64 points in each of 96 random boxes (float64 run of g); with
  the remainder dropped (H = 0) some sample exceeds it, so the samples can tell."""
  net = (hand_built.hand_built_product_network(8).net if which == 'hand_built'
         else random_net(11, scale=0.5))
  rng = np.random.default_rng(1)
  caught = 0
  for width in (0.4, 0.05):
    lo = rng.random((96, 3, 1)) * (1 - width)
    hi = lo + width * rng.random((96, 3, 1))
    pts = lo[:, None] + (hi - lo)[:, None] * rng.random((96, 64, 3, 1))
    flat = pts.reshape(-1, 3, 1)
    err = np.abs(network_apply.apply(net, flat) - f(flat)).reshape(96, 64, 3, 1).max(axis=1)
    for stated, sound in ((float(h), True), (0.0, False)):
      local = callable_enclosures.SecondOrder(f, jac, stated)
      e, _, _, _ = box_bound.Evaluator(net, box_bound.FSide(None, local), 'float64').evaluate(
          lo, hi)
      if sound:
        assert np.all(err <= e)
      else:
        caught += int(np.sum(err > e))
  assert caught > 0


def _refusal(match, **kwargs):
  net = hand_built.hand_built_product_network(8).net
  f = kwargs.pop('f', product)
  with pytest.raises(ValueError, match=match) as err:
    nc.certify_network(f, net, d=1, n=3, p=2, max_boxes=600, **kwargs)
  assert '\n' not in str(err.value)
  return str(err.value)


def test_a_too_small_hessian_is_refuted_naming_the_pair():
  text = _refusal('hessian=1.5 is refuted', jacobian=product_jacobian, hessian=1.5)
  assert 'at C = ' in text and 'pass hessian >= ' in text


def test_a_wrong_jacobian_is_refuted_by_central_differences():
  _refusal('jacobian is refuted by central differences',
           jacobian=lambda x: product_jacobian(x) * 1.01, hessian=2)
  _refusal('jacobian is refuted', f=wave, jacobian=product_jacobian, hessian=4.5)


@pytest.mark.parametrize('kwargs,match', [
    (dict(jacobian=product_jacobian, hessian=-1), 'hessian=-1; it must be'),
    (dict(jacobian=product_jacobian, hessian=float('nan')), 'hessian=nan'),
    (dict(jacobian=product_jacobian, hessian='2'), "hessian='2'"),
    (dict(jacobian=product_jacobian, hessian=True), 'hessian=True'),
    (dict(hessian=2), 'go together'),
    (dict(jacobian=product_jacobian), 'go together'),
    (dict(jacobian=3, hessian=2), 'jacobian= must be a function'),
    (dict(jacobian=product_jacobian, hessian=2, lipschitz=2), 'not lipschitz= and hessian='),
    (dict(jacobian=lambda x: np.zeros((len(x), 3, 1)), hessian=2), 'returned shape'),
    (dict(jacobian=lambda x: 1 / 0, hessian=2), 'jacobian raised ZeroDivisionError'),
    (dict(f='token_times_mean', jacobian=product_jacobian, hessian=2), 'for a callable'),
])
def test_bad_arguments_one_line(kwargs, match):
  _refusal(match, **kwargs)


def test_the_trainer_certifies_with_the_second_order_bound():
  """train_and_certify passes jacobian= and hessian= to certify_network: the certificate of
  its candidate is second order (the training is short; only the path is tested)."""
  from transformer_ua.certify import trainer
  got = trainer.train_and_certify(
      product, 0.5, d=1, n=3, jacobian=product_jacobian, hessian=2, max_width=8,
      shapes=((1, 1),), sample_fraction=1e9, steps=150, batch=256, pool=2048,
      refine_rounds=0, certify_minutes=0.05, max_minutes=1)
  assert got.certificate is not None and 'second order' in got.certificate.line()


MODULE_SOURCE = """
import numpy as np


def square_mean(x):
    return x * np.mean(x, axis=-2, keepdims=True)
"""


@pytest.mark.parametrize('flags,fragment', [
    (('--config.hessian=2',), 'for a callable target'),
    (('--config.target=second_order_flags:square_mean', '--config.hessian=2',
      '--config.jacobian=second_order_flags:missing'), "has no 'missing'"),
])
def test_the_binary_refuses_bad_second_order_flags_in_one_line(tmp_path, flags, fragment):
  import os
  import subprocess
  import sys
  (tmp_path / 'second_order_flags.py').write_text(MODULE_SOURCE)
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run(
      [sys.executable, os.path.join(root, 'experiments', 'train_and_certify.py'), *flags,
       f'--output_dir={tmp_path / "out"}'],
      capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
      env=dict(os.environ, PYTHONPATH=root, JAX_PLATFORMS='cpu'))
  lines = [line for line in proc.stderr.splitlines() if line.strip()]
  assert proc.returncode != 0 and 'Traceback' not in proc.stderr, proc.stderr
  assert lines[0].startswith('error: ') and fragment in lines[0], proc.stderr
  assert not (tmp_path / 'out').exists()
