"""runtime_graph.check_graph: the network's whole graph, as a runtime runs it, against the
certified D on adversarial points. Honest runs pass (NumPy float32, onnxruntime on the flat
ONNX export, every emulated TF32 / bfloat16 way of tests/low_precision_runs.py); a planted
fused epilogue (the residual and bias folded into the matmul's accumulator and reduced to
the operand format with its operands) and NaN outputs are refused."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import low_precision_runs  # noqa: E402

from transformer_ua.certify import hand_built, runtime_graph  # noqa: E402
from transformer_ua.networks import flat_onnx, network_apply, network_dict  # noqa: E402


def _hand_built():
  net = hand_built.hand_built_product_network(20).net
  return network_apply.cast(network_dict.check(net.as_dict(), d=1, n=3), np.float32)


def test_points_are_float32_in_the_cube_and_hit_the_edges():
  x = runtime_graph.adversarial_points(3, 1, 300)
  assert x.dtype == np.float32 and x.min() >= 0 and x.max() <= 1
  assert np.any(x == 1.0) and np.any(x == np.float32(0.5) * (1 - np.float32(2.0 ** -24)))


def test_numpy_and_onnxruntime_float32_graphs_are_covered():
  import onnxruntime as ort
  net = _hand_built()
  ok = runtime_graph.check_graph(lambda x: network_apply.apply(net, x, np.float32), net,
                                 'float32', points=256)
  assert ok.ok and 0 < ok.ratios['nearest'] <= 1, ok.line()
  model = flat_onnx.to_model(net, dtype='float32').SerializeToString()
  for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    sess = ort.InferenceSession(model, opts, providers=['CPUExecutionProvider'])
    rep = runtime_graph.check_graph(lambda x, s=sess: s.run(None, {'X': x})[0], net,
                                    'float32', points=256)
    assert rep.ok, (level, rep.line())
  assert '\n' not in rep.line() and 'float32' in rep.line()


@pytest.mark.parametrize('arithmetic', ['tf32', 'bfloat16'])
def test_every_emulated_way_is_covered(arithmetic):
  net = _hand_built()
  for mode, order, acc in low_precision_runs.ways(arithmetic):
    rep = runtime_graph.check_graph(
        lambda x, m=mode, o=order, a=acc: low_precision_runs.run(net, x, arithmetic, mode=m,
                                                                 order=o, accumulate=a),
        net, arithmetic, points=192)
    assert rep.ok, (mode, order, acc, rep.line())


@pytest.mark.parametrize('arithmetic', ['tf32', 'bfloat16'])
def test_a_planted_fused_epilogue_is_refused(arithmetic):
  net = low_precision_runs.residual_net()
  honest = runtime_graph.check_graph(
      lambda x: low_precision_runs.run(net, x, arithmetic, mode='truncate',
                                       accumulate='toward_zero'), net, arithmetic, points=256)
  assert honest.ok, honest.line()
  rep = runtime_graph.check_graph(low_precision_runs.fused_epilogue(net, arithmetic), net,
                                  arithmetic, points=256)
  assert not rep.ok and min(rep.ratios.values()) > 2, rep.line()
  assert 'NOT covered' in rep.line()


def test_nan_outputs_and_bad_arguments_are_refused_in_one_line():
  net = low_precision_runs.residual_net()
  rep = runtime_graph.check_graph(lambda x: np.full(x.shape, np.nan), net, 'float32',
                                  points=16)
  assert not rep.ok
  for kwargs, match in [(dict(arithmetic='exact'), 'exact'),
                        (dict(arithmetic='float32', operand_mode='up'), 'operand_mode'),
                        (dict(arithmetic='fp8'), 'allowed')]:
    with pytest.raises(ValueError, match=match) as err:
      runtime_graph.check_graph(lambda x: x, net, points=4, **kwargs)
    assert '\n' not in str(err.value)
  with pytest.raises(ValueError, match='shape'):
    runtime_graph.check_graph(lambda x: x[:, :1], net, 'float32', points=4)
