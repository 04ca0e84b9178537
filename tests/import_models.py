"""Small torch models the importer tests build (torch 2.13): stock layers, a hand-written
block, and models outside the class, each on X [1, n, d] (batch first)."""

import math

import torch
from torch import nn


class Stock(nn.Module):
  """Linear(d, D) -> nn.TransformerEncoderLayer -> [LayerNorm] -> Linear(D, d)."""

  def __init__(self, d=1, D=8, heads=2, r=32, norm_first=False, activation='relu',
               causal=False, final_ln=False, layers=1, seed=0):
    super().__init__()
    torch.manual_seed(seed)
    self.embed = nn.Linear(d, D)
    layer = nn.TransformerEncoderLayer(D, heads, r, 0.0, activation, batch_first=True,
                                       norm_first=norm_first)
    self.enc = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(D) if final_ln else None,
                                     enable_nested_tensor=False)
    self.readout = nn.Linear(D, d)
    self.causal = causal

  def forward(self, x):
    n = x.shape[1]
    mask = nn.Transformer.generate_square_subsequent_mask(n) if self.causal else None
    return self.readout(self.enc(self.embed(x), mask=mask, is_causal=self.causal))


class HandBlock(nn.Module):
  """A hand-written block without LayerNorm: separate Q, K, V Linear maps, heads by view and
  transpose, softmax(q k^T / sqrt(m)), one output Linear, then a GELU(tanh) or ReLU FF."""

  def __init__(self, d=1, D=8, heads=2, r=16, activation='relu', scale_mode='div', seed=0,
               bias=True):
    super().__init__()
    torch.manual_seed(seed)
    self.h, self.m = heads, D // heads
    self.embed = nn.Linear(d, D)
    self.q, self.k, self.v = (nn.Linear(D, D, bias=bias) for _ in range(3))
    self.o = nn.Linear(D, D)
    self.w1, self.w2 = nn.Linear(D, r), nn.Linear(r, D)
    self.act = {'relu': nn.ReLU(), 'gelu': nn.GELU(), 'gelu_tanh': nn.GELU('tanh'),
                'tanh': nn.Tanh(), 'sigmoid': nn.Sigmoid()}[activation]
    self.readout = nn.Linear(D, d)
    self.scale_mode = scale_mode

  def heads(self, t):
    b, n, _ = t.shape
    return t.view(b, n, self.h, self.m).transpose(1, 2)

  def forward(self, x):
    z = self.embed(x)
    q, k, v = self.heads(self.q(z)), self.heads(self.k(z)), self.heads(self.v(z))
    s = q @ k.transpose(-1, -2)
    if self.scale_mode == 'div':
      s = s / math.sqrt(self.m)
    elif self.scale_mode == 'mul':
      s = s * (1 / math.sqrt(self.m))
    a = torch.softmax(s, dim=-1) @ v
    b, h, n, m = a.shape
    z = z + self.o(a.transpose(1, 2).reshape(b, n, h * m))
    z = z + self.w2(self.act(self.w1(z)))
    return self.readout(z)


class SeqNorm(nn.Module):
  """A LayerNorm over the sequence axis (outside the class)."""

  def __init__(self, d=1, D=8, n=3, seed=0):
    super().__init__()
    torch.manual_seed(seed)
    self.embed, self.norm, self.readout = nn.Linear(d, D), nn.LayerNorm(n), nn.Linear(D, d)

  def forward(self, x):
    z = self.embed(x)
    return self.readout(z + self.norm(z.transpose(1, 2)).transpose(1, 2))


class WithConv(nn.Module):
  def __init__(self, d=1):
    super().__init__()
    self.conv = nn.Conv1d(d, d, 1)

  def forward(self, x):
    return self.conv(x.transpose(1, 2)).transpose(1, 2)


class DropoutTrain(nn.Module):
  """A residual FF with a Dropout that is exported in train mode."""

  def __init__(self, d=1, D=8):
    super().__init__()
    self.embed, self.w, self.readout = nn.Linear(d, D), nn.Linear(D, D), nn.Linear(D, d)

  def forward(self, x):
    z = self.embed(x)
    return self.readout(z + nn.functional.dropout(torch.relu(self.w(z)), 0.5, training=True))


#: The committed fixtures (tests/fixtures/imports/<name>.onnx, written by
#: tests/fixtures/imports/make_import_fixtures.py with torch 2.13.0): name -> (model class,
#: its keyword arguments, dynamo?, opset). Every supported op and placement is in some row.
FIXTURES = {}
for _exp, _dyn, _opset in (('dynamo', True, 20), ('legacy', False, 17)):
  for _norm in ('post', 'pre'):
    for _act in ('relu', 'gelu'):
      FIXTURES[f'stock_{_norm}_{_act}_{_exp}{_opset}'] = (
          Stock, dict(r=16, norm_first=_norm == 'pre', activation=_act), _dyn, _opset)
  FIXTURES[f'stock_causal_final_{_exp}{_opset}'] = (
      Stock, dict(r=16, norm_first=True, causal=True, final_ln=True, layers=2), _dyn, _opset)
  FIXTURES[f'hand_gelu_tanh_{_exp}{_opset}'] = (HandBlock, dict(activation='gelu_tanh'), _dyn,
                                                _opset)
  FIXTURES[f'hand_relu_mul_nobias_{_exp}{_opset}'] = (
      HandBlock, dict(scale_mode='mul', bias=False), _dyn, _opset)
#: decomposed GELU (erf) at the dynamo exporter's opset 17; decomposed LayerNorm and GELU
#: (erf and tanh) at the legacy exporter's opset 16; opset 13 (the legacy exporter cannot
#: write nn.MultiheadAttention's scaled_dot_product_attention below 14: a hand-written block).
FIXTURES['stock_post_gelu_dynamo17'] = (Stock, dict(r=16, activation='gelu'), True, 17)
FIXTURES['stock_pre_gelu_legacy16'] = (Stock, dict(r=16, norm_first=True, activation='gelu'),
                                       False, 16)
FIXTURES['hand_gelu_tanh_legacy16'] = (HandBlock, dict(activation='gelu_tanh'), False, 16)
FIXTURES['hand_gelu_legacy13'] = (HandBlock, dict(activation='gelu'), False, 13)   # no SDPA at 13
FIXTURES['stock_post_gelu_causal_legacy16'] = (
    Stock, dict(r=16, activation='gelu', causal=True), False, 16)
#: the remaining opsets of 13-20, one stock layer each: legacy 14 and 15 (LayerNorm and GELU
#: decomposed), dynamo 18 and 19.
FIXTURES['stock_post_gelu_legacy14'] = (Stock, dict(r=16, activation='gelu'), False, 14)
FIXTURES['stock_pre_relu_legacy15'] = (Stock, dict(r=16, norm_first=True), False, 15)
FIXTURES['stock_pre_gelu_dynamo18'] = (Stock, dict(r=16, norm_first=True, activation='gelu'),
                                       True, 18)
FIXTURES['stock_post_relu_dynamo19'] = (Stock, dict(r=16), True, 19)


def build(name):
  """The torch model of fixture ``name`` (seeded: the same weights as the file)."""
  cls, kwargs, _, _ = FIXTURES[name]
  return cls(**kwargs)
