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
With SPLIT_CANDIDATES = K > 1 both halves along each of the K largest terms are evaluated
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
from transformer_ua.certify import cost_model
from transformer_ua.certify import intervals as iv
from transformer_ua.certify import network_enclosure, sorted_volume, target_enclosures
from transformer_ua.decimal_text import bound_text
from transformer_ua.networks import network_dict
from transformer_ua.networks import source_check
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
#: Coordinates tried per bisected box (the largest mean-value terms): both halves of each
#: are evaluated and the split whose children's contributions sum lowest is kept.
SPLIT_CANDIDATES = 1
#: The automatic box kernel starts at the first round with this many new boxes (its
#: compilation, 10-20 s on 2 loaded cores, pays only on long runs: ``_kernel_backend``).
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
    head = f'd_{p}(f, fl(g)) <= {bound_text(_float_up(self.total), 4)}'
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


def _float_up(x: Fraction) -> float:
  """A float >= the rational x."""
  f = float(x)
  return f if Fraction(f) >= x else float(np.nextafter(f, np.inf))


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
  fside = _FSide(target_enclosures.interval_form(target), None, None, None)
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
    keep = sorted_volume.meets_sorted(lo, hi)
    lo, hi = lo[keep], hi[keep]
  return lo, hi


def _volumes(lo, hi, sorted_part: bool) -> np.ndarray:
  """vol(B cap R) with ``sorted_part`` (sorted_volume.py: exact, rounded up), else vol(B)."""
  if sorted_part:
    return sorted_volume.volumes_up(lo, hi)
  return np.prod((hi - lo).reshape(len(lo), -1), axis=1)     # powers of 2: exact


def _contributions(e, vol, p: float, mult: int) -> np.ndarray:
  """mult * vol * sum_jk E^p (upper bounds), or max_jk E for p = inf."""
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
  return iv.up(iv.up(s * vol) * mult)


def _total(contrib: np.ndarray, p: float, cause: str = '') -> Fraction:
  """An exact rational >= (sum contrib)^(1/p) (max for p = inf); ValueError (one line) when
  a box's bound overflowed (``cause``: ``_nonfinite_cause``'s phrase)."""
  if not np.all(np.isfinite(contrib)):
    raise ValueError(f'{int(np.sum(~np.isfinite(contrib)))} of {len(contrib):,} boxes have no '
                     f'finite bound when the run stopped ({cause or "no finite bound"} there); '
                     'no certificate.')
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
                    workers=None, state_dir: str | None = None, progress: bool | None = None,
                    runtime=None, max_boxes: int | None = None,
                    max_rounds: int | None = None, probe_minutes: float | None = None,
                    box_kernel: bool | None = None) -> NetworkCertificate:
  """Proves d_p(f, fl(g)) <= total over [0,1]^{n x d} (module docstring).

  Args:
    f: a built-in target name (closed-form interval extension) or a callable
      [batch, n, d] -> [batch, n, d] with ``lipschitz=`` (|f(X)_jk - f(Y)_jk| <= L max|X-Y|)
      or ``modulus=`` (modulus(centres [B, n, d], radii [B, n, d]) -> [B, n, d] bounds on
      sup over the box centre +- radii of |f(X) - f(centre)|, entrywise).
    g: anything ``source_check.read_network`` reads (a dict, an ONNX path, a torch or
      Flax module, (modules.Network, params)), checked against its source.
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
  target = _guarded('f', targets_lib.get_target, f, d=d, n=n)
  net, source = source_check.read_network(g, d=d, n=n, arithmetic=arithmetic)
  form = target_enclosures.interval_form(target)
  if form is not None:
    if lipschitz is not None or modulus is not None:
      target_bounds.check_lipschitz(lipschitz, target, d, n) if lipschitz is not None else None
    fside = _FSide(form, None, None, None)
    f_side = 'closed-form interval extension'
  else:
    fside, f_side = _guarded('f', _callable_side, target, d, n, lipschitz, modulus)
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
  run_net = net if arithmetic == 'exact' else network_dict.cast(
      net, rounding.MATMUL_MODELS[arithmetic].dtype)
  symmetric = bool(target.permutation_equivariant and form is not None
                   and net.permutation_equivariant)
  mult = math.factorial(n) if symmetric else 1
  operand_mode = getattr(runtime, 'operand_rounding', None)     # 'nearest' where probed
  evaluator = Evaluator(run_net, fside, arithmetic, operand_mode)
  iv.check_numpy_exp()
  kernel_from = None             # the round from which the kernel evaluated the boxes
  if box_kernel:
    evaluator.use_kernel()
    kernel_from = 1
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
  bar = _progress_bar(progress, max_rounds)
  workers_obj = None
  if workers is not None or state_dir is not None:
    workers_obj = executor_lib.as_workers(workers, state_dir=state_dir)
  spec = (run_net.as_dict(), d, n, target.name, arithmetic, operand_mode)
  e, dev, split, centre, executed = _evaluate(evaluator, lo, hi, workers_obj, spec, 0)
  vol = _volumes(lo, hi, symmetric)
  contrib = _contributions(e, vol, p, mult)
  floor = _contributions(centre, vol, p, mult)
  target_p = None if eps is None else (float(eps) if math.isinf(p) else float(eps) ** p)
  rounds, stopped, reached = 1, 'budget', None
  deadline = start + 60 * max_minutes
  executed_all = [executed] if executed else []
  history = []
  while True:
    total_now = contrib.max() if math.isinf(p) else math.fsum(contrib.tolist())
    floor_now = floor.max() if math.isinf(p) else math.fsum(floor.tolist())
    history.append((len(lo), time.perf_counter() - start, _float_total(total_now, p),
                    _float_total(floor_now, p)))
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
    pick = _pick(contrib, p, target_p)
    cand = split[pick][:, :SPLIT_CANDIDATES]             # [P, K] candidate axes, best first
    c_lo, c_hi = _bisect_each(lo[pick], hi[pick], cand)  # [K, 2, P, n, d]
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
      box_kernel = _kernel_backend()
      if box_kernel:
        try:
          evaluator.use_kernel()
          kernel_from = rounds + 1
        except ValueError:
          box_kernel = False                       # NumPy stays: it needs nothing more
    t0 = time.perf_counter()
    ce, cdev, csplit, ccentre, executed = _evaluate(evaluator, c_lo[alive], c_hi[alive],
                                                    workers_obj, spec, rounds)
    per_box = (time.perf_counter() - t0) / max(1, int(alive.sum()))
    if executed:
      executed_all.append(executed)
    c_vol = _volumes(c_lo[alive], c_hi[alive], symmetric)
    c_contrib = np.zeros(len(c_lo))
    c_contrib[alive] = _contributions(ce, c_vol, p, mult)
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
                            _contributions(ccentre[chosen], c_vol[chosen], p, mult)])
    rounds += 1
  if bar is not None:
    bar.close()
  bad = ~np.isfinite(contrib)
  total = _total(contrib, p, _nonfinite_cause(evaluator, lo[bad], hi[bad]) if bad.any() else '')
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
      network_enclosure.assumptions(net, evaluator.model)) + (f'g: {source}',)
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


def _kernel_backend() -> bool:
  """Whether the automatic kernel can be used: jax is importable (on 2 loaded CPU cores the
  kernel measured 1.0-2.6x NumPy's boxes/s on 8,192 boxes after 10-27 s of compiling, two
  runs of benchmarks/certify_kernel.py; a round of 50,000 boxes takes NumPy 15-60 s there)."""
  try:
    import jax  # noqa: F401
  except ImportError:
    return False
  return True


def _float_total(total_p: float, p: float) -> float:
  """A float >= (total_p)^(1/p) (the round's record; the certificate's total is exact)."""
  if math.isinf(p) or p == 1:
    return float(np.nextafter(total_p, np.inf))
  return float(iv.up(float(np.nextafter(total_p, np.inf)) ** (1.0 / p) * (1 + 2.0 ** -40)))


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


def _pick(contrib: np.ndarray, p: float, target_p: float | None) -> np.ndarray:
  """The boxes to bisect: the largest shares, until they hold half the sum (p < inf), or
  every box above the goal (p = inf); at least 1, at most MAX_SPLIT. Boxes without a
  finite bound (a LayerNorm whose variance may reach 0 there) go first, all of them."""
  unbounded = np.flatnonzero(~np.isfinite(contrib))
  if len(unbounded):
    return unbounded[:MAX_SPLIT]
  order = np.argsort(-contrib)
  if math.isinf(p):
    goal = target_p if target_p is not None else 0.5 * contrib.max()
    count = int(np.sum(contrib > goal))
  else:
    cum = np.cumsum(contrib[order])
    count = int(np.searchsorted(cum, 0.5 * cum[-1])) + 1
  count = max(1, min(count, MAX_SPLIT, len(contrib)))
  return order[:count]


def _bisect_each(lo, hi, axes):
  """Both halves of each box [P, n, d] along each of its candidate axes [P, K]:
  [K, 2, P, n, d] lows and highs (left half first)."""
  los, his = [], []
  for c in range(axes.shape[1]):
    c_lo, c_hi = _bisect(lo, hi, axes[:, c])
    los.append(c_lo.reshape((2,) + lo.shape))
    his.append(c_hi.reshape((2,) + lo.shape))
  return np.stack(los), np.stack(his)


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
