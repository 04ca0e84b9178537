"""The mean-value intersection of network_enclosure.enclose (networks with a LayerNorm) and
the interval-matrix form of LayerNorm's Jacobian (intervals.layer_norm), on boxes wide
enough that they change the bounds: values against dense samples of network_apply.apply,
tangents against finite differences, and the float deviation D against onnxruntime itself
running torch.onnx.export files of stock encoder layers (its LayerNormalization kernel is
one-pass: mean and mean of squares in one loop, in float32)."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_ua import rounding
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import network_enclosure as ne
from network_ops_helpers import boxes, random_net
from transformer_ua.networks import network_apply, network_dict

F32 = rounding.MATMUL_MODELS['float32']


@pytest.mark.parametrize('norm,activation', [('post', 'relu'), ('pre', 'gelu'),
                                             ('post', 'gelu_tanh')])
def test_tightened_enclosure_contains_samples_and_finite_differences(norm, activation):
  net = random_net(3, norm=norm, activation=activation, causal=False, blocks=2)
  rng = np.random.default_rng(11)
  lo, hi = boxes(rng, 6, 3, 1, 0.1)
  z, _ = ne.enclose(net, iv.box(lo, hi), None)
  x = lo[None] + rng.random((400, 1, 3, 1)) * (hi - lo)[None]
  vals = network_apply.apply(net, x.reshape(-1, 3, 1)).reshape(x.shape)
  assert np.all(vals >= z.lo) and np.all(vals <= z.hi)
  # the plain enclosure (no intersection) is never tighter
  plain = ne.enclose(net, iv.box(lo, hi), None, mean_value=False)[0]
  assert np.all(z.lo >= plain.lo) and np.all(z.hi <= plain.hi)
  h = 1e-6
  pts = x[:20].reshape(-1, 3, 1)
  for q in range(3):
    e = np.zeros((3, 1))
    e[q, 0] = h
    fd = ((network_apply.apply(net, pts + e) - network_apply.apply(net, pts - e)) / (2 * h))
    fd = fd.reshape(20, 6, 3, 1)
    tol = 1e-5 * (1 + np.abs(fd))
    assert np.all(fd >= z.tlo[None, ..., q] - tol) and np.all(fd <= z.thi[None, ..., q] + tol)


def _stock_export(tmp_path, norm_first, activation):
  import torch   # noqa: PLC0415 -- in the test extra: a missing torch fails, never skips

  class Encoder(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.embed = torch.nn.Linear(1, 8)
      self.layer = torch.nn.TransformerEncoderLayer(8, nhead=2, dim_feedforward=32, dropout=0.0,
                                                    batch_first=True, norm_first=norm_first,
                                                    activation=activation)
      self.readout = torch.nn.Linear(8, 1)

    def forward(self, x):
      return self.readout(self.layer(self.embed(x)))

  torch.manual_seed(3)
  path = str(tmp_path / 'stock.onnx')
  torch.onnx.export(Encoder().eval(), (torch.rand(1, 3, 1),), path, dynamo=False)
  return path


@pytest.mark.parametrize('norm_first,activation', [(False, 'relu'), (True, 'gelu'),
                                                   (True, 'relu')])
def test_deviation_covers_onnxruntime_on_stock_layers(tmp_path, norm_first, activation):
  import onnxruntime as ort   # noqa: PLC0415 -- in the test extra (never skipped)
  from transformer_ua.networks import onnx_import   # noqa: PLC0415 -- onnx on demand
  path = _stock_export(tmp_path, norm_first, activation)
  net = network_dict.check(onnx_import.read(path, d=1, n=3)[0], d=1, n=3,
                           arithmetic='float32')
  session = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
  name = session.get_inputs()[0].name
  rng = np.random.default_rng(5)
  lo, hi = boxes(rng, 4, 3, 1, 0.05)
  lo, hi = np.clip(lo, 0, 1), np.clip(hi, 0, 1)
  _, dev = ne.enclose(net, iv.box(lo, hi), F32)
  assert np.all(np.isfinite(dev))
  worst = 0.0
  for b in range(len(lo)):
    x = (lo[b] + rng.random((100, 3, 1)) * (hi[b] - lo[b])).astype(np.float32)
    got = np.concatenate([session.run(None, {name: x[i:i + 1]})[0] for i in range(len(x))])
    err = np.abs(got.astype(np.float64) - network_apply.apply(net, x.astype(np.float64)))
    assert np.all(err <= dev[b])
    worst = max(worst, float((err / dev[b]).max()))
  assert worst > 1e-6          # onnxruntime's rounding is seen: the check is not vacuous
