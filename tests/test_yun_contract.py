"""Every registered variant answers one contract: its approximator plans through
``yun.plan_realization``, realizes through one ``realize`` signature, and its g answers
the realization contract (exact_params, apply_certified, certify_interiors, ONNX)."""

from fractions import Fraction

import numpy as np
import onnxruntime as ort
import pytest

from transformer_ua import yun
from transformer_ua.networks.export_onnx import export_onnx
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.variants import registry

MARGIN = Fraction(1, 8)


@pytest.mark.parametrize('name', sorted(registry.VARIANTS))
def test_every_variant_answers_the_contract(name, tmp_path):
  v = registry.VARIANTS[name](Grid(1, 2, 2))
  net = v.build('token_times_mean' if v.equivariant else 'prefix_mean')
  assert net.variant is v
  plan = yun.plan_realization(net, tolerance=1e-6, margin=float(MARGIN))
  g = net.realize(margin=MARGIN, tolerance=1e-6, dtype='exact', clamp=True)
  assert g.lam == plan.lam and plan.bits > 0 and plan.describe().startswith('plan: lam=2^')
  # the size said before building is the network built
  size = v.size()
  assert (size['blocks'], size['params']) == (g.depth(), g.num_params())
  # the realization contract
  assert set(g.exact_params()) >= {'segment_0'}
  k = np.random.default_rng(0).integers(0, 2, size=(6, 2, 1))
  x = (k + 0.25 + 0.5 * np.random.default_rng(1).random(k.shape)) / 2   # cube interiors
  mid, rad = g.apply_certified(x)
  assert np.all(np.abs(np.asarray(mid, np.float64) - net.apply(x)) <= np.asarray(rad, np.float64) + 1e-6)
  inter = g.certify_interiors(MARGIN)
  assert 0 <= inter['max_abs_error'] <= 1e-6
  path = export_onnx(g, tmp_path / f'{name}.onnx')
  y = ort.InferenceSession(str(path)).run(None, {'X': x})[0]
  assert np.max(np.abs(y - np.asarray(mid, np.float64))) <= 1e-6
