r"""The first term of the certificate, d_p(f, f_bar), bounded cube by cube.

f_bar is constant on every cube S_L = prod [k_v / N, (k_v + 1) / N) of the grid (Lemma
4), with the value A_L: the float64 table the network is built from, taken as the exact
rational it is (``certificate``: Theorem 2's classes carry the representative's row,
permuted over the class). With m = nd entries, h = delta / 2, C_L the centre and
X = C_L + U on S_L (U uniform on [-h, h]^m),

    d_p(f, f_bar)^p = sum_L delta^m sum_ji E_L |f_ji(X) - A_L,ji|^p.

Per cube, one of (the best that applies to the target):

1. Exact polynomial integral (p = 2, polynomial built-ins, ``target_bounds.polynomial``):

       E_L (f_ji - A)^2 = E_L f_ji^2 - 2 A E_L f_ji + A^2,
       E_L prod_v x_v^{e_v} = prod_v ((k_v + 1)^{e_v + 1} - k_v^{e_v + 1}) / ((e_v + 1) N^{e_v}),

   all in rationals (python-flint fmpq): d_2(f, f_bar) itself, rounded up once at the root.

2. Gradient enclosure (any built-in with an arb form, ``target_bounds.arb_function``):
   forward-mode derivatives of f evaluated on the cube box in arb enclose every partial,
   G_v >= sup_{S_L} |d f_ji / d x_v|. The mean-value theorem on the segment C_L -> X gives
   |f_ji(X) - A| <= r + S, r >= |f_ji(C_L) - A| (``target_bounds.exact_values``) and
   S = sum_v G_v |U_v|. With E|U_v| = h/2, E U_v^2 = h^2/3 (independent entries),

       p = 2:   E (r + S)^2 <= r^2 + r h sum_v G_v + h^2 ((sum_v G_v)^2 / 4 + sum_v G_v^2 / 12)
       any p:   (E (r + S)^p)^{1/p} <= r + h (p + 1)^{-1/p} sum_v G_v          (Minkowski)

   and for p <= 2 also the centred form (the smaller of the two is taken): each partial's
   ball is mid_v +- rad_v on the whole cube, so f_ji(X) - A = (f(C) - A) + sum_v mid_v U_v
   + E with |E| <= sum_v rad_v |U_v|, and by Minkowski in L2(cube)

       (E (f_ji - A)^2)^{1/2} <= r + h (sum_v mid_v^2 / 3)^{1/2}
                                   + h ((sum_v rad_v)^2 / 4 + sum_v rad_v^2 / 12)^{1/2},

   exact for the linear part; the rest is O(delta) of it (rad_v = O(delta)). For p < 2
   an L2 bound on a cube is an L^p bound (Lyapunov: (E|Z|^p)^{1/p} <= (E Z^2)^{1/2}, the
   cube's uniform measure being a probability), so each cube keeps the smallest of its
   L^p form, its L2 forms and, for a polynomial, its exact L2 norm (1.).

3. Local modulus (``modulus=``, given by the caller): s_L,ji >= sup_{S_L} |f_ji(X) - f_ji(C_L)|
   on the closed cube, so E_L |f_ji - A|^p <= (r + s_L,ji)^p (r = 0 for a callable: f is
   the callable as evaluated, A its value). Refuted where evidence is found: neighbouring
   centres and sampled points in cubes (``callable_checks``).

4. Global Lipschitz (the fallback; L with |f(X)_ji - f(Y)_ji| <= L max|X - Y|):
   E max_v |U_v|^p = h^p m / (m + p), so

       d_p(f, f_bar) <= L h (m m / (m + p))^{1/p} + m^{1/p} max_L |f(C_L) - A_L|.

   A stated L is refuted when it is below a difference quotient found between
   neighbouring centres or sampled points in cubes (each a proved lower bound on the
   true constant of f as evaluated; ``callable_checks``).

When more than one applies, the smallest (each is an upper bound) is the term. The cube
mean in place of A would lower term 1 for p = 2 by delta^m sum (E_L f - A)^2 only; for
the polynomial built-ins E_L f - f(C_L) is delta^2 / (12 n) (token_times_mean) or 0
(prefix_mean, reversal), a gain of relative order delta^2, so f_bar keeps the centre
values (the network's table).

Work: with m = nd and t terms per polynomial entry, the exact integral costs
~ (C + m) m t^2 and the gradient enclosure ~ C m (2 m t, or 4 m^2 for attention_map);
past ``EXACT_WORK`` / ``GRADIENT_WORK`` (n in the tens to hundreds) a method is skipped
and the term is the smallest of the others (the Lipschitz fallback
always applies to a built-in), so every n up to 1024 gets a correct bound in seconds.
Orderings n! / prod c! are Python integers (exact at any n).

``bound(target, d=, n=, resolution=, p=)`` is the term before any network is built
(the resolution search). Shapes: K [C, n, d] grid indices, values [C, n, d], weights [C].
"""

from __future__ import annotations

import dataclasses
import math
import time
from fractions import Fraction

import numpy as np
from flint import arb, ctx, fmpq

from transformer_ua.exact import ball
from transformer_ua.targets import bounds as target_bounds
from transformer_ua.targets import callable_checks
from transformer_ua.targets import distances
from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun import enumeration
from transformer_ua.yun.grid import Grid

#: arb precision of the term's arithmetic (bits).
BITS = 128
#: arb precision of the gradient enclosures on cube boxes (bits; the widths are O(delta)).
GRADIENT_BITS = 64
#: Largest number of ordered cubes a callable is evaluated on (equivariance, quotients).
MAX_CUBES = 4_000_000

#: Estimated work (~0.4 us units, measured: token_times_mean n = 40, 2 s) past which a
#: per-cube method is skipped (module doc): the exact integral, (C + m) m t^2 ...
EXACT_WORK = 20_000_000
#: ... and the gradient enclosure, C m (operations of one evaluation of f), larger: the
#: only per-cube method of attention_map (10^5 classes at d = 2, n = 3 run, as before).
GRADIENT_WORK = 1_000_000_000

METHODS = ('exact polynomial integral', 'gradient enclosure', 'local modulus', 'lipschitz')


def _arb(v) -> arb:
  v = Fraction(v) if not isinstance(v, fmpq) else v
  return arb(int(v.numerator)) / int(v.denominator)


def _root(x: arb, p: float) -> arb:
  """A ball containing upper(x)^{1/p} (>= x^{1/p} at every point of x; 0 when x <= 0)."""
  u = arb(x.upper())
  if not u > 0:
    return arb(0)
  return u if p == 1 else u ** (arb(1) / arb(p))


def _pow(x: arb, p: float) -> arb:
  return x ** int(p) if float(p).is_integer() else x ** arb(p)


@dataclasses.dataclass(frozen=True)
class FTerm:
  """An upper bound on d_p(f, f_bar).

  Attributes:
    bound: the bound (a float rounded up).
    method: the per-cube method that gave it (one of ``METHODS``).
    assumes: what the bound assumes, one phrase ('nothing: ...' when nothing).
    parts: method -> bound, for every method computed.
    lipschitz: the constant L used by the Lipschitz fallback (None if none).
    lipschitz_source: 'proved constant', 'given by the caller', ... (None if none).
    seconds: wall time.
  """

  bound: float
  method: str
  assumes: str
  parts: dict
  lipschitz: float | None = None
  lipschitz_source: str | None = None
  seconds: float = 0.0

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)


# ---------------------------------------------------------------------------
# 1. Exact polynomial integrals (p = 2).
# ---------------------------------------------------------------------------


def _square(poly: dict) -> dict:
  out = {}
  for e1, c1 in poly.items():
    for e2, c2 in poly.items():
      e = tuple(a + b for a, b in zip(e1, e2))
      out[e] = out.get(e, Fraction(0)) + c1 * c2
  return out


def _moments(degree: int, resolution: int) -> list:
  """mom[e][k] = E x^e for x uniform on [k / N, (k + 1) / N): fmpq object arrays."""
  N = resolution
  return [np.asarray([fmpq((k + 1) ** (e + 1) - k ** (e + 1), (e + 1) * N ** e)
                      for k in range(N)], dtype=object) for e in range(degree + 1)]


def _cube_means(poly: dict, flat_k: np.ndarray, mom: list) -> np.ndarray:
  """E_L poly for every cube (flat_k [C, m]): an fmpq object array [C]."""
  total = np.full(len(flat_k), fmpq(0), dtype=object)
  for e, c in poly.items():
    term = np.full(len(flat_k), fmpq(c.numerator, c.denominator), dtype=object)
    for v, ev in enumerate(e):
      if ev:
        term = term * mom[ev][flat_k[:, v]]
    total = total + term
  return total


def _as_fmpq(values: np.ndarray) -> np.ndarray:
  return np.vectorize(lambda v: fmpq(*Fraction(float(v)).as_integer_ratio()),
                      otypes=[object])(values)


def exact_square_means(polys, k: np.ndarray, values: np.ndarray, resolution: int) -> np.ndarray:
  """E_L (f_ji - A_L,ji)^2 on every cube, exactly: an fmpq object array [C, n, d].

  Args:
    polys: [n][d] polynomials (``target_bounds.polynomial``).
    k: grid indices [C, n, d]; values: A [C, n, d] (float64, taken exactly).
  """
  k = np.asarray(k, np.int64)
  C, n, d = k.shape
  flat_k = k.reshape(C, n * d)
  degree = max(sum(e) for row in polys for poly in row for e in _square(poly))
  mom = _moments(max(degree, 1), resolution)
  a = _as_fmpq(np.asarray(values, np.float64))
  out = np.empty((C, n, d), dtype=object)
  for j in range(n):
    for i in range(d):
      ef = _cube_means(polys[j][i], flat_k, mom)
      ef2 = _cube_means(_square(polys[j][i]), flat_k, mom)
      aa = a[:, j, i]
      out[:, j, i] = ef2 - 2 * aa * ef + aa * aa
  return out


def exact_square_integral(polys, k: np.ndarray, values: np.ndarray, weights: np.ndarray,
                          resolution: int) -> Fraction:
  """sum_L w_L delta^m sum_ji E_L (f_ji - A_L,ji)^2 exactly: d_2(f, f_bar)^2 (weights
  [C]: the cubes each row of K stands for)."""
  means = exact_square_means(polys, k, values, resolution)
  C, n, d = means.shape
  w = np.asarray([fmpq(int(v)) for v in weights], dtype=object)
  total = fmpq(sum(w * means.reshape(C, n * d).sum(axis=1), fmpq(0))) if C else fmpq(0)
  total = total / fmpq(resolution) ** (n * d)
  return Fraction(int(total.p), int(total.q))


# ---------------------------------------------------------------------------
# 2. Gradient enclosures on cube boxes (forward mode in arb).
# ---------------------------------------------------------------------------


class _Grad:
  """A ball with the balls of its partial derivatives: (val, [d val / d x_v])."""

  __slots__ = ('val', 'grad')

  def __init__(self, val, grad):
    self.val, self.grad = val, grad

  def __add__(self, o):
    if isinstance(o, _Grad):
      return _Grad(self.val + o.val, [a + b for a, b in zip(self.grad, o.grad)])
    return _Grad(self.val + o, self.grad)

  __radd__ = __add__

  def __neg__(self):
    return _Grad(-self.val, [-a for a in self.grad])

  def __sub__(self, o):
    return self + (-o)

  def __rsub__(self, o):
    return (-self) + o

  def __mul__(self, o):
    if isinstance(o, _Grad):
      return _Grad(self.val * o.val, [self.val * b + o.val * a
                                      for a, b in zip(self.grad, o.grad)])
    return _Grad(self.val * o, [a * o for a in self.grad])

  __rmul__ = __mul__

  def _inv(self):
    inv = 1 / self.val
    return _Grad(inv, [-(a * inv * inv) for a in self.grad])

  def __truediv__(self, o):
    if isinstance(o, _Grad):
      return self * o._inv()
    return _Grad(self.val / o, [a / o for a in self.grad])

  def __rtruediv__(self, o):
    return self._inv() * o

  def exp(self):
    e = self.val.exp()
    return _Grad(e, [a * e for a in self.grad])


def _abs_up(x: arb) -> arb:
  """An arb number >= sup |x| (exact)."""
  return arb(abs(x).upper())


def gradient_balls(fn, k_row: np.ndarray, resolution: int) -> list:
  """[n][d][m] arb balls, each containing d f_ji / d x_v at every point of the cube K."""
  n, d = k_row.shape
  m = n * d
  x = []
  for j in range(n):
    tok = []
    for i in range(d):
      v = j * d + i
      lo = arb(int(k_row[j, i])) / resolution
      box = lo.union(arb(int(k_row[j, i]) + 1) / resolution)
      tok.append(_Grad(box, [arb(1) if u == v else arb(0) for u in range(m)]))
    x.append(tok)
  out = fn(x)
  return [[list(out[j][i].grad) for i in range(d)] for j in range(n)]


def gradient_norms(fn, k: np.ndarray, residues, resolution: int, p: float) -> list:
  """[C][n][d] arb upper bounds on (E_L |f_ji - A_L,ji|^p)^{1/p} from gradient
  enclosures (module doc, 2.); residues [C][n][d]: arb upper bounds on |f(C_L) - A_L|.
  For p <= 2 the L2 bound (centred or sup form) also bounds the L^p norm (Lyapunov:
  (E|Z|^p)^{1/p} <= (E Z^2)^{1/2} on a probability space), and the smaller is kept."""
  k = np.asarray(k, np.int64)
  C, n, d = k.shape
  with ctx.workprec(BITS):
    h = arb(1) / (2 * resolution)
    lp = h * _root(1 / (arb(p) + 1), p)
  out = []
  for c in range(C):
    with ctx.workprec(GRADIENT_BITS):
      balls = gradient_balls(fn, k[c], resolution)
    rows = []
    with ctx.workprec(BITS):
      for j in range(n):
        row = []
        for i in range(d):
          g = [_abs_up(b) for b in balls[j][i]]
          gs = sum(g, arb(0))
          r = residues[c][j][i]
          best = ball.float_upper(r + lp * gs)                       # the L^p sup form
          if p <= 2:
            g2 = sum((v * v for v in g), arb(0))
            sup_form = (r * r + r * h * gs + h * h * (gs * gs / 4 + g2 / 12)).sqrt()
            # centred: grad = mid + e, |e_v| <= rad_v; Minkowski in L2(cube)
            mid = [arb(b.mid()) for b in balls[j][i]]
            rad = [arb(b.rad()) for b in balls[j][i]]
            rs = sum(rad, arb(0))
            lin = h * (sum((v * v for v in mid), arb(0)) / 3).sqrt()
            rest = h * (rs * rs / 4 + sum((v * v for v in rad), arb(0)) / 12).sqrt()
            best = min(best, ball.float_upper(sup_form), ball.float_upper(r + lin + rest))
          row.append(arb(best))
        rows.append(row)
    out.append(rows)
  return out


def norms_integral(norms, weights: np.ndarray, resolution: int, p: float) -> arb:
  """sum_L w_L delta^m sum_ji norm_L,ji^p from per-cube L^p norms [C][n][d] (arb)."""
  with ctx.workprec(BITS):
    total = arb(0)
    m = 0
    for w, rows in zip(weights, norms):
      m = len(rows) * len(rows[0])
      total += int(w) * sum((_pow(v, p) for row in rows for v in row), arb(0))
    return total / arb(resolution) ** m


def gradient_integral(fn, k: np.ndarray, residues, weights: np.ndarray, resolution: int,
                      p: float) -> arb:
  """sum_L w_L delta^m sum_ji (bound on E_L |f_ji - A_L,ji|^p) from ``gradient_norms``."""
  return norms_integral(gradient_norms(fn, k, residues, resolution, p), weights,
                        resolution, p)


def _residues(target, k: np.ndarray, values: np.ndarray, resolution: int):
  """[C][n][d] arb upper bounds on |f(C_L) - A_L| (the real f at the centre against
  the float table); zeros for a target with no exact values (a callable as evaluated)."""
  exact = target_bounds.exact_values(target, k, resolution)
  C, n, d = np.shape(k)
  if exact is None:
    return [[[arb(0)] * d for _ in range(n)] for _ in range(C)]
  with ctx.workprec(BITS):
    return [[[_abs_up(exact[c][j][i] - _arb(Fraction(float(values[c, j, i]))))
              for i in range(d)] for j in range(n)] for c in range(C)]


# ---------------------------------------------------------------------------
# 3. A caller's local modulus, and the grid checks of a stated modulus.
# ---------------------------------------------------------------------------


def modulus_integral(s: np.ndarray, residues, weights: np.ndarray, resolution: int,
                     p: float) -> arb:
  """sum_L w_L delta^m sum_ji (r + s_L,ji)^p (module doc, 3.)."""
  C, n, d = s.shape
  with ctx.workprec(BITS):
    total = arb(0)
    for c in range(C):
      acc = sum((_pow(residues[c][j][i] + _arb(Fraction(float(s[c, j, i]))), p)
                 for j in range(n) for i in range(d)), arb(0))
      total += int(weights[c]) * acc
    return total / arb(resolution) ** (n * d)


# ---------------------------------------------------------------------------
# 4. The global Lipschitz bound (the fallback).
# ---------------------------------------------------------------------------


def lipschitz_bound(lipschitz, *, d: int, n: int, resolution: int, p: float,
                    rounding: float = 0.0) -> dict:
  """L h (m m / (m + p))^{1/p} + m^{1/p} rounding: {'lipschitz_part', 'rounding_part',
  'bound'} (floats rounded up)."""
  m = d * n
  with ctx.workprec(BITS):
    half = _arb(Fraction(lipschitz) / (2 * resolution))
    lip = half * _root(arb(m) * m / (arb(m) + arb(p)), p)
    rnd = _root(arb(m), p) * _arb(Fraction(float(rounding)))
    return {'lipschitz_part': ball.float_upper(lip), 'rounding_part': ball.float_upper(rnd),
            'bound': ball.float_upper(lip + rnd)}


# ---------------------------------------------------------------------------
# The term.
# ---------------------------------------------------------------------------


def f_fbar(target, k: np.ndarray, values: np.ndarray, weights: np.ndarray, *,
           resolution: int, p: float, lipschitz=None, lipschitz_source: str | None = None,
           modulus_values: np.ndarray | None = None, rounding: float = 0.0) -> FTerm:
  """d_p(f, f_bar) <= the smallest bound that applies (module doc).

  Args:
    target: the ``targets.Target``.
    k: grid indices [C, n, d] of the cubes (or classes); values: A [C, n, d];
    weights: [C] the cubes each row stands for.
    lipschitz, lipschitz_source: L for the fallback (None: not used) and where it
      comes from (``target_bounds.lipschitz_source``).
    modulus_values: s [C, n, d] from a caller's local modulus (None: not used).
    rounding: max |f(C_L) - A_L| for the Lipschitz fallback.
  Raises:
    ValueError: no method applies (no per-cube method and no L).
  """
  t0 = time.perf_counter()
  k = np.asarray(k, np.int64)
  C, n, d = k.shape
  parts, phrases = {}, {}
  terms, skipped = target_bounds.polynomial_terms(target, d, n), []
  polys = fn = None
  m = n * d
  if terms is not None and (C + m) * m * terms ** 2 > EXACT_WORK:
    skipped.append('exact polynomial integral')
  elif terms is not None:
    polys = target_bounds.polynomial(target, d, n)
  if target_bounds.arb_function(target, d, n) is not None:
    ops = 2 * m * terms if terms is not None else 4 * m * m      # one evaluation of f
    if C * m * ops > GRADIENT_WORK:
      skipped.append('gradient enclosure')
    else:
      fn = target_bounds.arb_function(target, d, n)
  if polys is not None and p == 2:
    with ctx.workprec(BITS):
      parts['exact polynomial integral'] = ball.float_upper(_root(
          _arb(exact_square_integral(polys, k, values, weights, resolution)), p))
    phrases['exact polynomial integral'] = (
        f'nothing: the integral of |f - f_bar|^2 over every cube, exactly in rationals '
        f'({target.name} is a polynomial)')
  residues = None
  if fn is not None and 'exact polynomial integral' not in parts:
    residues = _residues(target, k, values, resolution)
    norms = gradient_norms(fn, k, residues, resolution, p)
    phrases['gradient enclosure'] = (
        f'nothing: the gradient of {target.name} enclosed in arb on every cube '
        '(mean-value bound)')
    if polys is not None and p < 2:     # the exact L2 norm of each cube bounds its L^p
      with ctx.workprec(BITS):
        l2 = exact_square_means(polys, k, values, resolution)
        norms = [[[min(v, arb(ball.float_upper(_arb(e).sqrt()))) for v, e in zip(row, erow)]
                  for row, erow in zip(rows, erows)] for rows, erows in zip(norms, l2)]
      phrases['gradient enclosure'] = (
          f'nothing: per cube the smaller of the exact L2 norm of f - f_bar ({target.name} '
          'is a polynomial) and a mean-value bound from arb enclosures of its gradient')
    parts['gradient enclosure'] = ball.float_upper(
        _root(norms_integral(norms, weights, resolution, p), p))
  if modulus_values is not None:
    if residues is None:
      residues = _residues(target, k, values, resolution)
    parts['local modulus'] = ball.float_upper(_root(modulus_integral(
        np.asarray(modulus_values, np.float64), residues, weights, resolution, p), p))
    phrases['local modulus'] = ('|f(X) - f(C)| <= modulus(C, delta) on every cube (given '
                                'by the caller)')
  if lipschitz is not None:
    parts['lipschitz'] = lipschitz_bound(lipschitz, d=d, n=n, resolution=resolution, p=p,
                                         rounding=rounding)['bound']
    src = lipschitz_source or 'given by the caller'
    proved = target_bounds.arb_function(target, d, n) is not None    # a built-in
    phrases['lipschitz'] = (('nothing: ' if proved else '') +
                            f'f is {callable_checks.show_constant(lipschitz)}-Lipschitz in '
                            f'the max norm ({src})' +
                            (f'; {" and ".join(skipped)} skipped at n={n}' if skipped else ''))
  if not parts:
    raise ValueError(f'target {target.name!r} has no per-cube bound and no modulus; pass '
                     'lipschitz=L or modulus=.')
  method = min(parts, key=lambda key: parts[key])
  return FTerm(bound=parts[method], method=method, assumes=phrases[method], parts=parts,
               lipschitz=None if lipschitz is None else float(lipschitz),
               lipschitz_source=lipschitz_source if lipschitz is not None else None,
               seconds=time.perf_counter() - t0)


def classes_and_weights(grid: Grid, equivariant: bool):
  """(K [C, n, d], weights [C]): one row per multiset of cells with its number of
  orderings (Theorem 2, an equivariant f), or every cube with weight 1."""
  k = enumeration.cube_classes(Grid(grid.d, grid.n, grid.N), equivariant)
  if not equivariant:
    return k, np.ones(len(k), np.int64)
  return k, orderings(k)


def orderings(k: np.ndarray) -> np.ndarray:
  """[C]: the number of distinct orderings n! / prod(c!) of each row's tokens (int64,
  or Python integers in an object array past int64)."""
  out = []
  for row in np.asarray(k):
    counts = {}
    for tok in map(tuple, row):
      counts[tok] = counts.get(tok, 0) + 1
    w = math.factorial(len(row))
    for c in counts.values():
      w //= math.factorial(c)
    out.append(w)
  if out and max(out) >= 2 ** 63:
    return np.asarray(out, dtype=object)
  return np.asarray(out, np.int64)


def bound(target, *, d: int, n: int, resolution: int, p: float = 2.0,
          positional: bool = False, lipschitz=None, modulus=None) -> FTerm:
  """d_p(f, f_bar) at resolution N before any network is built (the resolution search).

  f_bar's values are f at the cube centres in float64 (``targets.grid_values``), on one
  representative per class (Theorem 2, a built-in) or on every cube (Theorem 3, or a
  callable: f_bar at each cube is the callable's own value there). A built-in with no
  per-cube method (none today) and a callable take the Lipschitz fallback and/or the
  local modulus.

  Args:
    target: a built-in name, ``targets.Target`` or callable [batch, n, d] -> [batch, n, d].
    d, n, resolution, p: the grid and the exponent of d_p.
    positional: Theorem 3 (every cube its own class).
    lipschitz: L (``target_bounds.check_lipschitz``: a built-in's proved constant by
      default; a callable needs L or ``modulus``).
    modulus: callable (centres [C, n, d], delta) -> [C, n, d] bounding sup over each
      cube of |f(X) - f(C)|.
  Raises:
    ValueError: as ``target_bounds.check_lipschitz``, a bad modulus, or a grid of a
      callable past ``MAX_CUBES``.
  """
  p = distances.check_p(p)
  for name, v, least in (('d', d, 1), ('n', n, 1), ('resolution', resolution, 2)):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
      raise ValueError(f'{name}={v!r}; it must be an integer >= {least}.')
  f = targets_lib.get_target(target, d=d, n=n)
  builtin = target_bounds.arb_function(f, d, n) is not None
  lip = None
  if lipschitz is not None or modulus is None:
    lip = target_bounds.check_lipschitz(lipschitz, f, d, n)
  equivariant = builtin and f.permutation_equivariant and not positional
  if not builtin and modulus is None:    # the Lipschitz fallback needs no grid
    return f_fbar(f, np.zeros((0, n, d), np.int64), np.zeros((0, n, d)),
                  np.zeros(0, np.int64), resolution=resolution, p=p, lipschitz=lip,
                  lipschitz_source=target_bounds.lipschitz_source(lip, f, d, n))
  if not builtin and resolution ** (n * d) > MAX_CUBES:
    raise ValueError(f'resolution={resolution} gives {resolution ** (n * d)} cubes; a '
                     f'callable is checked on every cube, at most {MAX_CUBES}.')
  k, w = classes_and_weights(Grid(d, n, resolution), equivariant)
  values = targets_lib.grid_values(f, k, resolution)
  s = None
  if modulus is not None:
    s = callable_checks.check_modulus(modulus, targets_lib.cell_centers(k, resolution),
                                      1 / resolution)
  return f_fbar(f, k, values, w, resolution=resolution, p=p, lipschitz=lip,
                lipschitz_source=None if lip is None else
                target_bounds.lipschitz_source(lip, f, d, n), modulus_values=s)
