r"""The network's own graph against its certificate: the whole fl(g) as a runtime runs it.

``runtime_probe.check_runtime`` measures three standalone operations; a runtime that fuses
(a bias or the residual folded into a matmul's epilogue and reduced with its operands),
reassociates across operations, or runs an online softmax is invisible there. Here the
runtime runs the network's exported graph (``run``: X [B, n, d] float32 -> fl(g)(X), e.g.
jax.jit of network_apply.apply, or an onnxruntime session of flat_onnx.to_model(net)) on
adversarial inputs, and each output is checked against the certifier's own bound:

    |run(X) - g_w(X)| <= D_w(X)        for every X and every entry,

g_w the real network with its weights reduced by mode w (box_bound.reduced_networks;
w = 'nearest' alone for an IEEE model or a probed nearest runtime), evaluated in float64
(relative error below 2^-40 here, SLACK), and D_w the deviation network_enclosure.enclose
certifies at the point X (an input already in float32: its rounding is exact). The run is
consistent with the model if one mode w holds at every point (a runtime reduces all its
weights one way); otherwise the certificate does not cover it: ``GraphReport.ok`` is False
and the line names the worst point and its ratio max |run - g_w| / D_w.

Adversarial inputs (``adversarial_points``): entries at and just below the binade edges
1, 1/2, 1/4, 1/8 (where a truncated operand loses the most, relative to v |x|), 1/3 and
2/3 (reductions of every sign), the cube's corners, and uniform points. A point outside the
cube is never used. The emulated model runs reach up to ~0.4 of D there (tests); a fault
adds its own error on top, so a planted fused epilogue (the residual reduced to the operand
format) is refused while every honest emulation passes (tests/test_runtime_graph.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from transformer_ua import rounding
from transformer_ua.certify import box_bound, network_enclosure
from transformer_ua.certify import intervals as iv
from transformer_ua.networks import network_apply, network_dict

#: The float64 evaluation of g is within SLACK (1 + |g|) of the real g on these networks.
SLACK = 2.0 ** -40


@dataclasses.dataclass(frozen=True)
class GraphReport:
  """The verdict on one runtime's graph: ``ok`` iff some weight reduction keeps every output
  within D; ``ratios`` the worst |run - g_w| / D_w per mode, ``worst`` the point [n, d]."""

  arithmetic: str
  points: int
  ratios: dict
  worst: list
  ok: bool

  def line(self) -> str:
    ratios = ', '.join(f'{m} {r:.3g}' for m, r in self.ratios.items())
    verdict = ('within the certified D at every point' if self.ok else
               'NOT covered by the certificate: an output leaves D')
    return (f'graph probe ({self.arithmetic}, {self.points} adversarial points): max |run - '
            f'g| / D = {ratios}; {verdict} (worst at X = {self.worst})')


def adversarial_points(n: int, d: int, count: int, seed: int = 0) -> np.ndarray:
  """[count, n, d] float32 points of [0, 1]^(n d) (module docstring)."""
  rng = np.random.default_rng(seed)
  edges = np.array([1.0, 0.5, 0.25, 0.125, 1 / 3, 2 / 3], np.float32)
  below = np.array([0.0, 2.0 ** -24, 2.0 ** -12, 2.0 ** -9], np.float32)
  x = rng.random((count, n, d)).astype(np.float32)
  k = (2 * count) // 3
  x[:k] = rng.choice(edges, (k, n, d)) * (1 - rng.choice(below, (k, n, d)))
  corners = min(2 ** (n * d), count - k)
  bits = (np.arange(corners)[:, None] >> np.arange(n * d)[None, :]) & 1
  x[k:k + corners] = bits.reshape(corners, n, d)
  return np.clip(x, 0, 1).astype(np.float32)


def check_graph(run, net: network_dict.Net, arithmetic: str, *, n: int | None = None,
                points: int = 512, operand_mode: str | None = None,
                seed: int = 0) -> GraphReport:
  """The verdict on ``run`` (X [B, n, d] float32 -> fl(g)(X)) for ``net`` with n tokens
  (``net.n``, or ``n`` where the network runs any n) under the model ``arithmetic``
  (rounding.NETWORK_ARITHMETICS, not 'exact'); ``operand_mode`` 'nearest' where the runtime
  probe measured it (the certificate's own choice). ValueError (one line) on an
  arithmetic, a mode, an n or an output that cannot be checked."""
  n = net.n if net.n is not None else n
  if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
    raise ValueError(f'n={n!r}; give the number of tokens (an integer >= 1) for a network '
                     'that runs any n.')
  rounding.check_network_arithmetic(arithmetic)
  if arithmetic == 'exact':
    raise ValueError("arithmetic='exact' has no runtime to probe; give a float arithmetic.")
  if operand_mode not in (None, 'nearest'):
    raise ValueError(f"operand_mode={operand_mode!r}; allowed: None (either), 'nearest'.")
  model = rounding.MATMUL_MODELS[arithmetic]
  nets = {'nearest': net}
  if model.operand_rel > 0:
    near, trunc = box_bound.reduced_networks(net, model)
    nets = {'nearest': near} if operand_mode == 'nearest' else {'nearest': near,
                                                                 'truncate': trunc}
    if operand_mode == 'nearest':
      model = model.with_nearest_operands()
    model = model.with_weights_reduced()
  x = adversarial_points(int(n), net.d, points, seed)
  y = np.asarray(run(x), np.float64)
  ratios, worst_at, worst = {}, None, -1.0
  for mode, variant in nets.items():
    exact = network_apply.apply(variant, x.astype(np.float64), np.float64)
    if y.shape != exact.shape:
      raise ValueError(f'run(X) has shape {y.shape}; the network gives {exact.shape}.')
    _, dev = network_enclosure.enclose(variant, iv.point(x.astype(np.float64)), model)
    err = np.abs(y - exact) - SLACK * (1 + np.abs(exact))
    with np.errstate(divide='ignore', invalid='ignore'):
      ratio = np.where(err <= 0, 0.0, err / dev)
    ratio = np.where(np.isfinite(y), ratio, np.inf)      # inf or NaN contradicts D
    ratios[mode] = float(ratio.max())
    if ratios[mode] > worst:
      worst = ratios[mode]
      worst_at = x[int(np.argmax(ratio.reshape(len(x), -1).max(axis=1)))].tolist()
  ok = min(ratios.values()) <= 1.0
  return GraphReport(arithmetic if operand_mode is None else f'{arithmetic}, probed nearest',
                     len(x), ratios, worst_at, ok)
