r"""The one softmax attention layer's plan and certified ids (for ``yun.single_attention.one_layer``).

Kajitsuka & Sato (ICLR 2024) on Yun et al.'s grid: with M = N^d cells, w = (N, N^2, ..,
N^d), T = M - 1 and the softmax scale lam, the single head of ``yun.single_attention.one_layer`` gives
token j of context S an id; this module plans lam (closed forms), encloses every id in
arb balls (``mean_enclosures``) and measures the certified gaps between them.

The id of token j in context S (the multiset {m_1, .., m_n}) is

    id(S, t) = w^T z_j = O + t + mean_{beta_t}(S) / (2 (M - 1)),   t = m_j,
    mean_beta(S) = sum_k m_k e^{beta m_k} / sum_k e^{beta m_k},   beta_t = lam (t + T).

Softmax counts multiplicities, so S is a multiset and repeated tokens are covered: a
context is a multiset of n cells and the pair (S, t), t in S, is what must be
separated (equal tokens of one context share their id, and by permutation equivariance
f gives them equal outputs). There is no bad set inside [0, 1)^{n x d}.

Theorem (separation). Let n >= 2, h = max((M - 1)/2, 1), B = 1 + ln sec 1 + pi/2
(< 3.187) and

    beta* = 1 / (16 B n (n-2)! n^(n-1) h^n),
    lam   = 2^floor(log2(beta* / (2 (M - 1)))),        so beta_t in (beta*/4, beta*].

Then for t != t' the ids lie in disjoint unit windows [O + t, O + t + 1/2], and for
S != S' both containing t

    |mean_{beta_t}(S) - mean_{beta_t}(S')| >= gamma_mean
        := (lam (M - 1))^(n-2) / (2 n^(n-1) (n-2)!),

so distinct (context, token) pairs have ids at least gamma = gamma_mean / (2 (M - 1))
apart.

Proof. mean_beta(S) = K_S'(beta) with K_S(beta) = log (1/n sum_k e^{beta m_k}), the
cumulant generating function of the uniform law on S: mean_beta(S) = sum_{r>=1}
kappa_r(S) beta^(r-1) / (r-1)!. Write D = mean(S) - mean(S') and Dk_r = kappa_r(S) -
kappa_r(S').
  (i) First difference. kappa_r is an integer polynomial of weight r in the moments
      mu_i = p_i / n (p_i the power sums), so n^r kappa_r is an integer and a non-zero
      Dk_r has |Dk_r| >= n^(-r). Let r0 be the first r with Dk_r != 0. r0 <= n - 1:
      if kappa_1..kappa_(n-1) agree then mu_1..mu_(n-1) agree, so the n - 1 tokens of S
      and S' other than t have the same first n - 1 power sums, hence (Newton) the same
      elementary symmetric functions: S = S'.
  (ii) Tail. Centre the tokens at (M - 1)/2: |Y| <= h. For complex z with |z| <= 1/h,
      Re E e^{zY} >= e^{-1} cos 1 > 0, so K is analytic there with |K| <= 1 + ln sec 1 +
      pi/2 = B (log of the modulus in [-1 - ln sec 1, 1], argument in (-pi/2, pi/2)).
      Cauchy: |kappa_r| / r! <= B h^r, so |Dk_r| beta^(r-1)/(r-1)! <= 2 B r h^r
      beta^(r-1), and with q = beta h <= 1/2,
          sum_{r > r0} ... <= 2 B h (r0 + 1) q^r0 / (1 - q)^2 <= 8 B (r0+1) h^(r0+1) beta^r0.
  (iii) Lead. |Dk_r0| beta^(r0-1)/(r0-1)! >= beta^(r0-1) / (n^r0 (r0-1)!), and beta <= beta*
      makes the tail at most half of it (beta* is the r0 = n - 1 case of
      1/(16 B (r0+1)(r0-1)! n^r0 h^(r0+1)), which decreases in r0 because h >= 1). So
      |D| >= beta^(r0-1) / (2 n^r0 (r0-1)!) >= beta^(n-2) / (2 n^(n-1) (n-2)!), the last
      step because beta / (n r0) <= 1; beta_t >= lam (M - 1) gives gamma_mean.
  (iv) Tokens. mean_beta(S) in [0, M - 1], so id(S, t) - O - t in [0, 1/2].        QED

Remark (any lam > 0 separates, without a margin). With P(x) = sum_v c_v x^v the count
polynomial of S, mean_beta(S) = x P'(x) / P(x) at x = e^beta; equal means of S != S' make
the integer polynomial P'Q - PQ' vanish at x, and it is not identically 0 (else (P/Q)' =
0, P = Q as P(1) = Q(1) = n). For rational beta > 0, x is transcendental (Lindemann), so
the means differ. The theorem above adds the margin the value map needs.

Scaling. log2(1/beta*) = n log2 h + O(n log n), so
    log2(1/gamma) = (n - 1)^2 d log2 N + O(n^2 log n)   (proved; Yun et al.'s N^d + 1
layers need ~ (3n + 1) d log2 N bits for their largest id). The *certified* gaps on
whole grids (``verify.one_layer``) are far larger than the proved bound; both are
reported. The ids are irrational (exp), so the separation used by the value map is the
certified one: arb enclosures of every id, sorted, consecutive enclosures disjoint.

"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from fractions import Fraction

import numpy as np
from flint import arb

from transformer_ua.yun.grid import Grid

#: Rational upper bound of B = 1 + ln sec 1 + pi/2 = 3.18642... (the Cauchy bound).
CAUCHY_B = Fraction(3187, 1000)
#: Extra bits of the id enclosures beyond log2(M / gamma_mean) (so radii << gaps).
ID_GUARD_BITS = 32
#: Largest number of (context, token) ids planned (one bump layer each).
MAX_IDS = 10_000_000
#: Largest id-enclosure precision planned (bits).
MAX_BITS = 4096


# ---------------------------------------------------------------------------
# Plan: u (= w / N), lambda, T, the id scale and the proved margin.
# ---------------------------------------------------------------------------


def num_ids(grid: Grid) -> int:
  """(context, token) pairs: M C(M + n - 2, n - 1) (token t, the other n - 1 tokens a
  multiset), M = N^d."""
  d, n, N = grid.d, grid.n, grid.N
  M = N ** d
  return M * math.comb(M + n - 2, n - 1)


def num_classes(grid: Grid) -> int:
  """Contexts: multisets of n cells, C(M + n - 1, n)."""
  d, n, N = grid.d, grid.n, grid.N
  M = N ** d
  return math.comb(M + n - 1, n)


def _log2(x) -> float:
  x = Fraction(x)
  return math.log2(x.numerator) - math.log2(x.denominator)


def ramp_below(c: Fraction) -> Fraction:
  """The Lemma 6 ramp width for a clearance c > 0: 2^floor(log2(c / 2)), halved until
  strictly below c (an exact power of two)."""
  eps = Fraction(2) ** math.floor(_log2(c / 2))
  while eps >= c:
    eps /= 2
  return eps


@dataclasses.dataclass(frozen=True)
class OneLayerPlan:
  """The construction's constants (module docstring), all exact rationals.

  Attributes:
    d, n, resolution (N), M = N^d, w = (N, .., N^d) (the token integer m = w^T x).
    h: max((M - 1)/2, 1); beta_star: a rational lower bound of beta* (CAUCHY_B >= B).
    lam: the softmax scale (power of two), T = M - 1 (query offset).
    id_scale: 1 / (2 (M - 1)) (mean -> id), gamma_mean: proved gap of the means,
    gamma: proved gap of the ids, bits: precision of the id enclosures.
  """

  d: int
  n: int
  resolution: int
  M: int
  w: tuple
  h: Fraction
  beta_star: Fraction
  lam: Fraction
  T: int
  id_scale: Fraction
  gamma_mean: Fraction
  gamma: Fraction
  bits: int

  def as_dict(self) -> dict:
    return {'d': self.d, 'n': self.n, 'resolution': self.resolution, 'M': self.M,
            'w': list(self.w), 'lam': float(self.lam), 'log2_lam': _log2(self.lam),
            'T': self.T, 'beta_star': float(self.beta_star), 'id_scale': float(self.id_scale),
            'gamma_mean_proved': float(self.gamma_mean), 'gamma_proved': float(self.gamma),
            'log2_gamma_proved': _log2(self.gamma), 'bits': self.bits}


def gamma_mean_bound(n: int, M: int, lam) -> Fraction:
  """(lam (M - 1))^(n-2) / (2 n^(n-1) (n-2)!): the proved mean gap at scale lam (valid
  when lam (2M - 2) <= beta*)."""
  return (Fraction(lam) * (M - 1)) ** (n - 2) / (2 * n ** (n - 1) * math.factorial(n - 2))


def plan(grid: Grid) -> OneLayerPlan:
  """The construction's constants for (d, n, N) (closed forms; no search).

  Raises:
    ValueError: bad (d, n, N), more than ``MAX_IDS`` ids, or enclosures past MAX_BITS.
  """
  d, n, N = grid.d, grid.n, grid.N
  M = N ** d
  ids = num_ids(grid)
  if ids > MAX_IDS:
    raise ValueError(f'd={d}, n={n}, resolution={N} has {ids:,} (context, token) ids '
                     f'(M C(M+n-2, n-1), M = N^d = {M}); at most {MAX_IDS:,} are planned '
                     '(one bump layer and one enclosure each). Choose a smaller grid.')
  h = max(Fraction(M - 1, 2), Fraction(1))
  beta_star = 1 / (16 * CAUCHY_B * n * math.factorial(n - 2) * n ** (n - 1) * h ** n)
  lam = Fraction(2) ** math.floor(_log2(beta_star / (2 * (M - 1))))
  while lam * 2 * (M - 1) > beta_star:   # floor of a float log: make it exact
    lam /= 2
  gamma_mean = gamma_mean_bound(n, M, lam)
  id_scale = Fraction(1, 2 * (M - 1))
  bits = math.ceil(_log2(Fraction(M) / gamma_mean)) + ID_GUARD_BITS
  if bits > MAX_BITS:
    raise ValueError(f'd={d}, n={n}, resolution={N}: the proved gap 2^{_log2(gamma_mean):.0f} '
                     f'needs {bits} bits per id enclosure; at most {MAX_BITS} are planned.')
  return OneLayerPlan(d=d, n=n, resolution=N, M=M, w=tuple(N ** (i + 1) for i in range(d)),
                      h=h, beta_star=beta_star, lam=lam, T=M - 1, id_scale=id_scale,
                      gamma_mean=gamma_mean, gamma=gamma_mean * id_scale, bits=bits)


# ---------------------------------------------------------------------------
# Certified id enclosures.
# ---------------------------------------------------------------------------


def _floor_scaled(x: arb, s: int) -> int:
  """floor(x * 2^s) for an exact arb point x."""
  m, e = x.man_exp()
  m, k = int(m), int(e) + s
  return m << k if k >= 0 else m >> -k


def _bounds_scaled(a: arb, s: int) -> tuple[int, int]:
  """Integers (lo, hi) with [lo, hi] / 2^s containing the ball a (outward)."""
  return _floor_scaled(a.lower(), s), -_floor_scaled(-a.upper(), s)


@dataclasses.dataclass(frozen=True)
class IdTable:
  """Certified enclosures of mean_{beta_t}(S) for every (context, token) pair.

  Attributes:
    tokens [P] int: t; rests [P, n-1] int: the other tokens (sorted); lo, hi [P] object
    (Python ints): [lo, hi] / 2^scale contains mean_{beta_t}(S) exactly; rows sorted by
    (t, lo). lam: the scale used; bits: arb precision; seconds: time to compute.
  """

  tokens: np.ndarray
  rests: np.ndarray
  lo: list
  hi: list
  scale: int
  lam: Fraction
  bits: int
  seconds: float
  M: int
  n: int

  def __len__(self) -> int:
    return len(self.lo)


def mean_enclosures(M: int, n: int, lam, *, T: int | None = None, bits: int) -> IdTable:
  """arb enclosures of mean_{beta_t}(S), beta_t = lam (t + T), for every token t in
  {0..M-1} and every multiset R of n - 1 further tokens (S = R + {t}).

  Exact inputs (lam a rational); every exp and quotient is an arb ball at ``bits``; the
  returned integer bounds round outward. Sorted by (t, lower bound).
  """
  t0 = time.perf_counter()
  T = M - 1 if T is None else T
  lam = Fraction(lam)
  from flint import ctx, fmpq  # pylint: disable=import-outside-toplevel
  rests = list(itertools.combinations_with_replacement(range(M), n - 1))
  scale = bits
  tok, rest_rows, lo, hi = [], [], [], []
  old = ctx.prec
  ctx.prec = bits
  try:
    lam_a = arb(fmpq(lam.numerator, lam.denominator))
    for t in range(M):
      beta = lam_a * (t + T)
      e = [(beta * v).exp() for v in range(M)]
      ve = [e[v] * v for v in range(M)]
      rows = []
      for r in rests:
        num, den = ve[t], e[t]
        for v in r:
          num += ve[v]
          den += e[v]
        a, b = _bounds_scaled(num / den, scale)
        rows.append((a, b, r))
      rows.sort(key=lambda x: (x[0], x[1]))
      for a, b, r in rows:
        tok.append(t)
        rest_rows.append(r)
        lo.append(a)
        hi.append(b)
  finally:
    ctx.prec = old
  return IdTable(tokens=np.asarray(tok, np.int64),
                 rests=np.asarray(rest_rows, np.int64).reshape(len(tok), n - 1), lo=lo, hi=hi,
                 scale=scale, lam=lam, bits=bits, seconds=time.perf_counter() - t0, M=M, n=n)


def gaps(table: IdTable) -> dict:
  """Certified separation of the means within each token t (consecutive enclosures).

  Returns dict: min_gap (Fraction: a lower bound of the smallest distance between two
  distinct pairs' means, negative when enclosures overlap), argmin (row index i: between
  rows i and i + 1), gaps (list of Python ints, scaled by 2^scale, one per consecutive
  pair of one token), mean_range (Fraction lo, hi over all rows).
  """
  lo, hi, tok = table.lo, table.hi, table.tokens
  out, where = [], []
  for i in range(len(lo) - 1):
    if tok[i] == tok[i + 1]:
      out.append(lo[i + 1] - hi[i])
      where.append(i)
  s = Fraction(2) ** table.scale
  k = int(np.argmin(out)) if out else None
  return {'min_gap': (Fraction(out[k]) / s) if out else None,
          'argmin': where[k] if out else None, 'gaps': out, 'rows': where,
          'mean_range': (Fraction(min(lo)) / s, Fraction(max(hi)) / s)}


def search_lam(grid: Grid, *, max_doublings: int = 48,
               patience: int = 3) -> dict:
  """The power of two lam >= the plan's whose *certified* smallest mean gap is largest.

  Tries lam = plan.lam 2^k, k = 0, 1, .. (enclosures at the plan's bits) until the gap
  has fallen ``patience`` times in a row after its best, enclosures overlap, or k =
  ``max_doublings``. Past the proved range (k >= 1) the separation rests on the
  certificate alone, which every candidate carries. Returns {'lam', 'min_gap_mean',
  'tried': [(log2 lam, certified min gap or None)], 'seconds'}.
  """
  t0 = time.perf_counter()
  p = plan(grid)
  best, tried, worse = None, [], 0
  for k in range(max_doublings + 1):
    lam = p.lam * 2 ** k
    g = gaps(mean_enclosures(p.M, grid.n, lam, T=p.T, bits=p.bits))['min_gap']
    tried.append((_log2(lam), float(g) if g is not None else None))
    if g is None or g <= 0:
      break
    if best is None or g > best[1]:
      best, worse = (lam, g), 0
    else:
      worse += 1
      if worse >= patience:
        break
  return {'lam': best[0], 'min_gap_mean': best[1], 'tried': tried,
          'seconds': time.perf_counter() - t0}



def cells_of(m, d: int, N: int) -> np.ndarray:  # pylint: disable=invalid-name
  """Token integers m [..] -> cells k [.., d] (m = sum_i k_i N^i, i from 0)."""
  m = np.asarray(m, np.int64)
  return np.stack([(m // N ** i) % N for i in range(d)], axis=-1)
