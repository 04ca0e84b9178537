r"""``certify_network(f, g)``: d_p(f, fl(g)) <= total over [0,1]^{n x d}, for any standard g.

Branch and bound over boxes (the package docstring gives the per-box bound E_B):

    total^p = sum_B mult * vol(B) * sum_jk E_B,jk^p              (1 <= p < inf)
    total   = max_B max_jk E_B,jk                                (p = inf)

The boxes partition the cube, or, when f and g are both permutation equivariant (a built-in
f flagged so, and g without positional encodings), the boxes that meet the sorted region
x_{1,1} <= x_{2,1} <= ... <= x_{n,1} with mult = n!: the error sum_jk |f - fl(g)|_jk^p is
the same at X and at any token permutation of X (f and g are equivariant; the float bound
D is computed from permutation-invariant magnitudes and covers any summation order), and
the sorted copies of the region cover the cube; a box that straddles the diagonal counts
whole, which only adds.

Refinement: the boxes holding the largest share of the sum are bisected along the
coordinate q with the largest sum_jk max|J_e(B)_jk,q| r_q (the mean-value term it
contributes), and re-certified from scratch: a child's bound is never taken from its parent.
It stops when total <= epsilon (``reached``), or when ``max_minutes`` is spent (the best
total so far is still a proved bound).

Numbers: every E_B and contribution is a float upper bound (outward rounding); the sum is
exact (``math.fsum``, correctly rounded, then one ulp up), and the p-th root is a rational
checked exactly (q^p >= sum). The certificate carries ``network_dict.params_hash`` of g and
refuses to be used for another network (``check_network``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from fractions import Fraction

import numpy as np

from transformer_ua import executor as executor_lib
from transformer_ua import rounding
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import network_enclosure, target_enclosures
from transformer_ua.decimal_text import bound_text
from transformer_ua.networks import network_dict
from transformer_ua.targets import bounds as target_bounds
from transformer_ua.targets import callable_checks
from transformer_ua.targets import distances
from transformer_ua.targets import functions as targets_lib

#: Boxes evaluated per NumPy batch (memory: ~ a few kB per box for small networks).
BATCH = 2048
#: Initial boxes (about; the per-axis count is the largest k with k^(n d) <= this).
INITIAL_BOXES = 512
#: At most this many boxes are bisected per round.
MAX_SPLIT = 32768
#: Sampled pairs used to refute a caller's lipschitz= / modulus=.
REFUTATION_POINTS = 4096


@dataclasses.dataclass(frozen=True)
class NetworkCertificate:
  """d_p(f, fl(g)) <= total over [0,1]^{n x d}, proved (module docstring)."""

  total: Fraction
  p: float
  arithmetic: str
  epsilon: Fraction | None
  reached: bool | None
  d: int
  n: int
  target: str
  f_side: str
  params_hash: str
  architecture: str
  params: int
  boxes: int
  rounds: int
  seconds: float
  symmetric: bool
  float_sup: float
  stopped: str
  assumptions: tuple
  runtime: str
  executed: str
  worst_centres: np.ndarray = dataclasses.field(repr=False, compare=False)

  def line(self) -> str:
    p = 'inf' if math.isinf(self.p) else f'{self.p:g}'
    head = f'd_{p}(f, fl(g)) <= {bound_text(_float_up(self.total), 4)}'
    if self.arithmetic == 'exact':
      run = 'for the exact real g'
    else:
      run = f'for g run in {self.assumptions[0].split("; no reassociation")[0]}'
    goal = ''
    if self.epsilon is not None:
      goal = (f'; epsilon {float(self.epsilon):g} ' +
              ('reached' if self.reached else f'NOT reached ({self.stopped})'))
    dom = (f'sorted tokens x {self.n}! ({self.boxes:,} boxes)' if self.symmetric
           else f'{self.boxes:,} boxes')
    floatdev = ('' if self.arithmetic == 'exact'
                else f'; sup |fl(g) - g| <= {bound_text(self.float_sup, 3)}')
    extra = f'; {self.executed}' if self.executed else ''
    return (f'{head} {run}{goal}; over [0,1]^({self.n}x{self.d}), {dom}, {self.rounds} '
            f'rounds, {self.seconds:.0f} s; target {self.target} ({self.f_side}); g '
            f'{self.params_hash[:19]} ({self.params:,} params: {self.architecture})'
            f'{floatdev}; assumes {"; ".join(self.assumptions)}; runtime: {self.runtime}'
            f'{extra}')

  def check_network(self, g, *, d: int | None = None) -> None:
    """ValueError (one line) unless ``g`` is the network this certificate is about."""
    net = as_net(g, d=self.d if d is None else d, n=self.n)
    got = network_dict.params_hash(net)
    if got != self.params_hash:
      raise ValueError(f'this certificate is for g {self.params_hash[:19]}; the network given '
                       f'is {got[:19]} (a changed weight or architecture): certify it again.')


def _float_up(x: Fraction) -> float:
  """A float >= the rational x."""
  f = float(x)
  return f if Fraction(f) >= x else float(np.nextafter(f, np.inf))


def as_net(g, *, d: int, n: int) -> network_dict.Net:
  """g as a ``network_dict.Net``: a Net, a dict, a (modules.Network, params) pair, or the
  path of an ONNX file (``flat_onnx.read``); one ValueError line otherwise."""
  if isinstance(g, (str, os.PathLike)):
    path = os.fspath(g)
    if not os.path.isfile(path):
      raise ValueError(f'g={path!r} is not a file; give a network dict, a (Network, params) '
                       'pair or an ONNX file.')
    from transformer_ua.networks import flat_onnx   # the ONNX reader is only needed for files
    return network_dict.check(flat_onnx.read(path), d=d, n=n)
  if isinstance(g, tuple) and len(g) == 2 and hasattr(g[0], 'segments'):
    net = network_dict.from_network(g[0], g[1], d=d)
    return network_dict.check(net, d=d, n=n)
  if isinstance(g, (dict, network_dict.Net)):
    return network_dict.check(g, d=d, n=n)
  raise ValueError(f'g is a {type(g).__name__}; give a network dict (network_dict.py), a '
                   '(modules.Network, params) pair, or the path of an ONNX file.')


def _check_epsilon(epsilon) -> Fraction | None:
  if epsilon is None:
    return None
  if isinstance(epsilon, (bool, np.bool_)) or \
      not isinstance(epsilon, (int, float, Fraction, np.integer, np.floating)) or \
      not math.isfinite(float(epsilon)) or epsilon <= 0:
    raise ValueError(f'epsilon={epsilon!r}; it must be a positive finite number (or None: '
                     'the best bound the budget reaches).')
  return Fraction(epsilon) if isinstance(epsilon, (int, Fraction)) else \
      Fraction(float(epsilon))


def _check_positive_int(name: str, value) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
    raise ValueError(f'{name}={value!r}; it must be a positive integer.')
  return int(value)


# ---------------------------------------------------------------------------
# The per-box bound.
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class _FSide:
  """f's side: an interval form (built-in) or a callable with its modulus."""

  form: object
  call: object
  lipschitz: float | None
  modulus: object


class Evaluator:
  """E_B [B, n, d] and the split coordinate of each box, for one (f, g, arithmetic)."""

  def __init__(self, net: network_dict.Net, fside: _FSide, arithmetic: str,
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
      self.model = self.model.with_weights_reduced()

  def evaluate(self, lo: np.ndarray, hi: np.ndarray):
    """(E [B, n, d] upper bounds of sup_B |f - fl(g)|, D [B, n, d], split [B])."""
    outs = [self._batch(lo[i:i + BATCH], hi[i:i + BATCH]) for i in range(0, len(lo), BATCH)]
    return tuple(np.concatenate([o[k] for o in outs]) for k in range(3))

  def _batch(self, lo, hi):
    """The worse of the networks' bounds (each reduction of the weights: ``nets``)."""
    outs = [self._batch_net(net, lo, hi) for net in self.nets]
    e = np.maximum.reduce([o[0] for o in outs])
    dev = np.maximum.reduce([o[1] for o in outs])
    return e, dev, outs[0][2]

  def _batch_net(self, net, lo, hi):
    c = (lo + hi) / 2                      # exact: dyadic boxes
    r = (hi - lo) / 2
    b, n, d = lo.shape
    g_c, _ = network_enclosure.enclose(net, iv.point(c), None)
    g_b, dev = network_enclosure.enclose(net, iv.box(lo, hi), self.model)
    rq = r.reshape(b, 1, 1, n * d)
    fs = self.fside
    if fs.form is not None:
      f_c = fs.form(iv.point(c))
      f_b = fs.form(iv.box(lo, hi))
      e_c = iv.sub(f_c, g_c).mag()
      jac = np.maximum(np.abs(f_b.tlo - g_b.thi), np.abs(f_b.thi - g_b.tlo))
      mv = iv.up(e_c + iv.up((jac * rq).sum(axis=-1) * (1 + 2.0 ** -40)))
      natural = iv.sub(f_b, g_b).mag()
    else:
      f_c = np.asarray(_guarded('f', fs.call, c), np.float64)
      if fs.modulus is not None:
        wiggle = np.asarray(_guarded('the modulus', fs.modulus, c, r), np.float64)
      else:
        wiggle = iv.up(fs.lipschitz * r.reshape(b, -1).max(axis=1))[:, None, None] * \
            np.ones_like(c)
      e_c = np.maximum(np.abs(f_c - g_c.lo), np.abs(g_c.hi - f_c))
      jac = g_b.tmag()
      mv = iv.up(e_c + iv.up((jac * rq).sum(axis=-1) * (1 + 2.0 ** -40)) + wiggle)
      natural = iv.up(np.maximum(np.abs(f_c - g_b.lo), np.abs(g_b.hi - f_c)) + wiggle)
    e = np.minimum(mv, natural)
    e = np.where(np.isnan(e), np.inf, e)     # an overflowed enclosure bounds nothing
    if dev is not None:
      dev = np.where(np.isnan(dev), np.inf, dev)
      e = iv.up(e + dev)
    else:
      dev = np.zeros_like(e)
    score = (jac * rq).sum(axis=(1, 2)) + 1e-300 * r.reshape(b, -1)   # ties: the widest
    split = np.argmax(score, axis=1)
    return e, dev, split


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
      att = None if b.attention is None else (
          red(b.attention[0], mode), b.attention[1], red(b.attention[2], mode),
          red(b.attention[3], mode), red(b.attention[4], mode))
      ff = None if b.ff is None else (red(b.ff[0], mode), b.ff[1], red(b.ff[2], mode),
                                      b.ff[3])
      blocks.append(network_dict.Block(att, ff))
    out.append(dataclasses.replace(net, embed=red(net.embed, mode), blocks=tuple(blocks),
                                   readout=red(net.readout, mode)))
  return tuple(out)


def build_evaluator(net_dict: dict, d: int, n: int, target_name: str, arithmetic: str,
                    operand_mode: str | None = None):
  """(net, an Evaluator) for a built-in target: the executor's build (module-level, so it
  pickles), and the per-box bound for a benchmark."""
  net = network_dict.check(net_dict, d=d, n=n)
  target = targets_lib.get_target(target_name, d=d, n=n)
  fside = _FSide(target_enclosures.interval_form(target), None, None, None)
  return net, Evaluator(net, fside, arithmetic, operand_mode)


def _evaluate_span(obj, start: int, stop: int):
  """The executor's chunk: E and split of boxes [start, stop) of the shipped round, as
  JSON lists (floats round-trip exactly)."""
  (_, ev), lo, hi = obj
  e, dev, split = ev.evaluate(lo[start:stop], hi[start:stop])
  return {'e': e.reshape(len(e), -1).tolist(), 'dev': dev.reshape(len(e), -1).tolist(),
          'split': split.tolist()}


def _build_round(net_dict, d, n, target_name, arithmetic, operand_mode, lo, hi):
  return build_evaluator(net_dict, d, n, target_name, arithmetic, operand_mode), lo, hi


# ---------------------------------------------------------------------------
# The domain and the sum.
# ---------------------------------------------------------------------------


def _initial_boxes(n: int, d: int, symmetric: bool):
  dims = n * d
  k = max(2, int(math.floor(INITIAL_BOXES ** (1.0 / dims) + 1e-9)))
  k = 2 ** int(math.floor(math.log2(k)))             # dyadic boxes: exact centres and radii
  axes = np.meshgrid(*[np.arange(k)] * dims, indexing='ij')
  idx = np.stack([a.ravel() for a in axes], axis=1).reshape(-1, n, d).astype(np.float64)
  lo, hi = idx / k, (idx + 1) / k
  if symmetric:
    keep = _meets_sorted(lo, hi)
    lo, hi = lo[keep], hi[keep]
  return lo, hi


def _meets_sorted(lo, hi) -> np.ndarray:
  """Boxes that meet {x_{1,1} <= x_{2,1} <= ... <= x_{n,1}} (greedy: smallest feasible)."""
  cur = lo[:, 0, 0].copy()
  ok = np.ones(len(lo), bool)
  for j in range(1, lo.shape[1]):
    cur = np.maximum(cur, lo[:, j, 0])
    ok &= cur <= hi[:, j, 0]
  return ok


def _contributions(e, lo, hi, p: float, mult: int) -> np.ndarray:
  """mult * vol(B) * sum_jk E^p (upper bounds), or max_jk E for p = inf."""
  b = len(e)
  flat = e.reshape(b, -1)
  if math.isinf(p):
    return flat.max(axis=1)
  if p == 1:
    pw = flat
  elif p == 2:
    pw = iv.up(flat * flat)
  else:
    pw = iv.up(np.power(flat, p) * (1 + 2.0 ** -40))
  s = iv.up(pw.sum(axis=1) + iv.sum_error(pw.sum(axis=1), pw.shape[1]))
  vol = np.prod(hi.reshape(b, -1) - lo.reshape(b, -1), axis=1)   # powers of 2: exact
  return iv.up(s * vol * mult)


def _total(contrib: np.ndarray, p: float, cause: str = '') -> Fraction:
  """An exact rational >= (sum contrib)^(1/p) (max for p = inf); ValueError (one line) when
  a box's bound overflowed (``cause``: ``_nonfinite_cause``'s phrase)."""
  if not np.all(np.isfinite(contrib)):
    raise ValueError(f'{int(np.sum(~np.isfinite(contrib)))} boxes have no finite bound ('
                     f'{cause or "the network" + chr(39) + "s values overflow float64 intervals"}'
                     ' there); no certificate.')
  if math.isinf(p):
    return Fraction(float(contrib.max()))
  s = Fraction(float(np.nextafter(math.fsum(contrib.tolist()), np.inf)))
  if p == 1:
    return s
  guess = Fraction(float(np.nextafter(float(s) ** (1.0 / p), np.inf))).limit_denominator(10**12)
  step = max(guess * Fraction(1, 10 ** 12), Fraction(1, 10 ** 300))
  pi = Fraction(p).limit_denominator(10 ** 6) if p != int(p) else Fraction(int(p))
  while not _pow_ge(guess, pi, s, p):
    guess += step
    step *= 2
  return guess


def _nonfinite_cause(evaluator: 'Evaluator', lo, hi) -> str:
  """What is not finite on the first box of lo/hi (lowprec): the certifier's float64
  interval of g's values, its interval Jacobian (the mean-value form's; the interval
  softmax's derivative meets inf - inf where scores differ by more than float64 holds), f's
  interval, or the float deviation D."""
  with np.errstate(all='ignore'):
    for net in evaluator.nets:
      g_b, dev = network_enclosure.enclose(net, iv.box(lo[:1], hi[:1]), evaluator.model)
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


def _pow_ge(q: Fraction, pi: Fraction, s: Fraction, p: float) -> bool:
  """q^p >= s, decided exactly for integer p, else with mpmath at 60 digits + margin."""
  if pi.denominator == 1 and pi == p:
    return q ** int(pi) >= s
  import mpmath
  with mpmath.workdps(60):
    return mpmath.power(mpmath.mpf(q.numerator) / q.denominator, p) >= \
        (mpmath.mpf(s.numerator) / s.denominator) * (1 + mpmath.mpf(10) ** -40)


# ---------------------------------------------------------------------------
# The public call.
# ---------------------------------------------------------------------------


def certify_network(f, g, *, d: int, n: int, p=2, arithmetic: str = 'float64',
                    epsilon=None, max_minutes: float = 10.0, lipschitz=None, modulus=None,
                    workers=None, state_dir: str | None = None, progress: bool = False,
                    runtime=None) -> NetworkCertificate:
  """Proves d_p(f, fl(g)) <= total over [0,1]^{n x d} (module docstring).

  Args:
    f: a built-in target name (closed-form interval extension) or a callable
      [batch, n, d] -> [batch, n, d] with ``lipschitz=`` (|f(X)_jk - f(Y)_jk| <= L max|X-Y|)
      or ``modulus=`` (modulus(centres [B, n, d], radii [B, n, d]) -> [B, n, d] bounds on
      sup over the box centre +- radii of |f(X) - f(centre)|, entrywise).
    g: a ``network_dict.Net`` or dict, a (modules.Network, params) pair, or an ONNX path.
    d, n: token width and number of tokens.
    p: 1 <= p < inf, or math.inf.
    arithmetic: 'exact', 'float64', 'float32', 'tf32', 'bfloat16', or a hardware model
      'tf32-a100', 'tf32-h100' (rounding.NETWORK_ARITHMETICS; rounding.py).
    epsilon: refine until total <= epsilon (or the budget ends); None: best in budget.
    max_minutes: the time budget (the estimate is checked against it before starting).
    workers: None (this process), an int (local processes) or an Executor: rounds are
      dispatched through ``executor.map_spans`` (built-in targets only); remote and
      resumed chunks are re-checked there.
    state_dir: keep each round's chunks (resumable; built-in targets only).
    progress: print one line per round.
    runtime: a ``runtime_probe.RuntimeReport`` of the runtime g will run on: refused if
      it does not meet this arithmetic's assumptions, named in the line; where it measured
      operands rounded to nearest, the TF32 / bfloat16 models use v / 2.
  """
  d = _check_positive_int('d', d)
  n = _check_positive_int('n', n)
  p = distances.check_p(p, allow_inf=True)
  eps = _check_epsilon(epsilon)
  arithmetic = rounding.check_network_arithmetic(arithmetic)
  if isinstance(max_minutes, bool) or not isinstance(max_minutes, (int, float)) or \
      not math.isfinite(max_minutes) or max_minutes <= 0:
    raise ValueError(f'max_minutes={max_minutes!r}; it must be a positive number of minutes.')
  target = _guarded('f', targets_lib.get_target, f, d=d, n=n)
  net = as_net(g, d=d, n=n)
  form = target_enclosures.interval_form(target)
  if form is not None:
    if lipschitz is not None or modulus is not None:
      target_bounds.check_lipschitz(lipschitz, target, d, n) if lipschitz is not None else None
    fside = _FSide(form, None, None, None)
    f_side = 'closed-form interval extension'
  else:
    fside, f_side = _guarded('f', _callable_side, target, d, n, lipschitz, modulus)
  runtime_text = _runtime_text(runtime, arithmetic)
  if workers is not None or state_dir is not None:
    if form is None:
      raise ValueError('workers= and state_dir= need a built-in target (a callable does not '
                       'travel to other processes); run a callable in this process.')
  if arithmetic != 'exact':
    rounding.MATMUL_MODELS[arithmetic].check_weights(net.arrays())
  run_net = net if arithmetic == 'exact' else network_dict.cast(
      net, rounding.MATMUL_MODELS[arithmetic].dtype)
  symmetric = bool(target.permutation_equivariant and form is not None
                   and net.permutation_equivariant)
  mult = math.factorial(n) if symmetric else 1
  operand_mode = getattr(runtime, 'operand_rounding', None)     # 'nearest' where probed
  evaluator = Evaluator(run_net, fside, arithmetic, operand_mode)
  iv.check_numpy_exp()
  lo, hi = _initial_boxes(n, d, symmetric)
  start = time.perf_counter()
  per_box = 0.0
  for probe in (16, 512):      # a small probe first: a huge network is refused quickly
    probe = min(probe, len(lo))
    t0 = time.perf_counter()
    evaluator.evaluate(lo[:probe], hi[:probe])
    per_box = (time.perf_counter() - t0) / probe
    estimate = per_box * len(lo)
    if estimate > 60 * max_minutes or probe == len(lo):
      break
  if estimate > 60 * max_minutes:
    raise ValueError(f'the first partition alone ({len(lo):,} boxes at {per_box * 1e3:.2f} ms '
                     f'each) is estimated at {estimate / 60:.1f} min, above max_minutes='
                     f'{max_minutes:g}; raise the budget or certify a smaller network.')
  if progress:
    print(f'certify_network: {len(lo):,} initial boxes, about {per_box * 1e3:.3f} ms each '
          f'({estimate:.1f} s); budget {max_minutes:g} min', flush=True)
  workers_obj = None
  if workers is not None or state_dir is not None:
    workers_obj = executor_lib.as_workers(workers, state_dir=state_dir)
  spec = (run_net.as_dict(), d, n, target.name, arithmetic, operand_mode)
  e, dev, split, executed = _evaluate(evaluator, lo, hi, workers_obj, spec, 0)
  contrib = _contributions(e, lo, hi, p, mult)
  target_p = None if eps is None else (float(eps) if math.isinf(p) else float(eps) ** p)
  rounds, stopped, reached = 1, 'budget', None
  deadline = start + 60 * max_minutes
  executed_all = [executed] if executed else []
  while True:
    total_now = contrib.max() if math.isinf(p) else math.fsum(contrib.tolist())
    if progress:
      shown = total_now if math.isinf(p) else total_now ** (1 / p)
      print(f'  round {rounds}: {len(lo):,} boxes, bound {bound_text(shown * (1 + 1e-9), 4)}'
            f', {time.perf_counter() - start:.0f} s', flush=True)
    if target_p is not None and total_now <= target_p * (1 - 1e-12):
      stopped, reached = 'epsilon reached', True
      break
    elapsed = time.perf_counter() - start
    if elapsed > 60 * max_minutes:
      break
    pick = _pick(contrib, p, target_p)
    parents_lo, parents_hi, axis = lo[pick], hi[pick], split[pick]
    c_lo, c_hi = _bisect(parents_lo, parents_hi, axis)
    if symmetric:
      keep = _meets_sorted(c_lo, c_hi)
      c_lo, c_hi = c_lo[keep], c_hi[keep]
    # the next round's time: a child costs about what a box cost this round
    if time.perf_counter() + per_box * len(c_lo) > deadline:
      break
    t0 = time.perf_counter()
    ce, cdev, csplit, executed = _evaluate(evaluator, c_lo, c_hi, workers_obj, spec, rounds)
    per_box = (time.perf_counter() - t0) / max(1, len(c_lo))
    if executed:
      executed_all.append(executed)
    keep_mask = np.ones(len(lo), bool)
    keep_mask[pick] = False
    lo = np.concatenate([lo[keep_mask], c_lo])
    hi = np.concatenate([hi[keep_mask], c_hi])
    e = np.concatenate([e[keep_mask], ce])
    dev = np.concatenate([dev[keep_mask], cdev])
    split = np.concatenate([split[keep_mask], csplit])
    contrib = np.concatenate([contrib[keep_mask], _contributions(ce, c_lo, c_hi, p, mult)])
    rounds += 1
  bad = ~np.isfinite(contrib)
  total = _total(contrib, p, _nonfinite_cause(evaluator, lo[bad], hi[bad]) if bad.any() else '')
  if eps is not None:              # decided on the exact total, not the float loop's sum
    reached = total <= eps
    stopped = 'epsilon reached' if reached else f'budget of {max_minutes:g} min spent'
  worst = np.argsort(-contrib)[:64]
  assumptions = _assumptions(evaluator.model)
  return NetworkCertificate(
      total=total, p=p, arithmetic=arithmetic, epsilon=eps, reached=reached, d=d, n=n,
      target=target.name, f_side=f_side, params_hash=network_dict.params_hash(net),
      architecture=net.architecture(), params=net.count_params(), boxes=len(lo),
      rounds=rounds, seconds=time.perf_counter() - start, symmetric=symmetric,
      float_sup=float(dev.max()) if len(dev) else 0.0, stopped=stopped,
      assumptions=assumptions, runtime=runtime_text,
      executed='; '.join(sorted(set(executed_all))),
      worst_centres=(lo[worst] + hi[worst]) / 2)


def _assumptions(model) -> tuple:
  out = []
  if model is None:
    out.append('exact real arithmetic (no float runtime covered)')
  else:
    out.append(f'{model.describe()}; no reassociation across operations, no fast-math')
    out.append(rounding.EXP_ASSUMPTION)
    out.append(f'the input rounded to {model.storage.name} (|fl(X) - X| <= u |X|)')
  out.append("certifier: outward-rounded float64 intervals, NumPy exp within "
             f"2^{int(math.log2(iv.EXP_SLACK))} (checked against mpmath)")
  return tuple(out)


def _guarded(what: str, fn, *args, **kwargs):
  """fn(*args, **kwargs), with any exception other than a ValueError raised from the
  caller's ``what`` (f or its modulus) turned into one ValueError line."""
  try:
    return fn(*args, **kwargs)
  except ValueError:
    raise
  except Exception as err:  # noqa: BLE001 -- a caller's function may raise anything
    raise ValueError(f'{what} raised {type(err).__name__} ({err}) on points of [0,1]^(n x d)'
                     f'; {what} must be defined on the whole cube.') from None


def _runtime_text(runtime, arithmetic: str) -> str:
  if runtime is None:
    return 'not probed (certify.check_runtime measures these assumptions on a runtime)'
  if not hasattr(runtime, 'ok_for'):
    raise ValueError(f'runtime={runtime!r} is a {type(runtime).__name__}; give the report '
                     f'of a probe: runtime=certify.check_runtime({runtime!r}, '
                     f'arithmetic={arithmetic!r}) (a RuntimeReport), or None.')
  ok, why = runtime.ok_for(arithmetic)
  if not ok:
    raise ValueError(f'the probed runtime does not meet the {arithmetic} model: {why}.')
  return runtime.line()


def _callable_side(target, d, n, lipschitz, modulus):
  if modulus is not None and lipschitz is not None:
    raise ValueError('give lipschitz= or modulus=, not both.')
  if modulus is not None:
    if not callable(modulus):
      raise ValueError('modulus= must be a function (centres [B, n, d], radii [B, n, d]) -> '
                       '[B, n, d].')
    _refute_modulus(target, modulus, d, n)
    return _FSide(None, target, None, modulus), 'callable, modulus given by the caller'
  lip = target_bounds.check_lipschitz(lipschitz, target, d, n)
  callable_checks.refute_lipschitz(target, lip, d=d, n=n)
  source = target_bounds.lipschitz_source(lip, target, d, n)
  return (_FSide(None, target, float(iv.up(float(lip))), None),
          f'callable, L = {callable_checks.show_constant(lip)} {source}, first order')


def _refute_modulus(target, modulus, d, n):
  rng = np.random.default_rng(0)
  c = rng.random((REFUTATION_POINTS // 8, n, d))
  r = np.minimum(np.minimum(c, 1 - c), rng.uniform(0, 0.25, (len(c), 1, 1)) *
                 np.ones_like(c))
  try:
    bound = np.asarray(modulus(c, r), np.float64)
  except Exception as err:  # noqa: BLE001 -- a caller's function may raise anything
    raise ValueError(f'modulus(centres, radii) failed: {type(err).__name__} ({err}); it '
                     'must map [B, n, d] arrays to [B, n, d] bounds.') from None
  if bound.shape != c.shape or not np.all(np.isfinite(bound)) or np.any(bound < 0):
    raise ValueError('modulus(centres, radii) must return finite bounds >= 0 of shape '
                     '[B, n, d].')
  for _ in range(8):
    x = c + r * rng.uniform(-1, 1, c.shape)
    diff = np.abs(target(x) - target(c))
    bad = diff > bound
    if np.any(bad):
      i = int(np.argmax((diff - bound).reshape(len(c), -1).max(axis=1)))
      raise ValueError(f'the modulus is refuted: |f(X) - f(c)| = {diff[i].max():.6g} > '
                       f'{bound[i][diff[i] > bound[i]].min():.6g} at a sampled point of a '
                       'box; it must bound sup over the box of |f(X) - f(c)|.')


def _evaluate(evaluator: Evaluator, lo, hi, workers, spec, round_index: int):
  if workers is None:
    e, dev, split = evaluator.evaluate(lo, hi)
    return e, dev, split, ''
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
  split = np.concatenate([np.asarray(r['split'], np.int64) for _, r in mapped.results])
  return e, dev, split, mapped.describe()


def _pick(contrib: np.ndarray, p: float, target_p: float | None) -> np.ndarray:
  """The boxes to bisect: the largest shares, until they hold half the sum (p < inf), or
  every box above the goal (p = inf); at least 1, at most MAX_SPLIT."""
  order = np.argsort(-contrib)
  if math.isinf(p):
    goal = target_p if target_p is not None else 0.5 * contrib.max()
    count = int(np.sum(contrib > goal))
  else:
    cum = np.cumsum(contrib[order])
    count = int(np.searchsorted(cum, 0.5 * cum[-1])) + 1
  count = max(1, min(count, MAX_SPLIT, len(contrib)))
  return order[:count]


def _bisect(lo, hi, axis):
  b, n, d = lo.shape
  flat_lo, flat_hi = lo.reshape(b, -1), hi.reshape(b, -1)
  mid = (flat_lo[np.arange(b), axis] + flat_hi[np.arange(b), axis]) / 2
  left_hi = flat_hi.copy()
  left_hi[np.arange(b), axis] = mid
  right_lo = flat_lo.copy()
  right_lo[np.arange(b), axis] = mid
  new_lo = np.concatenate([flat_lo, right_lo]).reshape(2 * b, n, d)
  new_hi = np.concatenate([left_hi, flat_hi]).reshape(2 * b, n, d)
  return new_lo, new_hi
