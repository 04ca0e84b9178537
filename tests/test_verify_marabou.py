"""Marabou's second opinion on a realized g over one box (verify.marabou).

The boxes are checked against hand-worked fractions; the Marabou run (slow; skipped
when maraboupy is not installed: pip install "transformer_ua[verify]") must prove both
ends of the project's enclosure (UNSAT), reach values within tau of the extremes (SAT)
at points that the project and the mpmath oracle both place inside the enclosure.
"""

from fractions import Fraction

import numpy as np
import pytest

from transformer_ua.verify import marabou


def test_cube_and_window_boxes_by_hand():
  cells = np.asarray([[0], [1]])
  lo, hi = marabou.cube_box(cells, 2, Fraction(1, 64))
  assert (lo, hi) == ([[Fraction(1, 128)], [Fraction(65, 128)]],
                      [[Fraction(63, 128)], [Fraction(127, 128)]])
  lo, hi = marabou.window_box(cells, 2, Fraction(1, 64))
  assert (lo[0], hi[0]) == ([Fraction(63, 128)], [Fraction(65, 128)])
  assert (lo[1], hi[1]) == ([Fraction(65, 128)], [Fraction(127, 128)])


def test_float_box_lies_inside_the_exact_box():
  lo, hi = marabou._float_inside([[Fraction(1, 3)]], [[Fraction(2, 3)]])  # pylint: disable=protected-access
  assert Fraction(float(lo[0, 0])) >= Fraction(1, 3) and Fraction(float(hi[0, 0])) <= Fraction(2, 3)
  assert hi[0, 0] - lo[0, 0] > 1 / 3 - 1e-15


@pytest.mark.slow
def test_marabou_agrees_with_the_certified_enclosure(tmp_path):
  pytest.importorskip('maraboupy')
  pytest.importorskip('onnxruntime')
  out = marabou.run(taus=(1e-6,), timeout=300, export_path=str(tmp_path / 'g.onnx'))
  # what the parser cannot read of export_onnx's graph, operator by operator
  assert [(r['parsed'], r['operator'].split()[0]) for r in out['parser']] == [
      (False, 'Scan'), (False, 'Reshape'), (False, 'Transpose')]
  check = out['checks'][0]
  assert check['same_function'] == 0.0
  # cube (0, 1) of token_times_mean at N = 2: g_bar = (1/4 * 1/2, 3/4 * 1/2)
  assert out['config']['g_bar_at_cells'] == [[0.125], [0.375]]
  for (lo, hi), want in zip(np.asarray(check['enclosure']).reshape(-1, 2), (0.125, 0.375)):
    assert lo <= want <= hi and hi - lo < 1e-12
  statuses = [(q['expected'], q['status']) for q in check['queries']]
  assert statuses == [('unsat', 'unsat'), ('sat', 'sat')] * 4, statuses
  for q in check['queries']:
    if q['status'] == 'sat':
      assert q['point_in_enclosure']
      assert abs(q['marabou_value'] - q['oracle_value']) <= 1e-6
  assert out['agrees']


def test_vnnlib_property_by_hand():
  text = marabou.vnnlib_property([[0.25], [0.5]], [[0.375], [0.75]], [[1.0], [-2.0]],
                                 [[1.5], [2.0]])
  assert text.splitlines() == [
      '(declare-const X_0 Real)', '(declare-const X_1 Real)',
      '(declare-const Y_0 Real)', '(declare-const Y_1 Real)',
      '(assert (>= X_0 0.25))', '(assert (<= X_0 0.375))',
      '(assert (>= X_1 0.5))', '(assert (<= X_1 0.75))',
      '(assert (or (and (>= Y_0 1.5)) (and (<= Y_0 1.0)) (and (>= Y_1 2.0)) '
      '(and (<= Y_1 -2.0))))']


@pytest.mark.slow
def test_marabou_proves_the_certified_bound_on_the_flat_file(tmp_path):
  """The flat file of a certified Theorem 2 network: the property its certificate implies
  is UNSAT, and its SAT companion (g reaches g_bar) is SAT."""
  pytest.importorskip('maraboupy')
  from transformer_ua import yun  # pylint: disable=import-outside-toplevel
  from transformer_ua.yun.realization import plan  # pylint: disable=import-outside-toplevel
  net = yun.build_approximator('token_times_mean', d=1, n=2, resolution=2, ties='complete')
  margin = Fraction(1, 64)
  p = plan.plan_realization(net, tolerance=1e-6, margin=float(margin))
  g = net.realize(lam=p.lam, epsilon=p.epsilon, dtype='exact', clamp=True)
  cert = yun.certify_lp(net, g, 2.0, margin=margin)
  out = marabou.check_flat(net, g, cert, str(tmp_path))
  assert (out['unsat']['status'], out['sat']['status']) == ('unsat', 'sat')
  assert out['agrees'] and out['g_bar'] == [[0.125], [0.375]]
  assert sorted(q.name for q in tmp_path.iterdir()) == ['g_flat.onnx', 'property.vnnlib',
                                                        'sat.vnnlib']
