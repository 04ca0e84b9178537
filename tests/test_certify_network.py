"""certify_network: soundness against emulated runtimes and dense samples, and bad input.

The float checks emulate runtimes the certificate claims to cover, independently of the
certifier's code: NumPy evaluations of g in float32 / float64 with the dot products summed
in random order, bias first, in blocks, with a single rounding per product-sum (FMA-like),
and with TF32 / bfloat16 operand reduction (``rounding.MatmulModel.reduce_operand``) and
float32 accumulation; the reference g is evaluated in np.longdouble. Every emulated
output must stay within the certified per-box deviation D of the reference.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_ua import rounding
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import network_certificate as nc
from transformer_ua.certify import network_enclosure
from transformer_ua.networks import network_apply, network_dict


def random_net(seed: int, *, d=1, n=3, D=3, h=2, m=2, r=6, blocks=1, scale=1.0,
               positional=False, readout=False):
  rng = np.random.default_rng(seed)
  out = {'blocks': []}
  for _ in range(blocks):
    out['blocks'].append({
        'W_Q': rng.normal(size=(h, m, D)) * scale, 'b_Q': rng.normal(size=(h, m)) * scale,
        'W_K': rng.normal(size=(h, m, D)) * scale, 'W_V': rng.normal(size=(h, m, D)) * scale,
        'W_O': rng.normal(size=(h, D, m)) * scale / 2,
        'W_1': rng.normal(size=(r, D)) * scale, 'b_1': rng.normal(size=r) * scale,
        'W_2': rng.normal(size=(D, r)) * scale / 2, 'b_2': rng.normal(size=D) * scale})
  if positional:
    out['positional'] = rng.normal(size=(n, D))
  if readout:
    out['readout'] = rng.normal(size=(d, D))
  return network_dict.check(out, d=d, n=n)


# ---------------------------------------------------------------------------
# Emulated runtimes (no code shared with the certifier).
# ---------------------------------------------------------------------------


def _dot(a, b, bias, dtype, order, rng, reduce=None):
  """sum_i a[..., i] b[i, :] + bias, each output summed term by term in ``dtype``."""
  if reduce is not None:
    a, b = reduce(a), reduce(b)
  a = np.asarray(a, dtype)
  b = np.asarray(b, dtype)
  terms = a[..., :, None] * b                       # products, rounded to dtype
  if order == 'fma':                                # one rounding of the exact sum
    exact = (a.astype(np.longdouble)[..., :, None] * b.astype(np.longdouble)).sum(axis=-2)
    return (exact + np.asarray(bias, np.longdouble)).astype(dtype)
  k = terms.shape[-2]
  idx = list(range(k))
  if order == 'random':
    rng.shuffle(idx)
  elif order == 'reverse':
    idx = idx[::-1]
  if order == 'bias_first':
    acc = np.broadcast_to(np.asarray(bias, dtype), terms[..., 0, :].shape).astype(dtype)
    for i in idx:
      acc = (acc + terms[..., i, :]).astype(dtype)
    return acc
  if order == 'blocked':
    acc = np.zeros_like(terms[..., 0, :])
    for s in range(0, k, 2):
      part = terms[..., s, :]
      if s + 1 < k:
        part = (part + terms[..., s + 1, :]).astype(dtype)
      acc = (acc + part).astype(dtype)
    return (acc + np.asarray(bias, dtype)).astype(dtype)
  acc = terms[..., idx[0], :]
  for i in idx[1:]:
    acc = (acc + terms[..., i, :]).astype(dtype)
  return (acc + np.asarray(bias, dtype)).astype(dtype)


def emulate(net, x, dtype, order='forward', seed=0, reduce=None):
  """fl(g)(x) in an emulated runtime (x [B, n, d]); the residual enters a dot product as
  its bias, the FF's b_2 too (so 'bias_first' adds both before the products)."""
  rng = np.random.default_rng(seed)

  def dot(a, b, bias=0.0):
    return _dot(a, b, bias, dtype, order, rng, reduce)

  z = np.asarray(x, dtype)
  z = np.concatenate([z, np.zeros(z.shape[:-1] + (net.D - net.d,), dtype)], axis=-1)
  if net.positional is not None:
    z = (z + net.positional.astype(dtype)).astype(dtype)
  for blk in net.blocks:
    if blk.attention is not None:
      a = blk.attention
      w_q, b_q, w_k, w_v, w_o = a.w_q, a.b_q, a.w_k, a.w_v, a.w_o
      heads = []
      for i in range(w_q.shape[0]):
        q = dot(z, w_q[i].T, b_q[i])
        k = dot(z, w_k[i].T)
        v = dot(z, w_v[i].T)
        s = np.stack([dot(q[bb], k[bb].T) for bb in range(q.shape[0])])
        s = (s - s.max(axis=-1, keepdims=True)).astype(dtype)
        e = np.exp(s).astype(dtype)
        w = (e / e.sum(axis=-1, keepdims=True, dtype=dtype)).astype(dtype)
        heads.append(np.stack([dot(w[bb], v[bb]) for bb in range(w.shape[0])]))
      cat = np.concatenate(heads, axis=-1)                               # [B, n, h m]
      wo = np.concatenate([w_o[i] for i in range(w_o.shape[0])], axis=-1)   # [D, h m]
      z = dot(cat, wo.T, z)
    if blk.ff is not None:
      w_1, b_1, w_2, b_2 = blk.ff.w_1, blk.ff.b_1, blk.ff.w_2, blk.ff.b_2
      hid = np.maximum(dot(z, w_1.T, b_1), 0).astype(dtype)
      z = dot(hid, w_2.T, (z + b_2.astype(dtype)).astype(dtype))
  return z[..., :net.d]


def reference(net, x):
  """g(x) in np.longdouble (far more precise than the deviations checked)."""
  return network_apply.apply(net, np.asarray(x, np.longdouble), dtype=np.longdouble)


def _boxes(rng, count, n, d, width):
  lo = rng.uniform(0, 1 - width, (count, n, d))
  return lo, lo + width


@pytest.mark.parametrize('arithmetic,dtype,reduce_mode', [
    ('float64', np.float64, None), ('float32', np.float32, None),
    ('tf32', np.float32, 'nearest'), ('tf32', np.float32, 'truncate'),
    ('bfloat16', np.float32, 'nearest'), ('bfloat16', np.float32, 'truncate')])
@pytest.mark.parametrize('order', ['forward', 'random', 'bias_first', 'blocked', 'fma'])
def test_float_deviation_covers_emulated_runtimes(arithmetic, dtype, reduce_mode, order):
  model = rounding.MATMUL_MODELS[arithmetic]
  reduce = None if reduce_mode is None else (
      lambda a: model.reduce_operand(np.asarray(a, np.float32), reduce_mode).astype(dtype))
  net = network_apply.cast(random_net(3, scale=0.8), model.dtype)
  rng = np.random.default_rng(1)
  lo, hi = _boxes(rng, 24, 3, 1, 0.05)
  _, dev = network_enclosure.enclose(net, iv.box(lo, hi), model)
  x = lo + (hi - lo) * rng.random(lo.shape)
  got = emulate(net, x.astype(dtype), dtype, order, seed=2, reduce=reduce).astype(np.longdouble)
  err = np.abs(got - reference(net, x)).astype(np.float64)
  assert np.all(err <= dev), (err / dev).max()
  # not vacuous: the deviation is within a few orders of the measured error somewhere
  assert err.max() > 0


def test_deviation_bound_fails_when_tf32_is_not_modelled():
  """The float32 model does not cover a TF32 runtime: the emulated TF32 error exceeds the
  float32 D (so the test above can fail, and the TF32 model is needed)."""
  model32 = rounding.MATMUL_MODELS['float32']
  tf32 = rounding.MATMUL_MODELS['tf32']
  net = network_apply.cast(random_net(3, scale=0.8), np.float32)
  rng = np.random.default_rng(1)
  lo, hi = _boxes(rng, 24, 3, 1, 0.05)
  _, dev = network_enclosure.enclose(net, iv.box(lo, hi), model32)
  x = lo + (hi - lo) * rng.random(lo.shape)
  got = emulate(net, x.astype(np.float32), np.float32, 'forward',
                reduce=lambda a: tf32.reduce_operand(a, 'truncate'))
  err = np.abs(got.astype(np.longdouble) - reference(net, x)).astype(np.float64)
  assert np.any(err > dev)


@pytest.mark.parametrize('seed,positional', [(0, False), (1, True), (2, False)])
def test_sup_certificate_is_above_dense_samples(seed, positional):
  """Untrained networks with large errors: the certified sup (p = inf) is at least the
  largest sampled |f - fl(g)|, and the certified d_2 at least the sampled d_2's 99.9% upper
  confidence end minus nothing (it must not be below the sample mean)."""
  net = random_net(seed, positional=positional, scale=0.6)
  rng = np.random.default_rng(seed + 10)
  x = rng.random((20000, 3, 1))
  f = x * x.mean(axis=1, keepdims=True)
  err = np.abs(network_apply.apply(network_apply.cast(net, np.float32), x.astype(np.float32),
                                  np.float32) - f)
  cert_inf = nc.certify_network('token_times_mean', net, d=1, n=3, p='inf',
                                arithmetic='float32', max_minutes=0.08)
  assert float(cert_inf.total) >= err.max()
  cert_2 = nc.certify_network('token_times_mean', net, d=1, n=3, p=2, arithmetic='float32',
                              max_minutes=0.08)
  assert float(cert_2.total) >= math.sqrt((err ** 2).sum(axis=(1, 2)).mean())
  assert cert_inf.symmetric == (not positional)


def test_callable_target_with_lipschitz_is_sound_and_first_order():
  net = random_net(5, scale=0.5)
  f = lambda x: np.sin(3 * x) * 0.5   # noqa: E731  |d/dx| <= 1.5 (entrywise)
  cert = nc.certify_network(f, net, d=1, n=3, p='inf', arithmetic='float64', lipschitz=1.5,
                            max_minutes=0.3)
  x = np.random.default_rng(0).random((20000, 3, 1))
  err = np.abs(network_apply.apply(net, x) - f(x)).max()
  assert float(cert.total) >= err
  assert 'first order' in cert.line() and not cert.symmetric


def test_false_lipschitz_is_refuted():
  net = random_net(5, scale=0.5)
  f = lambda x: np.sin(30 * x)   # noqa: E731  L = 30
  with pytest.raises(ValueError, match='lipschitz|L'):
    nc.certify_network(f, net, d=1, n=3, p=2, lipschitz=1.0, max_minutes=0.05)


def test_epsilon_reached_and_changed_weight_refused():
  net = random_net(7, scale=0.05, r=4)
  cert = nc.certify_network('token_times_mean', net, d=1, n=3, p=2, epsilon=10.0,
                            max_minutes=0.2)
  assert cert.reached and cert.total <= 10
  cert.check_network(net)
  nudged = net.as_dict()
  nudged['blocks'][0]['W_1'] = nudged['blocks'][0]['W_1'].copy()
  nudged['blocks'][0]['W_1'][0, 0] = np.nextafter(nudged['blocks'][0]['W_1'][0, 0], 1)
  with pytest.raises(ValueError, match='changed weight'):
    cert.check_network(nudged)


def test_line_rounds_up_and_names_assumptions():
  net = random_net(7, scale=0.05, r=4)
  cert = nc.certify_network('token_times_mean', net, d=1, n=3, p=2, arithmetic='tf32',
                            max_minutes=0.05)
  printed = float(cert.line().split('<= ')[1].split(' ')[0])
  assert printed >= float(cert.total)
  assert 'explicit bits' in cert.line() and rounding.EXP_ASSUMPTION in cert.line()
  assert 'not probed' in cert.line()


@pytest.mark.parametrize('kwargs,match', [
    (dict(p=0.5), 'p=0.5'), (dict(epsilon=0), 'epsilon'), (dict(epsilon=-1.0), 'epsilon'),
    (dict(arithmetic='float16'), 'arithmetic'), (dict(n=4), 'n=3|n=4'),
    (dict(max_minutes=0), 'max_minutes')])
def test_bad_input_one_line(kwargs, match):
  net = random_net(1, positional=True)
  args = dict(d=1, n=3, p=2)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match) as err:
    nc.certify_network('token_times_mean', net, **args)
  assert '\n' not in str(err.value)


@pytest.mark.parametrize('edit,match', [
    (lambda b: b.update(LayerNorm_scale=np.ones(3)), 'LayerNorm'),
    (lambda b: b.update(gelu=np.ones(3)), 'GELU'),
    (lambda b: b.pop('W_K'), 'partial attention'),
    (lambda b: b.pop('b_2'), 'partial feed-forward'),
    (lambda b: b.update(W_1=np.full((6, 3), np.nan)), 'non-finite'),
    (lambda b: b.update(W_2=np.full((3, 6), np.inf)), 'non-finite'),
    (lambda b: b.update(W_Q=np.zeros((2, 2, 4))), 'shape'),
])
def test_bad_network_one_line(edit, match):
  net = random_net(1).as_dict()
  edit(net['blocks'][0])
  with pytest.raises(ValueError, match=match) as err:
    nc.certify_network('token_times_mean', net, d=1, n=3)
  assert '\n' not in str(err.value)


def test_budget_estimate_refuses_a_huge_network():
  net = random_net(1, D=64, h=4, m=16, r=512, blocks=6)
  with pytest.raises(ValueError, match='estimated at'):
    nc.certify_network('token_times_mean', net, d=1, n=3, max_minutes=0.001)


def test_exp_of_numpy_within_the_certifier_slack():
  assert iv.check_numpy_exp(points=400) <= iv.EXP_SLACK


def test_workers_and_state_dir_resume(tmp_path):
  net = random_net(7, scale=0.05, r=4)
  first = nc.certify_network('token_times_mean', net, d=1, n=3, p=2, epsilon=10.0,
                             max_minutes=0.2, state_dir=str(tmp_path))
  again = nc.certify_network('token_times_mean', net, d=1, n=3, p=2, epsilon=10.0,
                             max_minutes=0.2, state_dir=str(tmp_path))
  assert again.total == first.total
  assert 'resumed' in again.line()


@pytest.mark.parametrize('index', [0, 1, 2])
def test_docs_example_runs(index, tmp_path, monkeypatch):
  """docs/certify.md's Python examples run as written (the dict, the torch export, the Flax
  module), each in a fresh directory."""
  import os
  import re
  path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs',
                      'certify.md')
  blocks = re.findall(r'^```python\n(.*?)^```', open(path).read(), flags=re.S | re.M)
  assert len(blocks) == 3
  monkeypatch.chdir(tmp_path)
  exec(compile(blocks[index], f'docs/certify.md example {index}', 'exec'), {})   # noqa: S102


@pytest.mark.parametrize('units,p', [(4, 2), (4, 'inf'), (8, 'inf')])
def test_hand_built_network_within_one_and_a_half_of_its_closed_form(units, p):
  """The uniform-mean head plus a ReLU product layer (certify/hand_built.py), whose error is
  known in closed form (exact rationals): the certificate is at least the true error and
  reaches 1.5 times it."""
  from transformer_ua.certify import hand_built
  hb = hand_built.hand_built_product_network(units, n=3)
  true = math.sqrt(hb.l2_error_squared) if p == 2 else float(hb.sup_error)
  cert = nc.certify_network('token_times_mean', hb.net, d=1, n=3, p=p, arithmetic='float64',
                            epsilon=1.5 * true, max_minutes=1.0)
  assert cert.reached
  assert true <= float(cert.total) <= 1.5 * true


def test_onnx_file_in_and_unsupported_op_refused(tmp_path):
  """g given as a flat ONNX file is the same network (same hash); a graph with an operator
  outside the class (LayerNormalization) is refused in one line naming it."""
  import onnx
  from onnx import TensorProto, helper
  from transformer_ua.networks import flat_onnx
  net = random_net(7, scale=0.05, r=4)
  path = str(tmp_path / 'g.onnx')
  flat_onnx.write(net, path, dtype='float64')
  cert = nc.certify_network('token_times_mean', path, d=1, n=3, p=2, epsilon=10.0,
                            max_minutes=0.2)
  cert.check_network(net)
  x = helper.make_tensor_value_info('X', TensorProto.DOUBLE, [None, 3, 1])
  y = helper.make_tensor_value_info('Y', TensorProto.DOUBLE, [None, 3, 1])
  scale = helper.make_tensor('s', TensorProto.DOUBLE, [1], [1.0])
  bias = helper.make_tensor('b', TensorProto.DOUBLE, [1], [0.0])
  node = helper.make_node('LayerNormalization', ['X', 's', 'b'], ['Y'], axis=-1)
  model = helper.make_model(helper.make_graph([node], 'ln', [x], [y], [scale, bias]),
                            opset_imports=[helper.make_opsetid('', 17)])
  bad = str(tmp_path / 'ln.onnx')
  onnx.save(model, bad)
  with pytest.raises(ValueError, match='LayerNormalization') as err:
    nc.certify_network('token_times_mean', bad, d=1, n=3)
  assert '\n' not in str(err.value)


def test_overflowing_network_gets_no_certificate():
  """Weights of 1e200 overflow the float64 run: refused in one line, never a NaN total."""
  net = random_net(2, scale=1e200).as_dict()
  with pytest.raises(ValueError, match='g can overflow in float64') as err:
    nc.certify_network('token_times_mean', net, d=1, n=3, max_minutes=0.05)
  assert '\n' not in str(err.value)


def test_softmax_saturates_on_a_score_row_spanning_1000():
  """exp(1000) overflows: the enclosure stays finite and holds the softmax (mpmath, 50
  digits) at sampled scores of each interval."""
  import mpmath
  rng = np.random.default_rng(0)
  centre = np.array([[0.0, 1000.0, 999.5, -300.0, 400.0], [-700.0, 0.0, 710.0, 5.0, 6.0]])
  half = np.array([[1.0, 0.0, 2.0, 0.5, 100.0], [0.0, 3.0, 0.25, 0.0, 1.0]])
  w = iv.softmax(iv.Interval(centre - half, centre + half))
  assert np.all(np.isfinite(w.lo)) and np.all(np.isfinite(w.hi)) and np.all(w.lo <= w.hi)
  with mpmath.workdps(50):
    for _ in range(40):
      s = centre + half * rng.uniform(-1, 1, centre.shape)
      for row in range(len(s)):
        e = [mpmath.exp(mpmath.mpf(float(v))) for v in s[row]]
        tot = sum(e)
        for k, ek in enumerate(e):
          assert w.lo[row, k] <= ek / tot <= w.hi[row, k]
  assert w.hi[0, 0] < 1e-300 and 0.18 < w.lo[0, 1] <= 1 / (1 + math.exp(1.5))


def test_wide_score_spread_is_certified_not_refused():
  """Scores spanning thousands (W_Q scaled up): a finite certificate above the samples."""
  net = random_net(3, scale=0.6).as_dict()
  net['blocks'][0]['W_Q'] = net['blocks'][0]['W_Q'] * 400
  net['blocks'][0]['b_Q'] = net['blocks'][0]['b_Q'] * 400
  net['blocks'][0]['W_K'] = net['blocks'][0]['W_K'] * 20
  x = np.random.default_rng(1).random((20000, 3, 1))
  z = np.pad(x, ((0, 0), (0, 0), (0, 2)))             # the input padded to D = 3
  blk = net['blocks'][0]
  q = np.einsum('hmD,bnD->bhnm', blk['W_Q'], z) + blk['b_Q'][None, :, None, :]
  k = np.einsum('hmD,bnD->bhnm', blk['W_K'], z)
  s = np.einsum('bhjm,bhkm->bhjk', q, k)
  assert np.ptp(s, axis=-1).max() > 709                # the spread that overflowed exp
  net = network_dict.check(net, d=1, n=3)
  err = np.abs(network_apply.apply(net, x) - x * x.mean(axis=1, keepdims=True)).max()
  cert = nc.certify_network('token_times_mean', net, d=1, n=3, p='inf', arithmetic='float64',
                            max_rounds=3, progress=False)
  assert math.isfinite(float(cert.total)) and float(cert.total) >= err
