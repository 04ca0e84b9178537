"""The jit box kernel (certify/box_kernel.py) against the NumPy reference
(network_enclosure.enclose) and against samples.

On random networks and dyadic boxes the kernel's value, tangent and deviation bounds contain
the reference's (XLA and NumPy sum in different orders; the kernel widens its bounds by
2^-40 of their largest magnitude, so it contains the reference's, and must not be much
looser either); and, independently of both, the exact g at sampled points of each box lies
in its value bounds, and the float32 run of g within its deviation of the float64 run.
Each case compiles the kernel (~7 s of CPU): two run by default, the other arithmetics
(tf32, float64, bfloat16) and a 2-block, 2-head network with --runslow.
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_ua import rounding
from transformer_ua.certify import box_kernel
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import jax_intervals
from transformer_ua.certify import network_enclosure
from transformer_ua.networks import network_apply, network_dict


def tiny_net(seed, *, n=3, positional=False, readout=False, blocks=1, h=1):
  rng = np.random.default_rng(seed)
  m, D, r = 2, 3, 4
  out = {'blocks': [{
      'W_Q': rng.normal(size=(h, m, D)), 'b_Q': rng.normal(size=(h, m)),
      'W_K': rng.normal(size=(h, m, D)), 'W_V': rng.normal(size=(h, m, D)),
      'W_O': rng.normal(size=(h, D, m)) / 2, 'W_1': rng.normal(size=(r, D)),
      'b_1': rng.normal(size=r), 'W_2': rng.normal(size=(D, r)) / 2,
      'b_2': rng.normal(size=D)} for _ in range(blocks)]}
  if positional:
    out['positional'] = rng.normal(size=(n, D))
  if readout:
    out['readout'] = rng.normal(size=(1, D))
  return network_dict.check(out, d=1, n=n)


def dyadic_boxes(rng, count, n):
  k = 2 ** rng.integers(0, 6, size=(count, n, 1))
  i = np.floor(rng.random((count, n, 1)) * k)
  return i / k, (i + 1) / k


CASES = [(0, 'float32', dict(positional=True, readout=True)), (2, 'exact', dict(h=2)),
         pytest.param(1, 'tf32', {}, marks=pytest.mark.slow),
         pytest.param(5, 'float32', dict(blocks=2, h=2), marks=pytest.mark.slow),
         pytest.param(3, 'float64', {}, marks=pytest.mark.slow),
         pytest.param(4, 'bfloat16', dict(readout=True), marks=pytest.mark.slow)]


@pytest.mark.parametrize('seed,arithmetic,kw', CASES)
def test_kernel_contains_the_reference_and_the_samples(seed, arithmetic, kw):
  net = tiny_net(seed, **kw)
  model = None if arithmetic == 'exact' else rounding.MATMUL_MODELS[arithmetic]
  run_net = net if model is None else network_apply.cast(net, model.dtype)
  rng = np.random.default_rng(seed + 100)
  lo, hi = dyadic_boxes(rng, 200, 3)
  kernel = box_kernel.kernel_for(run_net, model, batch=128)    # 2 batches, one padded
  (c_lo, c_hi), g, dev = kernel.enclose(lo, hi)
  ref_c, _ = network_enclosure.enclose(run_net, iv.point((lo + hi) / 2), None)
  ref, ref_dev = network_enclosure.enclose(run_net, iv.box(lo, hi), model)
  for mine, theirs, side in [(c_lo, ref_c.lo, -1), (c_hi, ref_c.hi, 1), (g.lo, ref.lo, -1),
                             (g.hi, ref.hi, 1), (g.tlo, ref.tlo, -1), (g.thi, ref.thi, 1)]:
    assert np.all(side * (mine - theirs) >= 0)
    assert np.max(np.abs(mine - theirs)) <= 1e-9 * (1 + np.abs(theirs).max())
  if model is None:
    assert dev is None
  else:
    assert np.all(dev >= ref_dev) and np.all(dev <= ref_dev * (1 + 1e-8) + 1e-300)
  # samples: the exact g (float64 apply; its own rounding is far below these widths)
  x = lo[:, None] + (hi - lo)[:, None] * rng.random((len(lo), 16, 3, 1))
  y = network_apply.apply(run_net, x.reshape(-1, 3, 1)).reshape(len(lo), 16, 3, 1)
  assert np.all(y >= g.lo[:, None] - 1e-12) and np.all(y <= g.hi[:, None] + 1e-12)
  if arithmetic == 'float32':      # the float32 run of g within D of the float64 run
    x = x[:, 0]
    y32 = network_apply.apply(run_net, x.astype(np.float32), np.float32).astype(np.float64)
    y64 = network_apply.apply(run_net, x.astype(np.float32).astype(np.float64))
    assert np.all(np.abs(y32 - y64) <= dev)


def test_subnormal_weight_refused_and_exp_checked():
  net = tiny_net(0).as_dict()
  net['blocks'][0]['W_1'] = net['blocks'][0]['W_1'].copy()
  net['blocks'][0]['W_1'][0, 0] = 1e-310
  with pytest.raises(ValueError, match='subnormal') as err:
    box_kernel.BoxKernel(network_dict.check(net, d=1, n=3), None)
  assert '\n' not in str(err.value)
  assert jax_intervals.check_exp(points=400) <= iv.EXP_SLACK


def test_certify_network_with_the_kernel_same_boxes_and_total():
  """box_kernel=True and False split the same boxes (the split score is rounded to 24 bits)
  and agree on the total to 1e-9; the line names the kernel."""
  from transformer_ua.certify import box_bound
  from transformer_ua.certify import network_certificate as nc
  net = tiny_net(0, positional=True, readout=True)
  args = dict(d=1, n=3, p=2, arithmetic='float32', max_rounds=5, progress=False)
  a = nc.certify_network('token_times_mean', net, box_kernel=False, **args)
  box_bound.BATCH, old = 128, box_bound.BATCH              # the kernel compiled above (batch 128)
  try:
    b = nc.certify_network('token_times_mean', net, box_kernel=True, **args)
  finally:
    box_bound.BATCH = old
  assert [h[0] for h in a.history] == [h[0] for h in b.history]
  assert b.total >= a.total and float(b.total) <= float(a.total) * (1 + 1e-9)
  assert 'box kernel (jax.jit on cpu) from round 1' in b.line()
  with pytest.raises(ValueError, match='box_kernel'):
    nc.certify_network('token_times_mean', net, box_kernel='yes', **args)
