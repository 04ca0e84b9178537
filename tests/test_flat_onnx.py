"""flat_onnx and export_onnx(layout=...): the flat graph runs the network it was written from.

Oracles: the Scan layout (written by other code, the Scan bodies of ``export_onnx``), JAX
(``g.apply``), ``network_apply.apply`` (NumPy einsums) and a hand-built dict.

Measured (AMD EPYC, onnxruntime 1.2x CPU): the integer-id networks' flat files are
bit-identical to the Scan files and to JAX in float64 and float32. The deep, one-layer and
wide networks are certified in exact arithmetic; their float64 files are the rationals
rounded, and onnxruntime's kernels for the two layouts round differently (thm3: flat vs scan
1.2e-7, each within 1.1e-7 of JAX), so there the layouts are compared as the existing
export test compares runtimes: within REALIZED_ATOL and within what one ulp of every weight
does to g.apply.
"""

import dataclasses
from fractions import Fraction

import jax
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from transformer_ua import yun
from transformer_ua.networks import flat_onnx, network_apply, network_dict, project_import
from transformer_ua.networks.export_onnx import export_onnx
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.single_attention import one_layer_wide
from transformer_ua.yun.variants import registry
from transformer_ua.yun.variants.one_layer_wide import OneLayerWide

pytestmark = pytest.mark.filterwarnings(
    'ignore::transformer_ua.yun.realization.plan.FloatRealizationWarning')

#: |flat - scan| on the exactly certified networks' float64 files (measured <= 1.4e-7).
REALIZED_ATOL = 1e-5
MARGIN = Fraction(1, 2 ** 6)


def _run(path, x):
  return ort.InferenceSession(str(path), providers=['CPUExecutionProvider']).run(
      ['Y'], {'X': x})[0]


def _run_each(path, x):
  """The 'single' form (X [n, d]) on each point of x [batch, n, d], one session."""
  session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
  return np.stack([session.run(['Y'], {'X': xb})[0] for xb in x])


def _points(rng, grid, count):
  """Uniform points, and as many on grid lines (every coordinate k / N, k < N)."""
  k = rng.integers(0, grid.N, size=(count, grid.n, grid.d))
  return np.concatenate([rng.random((count, grid.n, grid.d)), k / grid.N])


@pytest.fixture(scope='module', params=['integer_ids', 'integer_ids_d2', 'positional'])
def integer_ids(request):
  name, target, grid = {
      'integer_ids': ('integer_ids', 'token_times_mean', Grid(1, 3, 3)),
      'integer_ids_d2': ('integer_ids', 'token_times_mean', Grid(2, 2, 2)),
      'positional': ('positional_integer_ids', 'prefix_mean', Grid(1, 2, 3))}[request.param]
  out = {}
  for fmt in ('float64', 'float32'):
    net = registry.VARIANTS[name](grid).build(target, number_format=fmt)
    out[fmt] = net.realize(margin=MARGIN)
  return grid, out


@pytest.mark.parametrize('fmt', ['float64', 'float32'])
def test_integer_id_flat_file_is_bit_identical_to_scan_and_jax(integer_ids, fmt, tmp_path):
  grid, gs = integer_ids
  g = gs[fmt]
  flat = export_onnx(g, tmp_path / 'flat.onnx', layout='flat')
  scan = export_onnx(g, tmp_path / 'scan.onnx', layout='scan')
  x = _points(np.random.default_rng(0), grid, 500).astype(fmt)
  y = _run(flat, x)
  assert y.dtype == np.dtype(fmt)
  assert np.array_equal(y, _run(scan, x))
  assert np.array_equal(y.astype(np.float64), g.apply(x))
  assert np.max(np.abs(y)) > 0.1           # not a trivially zero output
  ops = {n.op_type for n in onnx.load(str(flat)).graph.node}
  assert ops <= set(flat_onnx.OPERATORS) and 'Softmax' in ops and 'Pad' in ops


def _exact_certified(name):
  """(grid, float64 g) of a construction certified in exact arithmetic."""
  if name == 'thm2':
    net = yun.build_approximator('token_times_mean', d=1, n=3, resolution=4)
    return Grid(1, 3, 4), net.realize(lam=1e4, epsilon=1e-2)
  if name == 'thm3':
    net = yun.build_approximator('prefix_mean', d=1, n=2, resolution=3, positional=True)
    return Grid(1, 2, 3), net.realize(lam=1e4, epsilon=1e-2)
  if name == 'one_layer':
    net = yun.build_approximator('token_times_mean', d=1, n=3, resolution=4,
                                 contextual='one_layer')
    return Grid(1, 3, 4), net.realize(dtype='float64')
  wide = one_layer_wide.build('token_times_mean', OneLayerWide(Grid(1, 3, 4)))
  return Grid(1, 3, 4), wide.realize(dtype='float64')


@pytest.mark.parametrize('name', [pytest.param('thm2', marks=pytest.mark.slow), 'thm3',
                                  'one_layer', 'wide'])   # thm2: as thm3, ~20 s more
def test_exactly_certified_flat_file_agrees_with_scan_to_rounding(name, tmp_path):
  grid, g = _exact_certified(name)
  flat = export_onnx(g, tmp_path / 'flat.onnx')            # 'auto': these are shallow
  assert onnx.load(str(flat)).metadata_props and {
      p.key: p.value for p in onnx.load(str(flat)).metadata_props}['layout'] == 'flat'
  scan = export_onnx(g, tmp_path / 'scan.onnx', layout='scan')
  x = _points(np.random.default_rng(1), grid, 300)
  yf, ys, gx = _run(flat, x), _run(scan, x), g.apply(x)
  err = np.max(np.abs(yf - ys))
  assert err <= REALIZED_ATOL, (name, err)
  ulp = dataclasses.replace(g, params=jax.tree_util.tree_map(
      lambda a: a * (1 + np.finfo(np.float64).eps), g.params)) if name != 'wide' else None
  if ulp is not None:
    assert err <= np.max(np.abs(ulp.apply(x) - gx)), (name, err)
  assert np.max(np.abs(yf - gx)) <= REALIZED_ATOL


def _random_dict(rng, d=3, D=5, n=4, positional=False):
  w = lambda *s: rng.normal(scale=0.5, size=s)  # noqa: E731
  blocks = [{'W_Q': w(3, 2, D), 'b_Q': w(3, 2), 'W_K': w(3, 2, D), 'W_V': w(3, 2, D),
             'W_O': w(3, D, 2), 'W_1': w(6, D), 'b_1': w(6), 'W_2': w(D, 6), 'b_2': w(D)},
            {'W_1': w(4, D), 'b_1': w(4), 'W_2': w(D, 4), 'b_2': w(D)},
            {'W_Q': w(1, 4, D), 'b_Q': w(1, 4), 'W_K': w(1, 4, D), 'W_V': w(1, 4, D),
             'W_O': w(1, D, 4)}]
  out = {'embed': w(D, d), 'readout': w(d, D), 'blocks': blocks}
  if positional:
    out['positional'] = w(n, D)
  return out


@pytest.mark.parametrize('form', ['batched', 'single'])
@pytest.mark.parametrize('dtype', ['float64', 'float32'])
def test_random_dict_network_round_trips_and_runs(form, dtype, tmp_path):
  """embed, readout, FF-only and attention-only blocks, 3 heads of size 2; the file reads
  back as the network written (same hash), and onnxruntime runs what NumPy computes."""
  net = network_dict.check(_random_dict(np.random.default_rng(3)), n=4)
  path = flat_onnx.write(net, tmp_path / 'g.onnx', dtype=dtype, form=form)
  onnx.checker.check_model(onnx.load(path), full_check=True)
  back = flat_onnx.read(path)
  stored = net if dtype == 'float64' else network_apply.cast(net, np.float32)
  assert network_dict.params_hash(back) == network_dict.params_hash(stored)
  assert flat_onnx.dtype_of(path) == dtype
  x = np.random.default_rng(4).random((16, 4, 3)).astype(dtype)
  want = network_apply.apply(stored, x, np.dtype(dtype))
  got = _run(path, x) if form == 'batched' else _run_each(path, x)
  tol = 1e-12 if dtype == 'float64' else 5e-5
  assert np.max(np.abs(want)) > 1.0
  np.testing.assert_allclose(got, want, rtol=0, atol=tol)


def test_realized_round_trip_keeps_the_hash(integer_ids, tmp_path):
  _, gs = integer_ids
  for fmt, g in gs.items():
    path = export_onnx(g, tmp_path / f'{fmt}.onnx', layout='flat')
    assert (network_dict.params_hash(flat_onnx.read(path))
            == network_dict.params_hash(project_import.from_realized(g)))


def test_from_realized_is_what_jax_runs(integer_ids):
  grid, gs = integer_ids
  g = gs['float64']
  net = project_import.from_realized(g)
  assert (net.d, net.n, net.D) == (grid.d, grid.n, g.model_width)
  assert len(net.blocks) == g.depth() and net.embed is None and net.readout is None
  x = np.random.default_rng(5).random((50, grid.n, grid.d))
  np.testing.assert_allclose(network_apply.apply(net, x), g.apply(x), rtol=0, atol=1e-9)
  with pytest.raises(ValueError, match='has no'):
    project_import.from_realized(object())


# -- refusals ----------------------------------------------------------------


def _edited(path, edit):
  model = onnx.load(str(path))
  edit(model)
  return model


def test_read_refuses_other_operators_in_one_line(tmp_path):
  net = network_dict.check(_random_dict(np.random.default_rng(6)), n=4)
  path = flat_onnx.write(net, tmp_path / 'g.onnx')

  def swap(op, **attrs):
    def edit(model):
      node = next(n for n in model.graph.node if n.op_type == 'Relu')
      new = helper.make_node(op, list(node.input), list(node.output), name=node.name, **attrs)
      node.CopyFrom(new)
    return edit

  # Gelu is outside the flat layout; Erf and Tanh are in it (the GELU forms), so a ReLU
  # swapped for one is refused as a node the layout of these parameters does not have there
  for op, pattern in (('Gelu', 'is a Gelu .*GELU'), ('Erf', r'\(Erf -> .*\(Relu -> '),
                      ('Tanh', r'\(Tanh -> .*\(Relu -> ')):
    with pytest.raises(ValueError, match=pattern) as info:
      flat_onnx.read(_edited(path, swap(op)))
    assert '\n' not in str(info.value)

  def layer_norm(model):
    node = model.graph.node[0]
    model.graph.node.insert(1, helper.make_node('LayerNormalization', [node.output[0], 's'],
                                                ['ln'], name='ln'))
  with pytest.raises(ValueError, match=r'node 1 \(LayerNormalization -> ln\) is not what'):
    flat_onnx.read(_edited(path, layer_norm))


def test_read_refuses_a_scan_file_and_a_changed_graph_or_weight(tmp_path):
  grid = Grid(1, 3, 3)
  g = registry.VARIANTS['integer_ids'](grid).build('token_times_mean').realize(margin=MARGIN)
  scan = export_onnx(g, tmp_path / 'scan.onnx', layout='scan')
  with pytest.raises(ValueError, match="is a Scan .*layout='flat'"):
    flat_onnx.read(scan)
  flat = export_onnx(g, tmp_path / 'flat.onnx', layout='flat')

  def weight(model):  # one weight changed, the stored hash kept
    t = next(t for t in model.graph.initializer if t.name == 'blocks.0.W1')
    a = numpy_helper.to_array(t).copy()
    a.flat[0] += 1.0
    t.CopyFrom(numpy_helper.from_array(a, t.name))
  with pytest.raises(ValueError, match='is not the hash of its parameters'):
    flat_onnx.read(_edited(flat, weight))

  def softmax_axis(model):  # same operators, another function
    node = next(n for n in model.graph.node if n.op_type == 'Softmax')
    node.attribute[0].i = 0
  with pytest.raises(ValueError, match='is not what the flat layout'):
    flat_onnx.read(_edited(flat, softmax_axis))

  def rewire(model):  # the residual skipped in one block
    node = next(n for n in model.graph.node if n.name == 'blocks.1.z_feedforward')
    node.input[0] = node.input[1]
  with pytest.raises(ValueError, match='is not what the flat layout'):
    flat_onnx.read(_edited(flat, rewire))
  (tmp_path / 'junk.onnx').write_bytes(b'not a model')
  with pytest.raises(ValueError, match='not a readable ONNX model'):
    flat_onnx.read(tmp_path / 'junk.onnx')
  with pytest.raises(ValueError, match='is not an ONNX file'):
    flat_onnx.read(tmp_path / 'missing.onnx')


def test_export_bad_layout_path_and_existing_file_write_nothing(tmp_path):
  g = registry.VARIANTS['integer_ids'](Grid(1, 2, 2)).build('token_times_mean').realize(
      margin=MARGIN)
  cases = [(dict(path=tmp_path / 'a.onnx', layout='tree'), 'layout='),
           (dict(path=tmp_path / 'no' / 'a.onnx', layout='flat'), 'does not exist'),
           (dict(path='/proc/a.onnx', layout='flat'), 'not writable'),
           (dict(path=tmp_path / 'a.onnx', layout='flat', batch=0), 'batch must be')]
  for kwargs, match in cases:
    with pytest.raises(ValueError, match=match) as info:
      export_onnx(g, **kwargs)
    assert '\n' not in str(info.value)
  assert not list(tmp_path.iterdir())
  (tmp_path / 'g.onnx').write_text('keep me')
  with pytest.raises(FileExistsError, match='already exists'):
    export_onnx(g, tmp_path / 'g.onnx', layout='flat')
  assert (tmp_path / 'g.onnx').read_text() == 'keep me'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['g.onnx']
  for kwargs, match in ((dict(dtype='float16'), 'dtype='), (dict(form='3d'), 'form='),
                        (dict(form='single', batch=2), 'no batch axis')):
    with pytest.raises(ValueError, match=match):
      flat_onnx.write(project_import.from_realized(g), tmp_path / 'b.onnx', **kwargs)
  assert sorted(p.name for p in tmp_path.iterdir()) == ['g.onnx']


def test_auto_is_scan_above_the_depth_rule(tmp_path, monkeypatch):
  from transformer_ua.networks import export_onnx as export_module  # pylint: disable=import-outside-toplevel
  g = registry.VARIANTS['integer_ids'](Grid(1, 2, 2)).build('token_times_mean').realize(
      margin=MARGIN)
  ops = lambda p: {n.op_type for n in onnx.load(str(p)).graph.node}  # noqa: E731
  assert 'Scan' not in ops(export_onnx(g, tmp_path / 'a.onnx'))
  monkeypatch.setattr(export_module, 'AUTO_FLAT_BLOCKS', g.depth() - 1)
  assert 'Scan' in ops(export_onnx(g, tmp_path / 'b.onnx'))


def test_single_form_has_no_pad_or_slice_and_runs_the_same(integer_ids, tmp_path):
  """The verifiers' form (X [n, d]): padding and the first d as MatMuls by [I 0], exact."""
  grid, gs = integer_ids
  g = gs['float64']
  net = project_import.from_realized(g)
  single = flat_onnx.write(net, tmp_path / 'single.onnx', form='single')
  ops = {n.op_type for n in onnx.load(str(single)).graph.node}
  assert not ops & {'Pad', 'Slice'} and ops <= set(flat_onnx.OPERATORS)
  assert network_dict.params_hash(flat_onnx.read(single)) == network_dict.params_hash(net)
  x = _points(np.random.default_rng(8), grid, 50)
  y = _run_each(single, x)
  assert np.array_equal(y, g.apply(x))
