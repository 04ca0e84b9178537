"""torch_import and read_network on torch.nn.Module: exported by both exporters, read,
checked against the module itself; layouts, unsupported layers and float16 refused."""

import numpy as np
import pytest
import torch
from torch import nn

import import_models
from transformer_ua.networks import network_apply, network_dict, source_check, torch_import


def torch_run(module, x, dtype=torch.float64):
  module = module.to(dtype).eval()
  with torch.no_grad():
    return module(torch.tensor(x, dtype=dtype)).numpy()


X = np.random.default_rng(2).random((32, 3, 1))


@pytest.mark.parametrize('dynamo', [True, False])
def test_read_network_from_a_module_both_exporters(dynamo):
  """A pre-LN GELU encoder with a causal mask, through either exporter: the dict equals the
  module in float64 (1e-9 over the 1024 points read_network checks, and here on others)."""
  model = import_models.Stock(norm_first=True, activation='gelu', causal=True, r=16)
  raw, text = torch_import.read(model, d=1, n=3, dynamo=dynamo)
  assert ('dynamo)' in text) == dynamo and ('dynamo=False' in text) != dynamo
  net = network_dict.check(raw, d=1, n=3)
  assert net.blocks[0].norm == 'pre' and net.blocks[0].attention.causal
  assert np.abs(network_apply.apply(net, X) - torch_run(model, X, torch.float32)).max() < 1e-6


def test_read_network_checks_against_the_module_in_both_dtypes():
  model = import_models.HandBlock(activation='gelu', scale_mode='div')
  for arithmetic, dtype in (('float64', 'float64'), ('float32', 'float32')):
    net, text = source_check.read_network(model, d=1, n=3, arithmetic=arithmetic)
    assert f'torch module HandBlock on 1024 points in {dtype}' in text and '\n' not in text
    want = torch_run(import_models.HandBlock(activation='gelu', scale_mode='div'), X)
    assert np.abs(network_apply.apply(net, X) - want).max() < 1e-12


def test_batch_first_false_is_transposed():
  """A top-level batch_first=False layer is wrapped X -> layer(X^T)^T, and said so."""
  torch.manual_seed(3)
  layer = nn.TransformerEncoderLayer(2, 1, 4, 0.0)
  raw, text = torch_import.read(layer, d=2, n=3, dynamo=False)
  net = network_dict.check(raw, d=2, n=3)
  assert 'batch_first=False transposed' in text
  x = np.random.default_rng(0).random((16, 3, 2))
  want = torch_run(layer, x.transpose(1, 0, 2)).transpose(1, 0, 2)
  assert np.abs(network_apply.apply(net, x) - want).max() < 1e-9


def test_multihead_attention_in_a_custom_residual_module():
  class Residual(nn.Module):
    def __init__(self):
      super().__init__()
      torch.manual_seed(4)
      self.embed, self.attn, self.out = nn.Linear(1, 4), nn.MultiheadAttention(
          4, 2, batch_first=True), nn.Linear(4, 1)

    def forward(self, x):
      z = self.embed(x)
      return self.out(z + self.attn(z, z, z, need_weights=False)[0])
  model = Residual()
  net = network_dict.check(torch_import.read(model, d=1, n=3, dynamo=False)[0], d=1, n=3)
  assert net.blocks[0].ff is None and net.blocks[0].heads == 2
  assert np.abs(network_apply.apply(net, X) - torch_run(model, X, torch.float32)).max() < 1e-6


def test_batch_first_false_inside_a_custom_module_refused():
  class Inner(nn.Module):
    def __init__(self):
      super().__init__()
      self.layer = nn.TransformerEncoderLayer(2, 1, 4, 0.0)

    def forward(self, x):
      return self.layer(x)
  with pytest.raises(ValueError, match='batch_first=False inside') as err:
    torch_import.read(Inner(), d=2, n=3)
  assert '\n' not in str(err.value)


@pytest.mark.parametrize('module,what', [
    (nn.Sequential(nn.Linear(1, 4), nn.Tanh(), nn.Linear(4, 1)), 'Tanh'),
    (nn.Sequential(nn.Linear(1, 4), nn.Sigmoid(), nn.Linear(4, 1)), 'Sigmoid'),
    (import_models.WithConv(), 'Conv1d'),
    (nn.Sequential(nn.Linear(1, 4), nn.LSTM(4, 4)), 'LSTM'),
])
def test_module_of_unsupported_layers_refused(module, what):
  with pytest.raises(ValueError, match=what) as err:
    source_check.read_network(module, d=1, n=3, arithmetic='float32')
  assert '\n' not in str(err.value) and 'supported layers' in str(err.value)


def test_float16_module_refused():
  with pytest.raises(ValueError, match='float16') as err:
    source_check.read_network(import_models.Stock(r=8).half(), d=1, n=3, arithmetic='float32')
  assert '\n' not in str(err.value)


def test_one_float16_layer_refused_and_bfloat16_only_with_its_arithmetic():
  """A float16 readout in a float32 module is refused (not upcast), naming the weight;
  bfloat16 weights are refused outside arithmetic='bfloat16' (network_dict's rule)."""
  model = import_models.HandBlock(r=8)
  model.readout.half()
  with pytest.raises(ValueError, match="float16 weights \\('readout.weight'\\)") as err:
    source_check.read_network(model, d=1, n=3, arithmetic='float32')
  assert '\n' not in str(err.value)
  bf = import_models.HandBlock(r=8).to(torch.bfloat16)
  for arithmetic in ('float32', 'float64'):
    with pytest.raises(ValueError, match="accepted only with arithmetic='bfloat16'") as err:
      source_check.read_network(bf, d=1, n=3, arithmetic=arithmetic)
    assert '\n' not in str(err.value)
  net, _ = source_check.read_network(bf, d=1, n=3, arithmetic='bfloat16')
  assert net.d == 1 and net.n == 3


def test_module_that_is_not_in_the_class_gets_one_line():
  """A residual-free MLP of supported layers exports fine but is not a Transformer of the
  class (no residual): one line, never a traceback."""
  module = nn.Sequential(nn.Linear(1, 4), nn.ReLU(), nn.Linear(4, 1))
  with pytest.raises(ValueError) as err:
    torch_import.read(module, d=1, n=3, dynamo=False)
  assert '\n' not in str(err.value) and 'onnx_import' in str(err.value)


def test_raw_dict_says_it_has_no_source():
  raw, _ = torch_import.read(import_models.HandBlock(), d=1, n=3, dynamo=False)
  _, text = source_check.read_network(raw, d=1, n=3)
  assert 'no source' in text
