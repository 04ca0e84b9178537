r"""The error decomposition of Theorems 2 and 3, measured: d_p of every term.

Yun et al. 2020, Appendix C: for the approximator g_bar of f (``yun.approximator``) and a
realization g (Lemma 6),

    d_p(f, g) <= d_p(f, f_bar) + d_p(f_bar, g_bar) + d_p(g_bar, g)

``error_decomposition`` estimates every term by Monte Carlo on shared uniform samples and,
when the grid can be enumerated, computes d_p(f_bar, g_bar) and the bad set's measure
exactly (Theorem 2: f_bar's mass on the bad set; Theorem 3 and the variants without a bad
set: 0 or measured on every cube). ``window_diagnosis`` says where a sampled d_p(g_bar, g)
comes from (the ramp windows of width epsilon at the cell edges, or elsewhere);
``realization_error`` is max |g - g_bar| on cube interiors. Shapes: X [batch, n, d].

``net`` is a ``yun.approximator.Approximator`` (or anything with its d, n, resolution,
target, f_bar, values, variant and ``apply``), ``g`` a ``Realized``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from transformer_ua.targets import distances
from transformer_ua.targets import functions as targets_lib
from transformer_ua.yun.bounds import bad_set
from transformer_ua.yun.grid import Grid, decode_grid
from transformer_ua.yun.realization.plan import FLOAT_BITS, REPRODUCE_RTOL

#: Cube-interior samples with which error_decomposition checks that a float g
#: represents g_bar at all.
REPRESENT_SAMPLES = 256


#: The terms of the decomposition d_p(f, g) <= d_p(f, f_bar) + d_p(f_bar, g_bar) + d_p(g_bar, g).
DECOMPOSITION = (('f', 'f_bar'), ('f_bar', 'g_bar'), ('g_bar', 'g'), ('f', 'g_bar'), ('f', 'g'))


@dataclasses.dataclass(frozen=True)
class ExactTerms:
  """Terms computed over the whole grid: |B| and d_p(f_bar, g_bar) (Theorem 3: both 0)."""

  bad_set_measure: float
  dp_f_bar_g_bar: float


@dataclasses.dataclass(frozen=True)
class ErrorDecomposition:
  """d_p of every term of d_p(f, g) <= d_p(f, f_bar) + d_p(f_bar, g_bar) + d_p(g_bar, g).

  Attributes:
    p, samples, seed, confidence: the Monte Carlo setting (shared uniform samples).
    estimates: (a, b) -> DpEstimate of d_p(a, b) for the pairs of ``DECOMPOSITION``
      (those with g only when g was given).
    exact: the exact terms when the grid can be enumerated, else None.
    g_represents_g_bar: for a float g, whether it reproduces g_bar on cube interiors
      (None without a float g); when False, ``g_note`` says why the d_p terms with g
      measure rounding, not Lemma 6.
    g_windows: for a float g, where d_p(g_bar, g) comes from (``window_diagnosis``);
      when the ramp windows dominate, ``g_note`` says so.
  """

  p: float
  samples: int
  seed: int
  confidence: float
  estimates: dict
  exact: ExactTerms | None
  g_represents_g_bar: bool | None = None
  g_note: str | None = None
  g_windows: dict | None = None

  def as_dict(self) -> dict:
    """JSON form: estimates keyed 'a|b', each ``DpEstimate.as_dict()``."""
    out = {'p': self.p, 'samples': self.samples, 'seed': self.seed,
           'confidence': self.confidence,
           'estimates': {f'{a}|{b}': v.as_dict() for (a, b), v in self.estimates.items()}}
    if self.exact is not None:
      out['exact'] = dataclasses.asdict(self.exact)
    if self.g_represents_g_bar is not None:
      out['g_represents_g_bar'] = self.g_represents_g_bar
    if self.g_note is not None:
      out['g_note'] = self.g_note
    if self.g_windows is not None:
      out['g_windows'] = self.g_windows
    return out


def error_decomposition(net, g=None, *, p: float = 2.0,
                        samples: int = 20000, seed: int = 0,
                        confidence: float = 0.95) -> ErrorDecomposition:
  """Monte Carlo d_p of every term (shared uniform samples), plus the exact terms.

  The estimates cover the pairs of ``DECOMPOSITION`` (those with g only when g is
  given); when the grid can be enumerated, ``exact`` holds the bad-set measure and
  d_p(f_bar, g_bar) computed over the whole grid (Theorem 2: f_bar's mass on the bad
  set; Theorem 3: 0).
  """
  p = distances.check_p(p)
  fns = {'f': net.target, 'f_bar': net.f_bar, 'g_bar': net.apply}
  if g is not None:
    fns['g'] = g.apply
  pairs = [pair for pair in DECOMPOSITION if all(name in fns for name in pair)]
  est = distances.dp_distances(fns, pairs, d=net.d, n=net.n, p=p, samples=samples,
                               seed=seed, confidence=confidence)
  exact = None
  represents, note, windows = None, None, None
  if g is not None and g.dtype in FLOAT_BITS:
    windows = window_diagnosis(net, g, p=p, samples=samples, seed=seed)
    if windows['dominated_by_windows']:
      note = windows['note']
    # A float g far past the precision wall is not g_bar's realization: say so, so
    # that no caller reports its rounding noise as d_p(g_bar, g).
    rep = realization_error(net, g, samples=REPRESENT_SAMPLES, seed=seed)
    represents = rep['reproduces']
    if not represents:
      note = (
          f'the {g.dtype} network does not represent g_bar at this size (max |g - g_bar| = '
          f'{rep["max_abs_error"]:.3g} > {rep["tolerance"]:.3g} on cube interiors): the d_p '
          f'terms with g measure {g.dtype} rounding, not Lemma 6; '
          + "use dtype='exact' and yun.certify_lp.")
  variant = net.variant
  enumerable = net.resolution ** (net.d * net.n) <= bad_set.MAX_EXACT_CELLS
  if variant.exact_by_construction:     # Theorem 3: g_bar = f_bar on every cube
    exact = ExactTerms(bad_set_measure=0.0, dp_f_bar_g_bar=0.0)
  elif enumerable and variant.has_bad_set:   # Theorem 2: f_bar's mass on the bad set
    exact = ExactTerms(
        bad_set_measure=float(bad_set.bad_set_measure(net.variant.grid)),
        dp_f_bar_g_bar=bad_set.dp_on_bad_set(net.target, net.variant.grid, p=p))
  elif enumerable:                           # no bad set: measured on every cube
    exact = ExactTerms(bad_set_measure=0.0, dp_f_bar_g_bar=dp_f_bar_g_bar_on_grid(net, p=p))
  estimates = {tuple(k.split('|')): v for k, v in est.items()}
  return ErrorDecomposition(p=p, samples=samples, seed=seed, confidence=confidence,
                            estimates=estimates, exact=exact, g_represents_g_bar=represents,
                            g_note=note, g_windows=windows)


#: Share of d_p(g_bar, g)^p from samples off the cube interiors above which the ramp
#: windows are said to dominate it.
WINDOW_DOMINANCE = 0.5


def window_diagnosis(net, g, *, p: float = 2.0, samples: int = 4096,
                     seed: int = 0) -> dict:
  """Where a sampled d_p(g_bar, g) comes from: uniform samples split by whether
  |g - g_bar| exceeds the interior tolerance (REPRODUCE_RTOL max(1, max|A|)).

  Lemma 6's ramps act within epsilon of the cell edges; there g may reach the size of
  the contextual ids. Returns {'share' (of sum ||g - g_bar||_p^p from the off samples),
  'off_samples', 'samples', 'max_off' (largest |g - g_bar| there), 'max_edge_distance'
  (largest distance of an off sample's nearest entry to a cell edge), 'max_rest',
  'dominated_by_windows', 'note'}."""
  rng = np.random.default_rng(seed + 1)
  x = rng.random((samples, net.n, net.d))
  err = np.abs(g.apply(x) - net.apply(x))
  tol = REPRODUCE_RTOL * max(1.0, float(np.max(np.abs(net.values))) if net.values.size else 1.0)
  worst = np.max(np.where(np.isfinite(err), err, np.inf), axis=(1, 2))
  off = worst > tol
  e = np.sum(np.where(np.isfinite(err), err, np.inf) ** p, axis=(1, 2))
  total = float(np.sum(e))
  share = float(np.sum(e[off]) / total) if total > 0 else 0.0
  frac = x * net.resolution
  edge = np.min(np.minimum(frac - np.floor(frac), np.ceil(frac) - frac), axis=(1, 2))
  edge = edge / net.resolution
  out = {'share': share, 'off_samples': int(np.sum(off)), 'samples': samples,
         'max_off': float(np.max(worst[off])) if np.any(off) else 0.0,
         'max_edge_distance': float(np.max(edge[off])) if np.any(off) else None,
         'max_rest': float(np.max(worst[~off])) if np.any(~off) else None,
         'dominated_by_windows': bool(np.any(off) and share > WINDOW_DOMINANCE)}
  amax = float(np.max(np.abs(net.values))) if net.values.size else 0.0
  out['note'] = (
      f'd_p(g_bar, g) of this {g.dtype} g is over the uniform measure: {100 * share:.0f}% '
      f'of its p-th power comes from {out["off_samples"]} of {samples} samples, each within '
      f'{out["max_edge_distance"] or 0:.2g} of a cell edge (the ramp windows, epsilon='
      f'{float(g.epsilon):g}), where |g - g_bar| reaches {out["max_off"]:.3g} for |g_bar| <= '
      f'{amax:.3g}; a sample, not a bound (yun.certify_lp bounds d_p over the whole domain, '
      "with realize(clamp=True) taming the windows).") if out['dominated_by_windows'] else None
  return out


def dp_f_bar_g_bar_on_grid(net, *, p: float = 2.0, chunk: int = 65536) -> float:
  """``(N^{-dn} sum_L ||f_bar(C_L) - g_bar(C_L)||_p^p)^{1/p}`` over every cube S_L of the
  grid, g_bar evaluated by the network at the cube centres (both are constant on each
  cube): d_p(f_bar, g_bar) exactly up to the float64 sum. Refuses grids over
  ``bad_set.MAX_EXACT_CELLS``."""
  p = distances.check_p(p)
  cells = net.resolution ** (net.d * net.n)
  if cells > bad_set.MAX_EXACT_CELLS:
    raise ValueError(f'the grid has {cells} cells; exact enumeration is limited to '
                     f'{bad_set.MAX_EXACT_CELLS}.')
  total = 0.0
  for start in range(0, cells, chunk):
    k = decode_grid(np.arange(start, min(cells, start + chunk), dtype=np.int64),
                    net.variant.grid)
    x = targets_lib.cell_centers(k, net.resolution)
    total += float(np.sum(np.abs(net.f_bar(x) - net.apply(x)) ** p))
  return (total / cells) ** (1 / p)


def interior_points(rng: np.random.Generator, batch: int, grid: Grid,
                    *, margin: float = 0.25) -> np.ndarray:
  """Uniform points of the cube interiors: every entry at least ``margin * delta`` from
  its cell's edges (margin in [0, 1/2))."""
  d, n, N = grid.d, grid.n, grid.N
  if not 0 <= margin < 0.5:
    raise ValueError(f'margin must be in [0, 1/2), got {margin!r}.')
  k = rng.integers(0, N, size=(batch, n, d))
  return (k + margin + (1 - 2 * margin) * rng.random((batch, n, d))) / N


def realization_error(net, g, *, samples: int = 2048, seed: int = 0,
                      margin: float = 0.25) -> dict:
  """max |g - g_bar| on cube interiors (``interior_points``), and whether g is finite.

  ``reproduces`` is True when g is finite and within ``tol`` = REPRODUCE_RTOL max(1, max|A|) of
  g_bar on every sampled interior point (where Lemma 6's limit argument says g -> g_bar).
  """
  rng = np.random.default_rng(seed)
  x = interior_points(rng, samples, net.variant.grid,
                      margin=margin)
  gb = net.apply(x)
  gx = g.apply(x)
  finite = bool(np.all(np.isfinite(gx)))
  err = float(np.max(np.abs(gx - gb))) if finite else math.inf
  tol = REPRODUCE_RTOL * max(1.0, float(np.max(np.abs(net.values))) if net.values.size else 1.0)
  return {'max_abs_error': err, 'finite': finite, 'tolerance': tol,
          'reproduces': finite and err <= tol, 'samples': samples, 'margin': margin,
          'lam': g.lam, 'epsilon': g.epsilon, 'dtype': g.dtype}
