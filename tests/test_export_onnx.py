"""export_onnx: the realized Transformer g run by onnxruntime agrees with g.apply and g_bar.

Tolerances are measured (AMD EPYC, onnxruntime 1.32 CPUExecutionProvider, float64):

* A well-conditioned random network (h=2..3 heads of size m=2..3, lam != 1, positional):
  max |ORT - g.apply| = 1.4e-14 on outputs up to 15 -> asserted <= RANDOM_ATOL = 1e-12;
  in float32 5.7e-6 (~6 float32 ulps at 15) -> asserted <= FLOAT32_ATOL = 5e-5.
* Lemma 6 realizations (lam=1e4, epsilon=1e-2), cube interiors, 4096 points:
  Theorem 2 (token_times_mean d=1 n=3 N=4): 1.62e-6; Theorem 3 (prefix_mean d=1 n=2
  N=3): 6.9e-8. These networks amplify rounding: multiplying every weight by (1 + 2^-52),
  one ulp, moves g.apply itself by 3.5e-6 and 5.4e-7. So the two runtimes differ by less
  than a one-ulp change of the weights; asserted <= REALIZED_ATOL = 1e-5 and <= that
  one-ulp sensitivity, measured in the test.
"""

import dataclasses

import jax
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from transformer_ua import yun
from transformer_ua.layers import Segment
from transformer_ua.networks.export_onnx import export_onnx
from transformer_ua.yun import approximator
from transformer_ua.yun.bounds.decomposition import interior_points
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.realization.plan import REPRODUCE_RTOL

#: The module exports float64 realizations the plan cannot guarantee (that is what the
#: runtimes are compared on): their FloatRealizationWarning is expected.
pytestmark = pytest.mark.filterwarnings(
    'ignore::transformer_ua.yun.realization.plan.FloatRealizationWarning')

#: |ORT - g.apply| on the random well-conditioned network (measured 1.4e-14).
RANDOM_ATOL = 1e-12
#: |ORT - g.apply| on the Lemma 6 realizations, cube interiors (measured <= 1.62e-6).
REALIZED_ATOL = 1e-5
#: float32 export of the random network against g.apply in float32 (measured 5.7e-6).
FLOAT32_ATOL = 5e-5
SAMPLES = 4096
LAM, EPSILON = 1e4, 1e-2


def _run(path, x):
  session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
  return session.run(['Y'], {'X': x})[0]


@pytest.fixture(scope='module')
def thm2():
  net = yun.build_approximator('token_times_mean', d=1, n=3, resolution=4)
  return net, net.realize(lam=LAM, epsilon=EPSILON)


@pytest.fixture(scope='module')
def thm3():
  net = yun.build_approximator('prefix_mean', d=1, n=2, resolution=3, positional=True)
  return net, net.realize(lam=LAM, epsilon=EPSILON)


def _random_realized(dtype='float64', n=5, d=4, seed=0):
  """A Realized-shaped network with random weights: several heads of size > 1, lam != 1."""
  rng = np.random.default_rng(seed)
  segments = (Segment('block', depth=3, num_heads=2, head_size=3, normalizer='softmax',
                      width=5),
              Segment('block', depth=2, num_heads=3, head_size=2, normalizer='softmax',
                      lam=2.0, width=4))
  w = lambda *s: rng.normal(scale=0.5, size=s)  # noqa: E731
  params = {'E': w(n, d)}
  for i, s in enumerate(segments):
    L, h, m, r = s.depth, s.num_heads, s.head_size, s.width
    params[f'segment_{i}'] = {
        'attention': {'W_Q': w(L, h, m, d), 'b_Q': w(L, h, m), 'W_K': w(L, h, m, d),
                      'W_V': w(L, h, m, d), 'W_O': w(L, h, d, m)},
        'feedforward': {'W_1': w(L, r, d), 'b_1': w(L, r), 'W_2': w(L, d, r), 'b_2': w(L, d)}}
  params = jax.tree_util.tree_map(lambda a: np.asarray(a, dtype), params)
  return approximator.Realized(segments=segments, params=params, lam=1.0, epsilon=1.0, dtype=dtype,
                      positional=True, n=n)


def test_random_network_agrees_to_rounding(tmp_path):
  g = _random_realized()
  path = export_onnx(g, tmp_path / 'random.onnx', layout='scan')
  x = np.random.default_rng(1).random((64, 5, 4))
  y = _run(path, x)
  assert y.dtype == np.float64 and y.shape == x.shape
  ref = g.apply(x)
  assert np.max(np.abs(ref - x)) > 1.0  # the layers do something
  np.testing.assert_allclose(y, ref, rtol=0, atol=RANDOM_ATOL)
  # One Scan node per segment (plus X + E): the graph does not grow with depth.
  model = onnx.load(str(path))
  assert [n.op_type for n in model.graph.node] == ['Add', 'Scan', 'Scan']


def test_random_network_float32_and_fixed_batch(tmp_path):
  g = _random_realized(dtype='float32')
  path = export_onnx(g, tmp_path / 'random32.onnx', batch=8, dtype='float32')
  x = np.random.default_rng(2).random((8, 5, 4)).astype(np.float32)
  y = _run(path, x)
  assert y.dtype == np.float32
  np.testing.assert_allclose(y, g.apply(x), rtol=0, atol=FLOAT32_ATOL)
  with pytest.raises(Exception, match='invalid dimensions'):  # the batch is fixed at 8
    _run(path, x[:3])


@pytest.mark.parametrize('which', ['thm2', 'thm3'])
def test_realization_agrees_with_g_and_reproduces_g_bar(which, request, tmp_path):
  net, g = request.getfixturevalue(which)
  path = export_onnx(g, tmp_path / f'{which}.onnx')
  x = interior_points(np.random.default_rng(0), SAMPLES, net.variant.grid)
  y, gx, gb = _run(path, x), g.apply(x), net.apply(x)
  err = np.max(np.abs(y - gx))
  assert err <= REALIZED_ATOL, err
  # ... and within what one ulp of every weight does to g.apply itself.
  ulp = dataclasses.replace(g, params=jax.tree_util.tree_map(
      lambda a: a * (1 + np.finfo(np.float64).eps), g.params))
  assert err <= np.max(np.abs(ulp.apply(x) - gx)), err
  # Where float64 works, the exported model reproduces g_bar (the project's criterion).
  tol = REPRODUCE_RTOL * max(1.0, float(np.max(np.abs(net.values))))
  assert np.max(np.abs(y - gb)) <= tol
  assert np.max(np.abs(gb)) > 0.1  # g_bar is not trivially 0 on these points


def test_positional_e_is_in_the_model(thm3, tmp_path):
  _, g = thm3
  model = onnx.load(export_onnx(g, str(tmp_path / 'thm3.onnx')))
  e = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}['E']
  np.testing.assert_array_equal(e, g.params['E'])
  props = {p.key: p.value for p in model.metadata_props}
  assert (props['lam'], props['positional'], props['n']) == ('10000.0', 'True', '2')


def test_bad_inputs_are_one_line_errors(thm2, tmp_path):
  net, g = thm2
  cases = [
      (dict(g=net, path=tmp_path / 'a.onnx'), 'needs a realized g'),
      (dict(g=g, path=tmp_path / 'a.onnx', dtype='float16'), 'dtype'),
      (dict(g=g, path=tmp_path / 'a.onnx', batch=0), 'batch must be'),
      (dict(g=g, path=tmp_path / 'missing' / 'a.onnx'), 'does not exist'),
      (dict(g=g, path=tmp_path), 'is a directory'),
      (dict(g=g, path='/proc/a.onnx'), 'not writable'),
      (dict(g=g, path=None), 'path must be'),
  ]
  for kwargs, match in cases:
    g_arg, path = kwargs.pop('g'), kwargs.pop('path')
    with pytest.raises(ValueError, match=match) as info:
      export_onnx(g_arg, path, **kwargs)
    assert '\n' not in str(info.value)
  hard = dataclasses.replace(g, segments=tuple(dataclasses.replace(s, normalizer='hardmax')
                                               for s in g.segments))
  with pytest.raises(ValueError, match='softmax attention'):
    export_onnx(hard, tmp_path / 'a.onnx')
  assert not list(tmp_path.glob('*.onnx'))  # nothing was written


def test_an_existing_file_is_kept_unless_overwrite(thm2, tmp_path):
  """An unrelated file at ``path`` is refused before anything is built; overwrite=True
  replaces it (whole: the model loads)."""
  _, g = thm2
  path = tmp_path / 'notes.onnx'
  path.write_text('not a model')
  with pytest.raises(FileExistsError, match='already exists; pass overwrite=True'):
    export_onnx(g, path)
  assert path.read_text() == 'not a model'
  assert export_onnx(g, path, overwrite=True) == str(path)
  assert onnx.load(str(path)).graph.output[0].name == 'Y'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['notes.onnx']  # no temp file left


def test_the_one_layer_realization_exports_and_agrees(tmp_path):
  net = yun.build_approximator('token_times_mean', d=1, n=3, resolution=4, contextual='one_layer')
  g = net.realize(dtype='float64')
  path = export_onnx(g, tmp_path / 'one_layer.onnx')
  x = interior_points(np.random.default_rng(1), SAMPLES, Grid(1, 3, 4))
  err = np.max(np.abs(_run(path, x) - g.apply(x)))
  assert err <= REALIZED_ATOL, err
