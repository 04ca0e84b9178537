r"""Lemma 6 at scale: plan lambda, epsilon and the working precision from exact bounds.

Yun et al. 2020, Appendix F (Lemma 6) turns g_bar into a standard Transformer g:
hardmax -> softmax(lam .), each Phi unit -> 4 ReLUs with ramps of width epsilon.
g -> g_bar as lam -> inf, epsilon -> 0 outside the ramp windows; this module picks
*finite* values from the construction's exact quantities (no trial runs), and
certifies what they give.

Exact quantities (``yun.realization.ids.simulate``: the ids u^T Z of every grid class through
every layer of g_c, in exact rationals, checked equal to g_c's exact evaluation). g_c
is taken as its list of layers (``yun.realization.ids.id_layers``, from the exact params): Lemma
8's sweep + global shift, or ``ties='complete'``'s offset FF layer, sweep (shift
V + 2n), global min (b_Q = -1) and max + counting heads (``yun.stages.contextual_ties``); one
code path.

    gap      = min over layers, heads, classes, queries j of s_top - s_next
               (s_jk = key_k query_j; exact ties are exact in softmax too: the
               counting head has W_Q = 0, b_Q = 0, so all its scores are exactly 0
               and softmax averages exactly, whatever lam -- it adds no gap and no
               softmax error)
    max_score = max |query| max |key|
    shifts   = max number of selective shifts a class undergoes
    clearances of the Phi units (distance of a pre-activation to a breakpoint on
    the ramp's side): margin delta (quantization, cube interiors shrunk by margin
    delta), delta/2 (bumps: ids and centres are multiples of delta), the kill gap of
    the killed ids to [t_l, t_r] (Lemma 8.4), the trap gap t_l - delta/2 - max|u^T A|,
    and g_c's own Phi units (ties='complete': the offset's pre-activation is 0, its
    breakpoints +-1: clearance 1).

Choices (all powers of two, so lam and epsilon are exact binary rationals):

    epsilon = 2^floor(log2(min clearance / 2))
    K       = max over classes of prod over g_c layers of (1 + R sum_h |o_h|)^e
              error amplification through g_c (R = sum u, o_h = u^T W_O of head h;
              e = shifted tokens for a selective shift, 1 for a global layer): for
              Lemma 8, (1 + 2 N^d R)^shifts (1 + F R), F = global-shift scale
    F       = largest |o_h| of a head softmax can get wrong (Lemma 8: the global
              shift's; ties='complete': C1 of the max head)
    K_v     = 1 + (M + 1) R / epsilon if some kept id sits on t_l or t_r, else 1
    E_c     = min(tol / (2 K_v), gap / (4 R max|id|))     allowed g_c error
    lam     = 2^ceil(log2(2 ln(L_att h F (n - 1) max|id| K / E_c) / gap))
              (L_att attention layers of g_c, h = most heads in one of them)
              (softmax leaves weight <= exp(-lam gap / 2) off the arg max)
    bits    = ceil(log2(L max(C_q K K_v, C_a K K_v, C_v K_v, tol lam max_score K) / tol))
              + GUARD_BITS
              with the cancellation sizes C = max |pre-activation| sum |W_2'| of the
              realized ReLU layers (|u^T Z| |W_2| / epsilon) and C_a = F max|id|.

``bits`` is what a *literal* evaluation of g (float or mpmath, op by op) needs;
``yun.realization.certified_eval`` evaluates in arb balls (``exact.ball``) and proves its own accuracy, so
a plan that is too optimistic shows up as a large bound there.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
import warnings
from fractions import Fraction

import numpy as np

from transformer_ua import realize
from transformer_ua.yun.realization import rational
from transformer_ua.yun.realization.ids import simulate

#: Extra bits on top of the derived working precision.
GUARD_BITS = 2
#: epsilon = 2^floor(log2(EPS_FRACTION * smallest clearance)).
EPS_FRACTION = Fraction(1, 2)
#: Default cube-interior margin (fraction of delta kept off each cell edge).
DEFAULT_MARGIN = 0.25
#: Default max |g - g_bar| on cube interiors a plan aims at.
DEFAULT_TOLERANCE = 1e-6


class FloatRealizationWarning(UserWarning):
  """A float realization whose dtype cannot carry the precision the plan needs."""


#: g "reproduces" g_bar when max |g - g_bar| <= this * max(1, max |A|) on cube interiors
#: (float64 rounding in the 4-ReLU cancellations gives ~1e-6 where it works; where it
#: does not, errors are of the order of the ids, >> 1).
REPRODUCE_RTOL = 1e-4
#: Significand bits of the float dtypes (what a literal evaluation carries).
FLOAT_BITS = {'float64': 53, 'float32': 24}


def _pow2_floor(x: Fraction) -> Fraction:
  e = math.floor(math.log2(x))
  while Fraction(2) ** (e + 1) <= x:
    e += 1
  while Fraction(2) ** e > x:
    e -= 1
  return Fraction(2) ** e


def _log2(x) -> float:
  x = Fraction(x)
  return math.log2(x.numerator) - math.log2(x.denominator)


# ---------------------------------------------------------------------------
# The plan.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Plan:
  """lam, epsilon, bits for one Approximator, and the exact bounds they came from."""

  lam: Fraction
  epsilon: Fraction
  bits: int
  tolerance: float
  margin: float
  bounds: dict
  cancellation: dict  # stage -> cancellation size (at ``epsilon``)

  def bits_for(self, epsilon=None, lam=None) -> int:
    """Working precision a literal evaluation needs at (lam, epsilon)."""
    eps = Fraction(epsilon) if epsilon is not None else self.epsilon
    lam = Fraction(lam) if lam is not None else self.lam
    b = self.bounds
    kk, kv = b['amplification_K'], b['kill_amplification'](eps)
    terms = [self.cancellation['quantization'] * self.epsilon / eps * kk * kv,
             self.cancellation['attention'] * kk * kv,
             self.cancellation['value'] * self.epsilon / eps * kv,
             Fraction(self.tolerance) * lam * b['max_score'] * kk]
    return math.ceil(_log2(b['layers'] * max(terms) / Fraction(self.tolerance))) + GUARD_BITS

  def as_dict(self) -> dict:
    b = {k: (float(v) if isinstance(v, Fraction) else v) for k, v in self.bounds.items()
         if not callable(v)}
    return {'lam': float(self.lam), 'epsilon': float(self.epsilon), 'bits': self.bits,
            'tolerance': self.tolerance, 'margin': self.margin, 'bounds': b,
            'cancellation': {k: float(v) for k, v in self.cancellation.items()}}

  def describe(self) -> str:
    b = self.bounds
    if 'value_bits' in b:   # the integer-id network's (``integer_ids``)
      return (f'plan: lam=2^{_log2(self.lam):.0f}, epsilon=2^{_log2(self.epsilon):.0f}, '
              f'bits={self.bits} (integer ids up to {b["largest_id"]:,}, values in '
              f'{b["value_bits"]}-bit dyadics)')
    if 'gap' not in b:   # a one-layer map's plan (``ramp_plan``)
      return (f'plan: lam=2^{_log2(self.lam):.0f}, epsilon=2^{_log2(self.epsilon):.0f}, '
              f'bits={self.bits} (tolerance {self.tolerance:g}; certified id-to-edge '
              f'clearance {float(b["min_edge_clearance"]):.3g})')
    return (f'plan: lam=2^{_log2(self.lam):.0f}, epsilon=2^{_log2(self.epsilon):.0f}, '
            f'bits={self.bits} (tolerance {self.tolerance:g}; score gap {float(b["gap"]):.3g}, '
            f'max |score| {float(b["max_score"]):.3g}, max |id| {float(b["max_id"]):.3g}, '
            f'max cancellation {float(max(self.cancellation.values())):.3g})')


def check_tolerance(tolerance) -> float:
  if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) \
      or not math.isfinite(tolerance) or tolerance <= 0:
    raise ValueError(f'tolerance={tolerance!r}; it must be a positive finite number.')
  return float(tolerance)


def check_margin(margin) -> float:
  """The cube-interior margin as a float (an int, float or Fraction in (0, 1/2))."""
  if isinstance(margin, bool) or not isinstance(margin, (int, float, Fraction)) \
      or not 0 < margin < Fraction(1, 2):
    raise ValueError(f'margin={margin!r}; it must be in (0, 1/2) (fraction of delta kept '
                     'off each cell edge).')
  return float(margin)


def _cancellation(params, segments, t_bound_by_name) -> float:
  """max over ReLU layers of |pre-activation| sum_s |W_2'[:, s]| (realized, exact)."""
  worst = {}
  for i, seg in enumerate(segments):
    if not seg.has_feedforward:
      continue
    w2 = params[f'segment_{i}']['feedforward']['W_2']
    mag = np.max(np.sum(np.abs(np.asarray(w2, object)), axis=-1), axis=-1)  # [L]
    stage = t_bound_by_name[seg.name][0]
    val = max(mag) * t_bound_by_name[seg.name][1] if len(mag) else 0
    worst[stage] = max(worst.get(stage, 0), Fraction(val))
  return worst


@functools.lru_cache(maxsize=16)
def _plan_cached(net, tolerance: float, margin: float) -> Plan:
  sim = simulate(net)
  cm, vm = net.g_bar.contextual, net.g_bar.value
  d, n = net.d, net.n
  delta = Fraction(1, net.resolution)
  R = sum(cm.u)
  t_l, t_r = cm.t_l, cm.t_r
  if sim['gap'] is None:
    raise ValueError('score gap: every hardmax layer ties on every class; no finite lam '
                     'is needed, but none can be derived either.')
  # Clearances of the Phi units (exact).
  quant = Fraction(margin) * delta
  ids = [v for row in sim['ids'] for v in row]
  killed = [v for v in ids if v < t_l or v > t_r]
  kept = [v for v in ids if t_l <= v <= t_r]
  kill_gap = min((min(abs(v - t_l), abs(v - t_r)) for v in killed), default=None)
  kill_touch = any(v in (t_l, t_r) for v in kept)
  centers = sorted(Fraction(int(c), cm.scale) for c in cm.ops.to_python(np.asarray(vm.centers)))
  bump = None
  for v in kept:
    i = bisect.bisect_left(centers, v)
    for c in centers[max(0, i - 1):i + 1]:
      for br in (c - delta / 2, c + delta / 2):
        dist = abs(v - br)
        bump = dist if bump is None else min(bump, dist)
  values = np.asarray(net.values, np.float64)
  max_ua = max((abs(sum(Fraction(float(a)) * ui for a, ui in zip(col, cm.u)))
                for col in values.reshape(-1, d)), default=Fraction(0))
  trap = t_l - delta / 2 - max_ua
  clear = {'quantization': quant, 'bump': bump, 'kill': kill_gap, 'trap': trap,
           **sim['clearance']}
  for name, v in clear.items():
    if v is not None and v <= 0:
      raise ValueError(f'{name} clearance is {v}: no epsilon > 0 keeps the ramps of the '
                       f'{name} units off the grid classes.')
  epsilon = _pow2_floor(EPS_FRACTION * min(v for v in clear.values() if v is not None))
  # Amplification and lam.
  m_plus_1 = vm.kill_bound + 1
  big_f = sim['max_weight']   # largest W_O of a head that softmax can get wrong
  amp = sim['amplification']
  kill_amp = (lambda eps: 1 + Fraction(m_plus_1 * R) / Fraction(eps)) if kill_touch \
      else (lambda eps: Fraction(1))
  max_id = max(sim['max_id'], Fraction(1))
  tol = Fraction(tolerance)
  e_c = min(tol / (2 * kill_amp(epsilon)), sim['gap'] / (4 * R * max_id))
  att_layers, heads = sim['attention_layers'], sim['heads']
  arg = _log2(Fraction(att_layers * heads * big_f * max(n - 1, 1)) * max_id * amp / e_c)
  lam_real = 2 * arg * math.log(2) / float(sim['gap'])
  lam = Fraction(2) ** max(0, math.ceil(math.log2(lam_real)))
  # Cancellation sizes of the realized ReLU layers at this epsilon.
  params = rational.exact_params(net.g_bar, net.values)
  segs, params = realize.relu_realization(
      [s for s in net.g_bar.segments], params, epsilon)
  t_quant = net.g_bar.quantization.unit_input_bound
  t_value = 2 * max_id + max_ua + 1
  # feed-forward layers before g_c's first attention layer (g_q; ties='complete': the
  # offset, |t| <= 1) are amplified through g_c like the quantization; the rest are g_v
  first_att = next(i for i, s in enumerate(segs) if s.has_attention)
  names = {}
  for i, s in enumerate(segs):
    if s.has_feedforward:
      names[s.name] = ('quantization', t_quant) if i < first_att else ('value', t_value)
  canc = _cancellation(params, segs, names)
  canc.setdefault('quantization', Fraction(0))
  canc.setdefault('value', Fraction(0))
  canc['attention'] = big_f * max_id
  layers = sum(s.depth for s in net.g_bar.segments)
  bounds = {'gap': sim['gap'], 'max_score': sim['max_score'], 'max_id': sim['max_id'],
            'shifts': sim['shifts'], 'tied_heads': sim['tied_heads'],
            'amplification_K': amp, 'kill_touch': kill_touch,
            'kill_amplification': kill_amp, 'g_c_error_budget': e_c, 'layers': layers,
            't_l': t_l, 't_r': t_r, **{f'clearance_{k}': v for k, v in clear.items()}}
  plan = Plan(lam=lam, epsilon=epsilon, bits=0, tolerance=tolerance, margin=margin,
              bounds=bounds, cancellation=canc)
  return dataclasses.replace(plan, bits=plan.bits_for())


def plan_realization(net, tolerance: float = DEFAULT_TOLERANCE,
                     margin: float = DEFAULT_MARGIN) -> Plan:
  """Plans lam, epsilon and the working precision for Lemma 6 on any approximator
  (``net.realization_plan``): the deep Lemma 7-9 one from exact bounds (module
  docstring), the one-layer maps from their certified ids (``ramp_plan``).

  Args:
    net: an approximator (``variant.build(target)``: ``yun.approximator.Approximator``,
      ``OneLayerApproximator``, ``WideApproximator``).
    tolerance: target max |g - g_bar| on cube interiors (> 0).
    margin: cube interiors are shrunk by margin delta per side (in (0, 1/2)).
  Raises:
    ValueError: tolerance <= 0, a bad margin, or a bound that admits no finite choice
      (named in the message), or a g_c layer the id simulation does not model
      (``id_layers``).
  """
  return net.realization_plan(check_tolerance(tolerance), check_margin(margin))


def deep_plan(net, tolerance: float, margin: float) -> Plan:
  """The plan of a Lemma 7-9 approximator (module docstring; cached per net)."""
  return _plan_cached(net, tolerance, margin)


def ramp_plan(net, tolerance: float, margin: float) -> Plan:
  """The plan of a one-softmax-layer map: its lam (built in, ids certified distinct),
  the ramps below its certified clearances (``net.plan_epsilon``: one width per stage;
  ``epsilon`` is the smaller) and its ball precision (``net.plan_bits``)."""
  eps = net.plan_epsilon(Fraction(margin))
  return Plan(lam=Fraction(net.lam), epsilon=min(eps.values()), bits=net.plan_bits(tolerance),
              tolerance=tolerance, margin=margin,
              bounds={'epsilons': {k: float(v) for k, v in eps.items()},
                      'min_edge_clearance': net.min_edge_clearance}, cancellation={})


def check_float_dtype(net, dtype: str, *, lam, epsilon, tolerance=None) -> None:
  """Warns (``FloatRealizationWarning``, one line) when ``dtype`` carries fewer bits
  than a literal evaluation at (lam, epsilon) needs to reproduce g_bar within
  ``tolerance`` (default: ``REPRODUCE_RTOL`` max(1, max|A|))."""
  if tolerance is None:
    amax = float(np.max(np.abs(net.values))) if net.values.size else 1.0
    tolerance = REPRODUCE_RTOL * max(1.0, amax)
  try:
    p = plan_realization(net, tolerance)
  except ValueError as e:
    warnings.warn(FloatRealizationWarning(f'no plan for this realization ({e}); its {dtype} '
                                          'outputs are unchecked.'), stacklevel=3)
    return
  need = p.bits_for(epsilon=Fraction(epsilon), lam=Fraction(lam))
  have = FLOAT_BITS[dtype]
  if need > have:
    warnings.warn(FloatRealizationWarning(
        f'{dtype} carries {have} bits; the plan needs {need} to guarantee this realization '
        f'reproduces g_bar within {tolerance:g} (max cancellation '
        f'{float(max(p.cancellation.values())):.3g}): its outputs are not guaranteed to be '
        "g_bar's; use dtype='exact' and apply_certified / certify_interiors."), stacklevel=3)
