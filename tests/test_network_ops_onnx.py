"""The stock-layer ops in the flat ONNX layout (LayerNormalization-17, Erf, Tanh, Mul, an
additive -inf mask) and in the independent check's JAX program: onnxruntime and JAX on the
written network equal ``network_apply.apply``; ``read`` returns the network under its hash;
a mask removed or an activation swapped after writing is refused in one line."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from network_ops_helpers import random_net
from transformer_ua.certify import independent_check
from transformer_ua.networks import flat_onnx, network_apply, network_dict

CONFIGS = [('post', 'gelu', True), ('pre', 'gelu_tanh', True), ('pre', 'relu', False),
           (None, 'gelu_tanh', False)]


@pytest.mark.parametrize('norm,activation,causal', CONFIGS)
@pytest.mark.parametrize('dtype', ['float32', 'float64'])
def test_onnxruntime_on_the_written_file_equals_apply(tmp_path, norm, activation, causal,
                                                      dtype):
  import onnxruntime as ort
  net = random_net(20, norm=norm, activation=activation, causal=causal, blocks=2)
  path = flat_onnx.write(net, tmp_path / 'g.onnx', dtype=dtype)
  back = flat_onnx.read(path)
  want = net if dtype == 'float64' else network_apply.cast(net, np.float32)
  assert network_dict.params_hash(back) == network_dict.params_hash(flat_onnx._eps_float32(want))
  x = np.random.default_rng(21).random((64, 3, 1))
  ref = network_apply.apply(back, x.astype(dtype), np.dtype(dtype).type).astype(np.float64)
  if dtype == 'float64' and activation == 'gelu':
    # onnxruntime has no float64 Erf kernel: onnx's reference evaluator runs the file
    from onnx.reference import ReferenceEvaluator
    got = ReferenceEvaluator(onnx.load(path)).run(None, {'X': x})[0]
  else:
    sess = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    got = sess.run(None, {'X': x.astype(dtype)})[0]
  tol = 1e-12 if dtype == 'float64' else 2e-5
  if dtype == 'float64' and activation == 'gelu':
    tol = 1e-6          # onnx.reference's Erf is accurate to ~3e-8 only (measured), in float64
  assert np.max(np.abs(got - ref)) <= tol * (1 + np.abs(ref).max())


def test_jax_apply_equals_apply_for_every_op():
  x = np.random.default_rng(22).random((32, 3, 1))
  for norm, activation, causal in CONFIGS:
    net = random_net(23, norm=norm, activation=activation, causal=causal, blocks=2)
    got = independent_check.jax_apply(net, x, 'float64')
    assert np.max(np.abs(got - network_apply.apply(net, x))) < 1e-12


def _edited(path, edit, tmp_path):
  model = onnx.load(path)
  edit(model)
  out = tmp_path / 'edited.onnx'
  onnx.save(model, out)
  return str(out)


def test_removed_mask_or_swapped_activation_refused_in_one_line(tmp_path):
  net = random_net(24, norm='post', activation='gelu', causal=True)
  path = str(flat_onnx.write(net, tmp_path / 'g.onnx', dtype='float32'))

  def drop_mask(model):
    g = model.graph
    for node in list(g.node):
      if node.op_type == 'Add' and any(i.endswith('.mask') for i in node.input):
        for later in g.node:
          later.input[:] = [node.input[0] if i == node.output[0] else i for i in later.input]
        g.node.remove(node)
    for t in list(g.initializer):
      if t.name.endswith('.mask'):
        g.initializer.remove(t)

  with pytest.raises(ValueError, match='params_hash .* is not the hash of its parameters') as e:
    flat_onnx.read(_edited(path, drop_mask, tmp_path))
  assert '\n' not in str(e.value)

  def erf_to_tanh(model):
    node = next(n for n in model.graph.node if n.op_type == 'Erf')
    node.op_type = 'Tanh'

  with pytest.raises(ValueError, match=r'\(Tanh -> .* \(Erf -> ') as e:
    flat_onnx.read(_edited(path, erf_to_tanh, tmp_path))
  assert '\n' not in str(e.value)
