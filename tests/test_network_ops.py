"""Soundness of the stock-layer ops of the enclosure (biases, scale, causal mask, LayerNorm,
GELU, pre/post norm): interval values against dense samples of ``network_apply.apply``,
interval Jacobians against finite differences and mpmath, float deviations against emulated
float32 runtimes (LayerNorm two-pass, one-pass, Welford and torch's x rstd - mu rstd; GELU
by erf, erfc and tanh with their results moved by up to the assumed ulps; the scale after
the scores, on q, or split as fl(sqrt c) on q and k; every sum, biases included, in a
random order). Certificates: tests/test_network_ops_certify.py."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from transformer_ua import rounding
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import network_certificate as nc
from transformer_ua.certify import float_deviation
from transformer_ua.certify import network_enclosure as ne
from network_ops_helpers import boxes, random_net
from transformer_ua.networks import network_apply, network_dict

F32 = rounding.MATMUL_MODELS['float32']
K_TANH = math.sqrt(2 / math.pi)


# -- GELU: the float64 evaluation and the constants, against mpmath ------------------------


def _mp_gelu(x, form):
  x = x if isinstance(x, mpmath.mpf) else mpmath.mpf(float(x))
  if form == 'gelu':
    return x * mpmath.ncdf(x)
  y = mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf('0.044715') * x ** 3)
  return x / (1 + mpmath.exp(-2 * y))      # = x (1 + tanh y) / 2, without its cancellation


@pytest.mark.parametrize('form', ['gelu', 'gelu_tanh'])
def test_gelu_evaluation_and_constants_against_mpmath(form):
  rng = np.random.default_rng(0)
  x = np.concatenate([rng.normal(0, 3, 300), rng.uniform(-40, 40, 100), [-1e-300, 0.0, 1e-30,
                                                                          -37.5, 8.0, -8.0]])
  v, s = iv.gelu_value(x, form), iv.gelu_slope(x, form)
  (x0_lo, x0_hi), gmin, (c1_lo, c1_hi), dmin, (c2_lo, c2_hi), dmax = iv._GELU[form]
  with mpmath.workdps(40):
    for xi, vi, si in zip(x, v, s):
      ref = _mp_gelu(xi, form)
      assert abs(mpmath.mpf(float(vi)) - ref) <= abs(ref) * iv.GELU_SLACK + 2.0 ** -1000 * (
          1 + abs(xi))
      dref = mpmath.diff(lambda t: _mp_gelu(t, form), mpmath.mpf(float(xi)))
      assert abs(mpmath.mpf(float(si)) - dref) <= iv.GELU_SLACK
    f = lambda t: _mp_gelu(t, form)  # noqa: E731
    df = lambda t: mpmath.diff(f, t)  # noqa: E731
    d2f = lambda t: mpmath.diff(f, t, 2)  # noqa: E731
    x0 = mpmath.findroot(df, -0.75)
    assert x0_lo < x0 < x0_hi and f(x0) >= gmin
    assert df(x0_lo) < 0 < df(x0_hi)
    for c_lo, c_hi, ext, sign in ((c1_lo, c1_hi, dmin, 1), (c2_lo, c2_hi, dmax, -1)):
      c = mpmath.findroot(d2f, (c_lo + c_hi) / 2)
      assert c_lo < c < c_hi and sign * (df(c) - ext) >= 0
      assert d2f(c_lo) * d2f(c_hi) < 0
    assert max(-dmin, dmax) <= iv.GELU_LIPSCHITZ
    # g' monotone between the windows: the sign of g'' on a grid (mpmath at 40 digits)
    for a, b, sign in ((-10, c1_lo, -1), (c1_hi, c2_lo, 1), (c2_hi, 10, -1)):
      for t in np.linspace(a, b, 60):
        assert sign * d2f(mpmath.mpf(float(t))) > 0
    for t in np.linspace(-10, x0_lo, 40):            # g decreasing left of x0
      assert df(mpmath.mpf(float(t))) < 0
    for t in np.linspace(x0_hi, 10, 40):
      assert df(mpmath.mpf(float(t))) > 0


@pytest.mark.parametrize('form', ['gelu', 'gelu_tanh'])
def test_gelu_interval_contains_samples_and_derivatives(form):
  rng = np.random.default_rng(1)
  centre = np.concatenate([rng.normal(0, 2, 200), [-0.752, -1.4142, 1.4142, -1.418, 1.4185]])
  radius = np.concatenate([rng.exponential(0.3, 200), [1e-4] * 5])
  lo, hi = centre - radius, centre + radius
  x = iv.Interval(lo, hi, np.ones((len(lo), 1)), np.ones((len(lo), 1)))
  out = iv.gelu(x, form)
  t = rng.random((64, 1))
  pts = lo + t * (hi - lo)
  vals = network_apply.gelu(pts, form)
  assert np.all(vals >= out.lo) and np.all(vals <= out.hi)
  h = 1e-6
  fd = (network_apply.gelu(pts + h, form) - network_apply.gelu(pts - h, form)) / (2 * h)
  assert np.all(fd >= out.tlo[:, 0] - 1e-8) and np.all(fd <= out.thi[:, 0] + 1e-8)
  straddle = (lo < -0.7519) & (hi > -0.7517)
  assert np.all(out.lo[straddle] < -0.1699)


# -- LayerNorm: interval value and Jacobian --------------------------------------------------


def test_layer_norm_interval_contains_samples_and_finite_differences():
  rng = np.random.default_rng(2)
  width, p = 5, 3
  centre = rng.normal(0, 1, (40, width))
  centre[:5] = 0.3                                     # var near 0: s near sqrt(eps)
  rad = rng.exponential(0.05, (40, width))
  jac = rng.normal(0, 1, (width, p))                  # z = centre + J x, x in [-1, 1]^p box
  lo, hi = centre - np.abs(jac).sum(axis=1) * 0.01, centre + np.abs(jac).sum(axis=1) * 0.01
  lo, hi = np.minimum(lo, centre - rad), np.maximum(hi, centre + rad)
  t = np.broadcast_to(jac, (40, width, p))
  gamma, beta, eps = rng.uniform(0.5, 2, width), rng.normal(0, 1, width), 1e-5
  y, r, (s_lo, s_hi) = iv.layer_norm(iv.Interval(lo, hi, t.copy(), t.copy()), gamma, beta, eps)
  ln = network_dict.LayerNorm(gamma, beta, eps)
  xs = rng.uniform(-1, 1, (50, 1, p)) * 0.01
  z = centre[None] + np.einsum('wp,sbp->sbw', jac, xs)
  vals = network_apply.layer_norm(z, ln)
  assert np.all(vals >= y.lo) and np.all(vals <= y.hi)
  assert np.all(s_lo >= math.sqrt(eps) * (1 - 1e-15))
  h = 1e-7
  for q in range(p):
    step = jac[:, q] * h
    fd = (network_apply.layer_norm(z + step, ln) - network_apply.layer_norm(z - step, ln)) / (2 * h)
    tol = 1e-5 * (1 + np.abs(fd))
    assert np.all(fd >= y.tlo[None, ..., q] - tol) and np.all(fd <= y.thi[None, ..., q] + tol)


# -- whole networks: values and Jacobians -------------------------------------------------


CONFIGS = [('post', 'gelu', True), ('pre', 'gelu_tanh', True), ('post', 'relu', False),
           ('pre', 'relu', True), (None, 'gelu', False)]


@pytest.mark.parametrize('norm,activation,causal', CONFIGS)
def test_network_interval_contains_samples_and_finite_differences(norm, activation, causal):
  net = random_net(3, norm=norm, activation=activation, causal=causal, blocks=2)
  rng = np.random.default_rng(4)
  lo, hi = boxes(rng, 6, 3, 1, 0.02)
  z, _ = ne.enclose(net, iv.box(lo, hi), None)
  t = rng.random((300, 1, 3, 1))
  x = lo[None] + t * (hi - lo)[None]
  vals = network_apply.apply(net, x.reshape(-1, 3, 1)).reshape(x.shape)
  assert np.all(vals >= z.lo) and np.all(vals <= z.hi)
  h = 1e-6
  pts = x[:20].reshape(-1, 3, 1)
  for q in range(3):
    e = np.zeros((3, 1))
    e[q, 0] = h
    fd = ((network_apply.apply(net, pts + e) - network_apply.apply(net, pts - e)) / (2 * h))
    fd = fd.reshape(20, 6, 3, 1)
    tol = 1e-5 * (1 + np.abs(fd))
    assert np.all(fd >= z.tlo[None, ..., q] - tol) and np.all(fd <= z.thi[None, ..., q] + tol)


def test_causal_token_zero_ignores_later_tokens():
  """Token j of a causal net depends on x_0..x_j only: its interval Jacobian columns for
  later tokens are 0 (up to the subnormal outward steps of 0)."""
  net = random_net(5, norm='post', causal=True)
  lo, hi = boxes(np.random.default_rng(5), 4, 3, 1, 0.1)
  z, _ = ne.enclose(net, iv.box(lo, hi), None)
  for j, k in ((0, 1), (0, 2), (1, 2)):                 # token j, input token k > j
    assert np.all(np.abs(z.tlo[:, j, :, k]) < 1e-290) and np.all(np.abs(z.thi[:, j, :, k]) < 1e-290)
  for j, k in ((1, 0), (1, 1), (2, 0), (2, 2)):           # k <= j: they do depend
    assert np.all(z.thi[:, j, :, k] - z.tlo[:, j, :, k] > 1e-6)
  assert not net.permutation_equivariant


# -- float deviations against emulated float32 runtimes ------------------------------------


def _f32(x):
  return np.asarray(x, np.float32)


def _seq_sum(a, rng):
  """sum over the last axis, one float32 addition at a time, in a random order."""
  acc = np.zeros(a.shape[:-1], np.float32)
  for k in rng.permutation(a.shape[-1]):
    acc = acc + a[..., k]
  return acc


def _ln32(z, ln, kind, rng):
  dt = np.float32
  width = z.shape[-1]
  gamma, beta, eps = _f32(ln.gamma), _f32(ln.beta), dt(ln.eps)
  if kind == 'welford' or kind == 'torch':
    mu = np.zeros(z.shape[:-1], dt)
    m2 = np.zeros(z.shape[:-1], dt)
    for k in range(width):
      delta = z[..., k] - mu
      mu = mu + delta / dt(k + 1)
      m2 = m2 + delta * (z[..., k] - mu)
    var = m2 / dt(width)
  else:
    mu = _seq_sum(z, rng) / dt(width)
    if kind == 'two_pass':
      c = z - mu[..., None]
      var = _seq_sum(c * c, rng) / dt(width)
    else:                                                   # one pass
      var = np.maximum(_seq_sum(z * z, rng) / dt(width) - mu * mu, dt(0))
  s = np.sqrt(var + eps)[..., None]
  mu = mu[..., None]
  if kind == 'two_pass':
    return (z - mu) / s * gamma + beta
  rstd = dt(1) / s
  if kind == 'torch':
    return (z * rstd + (-mu * rstd)) * gamma + beta
  return (z - mu) * rstd * gamma + beta


def _ulps(x, k):
  """x moved by k[...] ulps (float32)."""
  out = np.array(x, np.float32)
  for step in range(int(np.abs(k).max(initial=0))):
    move = np.abs(k) > step
    out = np.where(move, np.nextafter(out, np.where(k > 0, np.inf, -np.inf).astype(np.float32)),
                   out)
  return out


_ERF64 = np.vectorize(math.erf, otypes=[np.float64])
_ERFC64 = np.vectorize(math.erfc, otypes=[np.float64])


def _gelu32(x, form, rng, variant=0):
  dt = np.float32
  if form == 'gelu':
    t = x * dt(1 / math.sqrt(2)) if variant == 0 else x / dt(math.sqrt(2))
    k = rng.integers(-rounding.ERF_ULPS, rounding.ERF_ULPS + 1, x.shape)
    if variant == 2:                                      # x Phi(x) through erfc
      return x * (dt(0.5) * _ulps(_f32(_ERFC64(-t.astype(np.float64))), k))
    e = _ulps(_f32(_ERF64(t.astype(np.float64))), k)
    return dt(0.5) * x * (dt(1) + e)
  inner = dt(K_TANH) * (x + dt(0.044715) * (x * x * x))
  k = rng.integers(-rounding.TANH_ULPS, rounding.TANH_ULPS + 1, x.shape)
  th = _ulps(_f32(np.tanh(inner.astype(np.float64))), k)
  return x * (dt(0.5) * (dt(1) + th)) if variant else dt(0.5) * x * (dt(1) + th)


def _ln_exact(z, ln):
  z = np.asarray(z, np.longdouble)
  mu = z.mean(axis=-1, keepdims=True)
  c = z - mu
  var = (c * c).mean(axis=-1, keepdims=True)
  return c / np.sqrt(var + np.longdouble(ln.eps)) * ln.gamma + ln.beta


@pytest.mark.parametrize('kind', ['two_pass', 'one_pass', 'welford', 'torch'])
@pytest.mark.parametrize('offset', [0.0, 30.0])
def test_layer_norm_deviation_covers_float32_variants(kind, offset):
  """The float32 LayerNorm at a perturbed input w (|w - z| <= D_z) is within D of the exact
  LN(z); offset 30 makes the one-pass variance cancel."""
  rng = np.random.default_rng(6)
  width = 6
  fm = float_deviation.Model(F32)
  centre = offset + rng.normal(0, 1, (30, 1, width))
  rad = rng.exponential(0.01, (30, 1, width))
  lo, hi = centre - rad, centre + rad
  d_z = np.full(lo.shape, 1e-6) + 2 * fm.u * np.maximum(np.abs(lo), np.abs(hi))
  ln = network_apply.cast(network_dict.check(
      {'blocks': [{'W_1': np.ones((1, width)), 'b_1': [0], 'W_2': np.ones((width, 1)),
                   'b_2': np.zeros(width), 'ln_ff': {'gamma': rng.uniform(0.5, 2, width),
                                                     'beta': rng.normal(0, 1, width),
                                                     'eps': 1e-5}, 'norm': 'post'}]},
      d=1), np.float32).blocks[0].ln_ff
  bound = float_deviation.layer_norm(fm, ln, iv.Interval(lo, hi), d_z)
  assert np.all(np.isfinite(bound))
  worst = 0.0
  for _ in range(20):
    z = lo + rng.random(lo.shape) * (hi - lo)
    w = _f32(z + rng.uniform(-0.5, 0.5, z.shape) * d_z)
    assert np.all(np.abs(w - z) <= d_z)
    err = np.abs(_ln32(w, ln, kind, rng).astype(np.longdouble) - _ln_exact(z, ln))
    assert np.all(err <= bound)
    worst = max(worst, float((err / bound).max()))
  assert worst > 1e-4          # the bound is not vacuous: within 10^4 of what happens


@pytest.mark.parametrize('form,variant', [('gelu', 0), ('gelu', 1), ('gelu', 2),
                                          ('gelu_tanh', 0), ('gelu_tanh', 1)])
def test_gelu_deviation_covers_float32_with_perturbed_ulps(form, variant):
  rng = np.random.default_rng(7)
  fm = float_deviation.Model(F32)
  x = np.concatenate([rng.normal(0, 3, 4000), rng.uniform(-12, 12, 2000)])
  d_x = np.abs(x) * rng.uniform(0, 1e-6, x.shape) + 1e-9
  w = _f32(x + rng.uniform(-0.4, 0.4, x.shape) * d_x)
  ok = np.abs(w - x) <= d_x
  bound = float_deviation.gelu(fm, form, d_x, np.abs(x))
  with mpmath.workdps(30):
    ref = np.array([float(_mp_gelu(xi, form)) for xi in x])   # float64 of the 30-digit value
  err = np.abs(_gelu32(w, form, rng, variant).astype(np.float64) - ref)
  slack = np.abs(ref) * 2.0 ** -52                            # the reference's own rounding
  assert np.all((err <= bound + slack) | ~ok) and ok.mean() > 0.9
  assert (err / bound).max() > 0.01


def _dot32(a, w, b, rng, extra=()):
  """fl32(a @ w^T + b + sum(extra)): float32 products, the bias and the extra terms added
  among them, one addition at a time in a random order. a [..., K], w [R, K]."""
  terms = [(a[..., None, :] * _f32(w)).astype(np.float32)]
  if b is not None:
    terms.append(np.broadcast_to(_f32(b), terms[0].shape[:-1])[..., None])
  for e in extra:
    terms.append(np.broadcast_to(_f32(e), terms[0].shape[:-1])[..., None])
  return _seq_sum(np.concatenate([np.broadcast_to(t, terms[0].shape[:-1] + t.shape[-1:])
                                  for t in terms], axis=-1), rng)


def emulate32(net, x, rng, ln_kind, variant):
  """fl32(g)(x) (the net already cast to float32), every sum in a random order."""
  dt = np.float32
  z = _dot32(_f32(x), net.embed, net.embed_bias, rng)
  if net.positional is not None:
    z = z + _f32(net.positional)

  def norm(z, ln):
    return z if ln is None else _ln32(z, ln, ln_kind, rng)

  def attn(a, z, res):
    n = z.shape[-2]
    outs = []
    for i in range(a.heads):
      q = _dot32(z, a.w_q[i], a.b_q[i], rng)
      k = _dot32(z, a.w_k[i], None if a.b_k is None else a.b_k[i], rng)
      v = _dot32(z, a.w_v[i], None if a.b_v is None else a.b_v[i], rng)
      where = rng.integers(3) if a.scale != 1.0 else -1  # after, on q, sqrt on q and k
      if where == 1:
        q = q * dt(a.scale)
      elif where == 2:
        t = dt(math.sqrt(a.scale))
        q, k = q * t, k * t
      s = _seq_sum((q[..., :, None, :] * k[..., None, :, :]).astype(dt), rng)
      if where == 0:
        s = s * dt(a.scale)
      if a.causal:
        s = np.where(np.triu(np.ones((n, n), bool), 1), dt(-np.inf), s)
      e = np.exp(s - s.max(axis=-1, keepdims=True))
      wgt = e / _seq_sum(e, rng)[..., None]
      outs.append(_seq_sum((wgt[..., :, :, None] * v[..., None, :, :]).astype(dt)
                           .swapaxes(-1, -2), rng))
    cat = np.concatenate(outs, axis=-1)
    w_o = np.concatenate(list(a.w_o), axis=-1)
    return _dot32(cat, w_o, a.b_o, rng, extra=(res,))

  def ffn(f, z, res):
    pre = _dot32(z, f.w_1, f.b_1, rng)
    act = np.maximum(pre, dt(0)) if f.activation == 'relu' else _gelu32(pre, f.activation, rng,
                                                                        variant)
    return _dot32(act, f.w_2, f.b_2, rng, extra=(res,))

  for b in net.blocks:
    for part, ln, fn in ((b.attention, b.ln_attn, attn), (b.ff, b.ln_ff, ffn)):
      if part is None:
        continue
      if b.norm == 'pre':
        z = fn(part, norm(z, ln), z)
      else:
        z = norm(fn(part, z, z), ln)
  z = norm(z, net.final_ln)
  return _dot32(z, net.readout, net.readout_bias, rng)


@pytest.mark.parametrize('norm,activation,causal,ln_kind,variant', [
    ('post', 'gelu', True, 'two_pass', 0), ('post', 'gelu', False, 'torch', 2),
    ('pre', 'gelu_tanh', True, 'one_pass', 1), ('pre', 'relu', True, 'welford', 0),
    (None, 'gelu_tanh', True, 'two_pass', 0)])
def test_network_deviation_covers_emulated_float32(norm, activation, causal, ln_kind, variant):
  net = network_apply.cast(random_net(8, norm=norm, activation=activation, causal=causal,
                                     scale=0.4), np.float32)
  rng = np.random.default_rng(9)
  lo, hi = boxes(rng, 8, 3, 1, 1e-3)
  _, dev = ne.enclose(net, iv.box(lo, hi), F32)
  assert np.all(np.isfinite(dev))
  worst = 0.0
  for _ in range(6):
    x = lo + rng.random(lo.shape) * (hi - lo)
    got = emulate32(net, x, rng, ln_kind, variant).astype(np.float64)
    ref = network_apply.apply(net, x)
    err = np.abs(got - ref)
    assert np.all(err <= dev)
    worst = max(worst, float((err / dev).max()))
  assert worst > 1e-6


# -- the line's assumptions; bad input -----------------------------------------------


def test_assumptions_only_for_ops_present():
  plain = random_net(12, norm=None, activation='relu', causal=False, final_ln=False)
  plain = network_dict.check(dict(plain.as_dict(), blocks=[
      {k: v for k, v in b.items() if k != 'scale'} for b in plain.as_dict()['blocks']]),
      d=1, n=3)
  assert float_deviation.assumptions(plain, F32) == []
  exact = float_deviation.assumptions(random_net(12), None)
  assert len(exact) == 1 and exact[0].startswith('certifier: GELU bounds from math.erfc')
  full = float_deviation.assumptions(random_net(12), F32)
  assert rounding.SQRT_DIV_ASSUMPTION in full and rounding.ERF_ASSUMPTION in full


def test_bad_input_through_certify_network_one_line():
  g = random_net(13).as_dict()
  g['blocks'][0]['activation'] = 'silu'
  with pytest.raises(ValueError, match=r"blocks\[0\]\.activation is 'silu'") as e:
    nc.certify_network('token_times_mean', g, d=1, n=3)
  assert '\n' not in str(e.value)


def test_gelu_evaluation_check_passes_and_catches_a_bad_erfc(monkeypatch):
  assert iv.check_gelu_evaluation(points=400, seed=5) < 0.5
  good = iv.gelu_value
  monkeypatch.setattr(iv, 'gelu_value', lambda x, form: good(x, form) * (1 + 2.0 ** -30))
  with pytest.raises(ValueError, match='GELU evaluation .* off by') as e:
    iv.check_gelu_evaluation()
  assert '\n' not in str(e.value)
