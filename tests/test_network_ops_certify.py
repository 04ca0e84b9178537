"""Float32 certificates of untrained networks with every stock-layer op (large errors)
against the dense-sampled d_2 of their float32 run (``network_apply.apply`` in float32); the
line names the ops' assumptions; a causal net gets no n! reduction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from network_ops_helpers import random_net
from transformer_ua import rounding
from transformer_ua.certify import network_certificate as nc
from transformer_ua.networks import network_apply


@pytest.mark.parametrize('norm,activation', [('post', 'gelu'), ('pre', 'gelu'),
                                             ('pre', 'gelu_tanh')])
def test_certificate_is_above_dense_sampled_error(norm, activation):
  """Untrained nets (large errors): the float32 certificate's d_2 is at least the sampled
  d_2 of the float32 run; the line names the new assumptions; causal: no n! reduction.
  eps = 1e-2 keeps every LayerNorm bound finite on the first partition (boxes of side 1/8),
  so a certificate comes out however few rounds the load allows."""
  net = random_net(10, norm=norm, activation=activation, causal=True, width=3, h=1, r=4,
                   positional=False, scale=0.4, eps=1e-2)
  x = np.random.default_rng(11).random((20000, 3, 1))
  f = x * x.mean(axis=1, keepdims=True)
  err = np.abs(network_apply.apply(network_apply.cast(net, np.float32), x.astype(np.float32),
                                  np.float32) - f)
  cert = nc.certify_network('token_times_mean', net, d=1, n=3, p=2, arithmetic='float32',
                            max_minutes=5, max_rounds=2)
  sampled = math.sqrt((err ** 2).sum(axis=(1, 2)).mean())
  assert math.isfinite(float(cert.total)) and float(cert.total) >= sampled
  line = cert.line()
  assert 'LayerNorm: sqrt and division' in line and 'causal mask' in line
  assert (rounding.ERF_ASSUMPTION if activation == 'gelu' else rounding.TANH_ASSUMPTION) in line
  assert not cert.symmetric


