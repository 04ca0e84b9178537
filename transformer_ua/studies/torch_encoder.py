r"""A stock torch encoder layer, trained as people train it, certified from its ONNX export.

    g = Linear(8, 1) o nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=32,
        dropout=0.0, activation, batch_first=True, norm_first) o Linear(1, 8)
    variants: post_relu, post_gelu, pre_relu, pre_gelu   (norm_first = pre; gelu = erf form)

Trained with Adam (lr 3e-3, batch 256 of uniform X in [0,1]^{3x1}, MSE to f = token_times_mean,
d = 1, n = 3) for at most ``train_seconds``; exported with ``torch.onnx.export`` (the
default dynamo exporter) to <output_dir>/model.onnx; then

    s      = onnxruntime's float32 d_2(f, g) on 2e4 uniform points (Monte Carlo, distances'
             estimate: its upper 95% end is reported too)
    target = max(3 s, 0.05)
    total  = certify_network(f, 'model.onnx', d=1, n=3, p=2, arithmetic='float32',
             epsilon=target, max_minutes)     (read through source_check: onnx_import, then
                                               compared with onnxruntime on 1024 points)

``run`` returns the row (params, sampled d_2 by torch and by onnxruntime, certified total,
seconds, the certificate's line) and writes record.json and certificate.txt.
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np

#: The four variants: (norm_first, activation).
VARIANTS = {'post_relu': (False, 'relu'), 'post_gelu': (False, 'gelu'),
            'pre_relu': (True, 'relu'), 'pre_gelu': (True, 'gelu')}
#: Uniform points of the sampled d_2.
SAMPLES = 20_000


def build(variant: str, seed: int = 0):
  """The torch model of ``variant`` (seeded)."""
  import torch  # noqa: PLC0415 -- torch on demand
  from torch import nn  # noqa: PLC0415
  if variant not in VARIANTS:
    raise ValueError(f'variant={variant!r}; one of {sorted(VARIANTS)}.')
  norm_first, act = VARIANTS[variant]
  torch.manual_seed(seed)

  class Encoder(nn.Module):
    def __init__(self):
      super().__init__()
      self.embed = nn.Linear(1, 8)
      self.layer = nn.TransformerEncoderLayer(8, 2, 32, 0.0, act, batch_first=True,
                                              norm_first=norm_first)
      self.readout = nn.Linear(8, 1)

    def forward(self, x):
      return self.readout(self.layer(self.embed(x)))
  return Encoder()


def train(model, *, seconds: float, seed: int = 0) -> dict:
  """Adam on token_times_mean for at most ``seconds``: steps and final batch loss."""
  import torch  # noqa: PLC0415
  torch.manual_seed(seed)
  opt = torch.optim.Adam(model.parameters(), lr=3e-3)
  sched_end = time.perf_counter() + seconds
  steps, loss = 0, float('nan')
  model.train()
  while time.perf_counter() < sched_end:
    x = torch.rand(256, 3, 1)
    y = x * x.mean(dim=1, keepdim=True)
    out = model(x)
    err = ((out - y) ** 2).mean()
    opt.zero_grad()
    err.backward()
    opt.step()
    steps += 1
    loss = float(err.detach())
  model.eval()
  return {'steps': steps, 'loss': loss, 'seconds': seconds}


def sampled_d2(fn, *, seed: int = 1) -> tuple:
  """(mean estimate, upper 95% end) of d_2(f, fn) on SAMPLES uniform points."""
  x = np.random.default_rng(seed).random((SAMPLES, 3, 1))
  e = ((fn(x) - x * x.mean(axis=1, keepdims=True)) ** 2).sum(axis=(1, 2))
  m, sd = float(e.mean()), float(e.std(ddof=1))
  return math.sqrt(m), math.sqrt(m + 1.959963984540054 * sd / math.sqrt(len(e)))


def run(variant: str, *, output_dir: str, train_seconds: float = 120.0,
        max_minutes: float = 5.0, seed: int = 0) -> dict:
  """Trains, exports, samples and certifies ``variant`` (module docstring); the row."""
  import onnxruntime  # noqa: PLC0415
  import torch  # noqa: PLC0415
  from transformer_ua.certify import network_certificate  # noqa: PLC0415
  from transformer_ua.networks import torch_import  # noqa: PLC0415
  if not 0 < train_seconds <= 120:
    raise ValueError(f'train_seconds={train_seconds!r}; 0 < train_seconds <= 120.')
  os.makedirs(output_dir, exist_ok=True)
  model = build(variant, seed)
  trained = train(model, seconds=train_seconds, seed=seed)
  path = os.path.join(output_dir, 'model.onnx')
  export_text = torch_import.export(model, path, d=1, n=3)
  with torch.no_grad():
    s_torch = sampled_d2(lambda x: model(torch.tensor(x, dtype=torch.float32)).numpy())
  sess = onnxruntime.InferenceSession(path, providers=['CPUExecutionProvider'])
  name = sess.get_inputs()[0].name
  s_ort = sampled_d2(lambda x: np.concatenate(
      [sess.run(None, {name: x[i:i + 1].astype(np.float32)})[0] for i in range(len(x))]))
  target = max(3 * s_ort[0], 0.05)
  t0 = time.perf_counter()
  row = {'variant': variant, 'params': sum(p.numel() for p in model.parameters()),
         'train': trained, 'sampled_d2_torch': s_torch[0],
         'sampled_d2_torch_upper95': s_torch[1], 'sampled_d2_onnxruntime': s_ort[0],
         'sampled_d2_onnxruntime_upper95': s_ort[1], 'target': target, 'export': export_text}
  try:
    cert = network_certificate.certify_network('token_times_mean', path, d=1, n=3, p=2,
                                               arithmetic='float32', epsilon=target,
                                               max_minutes=max_minutes)
  except ValueError as e:        # no certificate: the one line is the result
    row.update(certified_total=None, reached=False, certify_seconds=time.perf_counter() - t0,
               line=f'no certificate: {e}')
  else:
    row.update(params=cert.params, certified_total=float(cert.total), reached=cert.reached,
               boxes=cert.boxes, rounds=cert.rounds,
               certify_seconds=time.perf_counter() - t0, line=cert.line())
  with open(os.path.join(output_dir, 'certificate.txt'), 'w') as fh:
    fh.write(row['line'] + '\n')
  with open(os.path.join(output_dir, 'record.json'), 'w') as fh:
    json.dump(row, fh, indent=1)
  return row
