r"""What a caller's callable target, modulus and Lipschitz constant are checked against.

A user callable f is taken as evaluated in float64 (f_bar(L) = fl f(C_L) on every ordered
cube, ``certificate.callable_grid``); what the caller states about it is an assumption
the code cannot prove, so it is refuted wherever evidence can be found, and the evidence
found is printed next to the stated constant (``Certificate.describe``).

Stated L (|f(X)_ji - f(Y)_ji| <= L max|X - Y|) is refuted by any difference quotient

    q(X, Y) = max_ji |f(X)_ji - f(Y)_ji| / max_kl |X_kl - Y_kl|  >  L,

taken exactly in rationals of the float values, between
  * neighbouring centres C, C' (``check_lipschitz_on_grid``: every pair on the grid),
  * a point X sampled in a cube S_L and its centre C_L, and X and a point Y near X in the
    same cube, |Y - X| ~ delta 2^-s with s uniform in {0, ..., 20}
    (``refute_in_cubes``: ``points`` samples, a budget the caller can raise),
  * before any grid: pairs X, Y near each other in [0, 1)^{n x d} (``refute_lipschitz``);
for sampled pairs the numerator is |f(X)_ji - f(Y)_ji| - 2^-40 max(1, |f|) (``ROUNDING_SLACK``:
f's own float rounding is not evidence against L).

A local modulus s_L,ji >= sup_{S_L} |f_ji(X) - f_ji(C_L)| is refuted by neighbouring
centres, |f(C) - f(C')| > s_C + s_C' (the shared face point lies in both closed cubes,
``check_modulus_on_grid``), and by sampled points, |f(X) - f(C_L)| > s_L (``refute_in_cubes``).
Both refutations tolerate a relative 1e-12 of float rounding.

A stated second-order bound (|f(X) - f(C) - J_f(C)(X - C)| <= H/2 max|X - C|^2, the
caller's jacobian J_f and H): J_f is compared with central differences at JACOBIAN_POINTS
points, within H h / 2 (what the bound allows) + JACOBIAN_RTOL (1 + |J|) + f's rounding
(``check_jacobian``); H is refuted on sampled pairs (C, X) at distances 2^-s, s in
{0, ..., 12}, half of them along corner directions (``refute_hessian``).

f_bar's permutation equivariance (Theorem 2) is decided on every cube
(``equivariance_failures``): f_bar(L tau) = f_bar(L) tau for every swap tau of
neighbouring tokens. Differences at most ``ROUNDING_LEVEL`` max |f| come from float
summation order in f itself; they are still counted (term 2), and reported as such.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from transformer_ua.targets import functions as targets_lib

#: Sampled points of the refutation in cubes (the default budget; ``certify_lp`` and
#: ``approximate`` take ``refutation_points=``).
REFUTATION_POINTS = 2048
#: Relative size of an equivariance difference reported as float rounding (2^-44 max |f|).
ROUNDING_LEVEL = 2.0 ** -44
#: Relative float rounding tolerated before a modulus is refuted.
MODULUS_RTOL = 1e-12
#: Rounding inside f allowed for at sampled pairs: |f(X) - f(Y)| - 2^-40 max(1, |f|)
#: enters a sampled quotient (points 2^-20 delta apart would otherwise turn f's own
#: ulps into quotients above an honest L).
ROUNDING_SLACK = 2.0 ** -40


def show_constant(v) -> str:
  """A stated constant as the caller gave it (repr: 1.9999999999999998 is not 2)."""
  v = Fraction(v)
  return str(v.numerator) if v.denominator == 1 else repr(float(v))


def check_refutation_points(points) -> int:
  """``points`` as an int >= 0 (the sampled refutation's budget), or one ValueError line."""
  if isinstance(points, bool) or not isinstance(points, (int, np.integer)) or points < 0:
    raise ValueError(f'refutation_points={points!r}; it must be an integer >= 0 (points '
                     'sampled in cubes to refute a stated lipschitz= or modulus=).')
  return int(points)


def check_modulus(modulus, centres: np.ndarray, delta: float) -> np.ndarray:
  """s = modulus(centres, delta) as a float array [C, n, d] of finite values >= 0, or
  a one-line ValueError."""
  try:
    s = np.asarray(modulus(np.asarray(centres, np.float64), float(delta)), np.float64)
  except (TypeError, ValueError) as e:
    raise ValueError(f'modulus(centres, delta) failed: {e}; it must map centres '
                     '[C, n, d] and delta to bounds [C, n, d].') from None
  if s.shape != np.shape(centres):
    raise ValueError(f'modulus(centres, delta) returned shape {s.shape} for centres of '
                     f'shape {np.shape(centres)}; it must return [C, n, d].')
  if not np.all(np.isfinite(s)) or np.any(s < 0):
    raise ValueError('modulus(centres, delta) returned a negative or non-finite bound; '
                     'it must return sup over each cube of |f(X) - f(C)| >= 0.')
  return s


def _grid_axes(fv: np.ndarray, grid) -> np.ndarray:
  """Values on every ordered cube [N^m, n, d] (lexicographic) as [N, ..., N, n, d]."""
  d, n, N = grid.d, grid.n, grid.N
  return fv.reshape((N,) * (n * d) + (n, d))


def check_lipschitz_on_grid(lipschitz, fv: np.ndarray, grid) -> Fraction:
  """The largest difference quotient |f(C)_ji - f(C')_ji| / delta over neighbouring
  centres (exact rationals of the float values), a lower bound on any L; refuses a
  smaller ``lipschitz`` in one line naming the two centres.

  Args:
    fv: f at every ordered cube centre [N^m, n, d], lexicographic (``common.decode_grid``).
  """
  d, n, N = grid.d, grid.n, grid.N
  m = n * d
  grid_f = _grid_axes(np.asarray(fv, np.float64), grid)
  best, where = -1.0, None
  for axis in range(m):
    diff = np.abs(np.diff(grid_f, axis=axis))
    if diff.size and float(diff.max()) > best:
      best = float(diff.max())
      where = (axis, np.unravel_index(int(np.argmax(diff)), diff.shape))
  if where is None:
    return Fraction(0)
  axis, idx = where
  k1 = list(idx[:m])
  k2 = list(k1)
  k2[axis] += 1
  j, i = idx[m], idx[m + 1]
  a, b = grid_f[tuple(k1) + (j, i)], grid_f[tuple(k2) + (j, i)]
  quotient = abs(Fraction(float(a)) - Fraction(float(b))) * N
  if lipschitz is not None and Fraction(lipschitz) < quotient:
    c1 = _centre_text(k1, grid)
    c2 = _centre_text(k2, grid)
    raise ValueError(f'lipschitz={show_constant(lipschitz)} is refuted: f changes by '
                     f'{float(abs(Fraction(float(a)) - Fraction(float(b)))):.4g} in entry '
                     f'({j}, {i}) between the neighbouring cube centres {c1} and {c2} '
                     f'(delta = 1/{N} apart), a difference quotient of {float(quotient):.4g}; '
                     f'pass lipschitz >= {float(quotient):.4g}.')
  return quotient


def check_modulus_on_grid(s: np.ndarray, fv: np.ndarray, grid) -> None:
  """Refuses a local modulus with |f(C) - f(C')| > s_C + s_C' for neighbouring centres
  (module doc, 3.), in one line naming the two centres. s, fv: [N^m, n, d]."""
  m = grid.n * grid.d
  gf = _grid_axes(np.asarray(fv, np.float64), grid)
  gs = _grid_axes(np.asarray(s, np.float64), grid)
  for axis in range(m):
    lhs = np.abs(np.diff(gf, axis=axis))
    sl = [slice(None)] * gs.ndim
    sl[axis] = slice(1, None)
    sr = list(sl)
    sr[axis] = slice(None, -1)
    rhs = gs[tuple(sl)] + gs[tuple(sr)]
    # (a refusal only where the float gap is clear of float rounding)
    bad = lhs > rhs * (1 + MODULUS_RTOL) + 1e-300
    if np.any(bad):
      idx = np.unravel_index(int(np.argmax(bad)), bad.shape)
      k1 = list(idx[:m])
      k2 = list(k1)
      k2[axis] += 1
      raise ValueError(f'modulus is refuted: f changes by {float(lhs[idx]):.4g} in entry '
                       f'({idx[m]}, {idx[m + 1]}) between the neighbouring cube centres '
                       f'{_centre_text(k1, grid)} and {_centre_text(k2, grid)}, more '
                       f'than the {float(rhs[idx]):.4g} its two cubes allow.')


def equivariance_failures(fv: np.ndarray, grid) -> dict:
  """Where f_bar(L) = fl f(C_L) is not permutation equivariant, decided exactly: f_bar
  is equivariant on the grid iff f_bar(L tau) = f_bar(L) tau for every cube L and every
  swap tau of neighbouring tokens (they generate the permutations).

  Args:
    fv: f at every ordered cube centre [N^m, n, d], lexicographic.
  Returns:
    {'cubes': number of cubes L where some swap fails, 'example': one such cube's
    centre (text) or None, 'max_difference': the largest |f_bar(L tau) - f_bar(L) tau|,
    'scale': max |f_bar|, 'rounding_level': True when every difference is at most
    ``ROUNDING_LEVEL`` scale (float summation order in f; still counted in term 2)}.
  """
  d, n, N = grid.d, grid.n, grid.N
  m = n * d
  gf = _grid_axes(np.asarray(fv, np.float64), grid)
  bad = np.zeros((N,) * m, bool)
  worst = 0.0
  for t in range(n - 1):
    axes = list(range(m))
    axes[t * d:(t + 2) * d] = axes[(t + 1) * d:(t + 2) * d] + axes[t * d:(t + 1) * d]
    swapped_in = np.transpose(gf, axes + [m, m + 1])          # f(C_{L tau})
    rows = list(range(n))
    rows[t], rows[t + 1] = rows[t + 1], rows[t]
    swapped_out = gf[..., rows, :]                              # f(C_L) tau
    diff = np.abs(swapped_in - swapped_out)
    bad |= np.any(diff != 0, axis=(-2, -1))
    worst = max(worst, float(diff.max()) if diff.size else 0.0)
  count = int(bad.sum())
  example = None
  if count:
    idx = np.unravel_index(int(np.argmax(bad)), bad.shape)
    example = _centre_text(list(idx), grid)
  scale = float(np.max(np.abs(gf))) if gf.size else 0.0
  return {'cubes': count, 'example': example, 'max_difference': worst, 'scale': scale,
          'rounding_level': bool(count and worst <= ROUNDING_LEVEL * scale)}


def _centre_text(flat_k, grid) -> str:
  k = np.asarray(flat_k).reshape(grid.n, grid.d)
  return '[' + ', '.join('(' + ', '.join(f'{2 * int(v) + 1}/{2 * grid.N}' for v in tok) + ')'
                         for tok in k) + ']'


# ---------------------------------------------------------------------------
# Sampled refutation (difference quotients inside cubes).
# ---------------------------------------------------------------------------


def _near(rng, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, scale: float) -> np.ndarray:
  """Points Y near X [B, n, d] inside the boxes [lo, hi) entrywise: X + delta 2^-s v,
  v uniform in [-1, 1]^{nd}, s uniform in {0, ..., 20} per point, clipped to the box."""
  s = rng.integers(0, 21, size=(len(x), 1, 1))
  y = x + scale * 2.0 ** (-s) * rng.uniform(-1, 1, size=x.shape)
  top = np.nextafter(hi, -np.inf)
  return np.clip(y, lo, top)


def _quotients(fx: np.ndarray, fy: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """[B] difference quotients max_ji (|f(X) - f(Y)| - r) / max |X - Y| (0 where X = Y),
  r = ``ROUNDING_SLACK`` max(1, |f(X)|, |f(Y)|): float rounding inside f itself, which at
  nearby points would otherwise refute an L the real f meets."""
  r = ROUNDING_SLACK * np.maximum(1.0, np.maximum(np.abs(fx), np.abs(fy)))
  num = np.max(np.maximum(np.abs(fx - fy) - r, 0.0), axis=(1, 2))
  den = np.max(np.abs(x - y), axis=(1, 2))
  with np.errstate(divide='ignore', invalid='ignore'):
    return np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)


def _exact_quotient(fx, fy, x, y) -> Fraction:
  """``_quotients`` of one pair in rationals of the float values (slack included)."""
  slack = Fraction(ROUNDING_SLACK)
  num = max(max(abs(Fraction(float(a)) - Fraction(float(b)))
                - slack * max(1, abs(Fraction(float(a))), abs(Fraction(float(b)))), Fraction(0))
            for a, b in zip(fx.ravel(), fy.ravel()))
  den = max(abs(Fraction(float(a)) - Fraction(float(b))) for a, b in zip(x.ravel(), y.ravel()))
  return num / den if den else Fraction(0)


def _point_text(x: np.ndarray) -> str:
  return '[' + ', '.join('(' + ', '.join(f'{v:.6g}' for v in tok) + ')' for tok in x) + ']'


def _largest_quotient(lipschitz, fx, fy, x, y, between) -> Fraction:
  """The largest difference quotient over the pairs (X_b, Y_b) with values fx, fy, exactly;
  refuses a smaller ``lipschitz`` in one line, ``between(b)`` naming the two points."""
  q = _quotients(fx, fy, x, y)
  if not len(q):
    return Fraction(0)
  b = int(np.argmax(q))
  best = _exact_quotient(fx[b], fy[b], x[b], y[b])
  if lipschitz is not None and best > Fraction(lipschitz):
    raise ValueError(f'lipschitz={show_constant(lipschitz)} is refuted: f changes by '
                     f'{float(np.max(np.abs(fx[b] - fy[b]))):.4g} {between(b)} (max-norm '
                     f'distance {float(np.max(np.abs(x[b] - y[b]))):.3g}), a difference '
                     f'quotient of {float(best):.4g}; pass lipschitz >= {float(best):.4g}.')
  return best


def _refute_pairs(target, lipschitz, x, y, where: str):
  """The largest quotient (Fraction) over the pairs (X_b, Y_b); refuses a smaller
  ``lipschitz`` in one line naming the two points."""
  return _largest_quotient(
      lipschitz, targets_lib.evaluate(target, x), targets_lib.evaluate(target, y), x, y,
      lambda b: f'between the points {_point_text(x[b])} and {_point_text(y[b])} {where}')


def refute_lipschitz(target, lipschitz, *, d: int, n: int, points: int = REFUTATION_POINTS,
                     seed: int = 0) -> Fraction:
  """Before any grid: the largest difference quotient over ``points`` pairs of nearby
  points in [0, 1)^{n x d} (module doc); refuses a stated L below it in one line.
  Returns the quotient (a lower bound on f's constant as evaluated)."""
  points = check_refutation_points(points)
  if not points:
    return Fraction(0)
  rng = np.random.default_rng(seed)
  x = rng.random((points, n, d))
  y = _near(rng, x, np.zeros_like(x), np.ones_like(x), 1.0)
  return _refute_pairs(target, lipschitz, x, y, 'of [0, 1)^{n x d}')


def refute_in_cubes(target, k: np.ndarray, fv: np.ndarray, resolution: int, *,
                    lipschitz=None, modulus_values=None, points: int = REFUTATION_POINTS,
                    seed: int = 0) -> dict:
  """Sampled refutation in the cubes K [C, n, d] with f_bar values fv = f(C_L) [C, n, d]
  (module doc): ``points`` points X uniform in random cubes, each against its centre
  and against a nearby Y in the same cube. Refuses, in one line, a ``lipschitz`` below
  a quotient found, or a modulus s [C, n, d] with |f(X) - f(C_L)| > s_L.

  Returns {'points', 'largest_quotient' (float, rounded down: a proved lower bound on
  f's constant as evaluated, up to the float value), 'largest_modulus_ratio' (max
  |f(X) - f(C_L)| / s_L over the samples with s_L > 0; None without a modulus)}."""
  points = check_refutation_points(points)
  k = np.asarray(k, np.int64)
  out = {'points': points, 'largest_quotient': 0.0, 'largest_modulus_ratio': None}
  if not points or not len(k):
    return out
  rng = np.random.default_rng(seed)
  rows = rng.integers(0, len(k), size=points)
  lo = k[rows] / resolution
  hi = (k[rows] + 1) / resolution
  x = np.clip(lo + rng.random(lo.shape) / resolution, lo, np.nextafter(hi, -np.inf))
  centres = targets_lib.cell_centers(k[rows], resolution)
  y = _near(rng, x, lo, hi, 1.0 / resolution)
  fx = targets_lib.evaluate(target, x)
  fc = np.asarray(fv, np.float64)[rows]
  best = Fraction(0)
  for other, f_other, where in ((centres, fc, 'and its cube centre'),
                                (y, None, 'in one cube')):
    f_o = f_other if f_other is not None else targets_lib.evaluate(target, other)
    best = max(best, _largest_quotient(
        lipschitz, fx, f_o, x, other,
        lambda b, other=other, where=where: (f'between the sampled point {_point_text(x[b])} '
                                             f'{where} {_point_text(other[b])}')))
  out['largest_quotient'] = float(best) if Fraction(float(best)) <= best else \
      float(np.nextafter(float(best), -np.inf))
  if modulus_values is not None:
    s = np.asarray(modulus_values, np.float64)[rows]
    dev = np.abs(fx - fc)
    bad = dev > s * (1 + MODULUS_RTOL) + 1e-300
    if np.any(bad):
      b, j, i = np.unravel_index(int(np.argmax(bad)), bad.shape)
      raise ValueError(f'modulus is refuted: at the sampled point {_point_text(x[b])} f '
                       f'differs from its cube centre value by {float(dev[b, j, i]):.4g} in '
                       f'entry ({j}, {i}), more than the {float(s[b, j, i]):.4g} the modulus '
                       'allows on that cube.')
    with np.errstate(divide='ignore', invalid='ignore'):
      ratio = np.where(s > 0, dev / np.where(s > 0, s, 1), 0.0)
    out['largest_modulus_ratio'] = float(np.max(ratio)) if ratio.size else 0.0
  return out


# ---------------------------------------------------------------------------
# A stated second-order bound: the caller's jacobian= and hessian= H.
# ---------------------------------------------------------------------------

#: Points where the caller's jacobian is compared with central differences of f.
JACOBIAN_POINTS = 256
#: The central differences' step h (a power of 2).
JACOBIAN_STEP = 2.0 ** -16
#: The stated tolerance of the jacobian check: |FD - J| <= H h / 2 + JACOBIAN_RTOL (1 + |J|)
#: + f's own rounding (2^-40 max(1, |f|) / h).
JACOBIAN_RTOL = 1e-6


def evaluate_jacobian(jacobian, x: np.ndarray) -> np.ndarray:
  """J_f(X) [B, n, d, n d] from the caller's ``jacobian(X [B, n, d]) -> [B, n, d, n, d]``
  (entry [b, j, k, l, m] = d f(X)_jk / d X_lm), checked: shape, finite, X unchanged; one
  ValueError line otherwise."""
  x = np.array(x, np.float64)
  keep = x.copy()
  b, n, d = x.shape
  try:
    out = np.asarray(jacobian(x), np.float64)
  except Exception as err:  # noqa: BLE001 -- a caller's function may raise anything
    raise ValueError(f'jacobian raised {type(err).__name__} ({err}) on points of '
                     '[0,1]^(n x d); it must map X [B, n, d] to [B, n, d, n, d].') from None
  if out.shape != (b, n, d, n, d):
    raise ValueError(f'jacobian returned shape {out.shape} for X of shape {x.shape}; it must '
                     f'return [B, n, d, n, d] = {(b, n, d, n, d)} (entry [b, j, k, l, m] = '
                     'd f(X)_jk / d X_lm).')
  if not np.all(np.isfinite(out)):
    raise ValueError('jacobian returned a non-finite entry on points of [0,1]^(n x d).')
  if not np.array_equal(x, keep):
    raise ValueError('jacobian changed its input array in place; it must not mutate X.')
  return out.reshape(b, n, d, n * d)


def check_jacobian(target, jacobian, hessian, *, d: int, n: int,
                   points: int = JACOBIAN_POINTS, seed: int = 0) -> None:
  """Compares the caller's J_f with central differences at ``points`` points X of
  [h, 1 - h]^{n x d}: under the stated bound (|rho(X, Y)| <= H/2 max|Y - X|^2),
  f(X +- h e_q) = f(X) +- h J_f(X) e_q + rho_+-, so |(f(X + h e_q) - f(X - h e_q)) / 2h -
  J_f(X)_q| <= H h / 2. Refuses, in one line naming the point and the entry, a gap above
  H h / 2 + JACOBIAN_RTOL (1 + |J|) + 2^-40 max(1, |f|) / h (f's own rounding)."""
  if not points:
    return
  rng = np.random.default_rng(seed)
  h = JACOBIAN_STEP
  m = n * d
  x = h + (1 - 2 * h) * rng.random((points, n, d))
  step = (np.eye(m) * h).reshape(m, n, d)
  xp = (x[:, None] + step[None]).reshape(-1, n, d)
  xm = (x[:, None] - step[None]).reshape(-1, n, d)
  width = (xp - xm).reshape(points, m, m)[:, np.arange(m), np.arange(m)]   # the real 2h
  fp = targets_lib.evaluate(target, xp).reshape(points, m, n, d)
  fm = targets_lib.evaluate(target, xm).reshape(points, m, n, d)
  fd = np.moveaxis((fp - fm) / width[:, :, None, None], 1, -1)          # [points, n, d, m]
  jac = evaluate_jacobian(jacobian, x)
  scale = np.moveaxis(np.maximum(1.0, np.maximum(np.abs(fp), np.abs(fm))), 1, -1)
  allowed = float(hessian) * h / 2 + JACOBIAN_RTOL * (1 + np.abs(jac)) + \
      2 * ROUNDING_SLACK * scale / h
  gap = np.abs(fd - jac)
  if np.any(gap > allowed):
    b, j, k, q = np.unravel_index(int(np.argmax(gap - allowed)), gap.shape)
    raise ValueError(f'jacobian is refuted by central differences of f: at X = '
                     f'{_point_text(x[b])}, d f_({j},{k}) / d X_({q // d},{q % d}) is given as '
                     f'{jac[b, j, k, q]:.6g} but (f(X + h e) - f(X - h e)) / 2h = '
                     f'{fd[b, j, k, q]:.6g} (h = 2^-16), a gap of {gap[b, j, k, q]:.3g} above '
                     f'the tolerance {allowed[b, j, k, q]:.3g} (H h / 2 + {JACOBIAN_RTOL:g} '
                     '(1 + |J|) + rounding); jacobian(X)[b, j, k, l, m] must be d f(X)_jk / '
                     'd X_lm.')


def refute_hessian(target, jacobian, hessian, *, d: int, n: int,
                   points: int = REFUTATION_POINTS, seed: int = 0) -> float:
  """Refutes a stated H on ``points`` sampled pairs (C, X) of the cube, X = C + 2^-s v
  clipped to [0, 1] (s uniform in {0, ..., 12}; v uniform in [-1, 1]^{nd} on half the pairs,
  a random corner of it on the other half):

      |f(X) - f(C) - J_f(C)(X - C)|_jk - slack  >  H/2 max|X - C|^2

  refuses in one line naming the pair, the entry and the measured value; slack = 2^-40
  (max(1, |f(X)|, |f(C)|) + sum_q |J_f(C)_q| |X_q - C_q|) is float rounding in f and in
  the linear term. Returns the largest sampled ratio 2 (measured - slack) / max|X - C|^2,
  a lower bound on f's H as evaluated (0 when no pair bends)."""
  if not points:
    return 0.0
  rng = np.random.default_rng(seed)
  c = rng.random((points, n, d))
  v = rng.uniform(-1, 1, c.shape)
  v[1::2] = np.sign(v[1::2])
  x = np.clip(c + 2.0 ** -rng.integers(0, 13, (points, 1, 1)) * v, 0.0, 1.0)
  dx = (x - c).reshape(points, 1, 1, n * d)
  fx = targets_lib.evaluate(target, x)
  fc = targets_lib.evaluate(target, c)
  jac = evaluate_jacobian(jacobian, c)
  rest = np.abs(fx - fc - (jac * dx).sum(axis=-1))
  slack = ROUNDING_SLACK * (np.maximum(1.0, np.maximum(np.abs(fx), np.abs(fc))) +
                            (np.abs(jac) * np.abs(dx)).sum(axis=-1))
  dist = np.abs(dx).max(axis=(1, 2, 3))[:, None, None]
  allowed = float(hessian) / 2 * dist ** 2 * np.ones_like(rest)
  excess = rest - slack - allowed
  with np.errstate(divide='ignore', invalid='ignore'):
    ratio = np.where(dist > 0, 2 * np.maximum(rest - slack, 0) / np.where(dist > 0, dist, 1)
                     ** 2, 0.0)
  if np.any(excess > 0):                     # the pair with the largest ratio is named
    b, j, k = np.unravel_index(int(np.argmax(np.where(excess > 0, ratio, -1.0))), excess.shape)
    raise ValueError(f'hessian={show_constant(hessian)} is refuted: at C = {_point_text(c[b])}'
                     f' and X = {_point_text(x[b])} (max-norm distance {dist[b, 0, 0]:.3g}), '
                     f'|f(X) - f(C) - J_f(C)(X - C)| = {rest[b, j, k]:.6g} in entry ({j}, {k}), '
                     f'above H/2 max|X - C|^2 = {allowed[b, j, k]:.6g}; pass hessian >= '
                     f'{ratio[b, j, k]:.4g}.')
  return float(ratio.max())
