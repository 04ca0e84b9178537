r"""Theorems 2 and 3 as a call: ``approximate(f, epsilon)`` -> g with a proof of d_p(f, g) <= epsilon.

The certificate (``yun.bounds.certificate.certify_lp``) bounds, for a network g built at the
resolution N = 1/delta with cube interiors shrunk by m delta per side,

    d_p(f, g) <= T1(N) + T2(N) + T3(N; m, tol)

    T1 = d_p(f, f_bar)       known before building (``term_estimates``): per cube
                             (``f_term``) up to ``term_estimates.F_TERM_CLASSES``
                             classes, else the global modulus
    T2 = d_p(f_bar, g_bar)   0 without a bad set; the paper's map: f_bar's mass on the
                             bad set, estimated in float64 before building
                             (``term_estimates.t2_estimate``)
    T3 = d_p(g_bar, g)       <= (nd s_I^p F + sum_ji s_W^p (1 - F))^{1/p},  F = (1 - 2m)^{nd},
                             s_W <= b_i - a_i by the output clamp, s_I <= tol (the plan)

The search, for one construction c (``registry.VARIANTS``), with slack:

    N_c   = min { N >= 2 : T1(N) + T2(N) <= F_TERM_SHARE epsilon,  and m(N) exists }
    left  = epsilon - T1(N_c) - T2(N_c)            >= (1 - F_TERM_SHARE) epsilon = epsilon / 10
    m     = the largest power of two m <= 1/4 whose window part of T3, with s_W = b_i - a_i,
            is <= (1 - INTERIOR_SHARE) left; m >= 2^-28 (``certificate.MIN_MARGIN``)
    tol   = INTERIOR_SHARE left / (nd)^{1/p} / 2   (the plan's max |g - g_bar| on interiors)

F_TERM_SHARE = 9/10: N is not the first resolution whose f-term squeezes under epsilon
but the first that leaves a tenth of epsilon for the realization, whose cost in the
margin and the bits is only logarithmic. E.g. token_times_mean, d = 1, n = 3, p = 2 at
epsilon = 0.05, with the exact per-cube f-term: T1(8) = 0.0473 would leave 0.0027 for T3;
T1(9) = 0.0421 leaves 0.0079, and N = 9 is chosen (``f_term.bound``). N_c is found by doubling and
bisection on N (T1 and T2 decrease in N). T1 is the per-cube bound up to the last N whose
grid has ``term_estimates.F_TERM_CLASSES`` cube classes and the looser global one past it,
so the doubling always tries that last N: it never jumps over the per-cube range into the
global bound, whose N can be several times larger. A refusal past that range names the
global bound and the N the per-cube bound would need (extrapolated as 1/N).

Size and time before building. Every construction gives its size at N in closed form
(``Variant.size``: blocks, attention layers, largest hidden width, parameters; the
output clamp included) and the cube classes its certificate evaluates (``classes``).
An attempt's time (build + realize + ``certify_lp``, one worker) is estimated as

    seconds ~ fixed + per_block * blocks + per_class_block * classes * blocks

(``Variant.seconds``; the box evaluation of one class skips inactive feed-forward layers
with one vectorized test per block, so a class costs ~ blocks). Calibrated on this
project's shared 2-core development machine (1-minute load 2 to 4), token_times_mean,
d = 1, n = 3, workers = 1, N = 8..20:

    paper, ties_complete:   fixed 10 s, 8e-3 s / block, 2.5e-6 s / class-block
    positional (Theorem 3): fixed 10 s, 19e-3 s / block, 7.6e-6 s / class-block
    one_layer (deep):       fixed  2 s, 2.5e-3 s / block, 1.6e-6 s / class-block

(measured: ties_complete N = 20: 4,247 blocks, 1,540 classes: build 12 s, plan + realize
24 s, certify 24 s; positional, prefix_mean, N = 13: 6,673 blocks, 2,197 cubes: 5 + 78 +
158 s; one_layer N = 16: 2,196 blocks, 816 classes: 2 + 6 s, and N = 30: estimated 148 s,
took 124 s). The shallow-wide constructions (``variants.one_layer_wide.wide_seconds``)
were calibrated at 1-minute load ~8.

What an estimate assumes: that loaded machine. The load moves the measured seconds by
about a factor of 10: in the size law (load 5 to 10) attempts took 0.04x to 5.6x their
estimates; on a near-idle machine (load ~2, revision 6722e9d) the shallow-wide attempts
for token_times_mean took 0.65 s (estimated 3.5 s, N = 9) and 4.8 s (estimated 21.4 s,
N = 22), 5x less. An estimate is a budget check before building, good to a factor of
about 5 either way, not a prediction; every attempt records its estimate next to the
measured seconds (``Approximation.attempts``), so each run checks the model.

The choice (``construction=None``): the candidates (c, N_c) of every construction that
applies (Theorem 2's need positional=False, f permutation equivariant; Theorem 3's apply
to every f) go in increasing order of parameters; an attempt whose estimate fits the time
left (``max_minutes``) and ``max_layers`` builds, realizes and certifies; the first whose
certificate holds is returned. That is the rule ``RULE``: the fewest parameters whose
certificate holds, among the attempts the budget allows. A certificate that fails at N
queues (c, N + 1); at most ``MAX_ATTEMPTS`` attempts. When no candidate fits the budget,
the one-line refusal names the smallest one: its construction, N, blocks, parameters and
estimated minutes.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import sys
import time
from fractions import Fraction

import numpy as np

from transformer_ua import decimal_text
from transformer_ua import rounding
from transformer_ua.targets import bounds as target_bounds
from transformer_ua.targets import callable_checks
from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun import grid, search_arguments, term_estimates
from transformer_ua.yun.bounds import certificate
from transformer_ua.yun.variants import registry

#: The f-term (with the bad-set estimate) may take at most this share of epsilon: the
#: rest, at least a tenth of epsilon, is the realization's (module doc).
F_TERM_SHARE = Fraction(9, 10)
#: Share of what is left after T1 and T2 that goes to the interiors (the rest goes to
#: the windows).
INTERIOR_SHARE = Fraction(1, 2)
#: Attempts (build + realize + certify) ``approximate`` makes before giving up.
MAX_ATTEMPTS = 4
#: With the default progress=None, attempts estimated at this many seconds or more say on
#: stderr that they start and how they ended; quicker ones print nothing.
QUIET_SECONDS = 10.0
#: Default time budget of one call, in minutes (estimated before each attempt).
DEFAULT_MAX_MINUTES = 10.0
#: Default depth limit (blocks) of a network ``approximate`` builds.
DEFAULT_MAX_LAYERS = 100_000
#: Cube-interior margin (fraction of delta) without the output clamp (its windows are
#: then bounded by the enclosure of g over the whole cube, not by the clamp).
UNCLAMPED_MARGIN = Fraction(1, 2 ** 20)
#: Supported d and n (checked before any arithmetic).
MAX_D, MAX_N = 16, 1024
#: The arithmetic ``approximate`` certifies by default: the network as IEEE binary64 runtimes
#: (JAX, onnxruntime) execute it, which is the network a user runs. Its certificate also
#: holds for the exact real network (the integer-id g computes the same in both).
DEFAULT_ARITHMETIC = 'float64'
#: The rule of ``construction=None``.
RULE = ('the fewest parameters whose certificate holds in the asked arithmetic (candidates: '
        'the constructions with a certificate for that arithmetic, in increasing order of '
        'parameters at their resolution; the first certified is returned)')


# ---------------------------------------------------------------------------
# The constructions.
# ---------------------------------------------------------------------------


def check_construction(construction):
  """The variant class named ``construction`` (``registry.VARIANTS``; None: the default
  rule)."""
  if construction is None:
    return None
  if not isinstance(construction, str) or construction not in registry.VARIANTS:
    raise ValueError(f'construction={search_arguments.show(construction)}; allowed: None (the fewest '
                     'parameters whose certificate holds) or one of '
                     f'{", ".join(repr(c) for c in registry.VARIANTS)}.')
  return registry.VARIANTS[construction]


@dataclasses.dataclass(frozen=True)
class _Candidate:
  """A construction at a resolution, with its budget split, size and estimate."""

  variant: object   # the ``yun.variants`` object at this resolution
  resolution: int
  f_term: float
  bad_set: float
  margin: Fraction
  tolerance: float
  size: dict
  classes: int
  seconds: float

  def describe(self) -> str:
    s = self.size
    return (f'{self.variant.name} N={self.resolution}: {search_arguments.count(s["blocks"])} blocks, '
            f'{search_arguments.count(s["params"])} params, estimated {_minutes(self.seconds)}')


def _minutes(seconds: float) -> str:
  """Estimated minutes for a line: 2 digits below 10, whole minutes with separators above."""
  if not math.isfinite(seconds):
    return 'unbounded minutes'
  m = seconds / 60
  return f'{m:.2g} min' if m < 10 else f'{m:,.0f} min' if m < 1e6 else \
      f'~10^{math.log10(m):.1f} min'


class _Search:
  """The terms and candidates of one call (module doc)."""

  def __init__(self, target, lip, *, epsilon, d, n, p, clamp, modulus=None):
    self.target, self.lip, self.epsilon, self.modulus = target, lip, epsilon, modulus
    self.d, self.n, self.p, self.clamp = d, n, p, clamp
    self.spread = term_estimates.clamp_spread(target, d, n) if clamp else None
    self.bad_cache, self.f_cache = {}, {}

  def split(self, c, N: int):  # pylint: disable=invalid-name
    """(f_term, bad_set, margin, tolerance) at N, or None when N has too little slack."""
    t1 = term_estimates.f_term_estimate(
        self.f_cache, self.target, self.lip, d=self.d, n=self.n, resolution=N, p=self.p,
        positional=not c.equivariant, modulus=self.modulus)
    if t1 > float(F_TERM_SHARE) * self.epsilon:
      return None
    t2 = term_estimates.t2_estimate(self.bad_cache, self.target, self.d, self.n, N, self.p) \
        if c.has_bad_set else 0.0
    left = self.epsilon - t1 - t2
    if t1 + t2 > float(F_TERM_SHARE) * self.epsilon:
      return None
    if self.clamp:
      margin = term_estimates.margin_for(left * float(1 - INTERIOR_SHARE), d=self.d,
                                         n=self.n, p=self.p, spread=self.spread)
      if margin is None:
        return None
    else:
      margin = UNCLAMPED_MARGIN
    tol = left * float(INTERIOR_SHARE) / (self.d * self.n) ** (1 / self.p) / 2
    return t1, t2, margin, tol

  def per_cube_limit(self, c) -> int:
    """The largest N at which the f-term is the per-cube bound (past it, the looser global
    Lipschitz bound: ``term_estimates.f_term_estimate``)."""
    return term_estimates.per_cube_limit(self.target, d=self.d, n=self.n,
                                         positional=not c.equivariant)

  def f_term_method(self, c, N: int) -> str:  # pylint: disable=invalid-name
    return 'per cube' if N <= self.per_cube_limit(c) else \
        f'global Lipschitz bound (past {term_estimates.F_TERM_CLASSES:,} cube classes)'

  def resolution(self, c) -> int | None:
    """N_c: the smallest N >= 2 with slack (doubling, then bisection); None if no
    N <= 2^62 has it. The f-term switches from the per-cube bound to the looser global
    one past ``per_cube_limit``; that N is always tried, so that the doubling does not
    jump over the per-cube range into the global one (each bound decreases in N, so the
    bisection stays on one side)."""
    cap = self.per_cube_limit(c)
    lo, hi = 1, 2
    while self.split(c, hi) is None:
      lo, hi = hi, (cap if hi < cap < 2 * hi else 2 * hi)
      if hi > 2 ** 62:
        return None
    while hi - lo > 1:
      mid = (lo + hi) // 2
      if mid >= 2 and self.split(c, mid) is not None:
        hi = mid
      else:
        lo = mid
    return hi

  def per_cube_estimate(self, c) -> int | None:
    """About the smallest N at which the per-cube f-term would leave the realization its
    share, extrapolated from the largest N it is computed at by T1 ~ 1/N (None when that N
    has no finite per-cube bound)."""
    cap = self.per_cube_limit(c)
    if cap < 2:
      return None
    t1 = term_estimates.f_term_estimate(
        self.f_cache, self.target, self.lip, d=self.d, n=self.n, resolution=cap, p=self.p,
        positional=not c.equivariant, modulus=self.modulus)
    if not math.isfinite(t1):
      return None
    return max(cap + 1, math.ceil(cap * t1 / (float(F_TERM_SHARE) * self.epsilon)))

  def candidate(self, c, N: int) -> _Candidate:  # pylint: disable=invalid-name
    """Variant class ``c`` at N: its budget split, closed-form size and estimate."""
    split = self.split(c, N)
    if split is None:    # N + 1 after a failure always has slack if N had (T1 decreases)
      raise ValueError(f'{c.name} N={N}: no slack left for the realization.')
    t1, t2, margin, tol = split
    v = c(grid.Grid(self.d, self.n, N))
    size, classes = v.size(), v.cube_classes()
    return _Candidate(variant=v, resolution=N, f_term=t1, bad_set=t2, margin=margin,
                      tolerance=tol, size=size, classes=classes,
                      seconds=v.seconds(size, classes))

  def margin(self, net, cand: _Candidate) -> Fraction:
    """The windows' margin from the built net's exact clamp range (the probe's before
    building is an estimate); the planned one if the exact range leaves none."""
    a, b = net.output_range()
    left = self.epsilon - cand.f_term - cand.bad_set
    m = term_estimates.margin_for(left * float(1 - INTERIOR_SHARE), d=self.d, n=self.n,
                                  p=self.p, spread=[float(hi - lo) for lo, hi in zip(a, b)])
    return m if m is not None else cand.margin


# ---------------------------------------------------------------------------
# The theorem, executable: f, epsilon -> (g, certificate).
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Approximation:
  """``approximate``'s answer: g with its certificate, and the search that found it.

  Attributes:
    g, net: the realized standard Transformer (exact params) and its construction.
    certificate: ``certificate.Certificate``, total <= epsilon.
    epsilon: the d_p(f, g) asked for.
    construction: the registry name of g's construction (``registry.VARIANTS``).
    arithmetic: the g the certificate covers ('exact', 'float64', 'float32'); g.apply runs
      that network (the integer-id constructions) or the exact one's float64 midpoint.
    rule: how it was chosen (``RULE``, or 'construction= given').
    attempts: one dict per attempt: construction, resolution, blocks, params,
      estimated_seconds, seconds, total (or error), holds.
  """

  g: object
  net: object
  certificate: certificate.Certificate
  epsilon: float
  construction: str
  rule: str
  attempts: tuple
  arithmetic: str = 'exact'

  def __reduce__(self):
    """Pickles without g's per-process caches (arb ball networks, rebuilt on demand):
    a fresh copy of g's fields (the target pickles when f does: a built-in, or a
    module-level function)."""
    g = dataclasses.replace(self.g) if dataclasses.is_dataclass(self.g) else self.g
    return (type(self), tuple(getattr(self, f.name) if f.name != 'g' else g
                              for f in dataclasses.fields(self)))

  def __repr__(self) -> str:
    return (f'Approximation(d_p(f, g) <= {decimal_text.bound_text(self.certificate.total, 4)} '
            f'<= {self.epsilon:g} [{self.arithmetic}]; '
            f'{self.construction}, N={self.net.resolution}: {self.g.depth()} blocks, '
            f'{self.g.num_params()} params)')


def approximate(f, epsilon: float, *, d: int, n: int, p: float = 2.0, lipschitz=None,
                modulus=None,
                positional: bool = False, construction: str | None = None,
                clamp: bool = True, max_minutes: float = DEFAULT_MAX_MINUTES,
                max_layers: int = DEFAULT_MAX_LAYERS, workers=None, progress=None,
                arithmetic: str = DEFAULT_ARITHMETIC,
                refutation_points: int = callable_checks.REFUTATION_POINTS) -> Approximation:
  """Given f and epsilon, a standard Transformer g with a certificate d_p(f, g) <= epsilon.

  The search and its time estimate are the module doc. By default (``construction=None``)
  the answer is ``RULE``: the construction with the fewest parameters whose certificate
  holds. ``build_approximator`` defaults to ties='paper' (it builds the paper's network
  as published); here there is no ``ties``: ``construction='paper'`` or
  ``'ties_complete'`` names either, and the default picks by size (the paper's bad set
  costs a far larger N, so it is rarely the smallest).

  Args:
    f: a built-in target name or a callable [batch, n, d] -> [batch, n, d].
    epsilon: the d_p(f, g) to certify (> 0).
    d, n: token dimension (1..16) and number of tokens (2..1024), integers.
    p: exponent of d_p (>= 1).
    lipschitz: f's Lipschitz constant in the max norm (``target_bounds``: a built-in's
      proved one by default; a smaller one is refused, a larger one used and recorded).
    modulus: a local modulus of f, callable (centres [C, n, d], delta) -> [C, n, d]
      bounding sup |f(X) - f(C)| over each cube (``f_term``); a callable f needs
      ``lipschitz`` or ``modulus``, and its certificate states the one it rests on.
    positional: False: Theorem 2 (f permutation equivariant; every construction
      applies); True: Theorem 3 (any continuous f; only Theorem 3's constructions).
    construction: None (the rule above) or a name in ``registry.VARIANTS``.
    clamp: end g with the output clamp (False: the paper's network, whose windows need
      far smaller margins).
    max_minutes: the call's time budget: an attempt starts only when its estimate fits
      the minutes left (> 0; default ``DEFAULT_MAX_MINUTES``).
    max_layers: the deepest network (blocks) built (default ``DEFAULT_MAX_LAYERS``).
    workers: where the certificate's chunks run (``executor.as_workers``): None (the
      default local pool), an int (processes), a ``concurrent.futures.Executor`` (e.g.
      Dask's ``Client.get_executor()``) or an ``executor.Workers``.
    arithmetic: the g the certificate covers (``DEFAULT_ARITHMETIC``): 'float64' or
      'float32' (g run in that IEEE format by a runtime meeting the line's model: only the integer-id
      constructions have such certificates), or 'exact' (the real network, exact
      parameters: every construction).
    progress: None (the default: an attempt estimated at ``QUIET_SECONDS`` or more says
      on stderr that it starts and how it ended; quicker calls print nothing), False
      (nothing), True (every line on stdout, flushed) or a callable taking each line:
      one as the search starts, one with the candidates in the rule's order (N,
      parameters, estimated minutes), then one per attempt as it starts and as it ends
      and one per candidate skipped over a limit.
    refutation_points: a callable's sampled point pairs that try to refute
      ``lipschitz`` before anything is built, and its sampled points in cubes that try
      to refute ``lipschitz`` / ``modulus`` in the certificate (``callable_checks``).
  Raises:
    ValueError (one line): a bad argument (type or range named), an unknown construction
      (the allowed ones listed), a construction of Theorem 2 with positional=True, a
      request past max_layers or max_minutes before building (the construction, N,
      blocks, parameters and estimated minutes named), a callable that fails its checks
      (``targets.check_callable``), a lipschitz= refuted before building, an f that is
      not permutation equivariant with positional=False, or no certificate within
      ``MAX_ATTEMPTS`` attempts.
  """
  t_start = time.perf_counter()
  epsilon, d, n, p, workers, max_minutes, max_layers = search_arguments.check_args(
      epsilon, d, n, p, workers, max_minutes, max_layers, positional, clamp, progress,
      max_d=MAX_D, max_n=MAX_N)
  chosen = check_construction(construction)
  arithmetic = rounding.check_arithmetic(arithmetic)
  if chosen is not None and arithmetic not in chosen.arithmetics:
    raise ValueError(f'construction={chosen.name!r} has no {arithmetic} certificate (it is '
                     'certified for the exact real network only); use arithmetic=\'exact\' or '
                     'one of ' + ', '.join(repr(c.name) for c in registry.VARIANTS.values()
                                           if arithmetic in c.arithmetics) + '.')
  if chosen is not None and not chosen.applies(positional):
    raise ValueError(f'construction={chosen.name!r} is {chosen.theorem} (f '
                     'permutation equivariant); positional=True asks for Theorem 3: use '
                     + ', '.join(repr(c.name) for c in registry.VARIANTS.values()
                                 if not c.equivariant) + '.')
  say = (lambda line: print(line, flush=True)) if progress is True else \
      (progress or (lambda line: None))
  loud = progress is None          # the default: long attempts only, on stderr
  tell = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
  target = targets_lib.get_target(f, d=d, n=n)
  lip = None if lipschitz is None and modulus is not None else \
      target_bounds.check_lipschitz(lipschitz, target, d, n)
  refutation_points = callable_checks.check_refutation_points(refutation_points)
  if lipschitz is not None and target_bounds.arb_function(target, d, n) is None:
    callable_checks.refute_lipschitz(target, lip, d=d, n=n, points=refutation_points)
  if not positional:
    builtin_no = targets_lib.BUILTIN_TARGETS.get(target.name) is target and \
        not target.permutation_equivariant
    err = None if builtin_no else targets_lib.equivariance_error(target, d, n)
    if builtin_no or err is not None:
      said = 'by definition' if builtin_no else f'|f(XP) - f(X)P| = {err:.3g} on probes'
      raise ValueError(f'target {target.name!r} is not permutation equivariant ({said}); '
                       'positional=False asks for Theorem 2, which needs f(XP) = f(X)P: '
                       'pass positional=True (Theorem 3, positional encodings)'
                       + ('' if builtin_no else _low_precision_hint(target, d, n)) + '.')
  search = _Search(target, lip, epsilon=epsilon, d=d, n=n, p=p, clamp=clamp, modulus=modulus)
  pool = [chosen] if chosen is not None else \
      [c for c in registry.VARIANTS.values()
       if c.applies(positional) and arithmetic in c.arithmetics]
  if not pool:
    raise ValueError(f'arithmetic={arithmetic!r}: no registered construction for '
                     f'{"Theorem 3" if positional else "Theorem 2"} has a {arithmetic} '
                     "certificate; use arithmetic='exact'.")
  if clamp and term_estimates.margin_for(epsilon * float(1 - INTERIOR_SHARE), d=d, n=n, p=p,
                                         spread=search.spread) is None:   # no N can help
    raise ValueError(f'epsilon={epsilon:g}: for every construction '
                     f'({", ".join(c.name for c in pool)}) the ramp windows alone exceed '
                     f'epsilon at the smallest margin 2^-28 (p={search_arguments.p_text(p)}, clamp range up '
                     f'to {max(search.spread):.3g} on probes); raise epsilon or lower p.')
  rule = 'construction= given' if chosen is not None else RULE
  say(f'approximate: epsilon={epsilon:g}, d={d}, n={n}, p={search_arguments.p_text(p)}, '
      f'arithmetic={arithmetic}: choosing N for '
      f'{", ".join(c.name for c in pool)} (d_p(f, f_bar) <= {float(F_TERM_SHARE):g} epsilon)')
  heap, skipped, order = [], [], iter(range(1 << 62))   # (params, tie-break, candidate)
  for c in pool:
    N = search.resolution(c)  # pylint: disable=invalid-name
    if N is None:
      windows = clamp and term_estimates.margin_for(
          epsilon * float(1 - INTERIOR_SHARE), d=d, n=n, p=p, spread=search.spread) is None
      skipped.append(f'{c.name}: ' + (
          'the ramp windows alone exceed epsilon at the smallest margin 2^-28'
          if windows else 'no N <= 2^62 leaves a tenth of epsilon after d_p(f, f_bar)'
          + (' and its bad set' if c.has_bad_set else '')))
      continue
    try:
      c(grid.Grid(d, n, N)).check()
    except ValueError as e:
      skipped.append(f'{c.name} N={N}: {e}')
      continue
    cand = search.candidate(c, N)
    heapq.heappush(heap, (cand.size['params'], next(order), cand))
  say('approximate: candidates, fewest parameters first: ' + '; '.join(
      f'{c.variant.name} N={c.resolution} ({search_arguments.count(c.size["params"])} params, '
      f'{_minutes(c.seconds)})' for _, _, c in sorted(heap, key=lambda e: e[:2]))
      + ''.join(f'; no plan: {s}' for s in skipped))
  attempts, over = [], []
  while heap and len(attempts) < MAX_ATTEMPTS:
    cand = heapq.heappop(heap)[2]
    c = cand.variant
    left_s = max_minutes * 60 - (time.perf_counter() - t_start)
    if cand.size['blocks'] > max_layers or cand.seconds > left_s:
      over.append(cand)
      why = (f'over max_layers={max_layers}' if cand.size['blocks'] > max_layers else
             f'over the {max(left_s, 0) / 60:.2g} min left of max_minutes={max_minutes:g}')
      say(f'approximate: skipped {cand.describe()}: {why}')
      continue
    k = len(attempts) + 1
    if loud and cand.seconds >= QUIET_SECONDS:
      tell(f'approximate: attempt {k}: {cand.describe()} (progress=False silences this, '
           'progress=True says more)')
    say(f'approximate: attempt {k}: {cand.describe()} (budget {left_s / 60:.2g} min left); '
        f'd_p(f, f_bar) <= {decimal_text.bound_text(cand.f_term, 3)} '
        f'({search.f_term_method(type(c), cand.resolution)})')
    t0 = time.perf_counter()
    rec = {'construction': c.name, 'resolution': cand.resolution,
           'blocks': cand.size['blocks'], 'params': cand.size['params'],
           'estimated_seconds': cand.seconds}
    try:
      net = c.build(target, **({'number_format': arithmetic}
                               if arithmetic in rounding.FORMATS else {}))
      margin = search.margin(net, cand) if clamp else cand.margin
      g = net.realize(margin=margin, tolerance=cand.tolerance, dtype='exact', clamp=clamp)
      cert = certificate.certify_lp(net, g, p, lipschitz=lipschitz, modulus=modulus,
                                    margin=margin, workers=workers, arithmetic=arithmetic,
                                    refutation_points=refutation_points)
    except ValueError as e:
      rec.update(seconds=time.perf_counter() - t0, error=str(e), holds=False)
      attempts.append(rec)
      say(f'approximate: attempt {k}: {c.name} N={cand.resolution} refused after '
          f'{rec["seconds"]:.0f} s: {e}')
      continue
    eq = (cert.details.get('callable_checks') or {}).get('equivariance') or {}
    rec.update(seconds=time.perf_counter() - t0, total=cert.total, margin=float(margin),
               tolerance=cand.tolerance, holds=cert.holds(epsilon), blocks=g.depth(),
               params=g.num_params(),
               not_equivariant_cubes=0 if eq.get('rounding_level') else eq.get('cubes', 0))
    attempts.append(rec)
    if loud and cand.seconds >= QUIET_SECONDS:
      tell(f'approximate: attempt {k} done in {rec["seconds"]:.0f} s: d_p(f, g) <= '
           f'{decimal_text.bound_text(cert.total, 4)} {"<=" if rec["holds"] else ">"} '
           f'{epsilon:g}')
    say(f'approximate: attempt {k}: {c.name} N={cand.resolution} done in '
        f'{rec["seconds"]:.0f} s (estimated {cand.seconds:.0f} s): d_p(f, g) <= '
        f'{decimal_text.bound_text(cert.total, 4)} {"<=" if rec["holds"] else ">"} {epsilon:g}'
        f'{"" if rec["holds"] else ", the certificate does not hold"}')
    if rec['holds']:
      return Approximation(g=g, net=net, certificate=cert, epsilon=epsilon,
                           construction=c.name, rule=rule, attempts=tuple(attempts),
                           arithmetic=arithmetic)
    nxt = search.candidate(type(c), cand.resolution + 1)
    heapq.heappush(heap, (nxt.size['params'], next(order), nxt))
  if not attempts:
    if over:
      best = min(over, key=lambda c: c.size['params'])
      kind = type(best.variant)
      method = search.f_term_method(kind, best.resolution)
      per_cube = '' if method == 'per cube' else search.per_cube_estimate(kind)
      per_cube = '' if not per_cube or per_cube >= best.resolution else (
          f'; the per-cube bound, computed up to N={search.per_cube_limit(kind)} and '
          f'extrapolated as 1/N, would need about N={per_cube}')
      raise ValueError(
          f'epsilon={epsilon:g} needs resolution N >= {best.resolution} with the smallest '
          f'construction {best.variant.name!r} (d_p(f, f_bar) <= '
          f'{decimal_text.bound_text(best.f_term, 3)} there by the {method}{per_cube}): '
          f'{search_arguments.count(best.size["blocks"])} layers (blocks), '
          f'{search_arguments.count(best.size["params"])} params, estimated {_minutes(best.seconds)}; '
          f'limits max_layers={max_layers}, max_minutes={max_minutes:g}. Raise them or '
          'epsilon.')
    raise ValueError(f'epsilon={epsilon:g}: no construction has a plan at the resolution it '
                     f'needs ({"; ".join(skipped)}); raise epsilon.')
  last = attempts[-1]
  why = f'total {decimal_text.bound_text(last["total"], 3)}' if 'total' in last else \
      last['error']
  more = f'; next: {over[0].describe()}, over the limits' if over else ''
  cubes = max(a.get('not_equivariant_cubes', 0) for a in attempts)
  hint = '' if positional or not cubes else (
      f'; f_bar is not permutation equivariant on {cubes:,} cubes (their difference counts in '
      'd_p(f_bar, g_bar)): if f is not permutation equivariant, pass positional=True '
      '(Theorem 3)')
  raise ValueError(f'no certificate d_p(f, g) <= {epsilon:g} within {len(attempts)} '
                   f'attempts (last: {last["construction"]} N={last["resolution"]}, '
                   f'{why}){more}{hint}.')


def _low_precision_hint(target, d: int, n: int) -> str:
  """A clause for the equivariance refusal when f returns floats narrower than float64
  (JAX's default float32): the difference may be its rounding, not f's."""
  try:
    raw = target.fn(np.random.default_rng(1).random((2, n, d)))
    dt = np.dtype(getattr(raw, 'dtype', np.float64))
  except (TypeError, ValueError):
    return ''
  if dt.kind != 'f' or dt.itemsize >= 8:
    return ''
  return (f'; f returns {dt} (JAX computes in float32 unless x64 is on), so this difference '
          'may be its rounding: enable float64 first (jax.config.update('
          "'jax_enable_x64', True)) and pass positional=True only if f is not equivariant")
