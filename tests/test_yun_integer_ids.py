"""The integer-id network (``yun.single_attention.integer_ids``) and its float certificates.

Oracles that share nothing with the certificate: n-multiset sums enumerated with a Counter;
g_bar recomputed from f at the cell centres (floor(N x), the table's b-bit rounding); the
network evaluated by a NumPy interpreter below that sums every dot product in a random order
(a random binary tree, or a sequential fused multiply-add in exact rationals rounded once);
JAX and onnxruntime runs of the same parameters.
"""

import collections
import itertools
import math
import types
from fractions import Fraction

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import jax
import jax.numpy as jnp

import runtime_orders

from transformer_ua import rounding
from transformer_ua import yun
from transformer_ua.networks.export_onnx import export_onnx
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.single_attention import integer_ids_realized, sum_distinct_code
from transformer_ua.yun.variants import registry


# -- the code ------------------------------------------------------------------


@pytest.mark.parametrize('q, n', [(2, 2), (3, 2), (5, 2), (7, 2), (11, 2), (3, 3), (5, 3),
                                  (7, 3), (3, 4), (5, 4)])
def test_bose_chowla_sums_are_distinct(q, n):
  a = sum_distinct_code.bose_chowla(q, n)
  assert len(a) == q and all(0 <= v < q ** n - 1 for v in a)
  sums = collections.Counter(sum(c) for c in itertools.combinations_with_replacement(a, n))
  assert max(sums.values()) == 1
  assert len(sums) == math.comb(q + n - 1, n)


@pytest.mark.parametrize('cells, n', [(4, 3), (9, 3), (6, 2), (10, 2), (4, 4)])
def test_code_is_b_n_and_starts_at_zero(cells, n):
  phi = [int(v) for v in sum_distinct_code.code(cells, n)]
  assert phi[0] == 0 and phi == sorted(phi) and len(set(phi)) == cells
  sums = collections.Counter(sum(c) for c in itertools.combinations_with_replacement(phi, n))
  assert max(sums.values()) == 1


def test_a_non_b_n_set_is_detected():
  assert not sum_distinct_code.sums_distinct([0, 1, 2, 3], 2)    # 0 + 3 = 1 + 2


# -- the runtime's softmax of equal scores -------------------------------------


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
def test_jax_and_onnxruntime_softmax_of_equal_scores_is_fl_one_over_n(dtype):
  dt = np.dtype(dtype)
  node = helper.make_node('Softmax', ['s'], ['w'], axis=-1)
  ty = TensorProto.FLOAT if dtype == 'float32' else TensorProto.DOUBLE
  graph = helper.make_graph([node], 'g', [helper.make_tensor_value_info('s', ty, None)],
                            [helper.make_tensor_value_info('w', ty, None)])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)], ir_version=8)
  sess = ort.InferenceSession(model.SerializeToString())
  with jax.enable_x64(True):
    for n in range(2, 10):
      want = dt.type(1) / dt.type(n)
      got_jax = np.asarray(jax.nn.softmax(jnp.zeros((n,), dt)))
      got_ort = sess.run(None, {'s': np.zeros((1, n), dt)})[0][0]
      assert np.all(got_jax == want) and np.all(got_ort == want), n


# -- the construction ----------------------------------------------------------

CONFIGS = [('integer_ids', 'token_times_mean', Grid(1, 3, 3)),
           ('integer_ids', 'attention_map', Grid(1, 2, 4)),
           ('integer_ids', 'token_times_mean', Grid(2, 2, 2)),
           ('positional_integer_ids', 'prefix_mean', Grid(1, 2, 3))]
MARGIN = Fraction(1, 2 ** 6)


def _built(name, target, grid, number_format='float64'):
  net = registry.VARIANTS[name](grid).build(target, number_format=number_format)
  return net, net.realize(margin=MARGIN)


def _g_bar_by_hand(net, x):
  """g_bar from f at the cell centres, rounded to the table's b bits (no ids)."""
  N, b = net.resolution, net.value_bits
  c = np.minimum(np.floor(x * N), N - 1)
  y = net.target((c + 0.5) / N)
  return np.ldexp(np.round(np.ldexp(y, b)), -b)


def _interior_points(rng, net, count):
  k = rng.integers(0, net.resolution, size=(count, net.n, net.d))
  m = float(MARGIN)
  return (k + m + (1 - 2 * m) * rng.random(k.shape)) / net.resolution


def _window_points(rng, net, count):
  """Points with one random coordinate inside a quantization ramp's strip."""
  x = rng.random((count, net.n, net.d))
  N, m = net.resolution, float(MARGIN)
  for i in range(count):
    j, l = rng.integers(net.n), rng.integers(net.d)
    k = rng.integers(1, N)
    x[i, j, l] = (k + m * (2 * rng.random() - 1)) / N
  return x


@pytest.mark.parametrize('name, target, grid', CONFIGS)
def test_size_said_before_building_is_the_network(name, target, grid):
  net, g = _built(name, target, grid)
  assert registry.VARIANTS[name](grid).size() == {**g.size()}
  assert g.depth() == 5 + -(-grid.d // 2) and g.attention_layers() == 1


@pytest.mark.parametrize('name, target, grid', CONFIGS)
def test_exact_network_is_g_bar_on_interiors_and_in_range_on_windows(name, target, grid):
  net, g = _built(name, target, grid)
  rng = np.random.default_rng(0)
  xi = _interior_points(rng, net, 6)
  ex = g.apply_exact(xi)
  assert np.all(np.vectorize(float)(ex) == _g_bar_by_hand(net, xi))
  xw = _window_points(rng, net, 6)
  ex = np.vectorize(float)(g.apply_exact(xw))
  lo, hi = (np.asarray([float(v) for v in s]) for s in net.output_range())
  assert np.all(ex >= lo) and np.all(ex <= hi)


@pytest.mark.parametrize('name, target, grid', CONFIGS)
def test_jax_and_onnxruntime_float64_are_g_bar_exactly(name, target, grid, tmp_path):
  net, g = _built(name, target, grid)
  rng = np.random.default_rng(1)
  x = np.concatenate([_interior_points(rng, net, 300), _window_points(rng, net, 300),
                      rng.random((300, grid.n, grid.d))])
  want = _g_bar_by_hand(net, x[:300])
  assert np.all(g.apply(x[:300]) == want)
  y = ort.InferenceSession(str(export_onnx(g, tmp_path / 'g.onnx'))).run(None, {'X': x})[0]
  assert np.all(y[:300] == want) and np.all(y == g.apply(x))
  # anywhere, float g outputs a table value (the snaps land on valid ids)
  table = set(map(tuple, net.values.reshape(-1, grid.d).tolist()))
  for row in y.reshape(-1, grid.d):
    assert tuple(row.tolist()) in table


# -- the rounding model against randomized summation orders, with and without FMA ----------


def _rsum(terms, rng, dt):
  """Sum in a random binary tree, each addition rounded to dt."""
  terms = [dt.type(t) for t in terms]
  while len(terms) > 1:
    i, j = sorted(rng.choice(len(terms), 2, replace=False))
    b, a = terms.pop(j), terms.pop(i)
    terms.append(dt.type(a + b))
  return terms[0] if terms else dt.type(0)


def _dot(a, b, rng, dt, fma):
  """sum_i a_i b_i: products rounded then a random tree (fma=False), or a random order of
  fused multiply-adds, each exact then rounded once to binary64 (fma=True)."""
  if not fma:
    return _rsum([dt.type(x * y) for x, y in zip(a, b)], rng, dt)
  acc = Fraction(0)
  for i in rng.permutation(len(a)):
    acc = Fraction(float(Fraction(float(a[i])) * Fraction(float(b[i])) + acc))
  return dt.type(float(acc))


def _interpret(g, x, rng, dt, fma=False):
  """The network on one input [n, d], every dot product in a random order."""
  p = jax.tree_util.tree_map(lambda a: np.asarray(a, dt), g.params)
  n, d, D = g.n, g.d, g.model_width
  z = np.zeros((n, D), dt)
  z[:, :d] = x
  if g.positional:
    z = (z + p['E']).astype(dt)
  for i, _ in enumerate(g.segments):
    att, ff = p[f'segment_{i}']['attention'], p[f'segment_{i}']['feedforward']
    upd = np.zeros((n, D), dt)
    for h in range(att['W_Q'].shape[1]):
      q = [_dot(att['W_Q'][0, h, 0], z[j], rng, dt, fma) + att['b_Q'][0, h, 0] for j in range(n)]
      k = [_dot(att['W_K'][0, h, 0], z[j], rng, dt, fma) for j in range(n)]
      v = [_dot(att['W_V'][0, h, 0], z[j], rng, dt, fma) for j in range(n)]
      for j in range(n):
        s = np.asarray([dt.type(q[j] * k[t]) for t in range(n)], dt)
        e = np.exp(s - s.max()).astype(dt)
        w = (e / _rsum(e, rng, dt)).astype(dt)
        mixed = _dot(w, v, rng, dt, fma)
        upd[j] += (att['W_O'][0, h, :, 0] * mixed).astype(dt)
    z = (z + upd).astype(dt)
    out = np.zeros((n, D), dt)
    for j in range(n):
      pre = [_rsum([_dot(ff['W_1'][0, u], z[j], rng, dt, fma), ff['b_1'][0, u]], rng, dt)
             for u in range(ff['b_1'].shape[1])]
      h = np.maximum(np.asarray(pre, dt), 0)
      for c in range(D):
        nz = np.nonzero(ff['W_2'][0, c])[0]
        out[j, c] = _rsum([_dot(ff['W_2'][0, c, nz], h[nz], rng, dt, fma), ff['b_2'][0, c]],
                          rng, dt)
    z = (z + out).astype(dt)
  return z[:, :d].astype(np.float64)


@pytest.mark.parametrize('fma', [False, True])
@pytest.mark.parametrize('name, target, grid', CONFIGS[:2] + CONFIGS[3:])
def test_float64_any_order_with_or_without_fma_is_within_the_certified_deviation(
    name, target, grid, fma):
  net, g = _built(name, target, grid)
  dev = g.float_proof['interior']
  rng = np.random.default_rng(2)
  xs = np.concatenate([_interior_points(rng, net, 4), _window_points(rng, net, 4)])
  lo, hi = (np.asarray([float(v) for v in s]) for s in net.output_range())
  want = _g_bar_by_hand(net, xs[:4])
  for i, x in enumerate(xs):
    y = _interpret(g, x, rng, np.dtype('float64'), fma)
    if i < 4:
      assert np.all(np.abs(y - want[i]) <= dev)
    else:
      assert np.all(y >= lo - dev) and np.all(y <= hi + dev)


def test_float32_any_order_is_within_the_certified_deviation():
  net, g = _built('integer_ids', 'token_times_mean', Grid(1, 3, 3), number_format='float32')
  proof = g.float_proof
  rng = np.random.default_rng(3)
  xs = np.concatenate([_interior_points(rng, net, 4), _window_points(rng, net, 4)])
  want = _g_bar_by_hand(net, xs[:4])
  lo, hi = (np.asarray([float(v) for v in s]) for s in net.output_range())
  for i, x in enumerate(xs):
    y = _interpret(g, x.astype(np.float32), rng, np.dtype('float32'))
    if i < 4:
      assert np.all(np.abs(y - want[i]) <= proof['interior'])
    else:
      assert np.all(y >= lo - proof['window']) and np.all(y <= hi + proof['window'])


def test_the_snap_is_what_makes_it_exact():
  # without the snap constants (sigma = 0 after the quantization and the head) the same
  # float64 network drifts off g_bar: the snaps are doing work, the test can fail
  net, g = _built('integer_ids', 'token_times_mean', Grid(1, 3, 3))
  x = _interior_points(np.random.default_rng(4), net, 200)
  assert np.all(g.apply(x) == _g_bar_by_hand(net, x))
  sigma = rounding.FORMATS['float64'].snap
  bad = jax.tree_util.tree_map(lambda a: a, g.exact)
  snap = bad[f'segment_{integer_ids_realized.SNAP}']['feedforward']
  snap['b_2'] = snap['b_2'].copy()
  snap['b_2'][0, net.d] -= sigma - 1
  broken = integer_ids_realized.IntegerIdsRealized(segments=g.segments, exact=bad, source=net,
                                          ramp=g.ramp, margin=g.margin, kinks=g.kinks,
                                          clamp=g.clamp)
  assert not np.all(broken.apply(x) == _g_bar_by_hand(net, x))


# -- certificates, refusals ----------------------------------------------------


def test_float64_certificate_names_its_arithmetic_and_assumption():
  res = yun.approximate('token_times_mean', 0.2, d=1, n=3)
  cert = res.certificate
  assert res.arithmetic == cert.arithmetic == 'float64' and res.construction == 'integer_ids'
  assert cert.total <= 0.2 and cert.float_interior_sup < 1e-300
  line = str(cert)
  assert 'binary64' in line and rounding.SOFTMAX_ASSUMPTION in line
  x = np.random.default_rng(5).random((2000, 3, 1))
  assert np.all(res.g.apply(x) == res.net.apply(x))


def test_float32_certificate_and_where_it_stops():
  res = yun.approximate('token_times_mean', 0.3, d=1, n=3, arithmetic='float32',
                        construction='integer_ids')
  assert res.certificate.arithmetic == 'float32' and 'binary32' in str(res.certificate)
  with pytest.raises(ValueError, match='quantization sum'):
    yun.approximate('token_times_mean', 0.1, d=1, n=3, arithmetic='float32',
                    construction='integer_ids')


def test_exact_only_networks_refuse_a_float_certificate():
  net = registry.VARIANTS['one_layer_wide'](Grid(1, 2, 3)).build('token_times_mean')
  g = net.realize(margin=Fraction(1, 64))
  with pytest.raises(ValueError, match="exact real network only.*integer_ids") as e:
    yun.certify_lp(net, g, arithmetic='float64')
  assert '\n' not in str(e.value)
  with pytest.raises(ValueError, match='no float64 certificate'):
    yun.approximate('token_times_mean', 0.2, d=1, n=3, construction='one_layer_wide')


@pytest.mark.parametrize('bad', ['float16', 'flaot64', 64, None])
def test_bad_arithmetic_is_one_line_naming_the_allowed(bad):
  with pytest.raises(ValueError) as e:
    yun.approximate('token_times_mean', 0.2, d=1, n=3, arithmetic=bad)
  msg = str(e.value)
  assert "'exact', 'float64', 'float32'" in msg and '\n' not in msg
  net, g = _built('integer_ids', 'token_times_mean', Grid(1, 2, 2))
  if bad is not None:
    with pytest.raises(ValueError, match="'exact', 'float64', 'float32'"):
      yun.certify_lp(net, g, arithmetic=bad)


def test_a_format_mismatch_is_refused(tmp_path):
  net, g = _built('integer_ids', 'token_times_mean', Grid(1, 2, 2))
  with pytest.raises(ValueError, match="built for float64"):
    yun.certify_lp(net, g, arithmetic='float32')
  with pytest.raises(ValueError, match="built for float64"):
    export_onnx(g, tmp_path / 'g32.onnx', dtype='float32')


def test_float32_graph_runs_the_float32_network(tmp_path):
  net, g = _built('integer_ids', 'token_times_mean', Grid(1, 3, 3), number_format='float32')
  path = export_onnx(g, tmp_path / 'g32.onnx')
  assert onnx.load(str(path)).graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
  x = _interior_points(np.random.default_rng(6), net, 500).astype(np.float32)
  y = ort.InferenceSession(str(path)).run(None, {'X': x})[0]
  assert np.max(np.abs(y - _g_bar_by_hand(net, x.astype(np.float64)))) \
      <= g.float_proof['interior']


# -- the runtime model: summation orders it covers, and the operand roundings it refuses ----

def _sigma_in_the_quantizer_bias(g):
  """g as it was built before the snap had a block of its own: sigma the quantization's b_2."""
  exact = {k: ({kk: dict(vv) for kk, vv in v.items()} if isinstance(v, dict) else v)
           for k, v in g.exact.items()}
  q = exact['segment_0']['feedforward']
  snap = exact[f'segment_{integer_ids_realized.SNAP}']['feedforward']
  q['b_2'], snap['b_2'] = q['b_2'].copy(), snap['b_2'] * 0
  q['b_2'][0, g.d] = rounding.FORMATS[g.number_format].snap
  return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), exact)


def test_bias_first_at_the_point_that_broke_the_bias_last_hypothesis():
  # token_times_mean, epsilon 0.1, float64: x = 0.8000038862228394 on all three tokens is an
  # interior point (3.9e-6 from the cell edge 4/5; the ramps keep 1.5e-6 clear). With sigma
  # the quantizer's bias, a bias-first order gave 0.49 there instead of g_bar = 0.81.
  res = yun.approximate('token_times_mean', 0.1, d=1, n=3)
  x = np.full((1, 3, 1), 0.8000038862228394)
  want = _g_bar_by_hand(res.net, x)
  assert np.all(res.net.apply(x) == want)
  for bias_at in (0, 1, 3, None):
    got = runtime_orders.run(res.g.params, x, positional=False, bias_at=bias_at)
    assert np.all(got == want), bias_at
  old = runtime_orders.run(_sigma_in_the_quantizer_bias(res.g), x, positional=False, bias_at=0)
  assert not np.all(old == want)        # the order the old network was open to


@pytest.mark.parametrize('bias_at', [0, 1, 2, 7, 64, None])
def test_float32_bias_anywhere_is_g_bar_on_interiors(bias_at):
  # token_times_mean, epsilon 0.2, float32: with sigma the quantizer's bias, bias first put
  # fl(g) != g_bar on 5 of these 4000 interior points (0.19% of uniform points)
  res = yun.approximate('token_times_mean', 0.2, d=1, n=3, arithmetic='float32',
                        construction='integer_ids')
  net, g = res.net, res.g
  rng = np.random.default_rng(7)
  k = rng.integers(0, net.resolution, size=(4000, 3, 1))
  m = float(g.margin)
  x = ((k + m + (1 - 2 * m) * rng.random(k.shape)) / net.resolution)
  x = x.astype(np.float32).astype(np.float64)
  want = _g_bar_by_hand(net, x)
  got = runtime_orders.run(g.params, x, positional=False, dtype='float32', bias_at=bias_at)
  assert np.all(got == want)
  if bias_at == 0:
    old = runtime_orders.run(_sigma_in_the_quantizer_bias(g), x, positional=False,
                             dtype='float32', bias_at=0)
    assert not np.all(old == want)


@pytest.mark.parametrize('bias_at', [0, 5, None])
def test_positional_bias_anywhere_is_g_bar_on_interiors(bias_at):
  net, g = _built('positional_integer_ids', 'prefix_mean', Grid(1, 2, 3))
  x = _interior_points(np.random.default_rng(8), net, 200)
  got = runtime_orders.run(g.params, x, positional=True, bias_at=bias_at)
  assert np.all(got == _g_bar_by_hand(net, x))


def test_tf32_operands_break_the_quantizer_and_are_refused():
  # the reason 'tf32' is refused: with every matmul operand reduced to TF32's 11 bits the
  # float32 network leaves g_bar on interiors by far more than its certified deviation
  res = yun.approximate('token_times_mean', 0.2, d=1, n=3, arithmetic='float32',
                        construction='integer_ids')
  x = _interior_points(np.random.default_rng(9), res.net, 300)
  x = x.astype(np.float32).astype(np.float64)
  got = runtime_orders.run(res.g.params, x, positional=False, dtype='float32', operands='tf32')
  assert np.max(np.abs(got - _g_bar_by_hand(res.net, x))) > 0.01
  for name in ('tf32', 'bfloat16'):
    with pytest.raises(ValueError, match='IEEE products only') as e:
      yun.approximate('token_times_mean', 0.2, d=1, n=3, arithmetic=name)
    assert '\n' not in str(e.value)
    with pytest.raises(ValueError, match='IEEE products only'):
      yun.certify_lp(res.net, res.g, arithmetic=name)


def test_the_line_states_every_assumption_and_the_domain():
  line = str(yun.approximate('token_times_mean', 0.2, d=1, n=3).certificate)
  for assumption in rounding.INTEGER_ID_ASSUMPTIONS:
    assert assumption in line
  assert 'X in [0, 1]^(n x d), the closed cube' in line


# -- running g outside its certificate -------------------------------------------------


def test_a_float64_g_with_x64_off_is_refused_in_one_line():
  net, g = _built('integer_ids', 'token_times_mean', Grid(1, 3, 3))
  assert not jax.config.jax_enable_x64            # the default session
  with pytest.raises(ValueError, match="x64 is off") as e:
    g.network()
  assert '\n' not in str(e.value)
  with jax.enable_x64(True):
    y = g.network().apply({'params': g.params}, np.full((1, 3, 1), 0.5))
  assert np.all(np.asarray(y) == net.apply(np.full((1, 3, 1), 0.5)))
  net32, g32 = _built('integer_ids', 'token_times_mean', Grid(1, 3, 3), 'float32')
  assert all(a.dtype == np.float32 for a in jax.tree_util.tree_leaves(g32.params))
  g32.network()                                    # float32 needs no x64


def test_apply_takes_the_closed_cube_and_refuses_outside():
  net, g = _built('integer_ids', 'token_times_mean', Grid(1, 3, 3))
  x = np.array([[[1.0], [-0.0], [0.5]]])
  assert np.all(g.apply(x) == net.apply(x)) and np.all(g.apply(x) == _g_bar_by_hand(net, x))
  for bad, said in ((1 + 2 ** -52, '1.0000000000000002'), (-0.001, '-0.001')):
    with pytest.raises(ValueError, match='closed cube') as e:
      g.apply(np.full((1, 3, 1), bad))
    assert said in str(e.value) and '-0,' not in str(e.value)


def test_apply_batches_to_its_memory_budget(monkeypatch):
  net, g = _built('integer_ids', 'token_times_mean', Grid(1, 3, 3))
  x = np.random.default_rng(10).random((23, 3, 1))
  want = g.apply(x)
  monkeypatch.setattr(integer_ids_realized, 'APPLY_BYTES',
                      5 * 3 * g.max_width() * 8 * integer_ids_realized.APPLY_COPIES)
  assert g.apply_batch() == 5
  assert np.array_equal(g.apply(x), want)


def _quantizer_blocks(N, m):
  """The quantization and snap blocks of the integer-id network at N (d = 1, n = 2): the
  construction's own parameters (``realize_network`` on a stand-in whose code and value
  tables are trivial: only the first two blocks are used)."""
  stub = types.SimpleNamespace(number_format='float64', d=1, n=2, resolution=N,
                               phi=[0] * N, high=[0] * N, num_ids=2, ids=[0, 1],
                               value_num=np.array([[0], [1]], object), value_bits=8,
                               positional=False)
  e = Fraction(1)
  while e > m / (2 * N):
    e /= 2
  g = integer_ids_realized.realize_network(stub, e, m, clamp=False)
  return [g.exact[f'segment_{i}']['feedforward']
          for i in (integer_ids_realized.QUANTIZATION, integer_ids_realized.SNAP)]


def _gemm_graph(blocks):
  """z -> z + Gemm(Relu(Gemm(z, W_1, b_1)), W_2, C = b_2) per block: the feed-forwards as a
  converter writes them, the bias as Gemm's C (onnxruntime adds C inside its kernel)."""
  nodes, inits, z = [], [], 'z0'
  for i, ff in enumerate(blocks):
    for k in ('W_1', 'b_1', 'W_2', 'b_2'):
      inits.append(numpy_helper.from_array(np.asarray(ff[k][0], np.float64), f'{k}{i}'))
    nodes += [helper.make_node('Gemm', [z, f'W_1{i}', f'b_1{i}'], [f'p{i}'], transB=1),
              helper.make_node('Relu', [f'p{i}'], [f'h{i}']),
              helper.make_node('Gemm', [f'h{i}', f'W_2{i}', f'b_2{i}'], [f'y{i}'], transB=1),
              helper.make_node('Add', [z, f'y{i}'], [f'z{i + 1}'])]
    z = f'z{i + 1}'
  graph = helper.make_graph(nodes, 'q', [helper.make_tensor_value_info('z0', TensorProto.DOUBLE,
                                                                       None)],
                            [helper.make_tensor_value_info(z, TensorProto.DOUBLE, None)], inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)], ir_version=8)


def test_a_gemm_converted_quantizer_wider_than_512_snaps_to_the_cell():
  # N = 300: the quantization's a_1 row has 598 products, past the 512 after which
  # onnxruntime's Gemm adds C; sigma is in the snap block, so Gemm's C is 0 there
  N, m = 300, Fraction(1, 2 ** 10)
  blocks = _quantizer_blocks(N, m)
  assert blocks[0]['W_1'].shape[1] > 512
  sess = ort.InferenceSession(_gemm_graph(blocks).SerializeToString())
  rng = np.random.default_rng(11)
  k = rng.integers(0, N, 4000)
  z = np.zeros((8000, 3))
  z[:4000, 0] = (k + float(m) + (1 - 2 * float(m)) * rng.random(4000)) / N   # interiors
  z[4000:, 0] = rng.random(4000)                                              # anywhere
  cell = sess.run(None, {'z0': z})[0][:, 1] - rounding.FORMATS['float64'].snap
  assert np.all(cell[:4000] == k)
  assert np.all(cell == np.round(cell)) and np.all((cell >= 0) & (cell <= N - 1))
