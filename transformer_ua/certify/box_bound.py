r"""The per-box bound of ``certify_network``: E_B >= sup_B |f - fl(g)|, one round of boxes.

For a box B with centre c and half-widths r (dyadic: c and r exact), ``Evaluator`` returns

    E_B,jk = min( |e(c)|_jk + sum_q max|J_e(B)_jk,q| r_q ,  sup |f(B) - g(B)|_jk ) + D_B,jk

with e = f - g, J_e(B) = J_f(B) - J_g(B) the interval Jacobian (mean-value form) and
D_B >= sup_B |fl(g) - g| the float deviation (network_enclosure.py, or the jit kernel of
box_kernel.py). A callable f (no interval form) has its enclosure around the centre from
callable_enclosures.py: first order, sup_B |f - f(c)| <= L max_q r_q or the caller's
modulus, added to both forms, with J_e = -J_g; or second order, f(X) in f(c) + J_f(c)(X - c)
+- H/2 max_q r_q^2, with J_e = J_f(c) - J_g(B) and the remainder added. Where the arithmetic reduces
matmul operands (TF32, bfloat16), g is bounded for both reductions of its weights (round to
nearest and truncation: ``reduced_networks``) and E_B is the worse. Each box also gets its
SPLIT_CANDIDATES coordinates q with the largest sum_jk max|J_e(B)_jk,q| r_q (the split) and
the centre value |e(c)| + D_B (the floor the cost model extrapolates to).

``evaluate_round`` evaluates a round's boxes here or on the executor's workers (the build
``_build_round`` and the chunk ``_evaluate_span`` pickle, module-level);
``nonfinite_cause`` names what overflowed on a box with no finite bound; ``guarded`` turns a
caller's function's exception into one ValueError line.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from transformer_ua import executor as executor_lib
from transformer_ua import rounding
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import network_enclosure, target_enclosures
from transformer_ua.networks import network_dict
from transformer_ua.targets import functions as targets_lib

#: Boxes evaluated per NumPy batch (memory: ~ a few kB per box for small networks).
BATCH = 2048


#: Coordinates tried per bisected box (the largest mean-value terms): both halves of each
#: are evaluated and the split whose children's contributions sum lowest is kept.
SPLIT_CANDIDATES = 1


@dataclasses.dataclass
class FSide:
  """f's side: an interval form (built-in), or a callable's ``local`` enclosure around the
  box centre (callable_enclosures.FirstOrder or SecondOrder: ``around(c, r)``)."""

  form: object
  local: object


class Evaluator:
  """E_B [B, n, d] and the split coordinate of each box, for one (f, g, arithmetic)."""

  def __init__(self, net: network_dict.Net, fside: FSide, arithmetic: str,
               operand_mode: str | None = None):
    self.net = net
    self.fside = fside
    self.model = None if arithmetic == 'exact' else rounding.MATMUL_MODELS[arithmetic]
    self.nets = (net,)
    if self.model is not None and self.model.operand_rel > 0:
      self.nets = reduced_networks(net, self.model)
      if operand_mode == 'nearest':          # the probe measured it: one network, v / 2
        self.nets = self.nets[:1]
        self.model = self.model.with_nearest_operands()
      elif network_dict.params_hash(self.nets[0]) == network_dict.params_hash(self.nets[1]):
        self.nets = self.nets[:1]            # both reductions give the same weights; the
                                             # activations keep either mode (v)
      self.model = self.model.with_weights_reduced()
    self.kernels = None       # box_kernel.BoxKernel per net once ``use_kernel`` is called

  def use_kernel(self) -> None:
    """g's enclosures from the jit kernel (box_kernel.py) from now on; ValueError (one
    line) where it cannot run soundly here (no x64, XLA's exp off, a subnormal weight, an
    op it lacks, a magnitude that may overflow somewhere on the cube)."""
    if self.kernels is None:
      from transformer_ua.certify import box_kernel   # jax only when asked
      self.kernels = tuple(box_kernel.kernel_for(net, self.model, batch=BATCH)
                           for net in self.nets)

  def evaluate(self, lo: np.ndarray, hi: np.ndarray):
    """(E [B, n, d] upper bounds of sup_B |f - fl(g)|, D [B, n, d], split [B, K] (the K =
    SPLIT_CANDIDATES coordinates with the largest mean-value terms, largest first), and the
    centre's |f - g| + D [B, n, d]: the value E tends to as the box shrinks, which the cost
    model's floor estimates)."""
    outs = [self._batch(lo[i:i + BATCH], hi[i:i + BATCH]) for i in range(0, len(lo), BATCH)]
    return tuple(np.concatenate([o[k] for o in outs]) for k in range(4))

  def _batch(self, lo, hi):
    """The worse of the networks' bounds (each reduction of the weights: ``nets``)."""
    outs = [self._batch_net(i, net, lo, hi) for i, net in enumerate(self.nets)]
    e = np.maximum.reduce([o[0] for o in outs])
    dev = np.maximum.reduce([o[1] for o in outs])
    centre = np.maximum.reduce([o[3] for o in outs])
    return e, dev, outs[0][2], centre

  def _batch_net(self, index, net, lo, hi):
    c = (lo + hi) / 2                      # exact: dyadic boxes
    r = (hi - lo) / 2
    b, n, d = lo.shape
    if self.kernels is not None:
      (c_lo, c_hi), g_b, dev = self.kernels[index].enclose(lo, hi)
      g_c = iv.Interval(c_lo, c_hi)
      if dev is not None and not np.isfinite(dev).all():   # as the marks below
        bad = ~np.isfinite(dev).all(axis=(1, 2))
        network_enclosure.enclose(net, iv.point(c[bad]), self.model)
    else:
      g_c, _ = network_enclosure.enclose(net, iv.point(c), None)
      marks = []
      g_b, dev = network_enclosure.enclose(net, iv.box(lo, hi), self.model, marks=marks)
      if marks:    # a box that may overflow has no bound; at its centre point, a refusal
        bad = ~np.isfinite(dev).all(axis=(1, 2))
        network_enclosure.enclose(net, iv.point(c[bad]), self.model)
    rq = r.reshape(b, 1, 1, n * d)
    fs = self.fside
    if fs.form is not None:
      f_c = fs.form(iv.point(c))
      f_b = fs.form(iv.box(lo, hi))
      e_c = iv.sub(f_c, g_c).mag()
      jac = np.maximum(np.abs(f_b.tlo - g_b.thi), np.abs(f_b.thi - g_b.tlo))
      mv = iv.up(e_c + iv.up((jac * rq).sum(axis=-1) * (1 + 2.0 ** -40)))
      natural = iv.sub(f_b, g_b).mag()
    else:                  # f(X) in f(c) + J_f(c)(X - c) +- rem, |f(X) - f(c)| <= spread
      f_c, jf_c, rem, spread = fs.local.around(c, r)
      e_c = np.maximum(np.abs(f_c - g_c.lo), np.abs(g_c.hi - f_c))
      if jf_c is None:     # first order: J_e = -J_g
        jac = g_b.tmag()
      else:                # second order: J_e in J_f(c) - J_g(B) (callable_enclosures.py)
        jac = iv.up(np.maximum(np.abs(jf_c - g_b.tlo), np.abs(g_b.thi - jf_c)))
        e_c = iv.up(e_c)
      mv = iv.up(e_c + iv.up((jac * rq).sum(axis=-1) * (1 + 2.0 ** -40)) + rem)
      natural = iv.up(np.maximum(np.abs(f_c - g_b.lo), np.abs(g_b.hi - f_c)) + spread)
    e = np.minimum(mv, natural)
    e = np.where(np.isnan(e), np.inf, e)     # an overflowed enclosure bounds nothing
    if dev is not None:
      dev = np.where(np.isnan(dev), np.inf, dev)
      e = iv.up(e + dev)
    else:
      dev = np.zeros_like(e)
    # the score rounded to float32 (24 bits), ties to the widest, then the first: the NumPy
    # path and the kernel (whose bounds differ in the last bits) split the same boxes alike
    with np.errstate(over='ignore'):
      score = (jac * rq).sum(axis=(1, 2)).astype(np.float32)
    split = np.lexsort((-r.reshape(b, -1), -score), axis=-1)[:, :SPLIT_CANDIDATES]
    centre = np.where(np.isnan(e_c), np.inf, e_c) + dev
    return e, dev, split, centre


def reduced_networks(net: network_dict.Net, model: rounding.MatmulModel) -> tuple:
  """The network with every matmul weight (embed, W_Q, W_K, W_V, W_O, W_1, W_2, readout)
  reduced to ``model``'s operand format exactly, by round to nearest and by truncation
  (``MatmulModel.reduce_operand``): the two networks a runtime of either mode multiplies
  with. Biases and positional encodings are added in the storage format, unreduced."""
  def red(a, mode):
    return None if a is None else model.reduce_operand(a.astype(np.float32),
                                                       mode).astype(np.float64)
  out = []
  for mode in ('nearest', 'truncate'):
    blocks = []
    for b in net.blocks:
      a, f = b.attention, b.ff
      att = None if a is None else dataclasses.replace(
          a, w_q=red(a.w_q, mode), w_k=red(a.w_k, mode), w_v=red(a.w_v, mode),
          w_o=red(a.w_o, mode))
      ff = None if f is None else dataclasses.replace(f, w_1=red(f.w_1, mode),
                                                      w_2=red(f.w_2, mode))
      blocks.append(dataclasses.replace(b, attention=att, ff=ff))
    out.append(dataclasses.replace(net, embed=red(net.embed, mode), blocks=tuple(blocks),
                                   readout=red(net.readout, mode)))
  return tuple(out)


def build_evaluator(net_dict: dict, d: int, n: int, target_name: str, arithmetic: str,
                    operand_mode: str | None = None):
  """(net, an Evaluator) for a built-in target: the executor's build (module-level, so it
  pickles), and the per-box bound for a benchmark."""
  net = network_dict.check(net_dict, d=d, n=n)
  target = targets_lib.get_target(target_name, d=d, n=n)
  fside = FSide(target_enclosures.interval_form(target), None)
  return net, Evaluator(net, fside, arithmetic, operand_mode)


def _evaluate_span(obj, start: int, stop: int):
  """The executor's chunk: E and split of boxes [start, stop) of the shipped round, as
  JSON lists (floats round-trip exactly)."""
  (_, ev), lo, hi = obj
  e, dev, split, centre = ev.evaluate(lo[start:stop], hi[start:stop])
  return {'e': e.reshape(len(e), -1).tolist(), 'dev': dev.reshape(len(e), -1).tolist(),
          'split': split.tolist(), 'centre': centre.reshape(len(e), -1).tolist()}


def _build_round(net_dict, d, n, target_name, arithmetic, operand_mode, lo, hi):
  return build_evaluator(net_dict, d, n, target_name, arithmetic, operand_mode), lo, hi


def evaluate_round(evaluator: Evaluator, lo, hi, workers, spec, round_index: int):
  if workers is None:
    e, dev, split, centre = evaluator.evaluate(lo, hi)
    return e, dev, split, centre, ''
  shipment = executor_lib.ship(_build_round, *spec, lo, hi)
  identity = {'what': 'certify_network round', 'round': round_index,
              'params_hash': network_dict.params_hash(network_dict.check(spec[0], d=spec[1],
                                                                          n=spec[2])),
              'arithmetic': spec[4], 'target': spec[3]}
  mapped = executor_lib.map_spans(_evaluate_span, shipment, len(lo), workers,
                                  identity=identity)
  shape = lo.shape
  e = np.concatenate([np.asarray(r['e'], np.float64).reshape((-1,) + shape[1:])
                      for _, r in mapped.results])
  dev = np.concatenate([np.asarray(r['dev'], np.float64).reshape((-1,) + shape[1:])
                        for _, r in mapped.results])
  split = np.concatenate([np.asarray(r['split'], np.int64).reshape(len(r['split']), -1)
                          for _, r in mapped.results])
  centre = np.concatenate([np.asarray(r.get('centre', r['e']), np.float64)   # older state
                           .reshape((-1,) + shape[1:]) for _, r in mapped.results])
  return e, dev, split, centre, mapped.describe()


def nonfinite_cause(evaluator: 'Evaluator', lo, hi) -> str:
  """What is not finite on the first box of lo/hi (lowprec): the certifier's float64
  interval of g's values, its interval Jacobian (the mean-value form's; the interval
  softmax's derivative meets inf - inf where scores differ by more than float64 holds), f's
  interval, or the float deviation D."""
  with np.errstate(all='ignore'):
    for net in evaluator.nets:
      marks = []
      g_b, dev = network_enclosure.enclose(net, iv.box(lo[:1], hi[:1]), evaluator.model,
                                           marks=marks)
      if marks:
        return ("the float deviation bound D of g's run reaches the format's range on these "
                'boxes, though not at their centres: splitting them further (a larger '
                'budget: max_minutes=, max_rounds=, max_boxes=) may bound them')
      if not (np.all(np.isfinite(g_b.lo)) and np.all(np.isfinite(g_b.hi))):
        return "the certifier's float64 interval of g's values overflows"
      if g_b.has_tangent and not (np.all(np.isfinite(g_b.tlo)) and np.all(np.isfinite(g_b.thi))):
        return ("the certifier's float64 interval Jacobian of g overflows or turns NaN "
                "(g's values stay finite; scores this large leave the interval softmax's "
                'derivative without a bound)')
      if dev is not None and not np.all(np.isfinite(dev)):
        return "the float deviation bound D of g's run is not finite"
    if evaluator.fside.form is not None:
      f_b = evaluator.fside.form(iv.box(lo[:1], hi[:1]))
      if not (np.all(np.isfinite(f_b.lo)) and np.all(np.isfinite(f_b.hi))):
        return "f's float64 interval overflows"
  return "the network's values overflow float64 intervals"


def guarded(what: str, fn, *args, **kwargs):
  """fn(*args, **kwargs), with any exception other than a ValueError raised from the
  caller's ``what`` (f or its modulus) turned into one ValueError line."""
  try:
    return fn(*args, **kwargs)
  except ValueError:
    raise
  except Exception as err:  # noqa: BLE001 -- a caller's function may raise anything
    raise ValueError(f'{what} raised {type(err).__name__} ({err}) on points of [0,1]^(n x d)'
                     f'; {what} must be defined on the whole cube.') from None
