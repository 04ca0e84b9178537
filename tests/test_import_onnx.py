"""onnx_import: torch.onnx.export files (both exporters) read into the v2 dict, checked
against onnxruntime and against the torch model itself; planted faults and bad files."""

import os
import shutil

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import helper, numpy_helper

import import_models
from transformer_ua.networks import network_apply, network_dict, onnx_import, source_check

FIXTURES = os.path.join(os.path.dirname(__file__), 'fixtures', 'imports')


def fixture(name):
  return os.path.join(FIXTURES, f'{name}.onnx')


def ort(path, x):
  s = onnxruntime.InferenceSession(path, providers=['CPUExecutionProvider'])
  name = s.get_inputs()[0].name
  return np.concatenate([s.run(None, {name: x[i:i + 1].astype(np.float32)})[0]
                         for i in range(len(x))]).astype(np.float64)


def torch_run(model, x, dtype=torch.float64):
  model = model.to(dtype).eval()
  with torch.no_grad():
    return model(torch.tensor(x, dtype=dtype)).numpy().astype(np.float64)


X = np.random.default_rng(1).random((64, 3, 1))


@pytest.mark.parametrize('name', sorted(import_models.FIXTURES))
def test_fixture_equals_onnxruntime_and_torch(name):
  """Every fixture reads; the dict equals onnxruntime in float32 (within 2e-6) and the
  torch model in float64 (within 1e-6: the file's float32 constants, such as the split
  scale c^2, are the network's; torch's float64 run recomputes them)."""
  raw, text = onnx_import.read(fixture(name), d=1, n=3)
  net = network_dict.check(raw, d=1, n=3)
  assert '\n' not in text and 'opset' in text
  got32 = network_apply.apply(net, X, np.float32).astype(np.float64)
  assert np.abs(got32 - ort(fixture(name), X)).max() < 2e-6
  got64 = network_apply.apply(net, X, np.float64)
  assert np.abs(got64 - torch_run(import_models.build(name), X)).max() < 1e-6


def test_fixtures_cover_opsets_13_to_20_by_both_exporters():
  """The committed files span every opset of 13-20 (the dynamo exporter from 17 up), each
  exporter at more than one."""
  opsets = {(dyn, opset) for _, _, dyn, opset in import_models.FIXTURES.values()}
  assert {o for _, o in opsets} == set(range(13, 21))
  assert {o for dyn, o in opsets if dyn} == {17, 18, 19, 20}
  assert {o for dyn, o in opsets if not dyn} == {13, 14, 15, 16, 17}
  for name, (_, _, _, opset) in import_models.FIXTURES.items():
    assert onnx.load(fixture(name), load_external_data=False).opset_import[0].version == opset


def test_what_is_read():
  """The structure read matches the torch models: norm placement, activation, heads,
  causal mask, final LayerNorm, the decomposed forms named in the text."""
  cases = {
      'stock_post_relu_dynamo20': ('post', 'relu', False, 1),
      'stock_pre_gelu_legacy17': ('pre', 'gelu', False, 1),
      'stock_pre_gelu_legacy16': ('pre', 'gelu', False, 1),
      'stock_post_gelu_dynamo17': ('post', 'gelu', False, 1),
      'stock_causal_final_legacy17': ('pre', 'relu', True, 2),
      'stock_causal_final_dynamo20': ('pre', 'relu', True, 2),
      'hand_gelu_tanh_legacy16': (None, 'gelu_tanh', False, 1),
      'hand_gelu_tanh_dynamo20': (None, 'gelu_tanh', False, 1),
  }
  for name, (norm, act, causal, blocks) in cases.items():
    raw, text = onnx_import.read(fixture(name), d=1, n=3)
    net = network_dict.check(raw, d=1, n=3)
    assert len(net.blocks) == blocks, name
    b = net.blocks[0]
    assert b.norm == norm and b.ff.activation == act and b.attention.causal == causal, name
    assert b.heads == 2 and b.head_size == 4, name
    assert (net.final_ln is not None) == ('final' in name), name
  _, text = onnx_import.read(fixture('stock_pre_gelu_legacy16'), d=1, n=3)
  assert 'LayerNorm' in text and 'decomposed' in text and 'GELU decomposed' in text
  _, text = onnx_import.read(fixture('stock_post_relu_legacy17'), d=1, n=3)
  assert 'split across Q and K' in text
  raw, text = onnx_import.read(fixture('hand_gelu_tanh_legacy17'), d=1, n=3)
  assert raw['blocks'][0]['scale'] == 0.5 and 'divided by 2.0' in text
  raw, _ = onnx_import.read(fixture('hand_relu_mul_nobias_dynamo20'), d=1, n=3)
  assert raw['blocks'][0]['scale'] == 0.5 and not raw['blocks'][0]['b_K'].any()


def test_split_scale_is_the_product_of_the_two_factors():
  """q*c . k*c is read as scale c*c (c the file's float32 sqrt), exactly."""
  raw, _ = onnx_import.read(fixture('stock_post_relu_dynamo20'), d=1, n=3)
  c = np.float64(np.sqrt(np.float32(1 / np.sqrt(np.float32(4)))))
  assert raw['blocks'][0]['scale'] == float(np.float32(c)) ** 2


def test_source_check_accepts_the_file(tmp_path):
  net, text = source_check.read_network(fixture('stock_pre_gelu_dynamo20'), d=1, n=3,
                                        arithmetic='float32')
  assert 'onnxruntime' in text and '1024 points' in text and '\n' not in text


def _copy(name, tmp_path):
  for suffix in ('.onnx', '.onnx.data'):
    if os.path.exists(fixture(name)[:-5] + suffix):
      shutil.copy(fixture(name)[:-5] + suffix, tmp_path / f'{name}{suffix}')
  return str(tmp_path / f'{name}.onnx')


def _edit(path, fn):
  model = onnx.load(path)
  fn(model)
  onnx.save(model, path)
  return path


# -- planted faults ------------------------------------------------------------------------------
def test_edited_initializer_is_another_network(tmp_path):
  """An initializer edited after export: read and certified as the network it now is, under
  a new hash; a certificate of the original refuses it."""
  from transformer_ua.certify import network_certificate as nc
  name = 'hand_relu_mul_nobias_legacy17'
  path = _copy(name, tmp_path)
  before = network_dict.params_hash(network_dict.check(onnx_import.read(path, d=1, n=3)[0],
                                                       d=1, n=3))

  def bump(model):
    init = next(i for i in model.graph.initializer if numpy_helper.to_array(i).size > 8)
    arr = numpy_helper.to_array(init).copy()
    arr.flat[0] += 0.25
    init.CopyFrom(numpy_helper.from_array(arr, init.name))
  cert = nc.certify_network('token_times_mean', path, d=1, n=3, p=2, arithmetic='float32',
                            max_minutes=0.1, epsilon=100.0)
  _edit(path, bump)
  net, _ = source_check.read_network(path, d=1, n=3, arithmetic='float32')
  after = network_dict.params_hash(net)
  assert after != before and cert.params_hash == before
  with pytest.raises(ValueError, match='certify it again') as err:
    cert.check_network(path)
  assert '\n' not in str(err.value)


def test_dropped_scale_caught_by_the_source():
  raw, _ = onnx_import.read(fixture('stock_post_relu_dynamo20'), d=1, n=3)
  del raw['blocks'][0]['scale']
  net = network_dict.check(raw, d=1, n=3)
  with pytest.raises(ValueError, match='differs from') as err:
    source_check.compare(net, lambda x: ort(fixture('stock_post_relu_dynamo20'), x),
                         dtype='float32', what='onnxruntime')
  assert '\n' not in str(err.value)
  # One block: the certifier's D at a point is small enough to prove the two differ.
  assert 'proven a different network' in str(err.value)


def test_gelu_replaced_by_relu_in_the_graph_caught_by_the_torch_source(tmp_path):
  name = 'stock_post_gelu_dynamo20'
  path = _copy(name, tmp_path)

  def swap(model):
    node = next(nd for nd in model.graph.node if nd.op_type == 'Gelu')
    node.op_type = 'Relu'
    del node.attribute[:]
  _edit(path, swap)
  net = network_dict.check(onnx_import.read(path, d=1, n=3)[0], d=1, n=3)
  assert net.blocks[0].ff.activation == 'relu'
  model = import_models.build(name)
  with pytest.raises(ValueError, match='differs from'):
    source_check.compare(net, lambda x: torch_run(model, x, torch.float32), dtype='float32',
                         what='the torch module')


def test_mask_removed_caught_by_the_source(tmp_path):
  name = 'stock_causal_final_legacy17'
  raw, _ = onnx_import.read(fixture(name), d=1, n=3)
  for blk in raw['blocks']:
    del blk['mask']
  net = network_dict.check(raw, d=1, n=3)
  with pytest.raises(ValueError, match='differs from') as err:
    source_check.compare(net, lambda x: ort(fixture(name), x), dtype='float32',
                         what='onnxruntime')
  # Two untrained pre-LN blocks and a final LN: D at a point is of order 1 (first-order
  # propagation), so 2 D cannot prove it; the float32 noise tolerance refuses it.
  assert 'proven' not in str(err.value) and '0.0001 (1 + |source|)' in str(err.value)


def test_float16_weights_refused(tmp_path):
  path = _copy('stock_post_relu_legacy17', tmp_path)

  def half(model):
    for init in model.graph.initializer:
      arr = numpy_helper.to_array(init)
      if arr.dtype == np.float32:
        init.CopyFrom(numpy_helper.from_array(arr.astype(np.float16), init.name))
  _edit(path, half)
  with pytest.raises(ValueError, match='float16') as err:
    onnx_import.read(path, d=1, n=3)
  assert '\n' not in str(err.value)


def test_layer_norm_over_the_sequence_axis_refused(tmp_path):
  path = str(tmp_path / 'seq.onnx')
  for dynamo, opset in ((False, 17), (False, 16)):
    torch.onnx.export(import_models.SeqNorm(), (torch.rand(1, 3, 1),), path, dynamo=dynamo,
                      opset_version=opset)
    with pytest.raises(ValueError, match='across tokens') as err:
      onnx_import.read(path, d=1, n=3)
    assert '\n' not in str(err.value) and ('LayerNormalization' in str(err.value) or
                                           'ReduceMean' in str(err.value))


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize('model,op', [
    (import_models.HandBlock(activation='tanh'), 'Tanh'),
    (import_models.HandBlock(activation='sigmoid'), 'Sigmoid'),
    (import_models.WithConv(), 'Conv'),
    (import_models.DropoutTrain(), 'Dropout'),
])
def test_op_outside_the_class_named_with_its_node(tmp_path, model, op):
  path = str(tmp_path / 'bad.onnx')
  torch.onnx.export(model, (torch.rand(1, 3, 1),), path, dynamo=False)
  node = next(nd.name for nd in onnx.load(path).graph.node if nd.op_type == op)
  with pytest.raises(ValueError, match=op) as err:
    onnx_import.read(path, d=1, n=3)
  assert node in str(err.value) and '\n' not in str(err.value)


def test_opset23_attention_refused(tmp_path):
  x = helper.make_tensor_value_info('X', onnx.TensorProto.FLOAT, [1, 3, 4])
  y = helper.make_tensor_value_info('Y', onnx.TensorProto.FLOAT, [1, 3, 4])
  node = helper.make_node('Attention', ['X', 'X', 'X'], ['Y'], name='attn0', q_num_heads=1,
                          kv_num_heads=1)
  model = helper.make_model(helper.make_graph([node], 'a', [x], [y]),
                            opset_imports=[helper.make_opsetid('', 23)])
  path = str(tmp_path / 'a.onnx')
  onnx.save(model, path)
  with pytest.raises(ValueError, match="'attn0' \\(Attention\\)") as err:
    onnx_import.read(path, d=4, n=3)
  assert '\n' not in str(err.value)


def test_concat_with_constants_refused_naming_the_class(tmp_path):
  """A Concat of the network's tensor with a constant: one line naming the node and the
  class (the class's text, not a placeholder)."""
  from transformer_ua.networks.anchor_graph import CLASS
  x = helper.make_tensor_value_info('X', onnx.TensorProto.FLOAT, [1, 3, 1])
  y = helper.make_tensor_value_info('Y', onnx.TensorProto.FLOAT, [1, 3, 2])
  pad = numpy_helper.from_array(np.zeros((1, 3, 1), np.float32), 'pad')
  node = helper.make_node('Concat', ['X', 'pad'], ['Y'], name='cat0', axis=-1)
  model = helper.make_model(helper.make_graph([node], 'c', [x], [y], [pad]),
                            opset_imports=[helper.make_opsetid('', 17)])
  path = str(tmp_path / 'c.onnx')
  onnx.save(model, path)
  with pytest.raises(ValueError, match="'cat0' \\(Concat\\)") as err:
    onnx_import.read(path, d=1, n=3)
  assert CLASS in str(err.value) and '{' not in str(err.value) and '\n' not in str(err.value)


def test_dynamic_shapes_must_be_fixed(tmp_path):
  path = str(tmp_path / 'dyn.onnx')
  torch.onnx.export(import_models.Stock(r=8), (torch.rand(1, 3, 1),), path, dynamo=False,
                    input_names=['x'], dynamic_axes={'x': {1: 'n'}})
  with pytest.raises(ValueError, match="dynamic dimension 'n'") as err:
    onnx_import.read(path, d=1)
  assert '\n' not in str(err.value)
  raw, _ = onnx_import.read(path, d=1, n=3)            # n given: the dimension is fixed
  assert np.abs(network_apply.apply(network_dict.check(raw, d=1, n=3), X, np.float32)
                - ort(path, X)).max() < 2e-6
  with pytest.raises(ValueError, match='does not run') as err:   # traced for n=3 only
    onnx_import.read(path, d=1, n=4)
  assert '\n' not in str(err.value) and str(err.value).count('onnx_import:') == 1
  with pytest.raises(ValueError, match='shape'):
    onnx_import.read(fixture('stock_post_relu_legacy17'), d=1, n=4)   # fixed n=3


def test_missing_external_data_refused(tmp_path):
  path = _copy('stock_pre_relu_dynamo20', tmp_path)
  onnx_import.read(path, d=1, n=3)
  os.remove(path + '.data')
  with pytest.raises(ValueError, match='external data file') as err:
    onnx_import.read(path, d=1, n=3)
  assert '\n' not in str(err.value) and 'missing' in str(err.value)
