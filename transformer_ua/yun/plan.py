r"""Lemma 6 at scale: plan lambda, epsilon and the working precision; certify the result.

Yun et al. 2020, Appendix F (Lemma 6) turns g_bar into a standard Transformer g:
hardmax -> softmax(lam .), each Phi unit -> 4 ReLUs with ramps of width epsilon.
g -> g_bar as lam -> inf, epsilon -> 0 outside the ramp windows; this module picks
*finite* values from the construction's exact quantities (no trial runs), and
certifies what they give.

Exact quantities (``simulate``: the ids u^T Z of every grid class through every
hardmax layer, in Python integers, checked equal to g_c's exact evaluation):

    gap      = min over layers, heads, classes, queries j of s_top - s_next
               (s_jk = key_k query_j; exact ties are exact in softmax too)
    max_score = max |query| max |key|
    shifts   = max number of selective shifts a class undergoes
    clearances of the Phi units (distance of a pre-activation to a breakpoint on
    the ramp's side): margin delta (quantization, cube interiors shrunk by margin
    delta), delta/2 (bumps: ids and centres are multiples of delta), the kill gap of
    the killed ids to [t_l, t_r] (Lemma 8.4) and the trap gap t_l - delta/2 - max|u^T A|.

Choices (all powers of two, so lam and epsilon are exact binary rationals):

    epsilon = 2^floor(log2(min clearance / 2))
    K       = (1 + 2 N^d R)^shifts (1 + F R)      error amplification through g_c
              (R = sum u, F = global-shift scale)
    K_v     = 1 + (M + 1) R / epsilon if some kept id sits on t_l or t_r, else 1
    E_c     = min(tol / (2 K_v), gap / (4 R max|id|))     allowed g_c error
    lam     = 2^ceil(log2(2 ln(L_att h F (n - 1) max|id| K / E_c) / gap))
              (softmax leaves weight <= exp(-lam gap / 2) off the arg max)
    bits    = ceil(log2(L max(C_q K K_v, C_a K K_v, C_v K_v, tol lam max_score K) / tol))
              + GUARD_BITS
              with the cancellation sizes C = max |pre-activation| sum |W_2'| of the
              realized ReLU layers (|u^T Z| |W_2| / epsilon) and C_a = F max|id|.

``bits`` is what a *literal* evaluation of g (float or mpmath, op by op) needs;
``apply_certified`` / ``certify_interiors`` evaluate in arb balls (``exact.ball``) and
prove their own accuracy, so a plan that is too optimistic shows up as a large bound.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math
import multiprocessing
import os
import time
import warnings
from fractions import Fraction

import numpy as np

from transformer_ua import realize
from transformer_ua.exact import ball
from transformer_ua.yun import common, rational

#: Extra bits on top of the derived working precision.
GUARD_BITS = 2
#: epsilon = 2^floor(log2(EPS_FRACTION * smallest clearance)).
EPS_FRACTION = Fraction(1, 2)
#: Default cube-interior margin (fraction of delta kept off each cell edge).
DEFAULT_MARGIN = 0.25


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
# Exact simulation of g_c on every grid class.
# ---------------------------------------------------------------------------


def grid_classes(net) -> np.ndarray:
  """Grid indices K [C, n, d] of every cube up to what the theorem needs.

  Theorem 2: one representative per multiset of n cells (columns sorted by cell),
  repeated cells included (g and g_bar are permutation equivariant). Theorem 3: every
  one of the N^(dn) cubes.
  """
  d, n, N = net.d, net.n, net.resolution
  if net.positional:
    return common.decode_grid(np.arange(N ** (d * n), dtype=np.int64), d, n, N)
  cells = N ** d
  digits = np.asarray([[(c // N ** i) % N for i in range(d)] for c in range(cells)], np.int64)
  combos = np.asarray(list(itertools.combinations_with_replacement(range(cells), n)), np.int64)
  return digits[combos]


def _select(ids, q):
  """Hardmax of s_k = ids_k q (one query): selected value, and top - next key gap."""
  if q > 0:
    top = max(ids)
    rest = [v for v in ids if v != top]
    return top, (top - max(rest)) if rest else None
  if q < 0:
    top = min(ids)
    rest = [v for v in ids if v != top]
    return top, (min(rest) - top) if rest else None
  return Fraction(sum(ids), len(ids)), None


@functools.lru_cache(maxsize=16)
def simulate(net) -> dict:
  """Ids of every grid class through every hardmax layer of g_c, exactly.

  Returns (unscaled Fractions): 'gap' (smallest top-vs-next score gap), 'max_score',
  'max_id' (largest |id| anywhere in g_c), 'shifts' (largest number of selective
  shifts of one class), 'ids' [C][n] (final ids q), 'classes' K [C, n, d].
  Raises RuntimeError if the final ids differ from g_c's exact evaluation.
  """
  cm = net.g_bar.contextual
  d, n, N, S = cm.d, cm.n, cm.resolution, cm.scale
  k = grid_classes(net)
  u = np.asarray(cm.u, object)
  ids_all = (k.astype(object) * (S // N)) @ u
  if cm.positional:
    ids_all = ids_all + np.asarray([S * j * sum(cm.u) for j in range(n)], object)[None, :]
  half, shift = S // (2 * N), N ** d
  gap, max_score, max_id, max_shifts = None, 0, 0, 0
  finals = []
  for row in ids_all:
    ids = [Fraction(int(v)) for v in row]
    shifts = 0
    layers = [(int(l) * (S // N), shift) for l in cm.sweep_ids] + [(None, cm.final_scale)]
    for center, scale in layers:
      thresholds = [center - half, center + half] if center is not None else [0]
      sels = []
      for b in thresholds:
        sel_j = []
        for j in range(n):
          q = ids[j] - b
          sel, g = _select(ids, q)
          sel_j.append(sel)
          max_score = max(max_score, abs(q) * max(abs(v) for v in ids))
          if g is not None:
            gap = abs(q) * g if gap is None else min(gap, abs(q) * g)
        sels.append(sel_j)
      if center is not None:
        delta = [scale * (a - b) for a, b in zip(sels[0], sels[1])]
        shifts += sum(1 for v in delta if v != 0)
      else:
        delta = [scale * a for a in sels[0]]
      ids = [a + b for a, b in zip(ids, delta)]
      max_id = max(max_id, max(abs(v) for v in ids))
    max_shifts = max(max_shifts, shifts)
    finals.append(ids)
  exact = cm.ops.to_python(np.asarray(cm.column_ids_batch(k)))
  if any(Fraction(int(a)) != b for ra, rb in zip(exact, finals) for a, b in zip(ra, rb)):
    raise RuntimeError('the id simulation disagrees with the exact evaluation of g_c.')
  return {'gap': Fraction(gap, S * S) if gap is not None else None,
          'max_score': Fraction(max_score, S * S), 'max_id': Fraction(max_id, S),
          'shifts': max_shifts, 'ids': [[v / S for v in r] for r in finals], 'classes': k}


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
    return (f'plan: lam=2^{_log2(self.lam):.0f}, epsilon=2^{_log2(self.epsilon):.0f}, '
            f'bits={self.bits} (tolerance {self.tolerance:g}; score gap {float(b["gap"]):.3g}, '
            f'max |score| {float(b["max_score"]):.3g}, max |id| {float(b["max_id"]):.3g}, '
            f'max cancellation {float(max(self.cancellation.values())):.3g})')


def _check_tolerance(tolerance) -> float:
  if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) \
      or not math.isfinite(tolerance) or tolerance <= 0:
    raise ValueError(f'tolerance={tolerance!r}; it must be a positive finite number.')
  return float(tolerance)


def _check_margin(margin) -> float:
  if isinstance(margin, bool) or not isinstance(margin, (int, float)) \
      or not 0 < margin < 0.5:
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
  d, n, N = net.d, net.n, net.resolution
  delta = Fraction(1, N)
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
  clear = {'quantization': quant, 'bump': bump, 'kill': kill_gap, 'trap': trap}
  for name, v in clear.items():
    if v is not None and v <= 0:
      raise ValueError(f'{name} clearance is {v}: no epsilon > 0 keeps the ramps of the '
                       f'{name} units off the grid classes.')
  epsilon = _pow2_floor(EPS_FRACTION * min(v for v in clear.values() if v is not None))
  # Amplification and lam.
  m_plus_1 = vm.kill_bound + 1
  big_f = cm.final_scale
  amp = Fraction(1 + 2 * N ** d * R) ** sim['shifts'] * (1 + big_f * R)
  kill_amp = (lambda eps: 1 + Fraction(m_plus_1 * R) / Fraction(eps)) if kill_touch \
      else (lambda eps: Fraction(1))
  max_id = max(sim['max_id'], Fraction(1))
  tol = Fraction(tolerance)
  e_c = min(tol / (2 * kill_amp(epsilon)), sim['gap'] / (4 * R * max_id))
  att_layers = cm.depth()
  heads = 2
  arg = _log2(Fraction(att_layers * heads * big_f * max(n - 1, 1)) * max_id * amp / e_c)
  lam_real = 2 * arg * math.log(2) / float(sim['gap'])
  lam = Fraction(2) ** max(0, math.ceil(math.log2(lam_real)))
  # Cancellation sizes of the realized ReLU layers at this epsilon.
  params = rational.exact_params(net.g_bar, net.values)
  segs, params = realize.relu_realization(
      [s for s in net.g_bar.segments], params, epsilon)
  t_quant = 2 + (n if net.positional else 0)
  t_value = 2 * max_id + max_ua + 1
  names = {}
  for s in segs:
    if s.has_feedforward:
      names[s.name] = ('quantization', t_quant) if s.name == 'quantization' \
          else ('value', t_value)
  canc = _cancellation(params, segs, names)
  canc.setdefault('quantization', Fraction(0))
  canc.setdefault('value', Fraction(0))
  canc['attention'] = big_f * max_id
  layers = sum(s.depth for s in net.g_bar.segments)
  bounds = {'gap': sim['gap'], 'max_score': sim['max_score'], 'max_id': sim['max_id'],
            'shifts': sim['shifts'], 'amplification_K': amp, 'kill_touch': kill_touch,
            'kill_amplification': kill_amp, 'g_c_error_budget': e_c, 'layers': layers,
            't_l': t_l, 't_r': t_r, **{f'clearance_{k}': v for k, v in clear.items()}}
  plan = Plan(lam=lam, epsilon=epsilon, bits=0, tolerance=tolerance, margin=margin,
              bounds=bounds, cancellation=canc)
  return dataclasses.replace(plan, bits=plan.bits_for())


def plan_realization(net, tolerance: float = 1e-6, margin: float = DEFAULT_MARGIN) -> Plan:
  """Plans lam, epsilon and the working precision for Lemma 6 on ``net``.

  Args:
    net: a ``yun.Approximator``.
    tolerance: target max |g - g_bar| on cube interiors (> 0).
    margin: cube interiors are shrunk by margin delta per side (in (0, 1/2)).
  Raises:
    ValueError: tolerance <= 0, a bad margin, or a bound that admits no finite choice
      (named in the message).
  """
  return _plan_cached(net, _check_tolerance(tolerance), _check_margin(margin))


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


# ---------------------------------------------------------------------------
# Certified evaluation.
# ---------------------------------------------------------------------------


def _check_exact(g):
  if g.dtype != 'exact' or g.source is None:
    raise ValueError(f"certified evaluation needs a realization built with dtype='exact' "
                     f'(got {g.dtype}).')


def _resolve_bits(g, bits, check_plan: bool) -> int:
  need = plan_realization(g.source).bits_for(epsilon=g.epsilon, lam=g.lam)
  if bits is None:
    return need
  bits = ball.check_bits(bits)
  if check_plan and bits < need:
    raise ValueError(f'bits={bits} is below the {need} bits the plan needs for this '
                     f'realization (lam={float(g.lam):g}, epsilon={float(g.epsilon):g}).')
  return bits


@functools.lru_cache(maxsize=8)
def _ball_network(g, bits: int) -> ball.BallNetwork:
  with ball.precision(bits):
    return ball.BallNetwork(g.segments, g.params, g.positional)


def apply_certified(g, x, bits: int | None = None, check_plan: bool = True):
  """(mid, rad) float64 [batch, n, d]: the exact real g(X) lies in [mid - rad, mid + rad].

  Args:
    g: a realization with dtype 'exact'.
    x: X [batch, n, d] in [0, 1)^{n x d} (the domain the plan covers).
    bits: arb working precision (default and minimum: the plan's for g's lam, epsilon;
      ``check_plan=False`` allows fewer, e.g. to search for the smallest that certifies).
  """
  _check_exact(g)
  net = g.source
  try:
    x = np.asarray(x, np.float64)
  except (TypeError, ValueError) as e:
    raise ValueError(f'X must be a numeric array [batch, {net.n}, {net.d}]: {e}') from None
  if x.ndim != 3 or x.shape[1:] != (net.n, net.d):
    raise ValueError(f'X must have shape [batch, n={net.n}, d={net.d}], got {x.shape}.')
  if not np.all(np.isfinite(x)) or np.any(x < 0) or np.any(x >= 1):
    raise ValueError('X must lie in [0, 1)^{n x d} (the domain the plan covers).')
  bits = _resolve_bits(g, bits, check_plan)
  bn = _ball_network(g, bits)
  mid, rad = np.zeros(x.shape), np.zeros(x.shape)
  with ball.precision(bits):
    for b in range(x.shape[0]):
      mid[b], rad[b] = ball.mid_rad(bn.forward(ball.points(x[b])))
  return mid, rad


def _cube_box(k, N: int, margin: Fraction):
  """Balls containing the cube interior [(k + margin)/N, (k + 1 - margin)/N] entrywise."""
  return [[ball.interval(Fraction(int(v)) / N + margin / N, Fraction(int(v) + 1) / N - margin / N)
           for v in row] for row in k]


_WORK = {}


def _certify_chunk(args):
  start, stop = args
  g, bits, margin, classes, targets, stop_above = (
      _WORK[k] for k in ('g', 'bits', 'margin', 'classes', 'targets', 'stop_above'))
  bn = _ball_network(g, bits)
  worst, where = 0.0, None
  with ball.precision(bits):
    for c in range(start, stop):
      out = bn.forward(_cube_box(classes[c], g.source.resolution, margin))
      err = ball.abs_error_bound(out, targets[c])
      if err > worst or where is None:
        worst, where = err, c
      if stop_above is not None and worst > stop_above:
        break
  return worst, where


def certify_interiors(g, margin: float = DEFAULT_MARGIN, bits: int | None = None, *,
                      check_plan: bool = True, workers: int | None = None,
                      tolerance: float = 1e-6, stop_early: bool = False) -> dict:
  """Certified max |g - g_bar| over every point of every cube interior.

  Each cube S_L (Theorem 2: one per multiset of cells, by permutation equivariance;
  Theorem 3: every cube) is shrunk by ``margin`` delta per side and pushed through g
  as one box in arb ball arithmetic (``exact.ball``); g_bar is the constant A_L (0 on
  repeated columns) there. No sampling.

  ``stop_early``: stop a worker's chunk at its first cube above ``tolerance`` (for
  searches; max_abs_error is then a lower bound of the full maximum, still > tolerance).

  Returns dict: max_abs_error (rigorous bound), certified (bound <= tolerance),
  tolerance, cubes, bits, seconds, margin, worst_cube (grid indices), lam, epsilon.
  """
  _check_exact(g)
  margin = _check_margin(margin)
  tolerance = _check_tolerance(tolerance)
  bits = _resolve_bits(g, bits, check_plan)
  net = g.source
  t0 = time.perf_counter()
  classes = grid_classes(net)
  centers = (classes + 0.5) / net.resolution
  targets = net.apply(centers)
  _ball_network(g, bits)  # build once before forking
  _WORK.update(g=g, bits=bits, margin=Fraction(margin), classes=classes, targets=targets,
               stop_above=tolerance if stop_early else None)
  workers = workers or min(2, os.cpu_count() or 1)
  c = len(classes)
  step = max(1, -(-c // (8 * workers)))
  chunks = [(s, min(c, s + step)) for s in range(0, c, step)]
  if workers > 1 and c > 1:
    with multiprocessing.get_context('fork').Pool(workers) as pool:
      results = pool.map(_certify_chunk, chunks)
  else:
    results = [_certify_chunk(ch) for ch in chunks]
  worst, where = max(results, key=lambda r: r[0])
  seconds = time.perf_counter() - t0
  return {'max_abs_error': worst, 'certified': bool(worst <= tolerance),
          'tolerance': tolerance, 'cubes': c, 'bits': bits, 'seconds': seconds,
          'margin': margin, 'worst_cube': classes[where].tolist(),
          'lam': float(g.lam), 'epsilon': float(g.epsilon), 'workers': workers}


def min_certifying_bits(g, margin: float = DEFAULT_MARGIN, tolerance: float = 1e-6,
                        low: int = ball.MIN_BITS, high: int | None = None,
                        workers: int | None = None) -> dict:
  """Smallest working precision at which ``certify_interiors`` still certifies, by
  bisection on [low, high] (default high: the plan's bits; certification is monotone
  in practice, not by proof, so the answer is the bisection's). Returns
  {'bits': b or None, 'tried': {bits: certified}}."""
  high = high or plan_realization(g.source, tolerance).bits_for(g.epsilon, g.lam)
  tried = {}

  def ok(b):
    if b not in tried:
      tried[b] = certify_interiors(g, margin, b, check_plan=False, workers=workers,
                                   tolerance=tolerance, stop_early=True)['certified']
    return tried[b]

  if not ok(high):
    return {'bits': None, 'tried': tried}
  lo, hi = low, high        # invariant: ok(hi); not ok(b) for b < lo tested
  while lo < hi:
    mid = (lo + hi) // 2
    if ok(mid):
      hi = mid
    else:
      lo = mid + 1
  return {'bits': hi, 'tried': tried}
