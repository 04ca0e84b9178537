r"""One softmax attention layer as the contextual mapping: Theorem 2 with one attention layer.

After Kajitsuka & Sato (ICLR 2024): one single-head softmax self-attention layer with
rank-1 W_K W_Q^T (head size 1) is a contextual mapping; with token-wise feed-forward
layers around it, it approximates any continuous permutation-equivariant f. This module
builds one such network on Yun et al.'s grid and proves (and, on whole grids, certifies)
that it separates every context. Shapes are token-major: X, Z [.., n, d]; the paper's
X is d x n and its column j is our row j.

Pipeline (each stage a plain Transformer layer, residual included):

    g_q    Lemma 7, unchanged (``quantize``): X in the cube S_L  ->  L, L_j = k_j / N
    attn   one head, head size 1, softmax (no hardmax limit: the layer is exact):
             w      = (N, N^2, ..., N^d)            so m_j = w^T L_j in {0, .., M-1},
                                                    M = N^d, a bijection of cells
             key    k_k = w^T z_k = m_k             W_K = w^T
             query  q_j = lam (w^T z_j + T)         W_Q = lam w^T, b_Q = lam T, T = M - 1
             value  v_k = m_k                       W_V = w^T
             out    z_j <- z_j + c' e_1 sum_k softmax_k(q_j k_k) v_k,   W_O = c' e_1,
                    c' = 1 / (2 N (M - 1))
    shift  one token-wise feed-forward layer (bias only): z <- z + (O / N) e_1
    g_v    one bump layer per id (Lemma 9 with certified edges), see below.

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

Value map (token-wise, Lemma 9 with certified edges). Sort the ids; between consecutive
enclosures [lo_i, hi_i] < [lo_{i+1}, hi_{i+1}] put a dyadic rational edge e_i in the
certified gap; bump i is the Phi unit 1_[e_(i-1), e_i)(w^T z), writing A_i - r_i with
A_i = f(C_S)_t the target at the cube centre and r_i a dyadic approximation of token
t's exact state (|z - r_i| below the enclosure radius), so the token becomes A_i up to
that radius. The shift O = 2^ceil(log2(|w|_1 max|A| + 2)) keeps every written value
(|w^T A| <= O - 2) below every bump, so no bump fires twice (Lemma 9's trap gap).

Domain. The certificate covers X in [0, 1)^{n x d} (``apply`` refuses anything else):
Lemma 7 sends an entry outside [0, 1) to -N^(nd), and no claim is made there.

Lemma 6: the Phi units become 4 ReLUs with ramps of width 2^floor(log2(c / 2)) per stage,
c = margin delta for the quantization and c = min_i (e_i - hi_i, lo_(i+1) - e_i) for the
bumps (every cube interior and every id stays outside every ramp window); the attention
is already softmax. The realized network is T^{2,1,4} blocks (``realize.as_blocks``) with
exactly one attention layer that writes to the residual stream.

Whole domain. ``realize(clamp=True)`` appends ``realize.output_clamp`` (2 ReLUs per output
coordinate, clamping to the range of g_bar, ``output_range``), so |g - g_bar| <= that
range in the ramp windows too, and ``yun.certify_lp(net, g)`` bounds d_p(f, g) over the
whole unit cube (d_p(f_bar, g_bar) = 0 here: no bad set).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import multiprocessing
import os
import time
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from flint import arb

from transformer_ua import construction, layers, realize
from transformer_ua.exact import ball
from transformer_ua.layers import Segment
from transformer_ua.yun import common, grid, quantize, targets as targets_lib

#: The contextual mappings ``build_approximator`` knows.
CONTEXTUALS = grid.CONTEXTUALS
#: Rational upper bound of B = 1 + ln sec 1 + pi/2 = 3.18642... (the Cauchy bound).
CAUCHY_B = Fraction(3187, 1000)
#: Extra bits of the id enclosures beyond log2(M / gamma_mean) (so radii << gaps).
ID_GUARD_BITS = 32
#: dtypes of ``OneLayerApproximator.realize``.
REALIZATION_DTYPES = ('exact', 'float64')
#: Largest number of (context, token) ids planned (one bump layer each).
MAX_IDS = 10_000_000
#: Largest id-enclosure precision planned (bits).
MAX_BITS = 4096
#: Default cube-interior margin (fraction of delta per side), as ``yun.plan``.
DEFAULT_MARGIN = Fraction(1, 4)
#: Extra bits of the id enclosures a construction is built from (beyond the plan's): the
#: state approximations r_i are their midpoints, so |g - g_bar| on the cubes is ~ their
#: radius (~ 2^-(plan bits + this)).
STATE_EXTRA_BITS = 64


check_contextual = grid.check_contextual


# ---------------------------------------------------------------------------
# Plan: u (= w / N), lambda, T, the id scale and the proved margin.
# ---------------------------------------------------------------------------


def num_ids(d: int, n: int, resolution: int) -> int:
  """(context, token) pairs: M C(M + n - 2, n - 1) (token t, the other n - 1 tokens a
  multiset), M = N^d."""
  M = resolution ** d
  return M * math.comb(M + n - 2, n - 1)


def num_classes(d: int, n: int, resolution: int) -> int:
  """Contexts: multisets of n cells, C(M + n - 1, n)."""
  M = resolution ** d
  return math.comb(M + n - 1, n)


def _log2(x) -> float:
  x = Fraction(x)
  return math.log2(x.numerator) - math.log2(x.denominator)


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


def plan(d: int, n: int, resolution: int) -> OneLayerPlan:
  """The construction's constants for (d, n, N) (closed forms; no search).

  Raises:
    ValueError: bad (d, n, N), more than ``MAX_IDS`` ids, or enclosures past MAX_BITS.
  """
  d, n, N = common.check_config(d, n, resolution)
  M = N ** d
  ids = num_ids(d, n, N)
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


def search_lam(d: int, n: int, resolution: int, *, max_doublings: int = 48,
               patience: int = 3) -> dict:
  """The power of two lam >= the plan's whose *certified* smallest mean gap is largest.

  Tries lam = plan.lam 2^k, k = 0, 1, .. (enclosures at the plan's bits) until the gap
  has fallen ``patience`` times in a row after its best, enclosures overlap, or k =
  ``max_doublings``. Past the proved range (k >= 1) the separation rests on the
  certificate alone, which every candidate carries. Returns {'lam', 'min_gap_mean',
  'tried': [(log2 lam, certified min gap or None)], 'seconds'}.
  """
  t0 = time.perf_counter()
  p = plan(d, n, resolution)
  best, tried, worse = None, [], 0
  for k in range(max_doublings + 1):
    lam = p.lam * 2 ** k
    g = gaps(mean_enclosures(p.M, n, lam, T=p.T, bits=p.bits))['min_gap']
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


# ---------------------------------------------------------------------------
# The construction.
# ---------------------------------------------------------------------------


def _checked_input(x, n: int, d: int) -> np.ndarray:
  """X as float64 [batch, n, d] in [0, 1)^{n x d}, or ValueError (as ``yun.Approximator``)."""
  # pylint: disable=import-outside-toplevel,protected-access
  return common.check_domain(common.check_input(x, n, d))


def _cells(m, d: int, N: int) -> np.ndarray:
  """Token integers m [..] -> cells k [.., d] (m = sum_i k_i N^i, i from 0)."""
  m = np.asarray(m, np.int64)
  return np.stack([(m // N ** i) % N for i in range(d)], axis=-1)


def _exact(a) -> np.ndarray:
  return np.asarray(a, dtype=object)


def _as_float64(tree) -> dict:
  """A params pytree with rational (or float) leaves as float64 (bool leaves kept)."""
  return jax.tree_util.tree_map(
      lambda a: np.asarray(a, bool if np.asarray(a).dtype == bool else np.float64), tree)


def _unscale(tree, scale: int):
  """Lemma 7's scaled-integer params -> exact rationals (biases, breakpoints,
  intercepts scale with the input; weights do not)."""
  scaled = ('b_1', 'b_2', 'breaks', 'intercepts')

  def fix(path, leaf):
    leaf = np.asarray(leaf)
    if leaf.dtype == bool:
      return leaf
    name = getattr(path[-1], 'key', None)
    conv = (lambda v: Fraction(int(v), scale)) if name in scaled else int  # noqa: E731
    return np.vectorize(conv, otypes=[object])(leaf) if leaf.size else leaf.astype(object)
  return jax.tree_util.tree_map_with_path(fix, tree)


@dataclasses.dataclass(frozen=True, eq=False)
class OneLayerApproximator:
  """g_bar of Theorem 2 with one softmax attention layer (module docstring).

  Attributes:
    target, f_bar; d, n, resolution; plan (``OneLayerPlan``); table (``IdTable``);
    classes [C, n] int: every context as sorted token integers; values [P, d] float64:
    A for each id row of ``table``; edges: P + 1 dyadic Fractions (bump i is [e_i,
    e_(i+1)) in id space); states: P exact d-vectors r_i (token state approximations);
    offset: O; min_edge_clearance: min distance of an id enclosure to its edges.
  """

  target: targets_lib.Target
  f_bar: targets_lib.Target
  d: int
  n: int
  resolution: int
  plan: OneLayerPlan
  table: IdTable
  values: np.ndarray
  edges: tuple
  states: tuple
  offset: int
  min_edge_clearance: Fraction
  index: dict
  build_seconds: float

  @property
  def lam(self) -> Fraction:
    return self.table.lam

  @property
  def variant(self) -> grid.OneLayer:
    """The construction's variant (``yun.grid``)."""
    return grid.OneLayer(grid.Grid(self.d, self.n, self.resolution))

  @property
  def positional(self) -> bool:
    """Theorem 2 (permutation equivariant f, no positional encoding): always False."""
    return self.variant.positional

  # -- g_bar ---------------------------------------------------------------

  def apply(self, x) -> np.ndarray:
    """g_bar(X) for X [batch, n, d] in [0, 1)^{n x d}: each token's bump selected by
    its (context, token) pair (the certified separation makes this the literal bump
    layers' selection), its value A returned (float64)."""
    x = _checked_input(x, self.n, self.d)
    k = np.floor(x * self.resolution).astype(np.int64)
    m = np.sum(k * (self.resolution ** np.arange(self.d)), axis=-1)   # [batch, n]
    out = np.zeros(x.shape)
    for b in range(x.shape[0]):
      for j in range(self.n):
        rest = list(m[b])
        rest.remove(m[b, j])
        out[b, j] = self.values[self.index[(int(m[b, j]), tuple(sorted(int(v) for v in rest)))]]
    return out

  # -- counts -------------------------------------------------------------

  def apply_exact(self, x) -> np.ndarray:
    """g_bar(X) as Fractions [batch, n, d]: the selected bump's A (a float64 value,
    taken exactly)."""
    return construction.to_fractions(self.apply(x))

  # -- the construction contract: network and counts -------------------------

  def layer_counts(self) -> dict:
    """{'quantization': {'feedforward': d(N + 1)}, 'contextual': {'attention': 1,
    'feedforward': 1} (the softmax layer and the shift), 'value': {'feedforward': one
    per id}}."""
    return construction.merge_counts(*(
        construction.segment_counts((seg,), stage)
        for seg, stage in zip(self._modified()[0], self.stage_names())))

  def stage_names(self) -> tuple:
    """The stage of each segment of ``network()``."""
    return ('quantization', 'contextual', 'contextual', 'value')

  def depth(self) -> int:
    return sum(s.depth for s in self._modified()[0])

  def num_params(self) -> int:
    return layers.count_params(self._modified()[1])

  def network(self) -> layers.Network:
    """The literal g_bar (Phi feed-forwards, one softmax attention layer)."""
    return layers.Network(self._modified()[0], param_dtype=jnp.float64)

  def exact_params(self) -> dict:
    """The literal network's params as exact rationals."""
    return self._modified()[1]

  def float_params(self) -> dict:
    """``exact_params`` rounded to float64."""
    return _as_float64(self._modified()[1])

  # -- the modified network (Phi units) and its realization ----------------

  def _modified(self):
    """(segments, exact params) of g_bar: Phi feed-forwards, one softmax attention
    (built once per object; treat as read-only)."""
    cache = self.__dict__.setdefault('_cache', {})
    if 'modified' not in cache:
      cache['modified'] = self._build_modified()
    return cache['modified']

  def _build_modified(self):
    d, N, M = self.d, self.resolution, self.plan.M
    _, qp = quantize.quantization_params(d=d, n=self.n, resolution=N, scale=2 * N,
                                         dtype='int64')
    q = _unscale(jax.tree_util.tree_map(np.asarray, qp['segment_0']), 2 * N)
    w = [Fraction(v) for v in self.plan.w]
    lam, T = self.lam, self.plan.T
    c_out = Fraction(1, 2 * N * (M - 1))
    z = lambda *s: np.full(s, 0, object)  # noqa: E731
    att = {'W_Q': _exact([[[lam * v for v in w]]]), 'b_Q': _exact([[lam * T]]),
           'W_K': _exact([[w]]), 'W_V': _exact([[w]]),
           'W_O': _exact([[[c_out if i == 0 else 0] for i in range(d)]])}
    att = {k: v[None] for k, v in att.items()}           # [L=1, h=1, ...]
    shift = {'W_1': z(1, 1, d), 'b_1': z(1, 1), 'W_2': z(1, d, 1),
             'b_2': _exact([[Fraction(self.offset, N) if i == 0 else 0 for i in range(d)]])}
    P = len(self.table)
    e = self.edges
    # Bumps in *decreasing* id order: a token passes the bumps above its id (every ReLU
    # off: the layer is exactly the identity, even in floating point), then its own turns
    # it into A (below every bump, so off from there on). In increasing order it would
    # first cross every bump below its id with all four ReLUs on, cancelling terms of
    # size |w^T z| / epsilon: exact in rationals, but float64 drifts past the id gaps.
    order = range(P - 1, -1, -1)
    bumps = {
        'W_1': _exact([[w] for _ in order]),
        'b_1': _exact([[-e[i]] for i in order]),
        'W_2': _exact([[[Fraction(float(self.values[i, a])) - self.states[i][a]]
                        for a in range(d)] for i in order]),
        'b_2': z(P, d),
        'phi': {'breaks': _exact([[[Fraction(0), e[i + 1] - e[i]]] for i in order]),
                'slopes': _exact([[[0, 0, 0]] for _ in range(P)]),
                'intercepts': _exact([[[0, 1, 0]] for _ in range(P)]),
                'left_closed': np.zeros((P, 1, 2), bool)}}
    segments = (quantize.quantization_segments(d, N)[0],
                Segment('attention', 1, num_heads=1, head_size=1, normalizer='softmax',
                        lam=1.0, name='one_layer'),
                Segment('feedforward', 1, width=1, activation='relu', name='shift'),
                Segment('feedforward', P, width=1, activation='phi', name='value'))
    params = {'segment_0': q, 'segment_1': {'attention': att},
              'segment_2': {'feedforward': shift}, 'segment_3': {'feedforward': bumps}}
    return segments, params

  def plan_epsilon(self, margin=DEFAULT_MARGIN) -> dict:
    """Lemma 6 ramp widths per stage, 2^floor(log2(clearance / 2)): 'quantization'
    (clearance margin delta: cube interiors stay off Lemma 7's breakpoints) and 'value'
    (clearance: the smallest distance of an id enclosure to its bump edges). Separate
    widths keep the quantization's ramps, and so its weights, at the scale of delta."""
    def pow2_below(c):
      eps = Fraction(2) ** math.floor(_log2(c / 2))
      while eps >= c:
        eps /= 2
      return eps
    return {'quantization': pow2_below(Fraction(margin) / self.resolution),
            'value': pow2_below(self.min_edge_clearance)}

  def plan_bits(self, tolerance: float = 1e-6) -> int:
    """Working precision of the ball evaluation: ids resolved well below the edge
    clearance, outputs below ``tolerance``."""
    top = self.offset + self.plan.M
    return (math.ceil(_log2(Fraction(top) / self.min_edge_clearance))
            + math.ceil(-math.log2(tolerance)) + ID_GUARD_BITS)

  def output_range(self) -> tuple[list, list]:
    """(lo, hi) [d]: lo_i = min A_i, hi_i = max A_i over the value table, exact
    rationals of the float64 values: the range of g_bar in coordinate i (g_bar takes
    exactly the values A on [0, 1)^{n x d}; there is no bad set, so no 0)."""
    vals = self.values.reshape(-1, self.d)
    lo = [min(Fraction(float(v)) for v in vals[:, i]) for i in range(self.d)]
    hi = [max(Fraction(float(v)) for v in vals[:, i]) for i in range(self.d)]
    return lo, hi

  def realize(self, *, epsilon=None, dtype: str = 'exact', margin=DEFAULT_MARGIN,
              clamp: bool = False):
    """The standard Transformer g in T^{2,1,4}: Phi -> 4 ReLUs (Lemma 6), blocks.

    Args:
      epsilon: one ramp width for every Phi unit (exact rational), or None: the
        per-stage widths of ``plan_epsilon(margin)``.
      dtype: 'exact' (params are exact rationals; evaluation is certified) or 'float64'
        (the same rationals rounded; evaluated by the JAX network, not certified).
      margin: the cube-interior margin (fraction of delta per side) the quantization
        ramps keep clear of (``plan_epsilon``); certify with the same margin.
      clamp: append ``realize.output_clamp`` blocks clamping each output coordinate to
        the range of g_bar (``output_range``): |g - g_bar| <= hi - lo everywhere, the
        ramp windows included, and no change where g is within the range already.
    """
    if dtype not in REALIZATION_DTYPES:
      raise ValueError(f'dtype={dtype!r}; allowed: {", ".join(map(repr, REALIZATION_DTYPES))}.')
    if not isinstance(clamp, bool):
      raise ValueError(f'clamp must be True or False, got {clamp!r}.')
    if epsilon is None:
      eps = self.plan_epsilon(margin)
    else:
      if Fraction(epsilon) <= 0:
        raise ValueError(f'epsilon must be positive, got {epsilon!r}.')
      eps = {'quantization': Fraction(epsilon), 'value': Fraction(epsilon)}
    modified, mparams = self._modified()
    segments, params = [], {}
    for i, seg in enumerate(modified):   # Lemma 6 stage by stage, each with its width
      one, p1 = realize.relu_realization((seg,), {'segment_0': mparams[f'segment_{i}']},
                                         eps.get(seg.name, eps['value']))
      segments.append(one[0])
      params[f'segment_{i}'] = p1['segment_0']
    segments, params = realize.as_blocks(tuple(segments), params)
    bounds = None
    if clamp:
      lo, hi = self.output_range()
      segs, cp = realize.output_clamp(lo, hi, exact=True)
      params = {**params, f'segment_{len(segments)}': cp['segment_0']}
      segments = tuple(segments) + segs
      bounds = (tuple(lo), tuple(hi)) if dtype == 'exact' else (tuple(map(float, lo)),
                                                                tuple(map(float, hi)))
    if dtype == 'float64':
      params = _as_float64(params)
    return OneLayerRealized(segments=segments, params=params, epsilon=min(eps.values()),
                            epsilons=eps, source=self, dtype=dtype, clamp=bounds)

  def describe(self) -> str:
    c = construction.stage_counts(self.layer_counts())
    return (f'Theorem 2, one softmax attention layer: target {self.target.name}, d={self.d}, '
            f'n={self.n}, N={self.resolution}; {self.depth()} layers ({c["quantization"]} '
            f'quantization, 1 attention, 1 shift, {c["value"]} value), lam=2^'
            f'{_log2(self.lam):.0f}, certified min id gap {float(self.min_gap):.3g}')

  @property
  def min_gap(self) -> Fraction:
    """Certified smallest distance between two distinct ids (id space)."""
    return gaps(self.table)['min_gap'] * self.plan.id_scale


@dataclasses.dataclass(frozen=True, eq=False)
class OneLayerRealized:
  """The realized g: T^{2,1,4} blocks; 'exact' params (rationals) are evaluated and
  certified in arb balls, 'float64' params (the same rationals rounded) by the JAX network.

  Attributes: segments, params; epsilon (the smallest ramp width) and epsilons (per
  stage: 'quantization', 'value'); source (the ``OneLayerApproximator``); dtype; clamp:
  None, or (lo, hi): the last blocks clamp output coordinate i to the range of g_bar
  (``realize.output_clamp``; exact rationals for 'exact').

  With 'exact' params it carries what ``yun.certify_lp`` needs of a realization (the
  same as ``yun.Realized``): segments, params, positional, dtype, source, clamp,
  epsilon, quantization_epsilon, lam, ``planned_bits(margin)``, ``ball_network(bits)``
  and ``certify_interiors(margin, bits, workers=, check_plan=)``.
  """

  segments: tuple
  params: dict
  epsilon: Fraction
  source: OneLayerApproximator
  dtype: str = 'exact'
  epsilons: dict | None = None
  clamp: tuple | None = None

  @property
  def lam(self) -> Fraction:
    return self.source.lam

  @property
  def positional(self) -> bool:
    return False

  @property
  def quantization_epsilon(self) -> Fraction:
    """Ramp width of the quantization's ReLUs (Lemma 7 edges)."""
    return self.epsilons['quantization']

  def planned_bits(self, margin=DEFAULT_MARGIN, tolerance: float = 1e-6) -> int:
    """The ball precision the planner gives this realization (``plan_bits``; the ramps'
    widths, and so the margin, are fixed at ``realize``)."""
    del margin
    return self.bits(tolerance)

  # -- the construction contract (``transformer_ua.construction``) ----------

  def depth(self) -> int:
    """Blocks of T^{2,1,4} (the output clamp's included)."""
    return sum(s.depth for s in self.segments)

  def layer_counts(self) -> dict:
    """{stage: {'block': blocks}} (the source's stages, then 'clamp')."""
    stages = self.source.stage_names()
    out = {}
    for i, seg in enumerate(self.segments):
      out = construction.merge_counts(
          out, {stages[i] if i < len(stages) else 'clamp': {seg.kind: seg.depth}})
    return out

  def network(self) -> layers.Network:
    return layers.Network(self.segments, positional=False, num_tokens=self.source.n,
                          param_dtype=jnp.float64)

  def float_params(self) -> dict:
    """The params as float64 (the exact rationals rounded for 'exact')."""
    return _as_float64(self.params)

  def apply_exact(self, x) -> np.ndarray:
    """'float64': the exact values of what the float network computes; 'exact': the
    rational midpoint of the certified enclosure (softmax makes g(X) transcendental).
    Fractions [batch, n, d]."""
    return construction.to_fractions(self.apply(x))

  def block_counts(self) -> dict:
    """Blocks, and how many have their attention / feed-forward switched on."""
    att_on = ff_on = 0
    for i in range(len(self.segments)):
      p = self.params[f'segment_{i}']
      for a in np.asarray(p['attention']['W_O']).reshape(self.segments[i].depth, -1):
        att_on += int(any(v != 0 for v in a))
      ff = p['feedforward']
      w2 = np.asarray(ff['W_2']).reshape(self.segments[i].depth, -1)
      b2 = np.asarray(ff['b_2']).reshape(self.segments[i].depth, -1)
      for a, b in zip(w2, b2):
        ff_on += int(any(v != 0 for v in a) or any(v != 0 for v in b))
    return {'blocks': sum(s.depth for s in self.segments), 'attention_on': att_on,
            'feedforward_on': ff_on, 'heads': realize.BLOCK_HEADS,
            'head_size': realize.BLOCK_HEAD_SIZE, 'width': realize.BLOCK_WIDTH}

  def num_params(self) -> int:
    return layers.count_params(self.params)

  def bits(self, tolerance: float = 1e-6) -> int:
    return self.source.plan_bits(tolerance)

  def ball_network(self, bits: int) -> ball.BallNetwork:
    key = ('_ball', bits)
    cache = self.__dict__.setdefault('_cache', {})
    if key not in cache:
      with ball.precision(bits):
        cache[key] = ball.BallNetwork(self.segments, self.params)
    return cache[key]

  def apply_certified(self, x, bits: int | None = None):
    """(mid, rad) float64 [batch, n, d]: the exact g(X) lies in [mid - rad, mid + rad]."""
    self._check_exact()
    src = self.source
    x = _checked_input(x, src.n, src.d)
    bits = self.bits() if bits is None else ball.check_bits(bits)
    bn = self.ball_network(bits)
    mid, rad = np.zeros(x.shape), np.zeros(x.shape)
    with ball.precision(bits):
      for b in range(x.shape[0]):
        mid[b], rad[b] = ball.mid_rad(bn.forward(ball.points(x[b])))
    return mid, rad

  def _check_exact(self):
    if self.dtype != 'exact':
      raise ValueError(f"certified evaluation needs dtype='exact' (this one is {self.dtype}).")

  def apply(self, x) -> np.ndarray:
    """g(X) [batch, n, d] float64: the certified midpoint ('exact') or the float64 JAX
    network ('float64')."""
    if self.dtype == 'exact':
      return self.apply_certified(x)[0]
    x = _checked_input(x, self.source.n, self.source.d)
    with jax.enable_x64(True):
      return np.asarray(layers.jit_apply(self.network())(self.params,
                                                         jnp.asarray(x, jnp.float64)))

  def sampled_error(self, samples: int = 512, seed: int = 0, margin: float = 0.25) -> float:
    """max |g - g_bar| on ``samples`` uniform cube-interior points (a measurement, not a
    certificate; for the float64 realization)."""
    src = self.source
    rng = np.random.default_rng(seed)
    k = rng.integers(0, src.resolution, size=(samples, src.n, src.d))
    x = (k + margin + (1 - 2 * margin) * rng.random(k.shape)) / src.resolution
    return float(np.max(np.abs(self.apply(x) - src.apply(x))))

  def certify_interiors(self, margin=DEFAULT_MARGIN, bits: int | None = None, *,
                        tolerance: float = 1e-6, workers: int | None = None,
                        check_plan: bool = False) -> dict:
    """Certified max |g - g_bar| over every point of every cube interior (each cube
    shrunk by margin delta per side; one cube per context, by equivariance), by arb box
    propagation. ``check_plan``: refuse an explicit ``bits`` below the plan's. Returns
    dict as ``yun.plan.certify_interiors``."""
    self._check_exact()
    src = self.source
    margin = Fraction(margin)
    if not 0 <= margin < Fraction(1, 2):
      raise ValueError(f'margin must be in [0, 1/2), got {margin}.')
    need = self.bits(tolerance)
    bits = need if bits is None else ball.check_bits(bits)
    if check_plan and bits < need:
      raise ValueError(f'bits={bits} is below the {need} bits the plan needs for this '
                       'realization.')
    t0 = time.perf_counter()
    N = src.resolution
    classes = np.asarray(list(itertools.combinations_with_replacement(range(src.plan.M),
                                                                      src.n)), np.int64)
    cells = _cells(classes, src.d, N)                     # [C, n, d]
    targets = src.apply((cells + 0.5) / N)
    self.ball_network(bits)                               # build before forking
    _WORK.update(g=self, bits=bits, margin=margin, cells=cells, targets=targets)
    workers = workers or min(2, os.cpu_count() or 1)
    c = len(cells)
    step = max(1, -(-c // (8 * workers)))
    chunks = [(s, min(c, s + step)) for s in range(0, c, step)]
    if workers > 1 and c > 1:
      pool = multiprocessing.get_context('fork').Pool(workers)
      try:
        results = pool.map(_certify_chunk, chunks)
      finally:   # close + join: the workers exit on their own (no SIGTERM)
        pool.close()
        pool.join()
    else:
      results = [_certify_chunk(ch) for ch in chunks]
    worst, where = max(results, key=lambda r: r[0])
    return {'max_abs_error': worst, 'certified': bool(worst <= tolerance),
            'tolerance': tolerance, 'cubes': c, 'bits': bits,
            'seconds': time.perf_counter() - t0, 'margin': float(margin),
            'worst_cube': cells[where].tolist(), 'lam': float(self.lam),
            'epsilon': float(self.epsilon), 'workers': workers}


_WORK = {}


def _certify_chunk(args):
  start, stop = args
  g, bits, margin, cells, targets = (_WORK[k] for k in ('g', 'bits', 'margin', 'cells',
                                                       'targets'))
  N = g.source.resolution
  bn = g.ball_network(bits)
  worst, where = 0.0, start
  with ball.precision(bits):
    for c in range(start, stop):
      box = [[ball.interval(Fraction(int(v)) / N + margin / N,
                            Fraction(int(v) + 1) / N - margin / N) for v in row]
             for row in cells[c]]
      err = ball.abs_error_bound(bn.forward(box), targets[c])
      if err > worst:
        worst, where = err, c
  return worst, where


def _dyadic_between(a: Fraction, b: Fraction) -> Fraction:
  """The dyadic rational with the smallest denominator in the open interval (a, b)."""
  k = 0
  while True:
    s = Fraction(2) ** k
    v = Fraction(math.floor(a * s) + 1) / s
    if v < b:
      return v
    k += 1


def build(target, *, d: int, n: int, resolution: int, lam=None,
          id_bits: int | None = None) -> OneLayerApproximator:
  """Compiles a permutation-equivariant target into the one-attention-layer g_bar.

  Args:
    target: as ``yun.build_approximator``.
    d, n, resolution: the grid (n >= 2, N >= 2).
    lam: softmax scale (default: the plan's proved one; 'search': ``search_lam``'s);
      the construction is built only if the certified enclosures of its ids are
      pairwise disjoint.
    id_bits: precision of the id enclosures (default: the plan's + STATE_EXTRA_BITS).
  Raises:
    ValueError: bad configuration, a target that is not equivariant, a grid past the
      plan (``plan``), or ids whose certified enclosures overlap at this lam.
  """
  t0 = time.perf_counter()
  p = plan(d, n, resolution)
  d, n, N, M = p.d, p.n, p.resolution, p.M
  f = targets_lib.get_target(target, d=d, n=n)
  targets_lib.check_equivariant(f, d, n)
  if isinstance(lam, str):
    if lam != 'search':
      raise ValueError(f"lam={lam!r}; allowed: a positive rational, None or 'search'.")
    lam = search_lam(d, n, N)['lam']
  lam = p.lam if lam is None else Fraction(lam)
  if lam <= 0:
    raise ValueError(f'lam must be positive, got {lam}.')
  table = mean_enclosures(M, n, lam, T=p.T, bits=id_bits or p.bits + STATE_EXTRA_BITS)
  g = gaps(table)
  if g['min_gap'] is not None and g['min_gap'] <= 0:
    i = g['argmin']
    raise ValueError(f'lam={float(lam):g}: the certified id enclosures of rows {i} and '
                     f'{i + 1} overlap (token {table.tokens[i]}); increase the precision '
                     'or use the planned lam.')
  # targets: one row per id (token t of context R + {t}), A = f(centres)[position of t]
  classes = np.sort(np.concatenate([table.tokens[:, None], table.rests], axis=1), axis=1)
  x = (_cells(classes, d, N) + 0.5) / N
  fx = targets_lib.check_output(f.name, f(x), x.shape)
  pos = np.argmax(classes == table.tokens[:, None], axis=1)
  values = fx[np.arange(len(pos)), pos]
  amax = float(np.max(np.abs(values))) if values.size else 0.0
  wsum = sum(p.w)
  offset = 2 ** math.ceil(math.log2(wsum * amax + 2))
  # id-space enclosures and the edges between them
  s = Fraction(2) ** table.scale
  ids_lo = [offset + int(t) + p.id_scale * Fraction(a) / s for t, a in zip(table.tokens,
                                                                          table.lo)]
  ids_hi = [offset + int(t) + p.id_scale * Fraction(b) / s for t, b in zip(table.tokens,
                                                                          table.hi)]
  P = len(ids_lo)
  edges = [ids_lo[0] - Fraction(1, 4)]
  for i in range(P - 1):
    edges.append(_dyadic_between(ids_hi[i] + (ids_lo[i + 1] - ids_hi[i]) / 4,
                                 ids_lo[i + 1] - (ids_lo[i + 1] - ids_hi[i]) / 4))
  edges.append(ids_hi[-1] + Fraction(1, 4))
  clearance = min(min(e_hi - hi, lo - e_lo) for lo, hi, e_lo, e_hi in
                  zip(ids_lo, ids_hi, edges[:-1], edges[1:]))
  # r_i: token t's exact state is L_t + (O / N + c' mean) e_1; mean by its enclosure mid
  cells = _cells(table.tokens, d, N)
  c_out = Fraction(1, 2 * N * (M - 1))
  states = []
  for i in range(P):
    mid = Fraction(table.lo[i] + table.hi[i], 2) / s
    r = [Fraction(int(k), N) for k in cells[i]]
    r[0] += Fraction(offset, N) + c_out * mid
    states.append(tuple(r))
  index = {(int(t), tuple(int(v) for v in r)): i
           for i, (t, r) in enumerate(zip(table.tokens, table.rests))}
  return OneLayerApproximator(
      target=f, f_bar=targets_lib.piecewise_constant(f, N), d=d, n=n, resolution=N, plan=p,
      table=table, values=np.asarray(values, np.float64), edges=tuple(edges),
      states=tuple(states), offset=offset, min_edge_clearance=clearance, index=index,
      build_seconds=time.perf_counter() - t0)
