r"""``certify_network(f, g)``: d_p(f, fl(g)) <= total over [0,1]^{n x d}, for any standard g.

Branch and bound over boxes (the package docstring gives the per-box bound E_B):

    total^p = sum_B mult * vol_B * sum_jk E_B,jk^p                (1 <= p < inf)
    total   = max_B max_jk E_B,jk                                  (p = inf)

The boxes partition the cube (mult = 1, vol_B = vol(B)), or, when f and g are both
permutation equivariant (a built-in f flagged so, and g without positional encodings or a
causal mask), the boxes that meet the sorted region R = {x_{1,1} <= x_{2,1} <= ... <=
x_{n,1}} in positive volume, with mult = n! and vol_B = vol(B cap R), the exact rational
of sorted_volume.py rounded up: the error h(X) = sum_jk |f - fl(g)|_jk^p is the same at X and
at any token permutation of X (f and g are equivariant; the float bound D is computed from
permutation-invariant magnitudes and covers any summation order), the n! sorted copies of R
tile the cube, so int h = n! int_R h <= n! sum_B sup_B h vol(B cap R).

Refinement: the boxes holding the largest share of the sum are bisected along the
coordinate q with the largest sum_jk max|J_e(B)_jk,q| r_q (the mean-value term it
contributes), and re-certified from scratch: a child's bound is never taken from its parent.
With box_bound.SPLIT_CANDIDATES = K > 1 both halves along each of the K largest terms are evaluated
and the pair with the lowest contributions kept (split by measured gain). Measured on the
hand-built network (benchmarks/certify_split.py, 1.3x its d_2, float32): at equal boxes K = 3
lowers the total by 0.3-1%, but costs K times the evaluations, so at equal seconds K = 1
is ahead (n=4, 8 s: 0.0690 vs 0.0752): K = 1 is the default.
It stops when total <= epsilon (``reached``), when ``max_minutes`` is spent, or,
deterministically, before a round that would exceed ``max_boxes`` boxes or ``max_rounds``
rounds (the best total so far is still a proved bound). Each round records (boxes,
seconds, total, floor) in ``NetworkCertificate.history``: two runs stopped at the same
max_boxes / max_rounds have evaluated the same boxes and agree on the total.

Numbers: every E_B and contribution is a float upper bound (outward rounding); the sum is
exact (``math.fsum``, correctly rounded, then one ulp up), and the p-th root is a rational
checked exactly (q^p >= sum). The certificate carries ``network_dict.params_hash`` of g and
refuses to be used for another network (``check_network``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from fractions import Fraction

import numpy as np

from transformer_ua import executor as executor_lib
from transformer_ua import rounding
from transformer_ua.certify import box_bound, box_sums, callable_enclosures, cost_model
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import float_deviation, sorted_volume, target_enclosures
from transformer_ua.decimal_text import bound_text
from transformer_ua.networks import network_apply, network_dict
from transformer_ua.networks import source_check
from transformer_ua.targets import bounds as target_bounds
from transformer_ua.targets import callable_checks
from transformer_ua.targets import distances
from transformer_ua.targets import functions as targets_lib

#: The automatic box kernel starts at the first round with this many new boxes: its
#: compilation, 10-27 s on 2 loaded CPU cores, pays only on long runs (it measured 1.0-2.6x
#: NumPy's boxes/s on 8,192 boxes, benchmarks/certify_kernel.py; a round of 50,000 boxes
#: takes NumPy 15-60 s there).
KERNEL_MIN_BOXES = 50_000
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
  #: per round (boxes, seconds, total, floor), the cost model's input (cost_model.py)
  history: tuple = dataclasses.field(default=(), repr=False, compare=False)
  #: the cost model's projection to epsilon when it was not reached ('' otherwise)
  projection: str = dataclasses.field(default='', repr=False, compare=False)

  def line(self) -> str:
    p = 'inf' if math.isinf(self.p) else f'{self.p:g}'
    head = f'd_{p}(f, fl(g)) <= {bound_text(float_deviation.float_up(self.total), 4)}'
    if self.arithmetic == 'exact':
      run = 'for the exact real g'
    else:
      run = f'for g run in {self.assumptions[0].split("; no reassociation")[0]}'
    goal = ''
    if self.epsilon is not None:
      goal = (f'; epsilon {float(self.epsilon):g} ' +
              ('reached' if self.reached else f'NOT reached ({self.stopped}; ' +
                                                  (self.projection or
                                                   'too few rounds for a projection') +
                                                  ')'))
    elif self.stopped.startswith('max_'):
      goal = f'; stopped: {self.stopped}'
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
    net, _ = source_check.read_network(g, d=self.d if d is None else d, n=self.n,
                                       arithmetic=self.arithmetic)
    got = network_dict.params_hash(net)
    if got != self.params_hash:
      raise ValueError(f'this certificate is for g {self.params_hash[:19]}; the network given '
                       f'is {got[:19]} (a changed weight or architecture): certify it again.')


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
# The public call.
# ---------------------------------------------------------------------------


def certify_network(f, g, *, d: int, n: int, p=2, arithmetic: str = 'float64',
                    epsilon=None, max_minutes: float = 10.0, lipschitz=None, modulus=None,
                    jacobian=None, hessian=None, workers=None, state_dir: str | None = None, progress: bool | None = None,
                    runtime=None, max_boxes: int | None = None,
                    max_rounds: int | None = None, probe_minutes: float | None = None,
                    box_kernel: bool | None = None) -> NetworkCertificate:
  """Proves d_p(f, fl(g)) <= total over [0,1]^{n x d} (module docstring).

  Args:
    f: a built-in target name (closed-form interval extension) or a callable
      [batch, n, d] -> [batch, n, d] with ``lipschitz=`` (|f(X)_jk - f(Y)_jk| <= L max|X-Y|)
      or ``modulus=`` (modulus(centres [B, n, d], radii [B, n, d]) -> [B, n, d] bounds on
      sup over the box centre +- radii of |f(X) - f(centre)|, entrywise), both first
      order; or with ``jacobian=`` and ``hessian=`` (second order, callable_enclosures.py).
    g: anything ``source_check.read_network`` reads (a dict, an ONNX path, a torch or
      Flax module, (modules.Network, params)), checked against its source.
    d, n: token width and number of tokens.
    p: 1 <= p < inf, or math.inf.
    arithmetic: 'exact', 'float64', 'float32', 'tf32', 'bfloat16', or a hardware model
      'tf32-a100', 'tf32-h100' (rounding.NETWORK_ARITHMETICS; rounding.py).
    epsilon: refine until total <= epsilon (or the budget ends); None: best in budget.
    max_minutes: the time budget (the estimate is checked against it before starting).
    jacobian, hessian: a callable f's second-order bound: jacobian(X [B, n, d]) ->
      [B, n, d, n, d] (entry [b, j, k, l, m] = d f(X)_jk / d X_lm) and H >= 0 with
      |f(X) - f(c) - J_f(c)(X - c)| <= H/2 max|X - c|^2 entrywise; the jacobian is compared
      with central differences, H refuted on sampled pairs, both named in the line.
    workers: None (this process), an int (local processes) or an Executor: rounds are
      dispatched through ``executor.map_spans`` (built-in targets only); remote and
      resumed chunks are re-checked there.
    state_dir: keep each round's chunks (resumable; built-in targets only).
    progress: a tqdm bar (boxes, rounds, the current total rounded up); None: on a terminal
      only, True: also on a file or pipe (plain lines, ``outputs.progress``), False: off.
    runtime: a ``runtime_report.RuntimeReport`` of the runtime g will run on: refused if
      it does not meet this arithmetic's assumptions, named in the line; where it measured
      operands rounded to nearest, the TF32 / bfloat16 models use v / 2.
    max_boxes: stop before a round that would leave more boxes than this (None: no limit).
    max_rounds: stop after this many rounds (None: no limit).
    probe_minutes: with ``epsilon``, the first rounds (this many minutes, and enough rounds
      for a fit) are a probe: when the cost model (cost_model.py) projects more than
      ``max_minutes`` to reach epsilon, the run is refused in one line with the projection
      (None: no probe; a run not reaching epsilon prints the projection in its line).
    box_kernel: g's enclosures from the jit kernel (box_kernel.py) instead of NumPy: True
      from the first round, False never, None from the first round of KERNEL_MIN_BOXES
      new boxes on (a box count: the same rounds in every run), falling back to NumPy
      where the kernel cannot run soundly or lacks an op; in this process only (not with
      workers=).
  """
  d = _check_positive_int('d', d)
  n = _check_positive_int('n', n)
  p = distances.check_p(p, allow_inf=True)
  eps = _check_epsilon(epsilon)
  arithmetic = rounding.check_network_arithmetic(arithmetic)
  if isinstance(max_minutes, bool) or not isinstance(max_minutes, (int, float)) or \
      not math.isfinite(max_minutes) or max_minutes <= 0:
    raise ValueError(f'max_minutes={max_minutes!r}; it must be a positive number of minutes.')
  max_boxes = None if max_boxes is None else _check_positive_int('max_boxes', max_boxes)
  max_rounds = None if max_rounds is None else _check_positive_int('max_rounds', max_rounds)
  if probe_minutes is not None and (
      isinstance(probe_minutes, bool) or not isinstance(probe_minutes, (int, float)) or
      not math.isfinite(probe_minutes) or probe_minutes < 0):
    raise ValueError(f'probe_minutes={probe_minutes!r}; it must be a number of minutes >= 0 '
                     '(or None: no probe).')
  target = box_bound.guarded('f', targets_lib.get_target, f, d=d, n=n)
  net, source = source_check.read_network(g, d=d, n=n, arithmetic=arithmetic)
  form = target_enclosures.interval_form(target)
  f_assumptions = ()
  if form is not None:
    if jacobian is not None or hessian is not None:
      raise ValueError(f'jacobian= and hessian= are for a callable target; {target.name!r} is '
                       'a built-in with a closed-form interval extension: omit them.')
    if lipschitz is not None or modulus is not None:
      target_bounds.check_lipschitz(lipschitz, target, d, n) if lipschitz is not None else None
    fside = box_bound.FSide(form, None)
    f_side = 'closed-form interval extension'
  else:
    fside, f_side, f_assumptions = box_bound.guarded(
        'f', _callable_side, target, d, n, lipschitz, modulus, jacobian, hessian)
  runtime_text = _runtime_text(runtime, arithmetic)
  if box_kernel not in (None, True, False):
    raise ValueError(f'box_kernel={box_kernel!r}; it must be True, False or None (automatic).')
  if box_kernel and (workers is not None or state_dir is not None):
    raise ValueError('box_kernel=True runs in this process; it does not go with workers= or '
                     'state_dir= (their chunks are evaluated by NumPy).')
  if workers is not None or state_dir is not None:
    box_kernel = False
    if form is None:
      raise ValueError('workers= and state_dir= need a built-in target (a callable does not '
                       'travel to other processes); run a callable in this process.')
  if arithmetic != 'exact':
    rounding.MATMUL_MODELS[arithmetic].check_weights(net.arrays())
  run_net = net if arithmetic == 'exact' else network_apply.cast(
      net, rounding.MATMUL_MODELS[arithmetic].dtype)
  symmetric = bool(target.permutation_equivariant and form is not None
                   and net.permutation_equivariant)
  mult = math.factorial(n) if symmetric else 1
  operand_mode = getattr(runtime, 'operand_rounding', None)     # 'nearest' where probed
  evaluator = box_bound.Evaluator(run_net, fside, arithmetic, operand_mode)
  iv.check_numpy_exp()
  kernel_from = None             # the round from which the kernel evaluated the boxes
  if box_kernel:
    evaluator.use_kernel()
    kernel_from = 1
  lo, hi = box_sums.initial_boxes(n, d, symmetric)
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
                     f'each) is estimated at {estimate / 60:.2g} min, above max_minutes='
                     f'{max_minutes:g}; raise the budget or certify a smaller network.')
  bar = _progress_bar(progress, max_rounds)
  workers_obj = None
  if workers is not None or state_dir is not None:
    workers_obj = executor_lib.as_workers(workers, state_dir=state_dir)
  spec = (run_net.as_dict(), d, n, target.name, arithmetic, operand_mode)
  e, dev, split, centre, executed = box_bound.evaluate_round(evaluator, lo, hi, workers_obj,
                                                             spec, 0)
  vol = box_sums.volumes(lo, hi, symmetric)
  contrib = box_sums.contributions(e, vol, p, mult)
  floor = box_sums.contributions(centre, vol, p, mult)
  target_p = None if eps is None else (float(eps) if math.isinf(p) else float(eps) ** p)
  rounds, stopped, reached = 1, 'budget', None
  deadline = start + 60 * max_minutes
  executed_all = [executed] if executed else []
  history = []
  while True:
    total_now = contrib.max() if math.isinf(p) else math.fsum(contrib.tolist())
    floor_now = floor.max() if math.isinf(p) else math.fsum(floor.tolist())
    history.append((len(lo), time.perf_counter() - start, box_sums.float_total(total_now, p),
                    box_sums.float_total(floor_now, p)))
    if bar is not None:
      bar.update(1)
      bar.set_postfix_str(f'{len(lo):,} boxes, total <= {bound_text(history[-1][2], 4)}')
    if target_p is not None and total_now <= target_p * (1 - 1e-12):
      stopped, reached = 'epsilon reached', True
      break
    elapsed = time.perf_counter() - start
    if probe_minutes is not None and eps is not None and elapsed >= 60 * probe_minutes:
      proj = cost_model.project(history, float(eps), p)
      if proj is not None:
        probe_minutes = None                         # one verdict
        if proj.minutes > max_minutes:
          if bar is not None:
            bar.close()
          raise ValueError(f'(d, n) = ({d}, {n}): the probe of {rounds} rounds '
                           f'({elapsed:.0f} s) projects {proj.minutes:.3g} min, above '
                           f'max_minutes={max_minutes:g}; {proj.text()}.')
    if elapsed > 60 * max_minutes:
      break
    if max_rounds is not None and rounds >= max_rounds:
      stopped = f'max_rounds={max_rounds} reached'
      break
    pick = box_sums.pick_boxes(contrib, p, target_p)
    cand = split[pick][:, :box_bound.SPLIT_CANDIDATES]   # [P, K] candidate axes, best first
    c_lo, c_hi = box_sums.bisect_each(lo[pick], hi[pick], cand)  # [K, 2, P, n, d]
    shape = c_lo.shape
    c_lo, c_hi = c_lo.reshape((-1,) + shape[3:]), c_hi.reshape((-1,) + shape[3:])
    alive = sorted_volume.meets_sorted(c_lo, c_hi) if symmetric else np.ones(len(c_lo), bool)
    if cand.shape[1] == 1 and max_boxes is not None and \
        len(lo) - len(pick) + int(alive.sum()) > max_boxes:
      stopped = f'max_boxes={max_boxes:,} reached'
      break
    # the next round's time: a child costs about what a box cost this round
    if time.perf_counter() + per_box * int(alive.sum()) > deadline:
      break
    if box_kernel is None and kernel_from is None and int(alive.sum()) >= KERNEL_MIN_BOXES:
      try:                                         # jax is a core requirement
        evaluator.use_kernel()
        box_kernel, kernel_from = True, rounds + 1
      except ValueError:
        box_kernel = False                         # NumPy stays: it needs nothing more
    t0 = time.perf_counter()
    ce, cdev, csplit, ccentre, executed = box_bound.evaluate_round(
        evaluator, c_lo[alive], c_hi[alive], workers_obj, spec, rounds)
    per_box = (time.perf_counter() - t0) / max(1, int(alive.sum()))
    if executed:
      executed_all.append(executed)
    c_vol = box_sums.volumes(c_lo[alive], c_hi[alive], symmetric)
    c_contrib = np.zeros(len(c_lo))
    c_contrib[alive] = box_sums.contributions(ce, c_vol, p, mult)
    pair = c_contrib.reshape(shape[:3])                  # [K, 2, P]
    gain = pair.max(axis=1) if math.isinf(p) else pair.sum(axis=1)
    best = np.argmin(gain, axis=0)                       # measured: the lowest children
    chosen = np.zeros(shape[:3], bool)
    chosen[best, :, np.arange(shape[2])] = True
    chosen = chosen.reshape(-1)[alive]                   # among the evaluated children
    if max_boxes is not None and len(lo) - len(pick) + int(chosen.sum()) > max_boxes:
      stopped = f'max_boxes={max_boxes:,} reached'
      break
    keep_mask = np.ones(len(lo), bool)
    keep_mask[pick] = False
    lo = np.concatenate([lo[keep_mask], c_lo[alive][chosen]])
    hi = np.concatenate([hi[keep_mask], c_hi[alive][chosen]])
    e = np.concatenate([e[keep_mask], ce[chosen]])
    dev = np.concatenate([dev[keep_mask], cdev[chosen]])
    split = np.concatenate([split[keep_mask], csplit[chosen]])
    contrib = np.concatenate([contrib[keep_mask], c_contrib[alive][chosen]])
    floor = np.concatenate([floor[keep_mask],
                            box_sums.contributions(ccentre[chosen], c_vol[chosen], p, mult)])
    rounds += 1
  if bar is not None:
    bar.close()
  bad = ~np.isfinite(contrib)
  cause = box_bound.nonfinite_cause(evaluator, lo[bad], hi[bad]) if bad.any() else ''
  total = box_sums.exact_total(contrib, p, cause)
  if eps is not None:              # decided on the exact total, not the float loop's sum
    reached = total <= eps
    if reached:
      stopped = 'epsilon reached'
    elif stopped in ('budget', 'epsilon reached'):
      stopped = f'budget of {max_minutes:g} min spent'
  if stopped == 'budget':
    stopped = f'budget of {max_minutes:g} min spent'
  worst = np.argsort(-contrib)[:64]
  assumptions = _assumptions(evaluator.model) + tuple(
      float_deviation.assumptions(net, evaluator.model)) + (f'g: {source}',) + f_assumptions
  if kernel_from is not None:
    import jax
    assumptions += (f"box kernel (jax.jit on {jax.default_backend()}) from round "
                    f"{kernel_from}: XLA's exp and expm1 within 2^{int(math.log2(iv.EXP_SLACK))}"
                    ' (checked against mpmath), outward steps of 2^-1021 for flushed '
                    'subnormals',)
  return NetworkCertificate(
      total=total, p=p, arithmetic=arithmetic, epsilon=eps, reached=reached, d=d, n=n,
      target=target.name, f_side=f_side, params_hash=network_dict.params_hash(net),
      architecture=net.architecture(), params=net.count_params(), boxes=len(lo),
      rounds=rounds, seconds=time.perf_counter() - start, symmetric=symmetric,
      float_sup=float(dev.max()) if len(dev) else 0.0, stopped=stopped,
      assumptions=assumptions, runtime=runtime_text,
      executed='; '.join(sorted(set(executed_all))), history=tuple(history),
      projection=_projection_text(history, eps, reached, p),
      worst_centres=(lo[worst] + hi[worst]) / 2)


def _projection_text(history, eps, reached, p) -> str:
  if eps is None or reached:
    return ''
  proj = cost_model.project(history, float(eps), p)
  return '' if proj is None else proj.text()


def _progress_bar(progress, max_rounds):
  """A tqdm bar of rounds (None where off: ``progress`` None means on a terminal only)."""
  import sys
  if progress is None:
    isatty = getattr(sys.stderr, 'isatty', None)
    progress = bool(isatty is not None and isatty())
  if not progress:
    return None
  from transformer_ua import outputs   # tqdm only when a bar is shown
  return outputs.progress(total=max_rounds, desc='certify_network', unit='round')


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


def _callable_side(target, d, n, lipschitz, modulus, jacobian, hessian):
  """(FSide, the f-side text, assumptions): the callable's enclosure decided once here,
  first order (lipschitz= or modulus=) or second order (jacobian= and hessian=)."""
  stated = [k for k, v in (('lipschitz=', lipschitz), ('modulus=', modulus),
                           ('hessian=', hessian)) if v is not None]
  if len(stated) > 1:
    raise ValueError(f'give one of lipschitz=, modulus= or jacobian= with hessian=, not '
                     f'{" and ".join(stated)}.')
  if (jacobian is None) != (hessian is None):
    raise ValueError('jacobian= and hessian= go together (the second-order bound |f(X) - f(c)'
                     ' - J_f(c)(X - c)| <= H/2 max|X - c|^2 needs both); give both, or '
                     'lipschitz=.')
  if hessian is not None:
    local, text, assumption = callable_enclosures.second_order(
        target, jacobian, hessian, d=d, n=n, points=REFUTATION_POINTS)
    return box_bound.FSide(None, local), text, (assumption,)
  if modulus is not None:
    if not callable(modulus):
      raise ValueError('modulus= must be a function (centres [B, n, d], radii [B, n, d]) -> '
                       '[B, n, d].')
    _refute_modulus(target, modulus, d, n)
    return (box_bound.FSide(None, callable_enclosures.FirstOrder(target, None, modulus)),
            'callable, modulus given by the caller', ())
  lip = target_bounds.check_lipschitz(lipschitz, target, d, n)
  callable_checks.refute_lipschitz(target, lip, d=d, n=n)
  source = target_bounds.lipschitz_source(lip, target, d, n)
  local = callable_enclosures.FirstOrder(target, float(iv.up(float(lip))))
  return (box_bound.FSide(None, local),
          f'callable, L = {callable_checks.show_constant(lip)} {source}, first order', ())


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


