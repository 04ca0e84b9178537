r"""Theorems 2 and 3 as a certificate: a standard Transformer g with a proved d_p(f, g).

Yun et al.'s d_p (Section 3), entrywise l_p norm of the n x d output:

    d_p(f, g) = ( integral over [0, 1]^{n x d} of sum_ji |f(X)_ji - g(X)_ji|^p dX )^{1/p}

and the triangle inequality (Minkowski) splits it into three terms, each bounded here
by a rigorous number (exact rationals, or arb balls rounded up to floats):

    d_p(f, g) <= d_p(f, f_bar) + d_p(f_bar, g_bar) + d_p(g_bar, g)

f_bar (Lemma 4) takes the float64 value table of g_bar, A_L = fl(f(C_L)) on each cube.

1. d_p(f, f_bar), cube by cube (``f_term``): exactly in rationals for the polynomial
   built-ins at p = 2, from arb enclosures of grad f on every cube for the other
   built-ins (and p != 2), from a caller's local modulus, or from one global Lipschitz
   constant L (the fallback),

       d_p(f, f(C)) <= L (delta/2) (nd * nd / (nd + p))^{1/p} + (nd)^{1/p} max_L |f(C_L) - A_L|;

   the smallest that applies. A built-in's L is its proved constant (a smaller
   ``lipschitz=`` is refused, a larger one used as given). A user callable is f as
   evaluated in float64 (checked first: a function of one point, real, finite, of its
   shape, not mutating its input, ``targets.check_callable``): f_bar(L) is its value at
   C_L on every ordered cube, a stated L is refused when a difference quotient between
   neighbouring centres or between sampled points in the cubes exceeds it (a local
   modulus when two neighbouring cubes cannot reach each other's values, or a sampled
   point leaves it; ``callable_checks``, whose largest quotient the line prints), and
   under Theorem 2 f_bar's permutation equivariance is decided on every cube
   (``callable_checks.equivariance_failures``): where it fails, term 2 counts it. The
   only assumption a certificate can carry is a caller's modulus; ``Certificate.assumes``
   says it (or that nothing is assumed).
2. d_p(f_bar, g_bar): both are constant on each cube, so it is the finite sum

       ( sum_L delta^{nd} ||A_L - g_bar(C_L)||_p^p )^{1/p}

   over the classes (Theorem 2, a built-in: multisets of cells weighted by their
   orderings; a callable: every ordered cube), in exact rationals: the bad set's mass
   for the paper's map, 0 for ties='complete' and Theorem 3 (computed, not assumed),
   plus the cubes where a callable's f_bar is not equivariant.
3. d_p(g_bar, g) over two regions. The interiors I = cubes shrunk by m delta per side
   (volume F = (1 - 2m)^{nd}), and the windows W = the rest (volume 1 - F), where
   Lemma 6's ramps act:

       d_p(g_bar, g)^p <= nd sup_I |g - g_bar|^p F
                          + sum_ji sup_W |g_ji - g_bar_ji|^p (1 - F)

   sup_I by box propagation of every cube interior (``certified_eval.certify_interiors``);
   sup_W from one certified enclosure [lo_ji, hi_ji] of g over the whole unit cube
   (``certified_eval.certify_domain_sup``) and the range [a_i, b_i] of g_bar:
   sup_W |g_ji - g_bar_ji| <= max(hi_ji - a_i, b_i - lo_ji).

The output clamp (``realize.output_clamp``, ``Approximator.realize(clamp=True)``) keeps
every g_ji in [a_i, b_i], so sup_W <= b_i - a_i, the range of f_bar; without it g reaches
the size of the contextual ids in the windows and the windows must be made tiny.

The networks: the paper's (``yun.approximator.Approximator`` with its ``yun.approximator.Realized``) and the one
with a single softmax attention layer (``yun.single_attention.one_layer``: ``OneLayerApproximator`` with
its ``OneLayerRealized``, no bad set); both carry what ``certify_lp`` reads of them (its
docstring), so the certificate is one code path.

``yun.search.approximate(f, epsilon)`` searches the network and N this certifies.
"""

from __future__ import annotations

import dataclasses
import math
import time
from fractions import Fraction

import numpy as np
from flint import arb, ctx

from transformer_ua import rounding
from transformer_ua.decimal_text import bound_text, share_text
from transformer_ua.exact import ball
from transformer_ua.targets import bounds as target_bounds
from transformer_ua.targets import callable_checks
from transformer_ua.targets import distances
from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun.bounds import f_term
from transformer_ua.yun.grid import Grid, decode_grid
from transformer_ua.yun.realization import certified_eval, plan as plan_lib
from transformer_ua.yun.realization import ids

#: arb precision of the certificate's own arithmetic (bits).
CERT_BITS = 128
#: Largest cube-interior margin tried (fraction of delta per side).
MAX_MARGIN = Fraction(1, 4)
#: Smallest margin (fraction of delta) a cube-interior box can be certified at: arb
#: stores a ball's radius with a 30-bit mantissa, so a box [k + m, k + 1 - m] / N is held
#: as a ball up to ~2^-31 delta wider, and below this margin it reaches across the cell
#: edge into the quantization ramp (the bound then stays sound but becomes g's range).
MIN_MARGIN = Fraction(1, 2 ** 28)


def _q(v) -> arb:
  return ball.to_arb(Fraction(v) if not isinstance(v, float) else Fraction(v))


def _root(x: arb, p: float) -> arb:
  return x if p == 1 else (x ** (arb(1) / arb(p)) if x > 0 else arb(0))


def _pow(x: arb, p: float) -> arb:
  return x ** int(p) if float(p).is_integer() else x ** arb(p)


@dataclasses.dataclass(frozen=True)
class Certificate:
  """Certified upper bounds on d_p(f, g) and its terms (module doc).

  Attributes:
    p: the exponent of d_p.
    terms: {'f_fbar', 'fbar_gbar', 'gbar_g'}: upper bounds (floats rounded up).
    total: their sum, an upper bound on d_p(f, g) (Minkowski).
    interior_sup: certified max |g - g_bar| over the shrunk cube interiors.
    window_sup: certified max over entries of sup |g - g_bar| in the windows.
    window_measure: volume of the windows, 1 - (1 - 2 margin)^{nd} (rounded up).
    interior_fraction, window_fraction: the volume each kind of bound covers (sum 1).
    resolution, lam, epsilon (the ramp), bits, margin (fraction of delta).
    lipschitz: the L of the Lipschitz fallback (None when only a local modulus is given).
    clamp: whether g ends in the output clamp.
    seconds: wall time of the certification.
    assumes: what the bound assumes, one phrase ('nothing: ...' or the caller's modulus).
    f_term_method: the per-cube method of term 1 (``f_term.METHODS``).
    arithmetic: the g the bound is about (``rounding.ARITHMETICS``): 'exact' (the
      real network, exact parameters) or 'float64' / 'float32' (the network run in that
      IEEE format, any summation order, with or without FMA: term 3 is then d_p(g_bar,
      fl(g)) and ``interior_sup`` / ``window_sup`` are sups of |fl(g) - g_bar|).
    float_interior_sup, float_window_sup: the certified sup of |fl(g) - g| over the
      interiors, and of the distance of fl(g) from a table value over the windows (where
      fl(g) and g need not agree; 0 for 'exact'), included in the sups above.
    details: the pieces (term 1's parts, the grid checks of a callable, the interior
      certification, the domain enclosure, 'assumptions': the assumed lines, [] if none).
  """

  p: float
  terms: dict
  total: float
  interior_sup: float
  window_sup: float
  window_measure: float
  interior_fraction: float
  window_fraction: float
  resolution: int
  lam: float
  epsilon: float
  bits: int
  margin: float
  lipschitz: float | None
  clamp: bool
  seconds: float
  assumes: str = ''
  f_term_method: str = ''
  details: dict = dataclasses.field(default_factory=dict, compare=False)
  arithmetic: str = 'exact'
  float_interior_sup: float = 0.0
  float_window_sup: float = 0.0

  def holds(self, epsilon: float) -> bool:
    """True when the certified total is <= epsilon."""
    return self.total <= epsilon

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)

  def describe(self) -> str:
    """The certificate in one line, itself a proof: every bound rounded up, every share
    of the volume rounded down, p exact (``bound_text``, ``share_text``, ``_exact``),
    what came from outside the process and what a callable was checked for."""
    t = self.terms
    return (f'd_p(f, g) <= {bound_text(self.total, 4)} certified, assuming {self.assumes} '
            f'(p={_exact(self.p)}; f-f_bar {bound_text(t["f_fbar"], 3)} '
            f'[{self.f_term_method}] + f_bar-g_bar {bound_text(t["fbar_gbar"], 3)} + g_bar-g '
            f'{bound_text(t["gbar_g"], 3)}; interiors '
            f'{share_text(self.interior_fraction, 6, percent=True)}% of the volume, sup '
            f'{bound_text(self.interior_sup, 3)}; windows '
            f'{bound_text(self.window_measure, 3)}, sup {bound_text(self.window_sup, 3)}; '
            f'N={self.resolution}, lam={_power_of_two(self.lam)}, '
            f'ramp {_power_of_two(self.epsilon)}, {self.bits} bits, '
            f'{"clamped" if self.clamp else "no clamp"}, {self.seconds:.1f} s'
            f'{self._outside_note()}{self._callable_note()}{self._equivariance_note()})'
            f'{self._arithmetic_note()}')

  def __str__(self) -> str:
    return self.describe()

  def _outside_note(self) -> str:
    said = (self.details or {}).get('interior', {}).get('outside')
    return f'; interiors: {said}' if said else ''

  def _callable_note(self) -> str:
    cc = (self.details or {}).get('callable_checks') or {}
    sampled = cc.get('sampled')
    if not sampled:
      return ''
    quotient = max(cc['lipschitz_lower'], sampled['largest_quotient'])
    note = (f'; callable checked on {cc["probes"]} probes (one point at a time = batch, '
            f'real, finite, shape, input not mutated) and its {cc["centres"]} centres; '
            f'largest difference quotient found {share_text(quotient, 4)} '
            f'(neighbouring centres and {sampled["points"]} sampled points)')
    if cc.get('lipschitz') is not None:
      note += f' against the stated L {callable_checks.show_constant(cc["lipschitz"])}'
    if sampled.get('largest_modulus_ratio') is not None:
      note += (', largest |f(X) - f(C)| / modulus found '
               f'{share_text(sampled["largest_modulus_ratio"], 4)} (at most 1 allowed)')
    return note

  def _arithmetic_note(self) -> str:
    if self.arithmetic == 'exact':
      return '; for the exact real g (its float runs are not covered)'
    f = self.details.get('float', {})
    domain = f' {f["domain"]}' if f.get('domain') else ''
    return (f'; for g run in {f.get("format", self.arithmetic)}{domain}: |fl(g) - g| <= '
            f'{bound_text(self.float_interior_sup, 3)} on interiors; on windows fl(g) is '
            f'within {bound_text(self.float_window_sup, 3)} of a table value (g of a convex '
            f'combination of two: both in the table\'s range), assuming {f.get("assumes", "")}')

  def _equivariance_note(self) -> str:
    eq = self.details.get('callable_checks', {}).get('equivariance') if self.details else None
    if not eq:
      return ''
    if not eq['cubes']:
      return '; f_bar equivariant on every cube (checked)'
    level = (f', every difference at most {bound_text(eq["max_difference"], 2)}, at '
             f'rounding level of max |f| {bound_text(eq["scale"], 2)}: float summation order '
             'in f'
             if eq.get('rounding_level') else
             f', differences up to {bound_text(eq["max_difference"], 2)}')
    return (f'; f_bar not equivariant on {eq["cubes"]} cubes, e.g. {eq["example"]}{level} '
            '(counted in f_bar-g_bar)')


def _sum_up(values) -> float:
  """The exact sum of floats, rounded up to a float (inf if any is)."""
  values = [float(v) for v in values]
  if not all(math.isfinite(v) for v in values):
    return math.inf
  exact = sum(Fraction(v) for v in values)
  total = float(exact)
  return total if Fraction(total) >= exact else float(np.nextafter(total, np.inf))


def _exact(v: float) -> str:
  """A float as the shortest text that reads back as it (2 for 2.0, 1.0000001)."""
  v = float(v)
  return str(int(v)) if v.is_integer() and abs(v) < 2 ** 53 else repr(v)


def _power_of_two(v: float) -> str:
  """2^k when v is exactly a power of two, else v exactly (``_exact``)."""
  m, e = math.frexp(float(v))
  return f'2^{e - 1}' if m == 0.5 else _exact(v)


# ---------------------------------------------------------------------------
# The three terms.
# ---------------------------------------------------------------------------


def f_fbar_bound(lipschitz: Fraction, grid: Grid, *, p: float,
                 rounding: float = 0.0) -> dict:
  """Term 1 from one global Lipschitz constant, ``f_term.lipschitz_bound`` (kept for
  the resolution search of ``approximate``; ``certify_lp`` takes ``f_term.f_fbar``)."""
  return f_term.lipschitz_bound(lipschitz, d=grid.d, n=grid.n, resolution=grid.N, p=p,
                                rounding=rounding)


def _classes_and_weights(net):
  """(K [C, n, d], orderings [C]): every cube up to permutation (Theorem 2; weight =
  number of distinct orderings of the multiset) or every cube (Theorem 3; weight 1)."""
  k = ids.grid_classes(net)
  if not net.variant.equivariant:     # Theorem 3: every cube is its own class
    return k, np.ones(len(k), np.int64)
  return k, f_term.orderings(k)


def fbar_gbar_bound(net, p: float, classes=None, values=None) -> dict:
  """Term 2: d_p(f_bar, g_bar) over the whole grid, exactly (rounded up at the root).

  g_bar(C_L) by the network's exact bump selection (``Approximator.apply``), f_bar(C_L)
  = A_L from the value table (Theorem 2, a built-in: the representative's row, ordered
  as the class; every ordering has the same norm), or ``values`` [C, n, d] on the rows
  of ``classes`` (a callable: every ordered cube, weight 1).
  Returns {'bound', 'cubes_differing' (rows of ``classes`` where they differ), 'mass'}."""
  k, weights = classes if classes is not None else _classes_and_weights(net)
  centres = (k + 0.5) / net.resolution
  g_bar = net.apply(centres)
  f_bar = targets_lib.grid_values(net.target, k, net.resolution) if values is None \
      else np.asarray(values, np.float64)
  g_bar = np.asarray(g_bar, np.float64)
  cube = Fraction(1, net.resolution ** (net.d * net.n))
  rows = np.any(f_bar != g_bar, axis=(1, 2))
  differing = int(np.sum(rows))
  with ctx.workprec(CERT_BITS):    # |A - g_bar| exactly (two doubles), not fl(A - g_bar)
    total = arb(0)
    for c in np.flatnonzero(rows):
      total += int(weights[c]) * sum(
          (_pow(abs(_q(float(a)) - _q(float(b))), p)
           for a, b in zip(f_bar[c].ravel(), g_bar[c].ravel()) if a != b), arb(0))
    total *= _q(cube)
    return {'bound': ball.float_upper(_root(total, p)), 'cubes_differing': differing,
            'mass': ball.float_upper(total)}


def rounding_bound(net, classes) -> float:
  """max_L |f(C_L) - A_L| over the classes of a built-in (rounded up): the real f at
  the centres (``target_bounds.exact_values``) against the float table."""
  k = classes[0]
  exact = target_bounds.exact_values(net.target, k, net.resolution)
  if exact is None:
    raise ValueError(f'target {net.target.name!r} has no exact values (not a built-in).')
  table = targets_lib.grid_values(net.target, k, net.resolution)
  worst = 0.0
  with ctx.workprec(CERT_BITS):
    for rows, trows in zip(exact, table):
      for row, trow in zip(rows, trows):
        for v, t in zip(row, trow):
          worst = max(worst, ball.float_upper(abs(v - _q(float(t)))))
  return worst


def _builtin(target, d: int, n: int) -> bool:
  """A built-in target (its proved modulus, exact values and per-cube f-term apply)."""
  return target_bounds.arb_function(target, d, n) is not None


def callable_grid(net, lipschitz, modulus,
                  refutation_points: int = callable_checks.REFUTATION_POINTS) -> dict:
  """What a callable f is checked against on every ordered cube (module doc, 1.).

  f_bar(L) = f(C_L) as evaluated; a stated L is refused below the largest difference
  quotient between neighbouring centres or between sampled points in cubes, a local
  modulus where two neighbours cannot reach each other's values or a sampled point
  leaves it (``callable_checks``); under Theorem 2 f_bar's equivariance is decided.
  Returns {'k' [N^m, n, d], 'values' [N^m, n, d], 'modulus_values' (or None),
  'lipschitz_lower', 'sampled' (``callable_checks.refute_in_cubes``), 'equivariance'
  (``callable_checks.equivariance_failures``, or None)}.
  Raises:
    ValueError: more than ``f_term.MAX_CUBES`` cubes, a refuted modulus or L (one line
      naming two points), or a bad modulus.
  """
  d, n, N = net.d, net.n, net.resolution
  cubes = N ** (n * d)
  if cubes > f_term.MAX_CUBES:
    raise ValueError(f'a callable target is checked on every one of the N^(nd) = {cubes} '
                     f'cubes; at most {f_term.MAX_CUBES} (use a smaller resolution).')
  k = decode_grid(np.arange(cubes, dtype=np.int64), net.variant.grid)
  fv = targets_lib.grid_values(net.target, k, N)
  lower = callable_checks.check_lipschitz_on_grid(lipschitz, fv, net.variant.grid)
  s = None
  if modulus is not None:
    s = callable_checks.check_modulus(modulus, targets_lib.cell_centers(k, N), 1 / N)
    callable_checks.check_modulus_on_grid(s, fv, net.variant.grid)
  sampled = callable_checks.refute_in_cubes(net.target, k, fv, N, lipschitz=lipschitz,
                                            modulus_values=s, points=refutation_points)
  equiv = callable_checks.equivariance_failures(fv, net.variant.grid) \
      if net.variant.equivariant else None
  return {'k': k, 'values': fv, 'modulus_values': s, 'lipschitz_lower': lower,
          'sampled': sampled, 'equivariance': equiv}


def window_bound(net, g, bits: int) -> dict:
  """sup over the whole unit cube of |g_ji - g_bar_ji|, per entry, from one certified
  enclosure of g on the box [0, 1]^{n x d} and the range [a_i, b_i] of g_bar.
  Returns {'sup' [n, d] floats, 'max', 'enclosure' (lo, hi) [n, d], 'seconds'}."""
  t0 = time.perf_counter()
  bn = g.ball_network(bits)
  a, b = net.output_range()
  box = [[ball.interval(0, 1) for _ in range(net.d)] for _ in range(net.n)]
  sup = np.zeros((net.n, net.d))
  lo, hi = np.zeros((net.n, net.d)), np.zeros((net.n, net.d))
  with ball.precision(bits):
    out = bn.forward(box)
    for j in range(net.n):
      for i in range(net.d):
        v = out[j][i]
        if not v.is_finite():
          sup[j, i], lo[j, i], hi[j, i] = math.inf, -math.inf, math.inf
          continue
        lo[j, i], hi[j, i] = float(v.lower()), float(v.upper())
        s = arb(0).union(v.upper() - _q(a[i])).union(_q(b[i]) - v.lower())
        sup[j, i] = ball.float_upper(s)
  return {'sup': sup, 'max': float(np.max(sup)), 'enclosure': (lo, hi),
          'seconds': time.perf_counter() - t0}


def gbar_g_bound(*, d: int, n: int, p: float, margin: Fraction, interior_sup: float,
                 window_sup) -> dict:
  """Term 3 from the two sups (module doc). Returns {'bound', 'interior_part',
  'window_part', 'interior_fraction', 'window_measure'} (floats rounded up, except the
  interior fraction, rounded down)."""
  m = d * n
  with ctx.workprec(CERT_BITS):
    frac = _q((1 - 2 * Fraction(margin)) ** m)
    win = 1 - frac
    inner = arb(m) * _pow(_q(interior_sup), p) * frac if math.isfinite(interior_sup) \
        else arb('inf')
    outer = sum((_pow(_q(float(s)), p) if math.isfinite(s) else arb('inf')
                 for s in np.ravel(window_sup)), arb(0)) * win
    total = inner + outer
    return {'bound': ball.float_upper(_root(total, p)) if total.is_finite() else math.inf,
            'interior_part': ball.float_upper(inner), 'window_part': ball.float_upper(outer),
            'interior_fraction': ball.float_lower(frac),
            'window_measure': ball.float_upper(win)}


def default_margin(g) -> Fraction:
  """The smallest power-of-two margin (fraction of delta) that keeps the cube interiors
  off the quantization ramps: m delta >= 2 epsilon, capped at ``MAX_MARGIN``."""
  need = 2 * Fraction(g.quantization_epsilon) * g.source.resolution
  m = MAX_MARGIN
  while m / 2 >= need:
    m /= 2
  return m


def check_arithmetic(net, g, arithmetic) -> str:
  """The arithmetic the certificate covers: ``arithmetic``, or g's own when None (the
  format its parameters were built for, 'exact' for networks without float certificates);
  ValueError (one line) for an unknown name, a construction without that float certificate,
  or a g built for another format."""
  own = getattr(g, 'number_format', 'exact')
  arithmetic = own if arithmetic is None else rounding.check_arithmetic(arithmetic)
  if arithmetic == 'exact':
    return arithmetic
  variant = net.variant
  if arithmetic not in variant.arithmetics:
    from transformer_ua.yun.variants import registry  # pylint: disable=import-outside-toplevel
    have = [n for n, c in registry.VARIANTS.items() if arithmetic in c.arithmetics]
    raise ValueError(f'arithmetic={arithmetic!r}: {variant.name} is certified for the exact '
                     'real network only (its float runs round away what the proof needs); '
                     f'use arithmetic=\'exact\' or a construction with {arithmetic} '
                     f'certificates: {", ".join(have)}.')
  if own != arithmetic:
    raise ValueError(f'arithmetic={arithmetic!r}: this g was built for {own} (its snap '
                     f'constants are {own}\'s); build it with arithmetic={arithmetic!r}.')
  return arithmetic


def certify_lp(net, g, p: float = 2.0, lipschitz=None, *, modulus=None, margin=None,
               bits=None, workers=None, arithmetic: str | None = None,
               refutation_points: int = callable_checks.REFUTATION_POINTS) -> Certificate:
  """A certificate that d_p(f, g) <= total over the whole unit cube (module doc).

  Args:
    net: the ``yun.approximator.Approximator`` (f, f_bar, g_bar), or a
      ``yun.single_attention.one_layer.OneLayerApproximator``: any net with d, n, resolution, positional,
      target, values, ``apply`` (g_bar) and ``output_range``.
    g: its realization with ``dtype='exact'`` (``net.realize(..., dtype='exact')``):
      ``yun.approximator.Realized`` or ``OneLayerRealized``, each with segments, params, positional,
      dtype, source, clamp, lam, epsilon, quantization_epsilon, ``planned_bits(margin)``,
      ``ball_network(bits)`` and ``certify_interiors(margin, bits, workers=,
      check_plan=)``.
    p: exponent of d_p (>= 1).
    lipschitz: L with |f(X)_ij - f(Y)_ij| <= L max|X - Y|. Built-in targets carry their
      own proved constant (``target_bounds``) and refuse a smaller one; a callable
      needs L or ``modulus`` and refuses an L its centres refute.
    modulus: a callable target's local modulus, (centres [C, n, d], delta) -> [C, n, d]
      bounding sup over each cube of |f(X) - f(C)| (``f_term``); not for built-ins.
    margin: cube interiors shrunk by margin delta per side (default ``default_margin``).
    bits: arb working precision (default: the plan's for g).
    arithmetic: the g the bound covers: 'exact' (the real network), 'float64' or
      'float32' (the network as IEEE runtimes execute it: the integer-id constructions);
      None: g's own (the format an integer-id g was built for, else 'exact').
    workers: where the cube interiors run (``executor.as_workers``); chunks resumed from
      a state or computed by a caller's executor are re-run here on a sample
      (``Workers(recheck=)``) and the line says how many.
    refutation_points: a callable's sampled points in cubes that try to refute
      ``lipschitz`` / ``modulus`` (``callable_checks.refute_in_cubes``; raise it to
      look harder).
  Raises:
    ValueError: p < 1, a bad or refuted lipschitz or modulus, a lipschitz below a
      built-in's proved constant, a callable with neither, a float g, or a g that is not
      ``net``'s (each one line).
  """
  t0 = time.perf_counter()
  p = distances.check_p(p)
  certified_eval.check_exact(g)
  if g.source is not net:
    raise ValueError('g is not a realization of this net (g.source is another approximator).')
  arithmetic = check_arithmetic(net, g, arithmetic)
  d, n, N = net.d, net.n, net.resolution
  builtin = _builtin(net.target, d, n)
  if modulus is not None and builtin:
    raise ValueError(f'modulus= is for callable targets; the built-in {net.target.name!r} '
                     'carries proved per-cube bounds.')
  lip = None
  if lipschitz is not None or modulus is None:
    lip = target_bounds.check_lipschitz(lipschitz, net.target, d, n)
  source = None if lip is None else target_bounds.lipschitz_source(lip, net.target, d, n)
  margin = Fraction(margin) if margin is not None else default_margin(g)
  plan_lib.check_margin(float(margin))
  if margin < MIN_MARGIN:
    raise ValueError(f'margin={float(margin):.3g} delta is below {float(MIN_MARGIN):.3g} '
                     '(2^-28), the smallest at which arb balls (30-bit radii) can hold a '
                     'cube interior off the cell edges; use a margin >= 2^-28.')
  bits = g.planned_bits(float(margin)) if bits is None else ball.check_bits(bits)
  checks = {}
  if builtin:
    classes = _classes_and_weights(net)
    values = targets_lib.grid_values(net.target, classes[0], N)
    rounding = rounding_bound(net, classes)
    term1 = f_term.f_fbar(net.target, classes[0], values, classes[1], resolution=N, p=p,
                          lipschitz=lip, lipschitz_source=source, rounding=rounding)
    term2 = fbar_gbar_bound(net, p, classes)
  else:
    rounding = 0.0       # f is the callable as evaluated: f_bar(L) = f(C_L)
    cg = callable_grid(net, lip, modulus, refutation_points)
    ones = np.ones(len(cg['k']), np.int64)
    term1 = f_term.f_fbar(net.target, cg['k'], cg['values'], ones, resolution=N, p=p,
                          lipschitz=lip, lipschitz_source=source,
                          modulus_values=cg['modulus_values'])
    term2 = fbar_gbar_bound(net, p, (cg['k'], ones), cg['values'])
    checks = {'lipschitz_lower': float(cg['lipschitz_lower']),
              'sampled': cg['sampled'], 'lipschitz': None if lip is None else float(lip),
              'probes': targets_lib.PROBE_BATCH, 'centres': len(cg['k']),
              'equivariance': cg['equivariance']}
  interior = g.certify_interiors(float(margin), bits, check_plan=False, workers=workers)
  if hasattr(g, 'window_sup'):      # a structural bound (``integer_ids``: the table's range)
    sup = g.window_sup()
    window = {'sup': sup, 'max': float(np.max(sup)), 'enclosure': (sup * 0, sup), 'seconds': 0.0}
  else:
    window = window_bound(net, g, bits)
  term3 = gbar_g_bound(d=d, n=n, p=p, margin=margin,
                       interior_sup=interior['max_abs_error'], window_sup=window['sup'])
  flt = {'interior': 0.0, 'window': 0.0}
  interior_sup, window_sup = interior['max_abs_error'], window['max']
  if arithmetic != 'exact':          # term 3 for fl(g): sup |fl(g) - g_bar| <= exact + float
    flt = g.float_proof
    up = lambda a, b: float(np.nextafter(a + b, np.inf))  # noqa: E731
    interior_sup = up(interior_sup, flt['interior'])
    window_sups = np.vectorize(lambda v: up(v, flt['window']))(window['sup'])
    window_sup = float(np.max(window_sups))
    exact_term3, term3 = term3, gbar_g_bound(d=d, n=n, p=p, margin=margin,
                                             interior_sup=interior_sup, window_sup=window_sups)
  terms = {'f_fbar': term1.bound, 'fbar_gbar': term2['bound'], 'gbar_g': term3['bound']}
  total = _sum_up(terms.values())
  assumed = [] if term1.assumes.startswith('nothing') else [term1.assumes]
  fallback = {} if lip is None else f_term.lipschitz_bound(
      lip, d=d, n=n, resolution=N, p=p, rounding=rounding)
  details = {'f_fbar': {**term1.as_dict(),
                        'lipschitz_part': fallback.get('lipschitz_part'),
                        'rounding_part': fallback.get('rounding_part')},
             'fbar_gbar': term2, 'gbar_g': term3,
             'callable_checks': checks,
             'interior': {k: v for k, v in interior.items() if k != 'worst_cube'},
             'window_enclosure': [a.tolist() for a in window['enclosure']],
             'output_range': [[float(v) for v in side] for side in net.output_range()],
             'assumptions': assumed}
  if arithmetic != 'exact':
    details['float'] = {**flt, 'gbar_g_exact': exact_term3}
  return Certificate(
      p=p, terms=terms, total=total, interior_sup=interior_sup,
      window_sup=window_sup, window_measure=term3['window_measure'],
      interior_fraction=term3['interior_fraction'],
      window_fraction=1 - term3['interior_fraction'], resolution=N,
      lam=float(g.lam), epsilon=float(g.epsilon), bits=bits, margin=float(margin),
      lipschitz=None if lip is None else float(lip), clamp=g.clamp is not None,
      seconds=time.perf_counter() - t0, assumes=term1.assumes,
      f_term_method=term1.method, details=details, arithmetic=arithmetic,
      float_interior_sup=flt['interior'], float_window_sup=flt['window'])
