"""The shallow-wide one-attention-layer network (yun.single_attention.one_layer_wide, exact.wide_ball):
sizes in closed form and by hand, the independent mpmath oracle on cube interiors and
in the ramp windows, bisection against a full scan, the whole-domain certificate, and
one-line refusals."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from transformer_ua import oracle
from transformer_ua.exact import ball, wide_ball
from transformer_ua.yun.bounds import certificate
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.single_attention import one_layer_wide
from transformer_ua.yun.variants import registry
from transformer_ua.yun.variants.one_layer_wide import OneLayerWide
from transformer_ua.yun.variants.positional_wide import PositionalWide

from one_layer_fixtures import token_times_mean, token_times_mean_d2

CERT_MARGIN = Fraction(1, 64)


@pytest.fixture(scope='module')
def wide():
  return one_layer_wide.build('token_times_mean', OneLayerWide(Grid(1, 3, 4)))


@pytest.fixture(scope='module')
def g(wide):
  return wide.realize(margin=CERT_MARGIN)


@pytest.fixture(scope='module')
def cert(wide, g):
  return certificate.certify_lp(wide, g, p=2, margin=CERT_MARGIN)


# -- sizes ------------------------------------------------------------------------------


def test_sizes_equal_the_closed_form_and_a_hand_count(wide, g):
  # d=1, n=3, N=4: M = 4 cells, P = M C(M + 1, 2) = 4 * 10 = 40 ids.
  # quantization block: 1 head off (W_Q, b_Q, W_K, W_V, W_O: 1+1+1+1+1 = 5), width
  #   2N = 8: W_1 8, b_1 8, W_2 8, b_2 1 -> 25; value block: head 5, width 4P = 160:
  #   160 + 160 + 160 + 1 = 481; clamp block: 2 heads off (10), width 4: 4+4+4+1 = 13.
  hand = (5 + 25) + (5 + 481) + (10 + 13)
  assert hand == 539
  want = {'blocks': 3, 'attention_layers': 1, 'max_width': 160, 'params': hand, 'ids': 40}
  assert one_layer_wide.predicted_size(1, 3, 4) == want
  assert g.size() == want
  assert g.depth() == 3 and g.layer_counts() == {
      'quantization': {'block': 1}, 'contextual+value': {'block': 1}, 'clamp': {'block': 1}}
  assert wide.realize(clamp=False).size() == {**want, 'blocks': 2, 'params': 539 - 23}


def test_sizes_d2_by_hand():
  # d=2, n=2, N=2: M = 4, P = 4 C(4, 1) = 16. quantization width 2Nd = 8: head 9,
  # W_1 16, b_1 8, W_2 16, b_2 2 -> 51; value width 64: head 9, 128 + 64 + 128 + 2 = 322;
  # clamp: one block for 2 coordinates: 2 heads 18, W_1 8, b_1 4, W_2 8, b_2 2 = 40.
  want = {'blocks': 3, 'attention_layers': 1, 'max_width': 64, 'params': 51 + 331 + 40,
          'ids': 16}
  assert one_layer_wide.predicted_size(2, 2, 2) == want
  net = one_layer_wide.build('token_times_mean', OneLayerWide(Grid(2, 2, 2)))
  g2 = net.realize()
  assert g2.size() == want
  # and it is certified on every cube interior (C(4 + 1, 2) = 10 classes)
  inter = g2.certify_interiors()
  assert inter['certified'] and inter['cubes'] == 10 and inter['max_abs_error'] < 1e-12


def test_depth_is_constant_and_width_grows():
  sizes = [one_layer_wide.predicted_size(1, 3, N) for N in (4, 8, 16, 40)]
  assert {s['blocks'] for s in sizes} == {3}
  assert [s['max_width'] for s in sizes] == [4 * N * math.comb(N + 1, 2) for N in (4, 8, 16, 40)]


# -- the independent oracle --------------------------------------------------------------


def _interior_points(rng, N, count, margin):
  k = rng.integers(0, N, size=(count, 3, 1))
  return k, (k + float(margin) + (1 - 2 * float(margin)) * rng.random(k.shape)) / N


def test_oracle_equals_g_bar_on_cube_interiors(wide, g):
  rng = np.random.default_rng(0)
  k, x = _interior_points(rng, 4, 24, CERT_MARGIN)
  gbar = token_times_mean((k + 0.5) / 4)
  assert np.array_equal(wide.apply(x), gbar)
  for b in range(len(x)):
    got = np.asarray([[float(v) for v in row] for row in oracle.MpNetwork(g.segments, g.exact_params(), g.positional, 256, grouped=False)(x[b])])
    assert np.max(np.abs(got - gbar[b])) < 1e-15


def test_oracle_stays_within_the_certificate_in_the_windows(wide, g, cert):
  rng = np.random.default_rng(1)
  x = rng.random((24, 3, 1))
  # one entry per sample inside a quantization ramp [k/N - eps, k/N] or the margin
  eps = float(g.quantization_epsilon)
  j = rng.integers(0, 3, 24)
  edge = rng.integers(1, 4, 24)
  x[np.arange(12), j[:12], 0] = (edge[:12] - rng.random(12) * eps * 4) / 4   # in a ramp
  x[np.arange(12, 24), j[12:], 0] = (edge[12:] + (2 * rng.random(12) - 1)
                                     * float(CERT_MARGIN)) / 4
  gbar = token_times_mean((np.floor(x * 4) + 0.5) / 4)
  lo, hi = (float(v[0]) for v in wide.output_range())
  worst = 0.0
  for b in range(len(x)):
    got = np.asarray([[float(v) for v in row] for row in oracle.MpNetwork(g.segments, g.exact_params(), g.positional, 256, grouped=False)(x[b])])
    assert np.all(got >= lo - 1e-15) and np.all(got <= hi + 1e-15)   # the clamp
    worst = max(worst, float(np.max(np.abs(got - gbar[b]))))
  assert worst <= cert.window_sup


def test_certified_enclosure_contains_the_oracle(g):
  rng = np.random.default_rng(2)
  x = rng.random((6, 3, 1))
  mid, rad = g.apply_certified(x)
  for b in range(len(x)):
    got = np.asarray([[float(v) for v in row] for row in oracle.MpNetwork(g.segments, g.exact_params(), g.positional, 256, grouped=False)(x[b])])
    assert np.all(np.abs(got - mid[b]) <= rad[b] + 1e-15)


def test_float64_network_reproduces_g_bar_at_small_n(wide):
  gf = wide.realize(dtype='float64')
  rng = np.random.default_rng(3)
  k, x = _interior_points(rng, 4, 128, Fraction(1, 4))
  assert np.max(np.abs(gf.apply(x) - token_times_mean((k + 0.5) / 4))) < 1e-8


# -- bisection against a full scan ---------------------------------------------------------


def _full_scan(ff, lo, hi):
  """(on, undetermined) unit indices, every unit's pre-activation at the box's two
  ends in exact rationals (d = 1: the box is an interval of z)."""
  w1, b1, w2 = (np.asarray(ff[k])[0] for k in ('W_1', 'b_1', 'W_2'))
  on, mid = set(), set()
  for s in range(w1.shape[0]):
    if not any(v != 0 for v in w2[:, s]):
      continue
    ends = [Fraction(w1[s, 0]) * v + Fraction(b1[s]) for v in (lo, hi)]
    if min(ends) > 0:
      on.add(s)
    elif max(ends) >= 0:
      mid.add(s)
  return on, mid


def _dyadic(v, bits=40):
  return Fraction(round(v * 2 ** bits), 2 ** bits)


@pytest.mark.parametrize('layer', [0, 1])
def test_bisection_finds_the_units_of_a_full_scan(g, layer):
  ff = {k: v for k, v in g.exact[f'segment_{layer}']['feedforward'].items()}
  wf = wide_ball.WideFeedForward({k: np.asarray(v)[0] for k, v in ff.items()})
  rng = np.random.default_rng(4)
  # layer 0 reads x in [0, 1); layer 1 reads t = 4 z, the ids in [0, 4)
  edges = [Fraction(k, 4) for k in range(5)] if layer == 0 else \
      [e / 4 for e in g.source.edges]
  boxes = []
  for e in edges:                    # points and narrow boxes at and around every edge
    for dv in (0, Fraction(1, 2 ** 30), -Fraction(1, 2 ** 30)):
      boxes.append((e + dv, e + dv))
    boxes.append((e - Fraction(1, 2 ** 20), e + Fraction(1, 2 ** 20)))
  for _ in range(40):                # random points and boxes of every size
    a, w = rng.random(), rng.random() * 10.0 ** -int(rng.integers(0, 8))
    boxes.append((_dyadic(a), _dyadic(a + w)))
  boxes.append((Fraction(0), Fraction(1)))
  tested_mid = 0
  for lo, hi in boxes:
    with ball.precision(128):
      x = [ball.interval(lo, hi)]
      got = wf.classify(x)
    assert got == _full_scan(ff, lo, hi)
    tested_mid += bool(got[1])
  assert tested_mid >= 5       # the undetermined case was exercised


def test_cube_interiors_touch_no_kink(g):
  """Every class's box passes both wide layers with no kink inside (O(log width)); the
  clamp (width 4) may meet its kink where g_bar attains the clamp's bound exactly."""
  bn = g.ball_network(g.bits())
  N = 4
  with ball.precision(g.bits()):
    for cls in itertools.combinations_with_replacement(range(N), 3):
      z = [[ball.interval(Fraction(c, N) + CERT_MARGIN / N,
                          Fraction(c + 1, N) - CERT_MARGIN / N)] for c in cls]
      rep = list(range(3))
      for stage in bn.stages:
        rep = ball._equal_tokens(z, rep)  # pylint: disable=protected-access
        if isinstance(stage, wide_ball.WideFeedForward) and stage.width > 4:
          for x in z:
            assert not stage.classify(x)[1]
        z = stage(z, rep)


def test_pl_range_on_a_straddling_box_is_exact():
  # one coordinate: z + 2 ReLU(z - 1/2) - ReLU(z - 3/4), on [0, 1]: kinks 1/2, 3/4;
  # values 0, 1/2, 5/4, 7/4 at 0, 1/2, 3/4, 1 -> range [0, 7/4]; on [5/8, 7/8]:
  # 5/8 + 1/4 = 7/8, 3/4 + 1/2 = 5/4, 7/8 + 3/4 - 1/8 = 3/2 -> [7/8, 3/2]
  ff = {'W_1': np.asarray([[1], [1]], object),
        'b_1': np.asarray([Fraction(-1, 2), Fraction(-3, 4)], object),
        'W_2': np.asarray([[2, -1]], object), 'b_2': np.asarray([0], object)}
  wf = wide_ball.WideFeedForward(ff)
  with ball.precision(64):
    for (lo, hi), (want_lo, want_hi) in (((0, 1), (0, Fraction(7, 4))),
                                         ((Fraction(5, 8), Fraction(7, 8)),
                                          (Fraction(7, 8), Fraction(3, 2)))):
      out = wf.token([ball.interval(Fraction(lo), Fraction(hi))])[0]
      assert out.contains(ball.interval(want_lo, want_hi))
      # tight: only the ball's 30-bit radius widens it
      got_lo, got_hi = (Fraction(str(v)) for v in wide_ball.exact_ends(out))
      assert want_lo - got_lo < Fraction(1, 2 ** 25) and got_hi - want_hi < Fraction(1, 2 ** 25)


# -- the certificate -----------------------------------------------------------------------


def test_certify_lp_holds_for_the_wide_network(wide, g, cert):
  assert cert.clamp and cert.terms['fbar_gbar'] == 0.0
  # the Lipschitz fallback: L (delta / 2) (nd nd / (nd + p))^(1/2) with L = 2
  # (token_times_mean), N = 4, nd = 3; the term itself is d_2(f, f_bar) exactly, by hand
  assert cert.details['f_fbar']['parts']['lipschitz'] == pytest.approx(
      0.25 * math.sqrt(9 / 5), rel=1e-12)
  assert cert.terms['f_fbar'] == pytest.approx(token_times_mean_d2(3, 4), rel=1e-12)
  assert cert.interior_sup < 1e-12
  k = np.asarray(list(itertools.product(range(4), repeat=3)))[:, :, None]
  vals = token_times_mean((k + 0.5) / 4)
  assert cert.window_sup <= (vals.max() - vals.min()) * (1 + 1e-8)
  # term 3 by hand: windows 1 - (1 - 2/64)^3 at sup (hi - lo) per entry, 3 entries
  win = 1 - (1 - 2 / 64) ** 3
  assert cert.terms['gbar_g'] == pytest.approx(
      math.sqrt(3 * (vals.max() - vals.min()) ** 2 * win + 3 * cert.interior_sup ** 2),
      rel=1e-6)
  assert cert.holds(0.75)
  inter = g.certify_interiors(CERT_MARGIN)
  assert inter['certified'] and inter['cubes'] == 20


def test_certificate_dominates_a_monte_carlo_by_the_oracle(g, cert):
  rng = np.random.default_rng(5)
  x = rng.random((60, 3, 1))
  x[:30, 0, 0] = (rng.integers(1, 4, 30) + (2 * rng.random(30) - 1) * float(CERT_MARGIN)) / 4
  e = []
  for b in range(len(x)):
    got = np.asarray([[float(v) for v in row] for row in oracle.MpNetwork(g.segments, g.exact_params(), g.positional, 256, grouped=False)(x[b])])
    e.append(np.sum((got - token_times_mean(x[b][None])[0]) ** 2))
  assert math.sqrt(np.mean(e)) <= cert.total


@pytest.mark.slow
def test_certify_lp_at_n16():
  net = one_layer_wide.build('token_times_mean', OneLayerWide(Grid(1, 3, 16)))
  g16 = net.realize(margin=CERT_MARGIN)
  c = certificate.certify_lp(net, g16, p=2, margin=CERT_MARGIN)
  assert c.interior_sup < 1e-12 and c.terms['fbar_gbar'] == 0.0
  assert g16.size() == one_layer_wide.predicted_size(1, 3, 16)
  assert c.total < 0.6


# -- refusals ----------------------------------------------------------------------------------


def test_refusals(wide, g):
  with pytest.raises(ValueError, match="allowed: 'exact', 'float64'"):
    wide.realize(dtype='float32')
  with pytest.raises(ValueError, match='clamp must be True or False'):
    wide.realize(clamp='yes')
  with pytest.raises(ValueError, match='epsilon must be a positive finite number'):
    wide.realize(epsilon=-1)
  with pytest.raises(ValueError, match=r'margin must be in \(0, 1/2\)'):
    wide.realize(margin=Fraction(3, 4))
  with pytest.raises(ValueError, match="dtype='exact'"):
    wide.realize(dtype='float64').certify_interiors()
  with pytest.raises(ValueError, match=r'margin must be in \[0, 1/2\)'):
    g.certify_interiors(Fraction(1, 2))
  with pytest.raises(ValueError, match='below the'):
    g.certify_interiors(CERT_MARGIN, 20, check_plan=True)
  with pytest.raises(ValueError):
    g.apply_certified(np.full((1, 3, 1), 1.5))
  with pytest.raises(ValueError):
    g.apply_certified(np.zeros((1, 2, 1)))
  with pytest.raises(ValueError, match='resolution'):
    one_layer_wide.build('token_times_mean', OneLayerWide(Grid(1, 3, 1)))
  with pytest.raises(ValueError, match='clamp must be True or False'):
    one_layer_wide.predicted_size(1, 3, 4, clamp=None)
  for err in (pytest.raises(ValueError),):
    with err as info:
      one_layer_wide.predicted_size(0, 3, 4)
    assert '\n' not in str(info.value)


# -- ONNX --------------------------------------------------------------------------------------


def test_onnx_export_runs_in_onnxruntime(wide, g, tmp_path):
  ort = pytest.importorskip('onnxruntime')
  from transformer_ua.networks.export_onnx import export_onnx  # pylint: disable=import-outside-toplevel
  path = export_onnx(g, tmp_path / 'wide.onnx')
  k, x = _interior_points(np.random.default_rng(6), 4, 256, Fraction(1, 4))
  session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
  y = session.run(['Y'], {'X': x})[0]
  # the float64 graph of the exact rationals: g_bar up to float64 cancellation
  assert np.max(np.abs(y - token_times_mean((k + 0.5) / 4))) < 1e-8
  assert np.max(np.abs(y - wide.realize(dtype='float64').apply(x))) < 1e-8


# -- Theorem 3 (positional) ----------------------------------------------------------------


def _prefix_mean(x):
  """f(X)_j = mean_{k <= j} X_k: the built-in target, written out here."""
  return np.cumsum(x, axis=1) / np.arange(1, x.shape[1] + 1)[:, None]


@pytest.fixture(scope='module')
def thm3():
  net = one_layer_wide.build('prefix_mean', PositionalWide(Grid(1, 2, 3)))
  return net, net.realize(margin=CERT_MARGIN)


def test_positional_sizes_by_hand(thm3):
  # d=1, n=2, N=3: M = 3, P = n M^n = 18 ids. E: 2. quantization: the last (only)
  # coordinate spans [0, n = 2): 2N - 1 = 5 steps (10 ReLUs) + 2 = width 12 = 2N(d-1+n):
  # head 5, W_1 12, b_1 12, W_2 12, b_2 1 -> 42; value width 72: head 5, 72 * 3 + 1 = 217;
  # clamp 23.
  net, g = thm3
  want = {'blocks': 3, 'attention_layers': 1, 'max_width': 72,
          'params': 2 + 42 + 222 + 23, 'ids': 18}
  assert one_layer_wide.predicted_size(1, 2, 3, positional=True) == want
  assert g.size() == want and net.num_ids == 18 and len(net.base.index) == 18


def test_positional_oracle_equals_f_bar_on_interiors(thm3):
  net, g = thm3
  rng = np.random.default_rng(7)
  k = rng.integers(0, 3, size=(12, 2, 1))
  x = (k + 0.25 + 0.5 * rng.random(k.shape)) / 3
  want = _prefix_mean((k + 0.5) / 3)
  assert np.array_equal(net.apply(x), want)
  for b in range(len(x)):
    got = np.asarray([[float(v) for v in row] for row in oracle.MpNetwork(g.segments, g.exact_params(), g.positional, 256, grouped=False)(x[b])])
    assert np.max(np.abs(got - want[b])) < 1e-15


def test_positional_certify_lp_holds(thm3):
  net, g = thm3
  c = certificate.certify_lp(net, g, p=2, margin=CERT_MARGIN)
  assert c.terms['fbar_gbar'] == 0.0 and c.interior_sup < 1e-12
  assert c.details['interior']['cubes'] == 9          # every cube: N^(dn) = 9
  k = np.asarray(list(itertools.product(range(3), repeat=2)))[:, :, None]
  vals = _prefix_mean((k + 0.5) / 3)
  assert c.window_sup <= (vals.max() - vals.min()) * (1 + 1e-8)
  assert c.total < 0.45


def test_positional_refusals():
  with pytest.raises(ValueError, match='positional must be True or False'):
    registry.choose(1, 2, 3, positional='yes')
  with pytest.raises(ValueError, match='uses the planned lam'):
    one_layer_wide.build('prefix_mean', PositionalWide(Grid(1, 2, 3)), lam=1)
  with pytest.raises(ValueError, match='not permutation equivariant'):
    one_layer_wide.build('prefix_mean', OneLayerWide(Grid(1, 2, 3)))
  with pytest.raises(ValueError, match='positional must be True or False'):
    one_layer_wide.predicted_size(1, 2, 3, positional=1)


def test_positional_onnx_export_carries_e(thm3, tmp_path):
  ort = pytest.importorskip('onnxruntime')
  from transformer_ua.networks.export_onnx import export_onnx  # pylint: disable=import-outside-toplevel
  net, g = thm3
  path = export_onnx(g, tmp_path / 'wide3.onnx')
  rng = np.random.default_rng(8)
  k = rng.integers(0, 3, size=(64, 2, 1))
  x = (k + 0.25 + 0.5 * rng.random(k.shape)) / 3
  y = ort.InferenceSession(str(path), providers=['CPUExecutionProvider']).run(['Y'], {'X': x})[0]
  assert np.max(np.abs(y - _prefix_mean((k + 0.5) / 3))) < 1e-8
  assert net.positional and g.positional


def test_interiors_on_an_executor_equal_in_process():
  """The chunks of certify_interiors on a generic executor (each chunk carries the
  shipment) give the in-process certificate: the same bound, worst cube and bits."""
  import concurrent.futures as cf  # pylint: disable=import-outside-toplevel
  net = one_layer_wide.build("token_times_mean", OneLayerWide(Grid(1, 3, 5)))
  g = net.realize(dtype='exact', margin=Fraction(1, 8))
  here = g.certify_interiors(Fraction(1, 8), workers=1)
  with cf.ThreadPoolExecutor(2) as ex:
    there = g.certify_interiors(Fraction(1, 8), executor=ex)
  assert (there['max_abs_error'], there['worst_cube'], there['bits']) == (
      here['max_abs_error'], here['worst_cube'], here['bits'])
  assert here['max_abs_error'] < 1e-12


def test_interiors_certified_at_the_smallest_margin():
  # margin 2^-28 (certificate.MIN_MARGIN): the quantization ramps lie within 2^-29 delta
  # of the cube boxes, closer than a box held as an arb union (30-bit radius) reaches
  net = one_layer_wide.build('token_times_mean', OneLayerWide(Grid(1, 2, 24)))
  m = certificate.MIN_MARGIN
  g24 = net.realize(margin=m)
  inter = g24.certify_interiors(m)
  assert inter['cubes'] == math.comb(25, 2)
  assert inter['certified'] and inter['max_abs_error'] < 1e-12
