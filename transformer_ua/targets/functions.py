"""Target sequence-to-sequence functions, and Lemma 4's piecewise-constant f_bar.

A target maps ``X [batch, n, d]`` (token-major; the paper's ``X in R^{d x n}``) to an
array of the same shape. Built-ins:

    permutation equivariant (Theorem 2, class F_PE restricted to [0,1]^{d x n}):
      'token_times_mean'   f(X)_j = X_j * mean_k X_k              (entrywise product)
      'attention_map'      f(X)   = softmax(X W_Q (X W_K)^T / sqrt(d)) X W_V,
                           fixed weights drawn from a fixed seed
      'random_bumps'       f(X)_ji = sum_{b<64} a_b exp(-((x_ji - c_b)^2 + (m_i - e_b)^2)
                           / (2 s^2)),  m_i = mean_k x_ki,  s = 3/20: a target with no
                           structure to exploit (the issue's case is d = 1; entrywise for
                           any d). a_b ~ N(0, 1)/8, c_b, e_b ~ U[0, 1) drawn from
                           np.random.default_rng(RANDOM_BUMPS_SEED) in the order a (64),
                           c (64), e (64); the float64 draws are the exact constants
    not permutation equivariant (Theorem 3, class F_CD on [0,1]^{d x n}):
      'prefix_mean'        f(X)_j = mean_{k <= j} X_k
      'reversal'           f(X)_j = X_{n-1-j}

Lemma 4 (Appendix D): with cubes ``S_L = prod [L_ij, L_ij + delta)`` of the grid
``G_delta = {0, delta, ..., 1 - delta}^{d x n}`` and centres ``C_L = L + delta/2``,

    f_bar(X) = sum_L f(C_L) 1{X in S_L},

which is permutation equivariant whenever f is (``f_bar(XP) = f(C_{LP}) = f(C_L P)``).
Distances are integrated over the unit cube [0, 1)^{d x n}, the support of f_bar.
Grid indices: ``K [.., n, d]`` integers in {0, ..., N-1} with ``L = K / N``.

A user callable is judged by what it does, never by its name (``check_callable``, at
``get_target``): on ``PROBE_BATCH`` probe points it must be a function of one point (the
batch gives the values of the points one at a time, and of the batch reversed), real
(no complex output), of the declared shape [batch, n, d] and a real numeric dtype,
finite, and it must leave its input unchanged; each failure is one ValueError line that
names it. ``grid_values`` checks the same (real, finite, shape, input unchanged) on every
centre the value table evaluates. Equivariance is decided on probes by behaviour
(``equivariance_error``); only a built-in's declared flag is taken as given.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

#: Seed of the fixed weights of the built-in 'attention_map' target.
ATTENTION_MAP_SEED = 20200101
#: Seed, count and width of the built-in 'random_bumps' target (the width s = 3/20
#: exactly: a numerator and a denominator; ``random_bumps_params`` gives its float).
RANDOM_BUMPS_SEED = 20261128
RANDOM_BUMPS_COUNT = 64
RANDOM_BUMPS_WIDTH = (3, 20)
#: Probe batch used to validate a user callable.
PROBE_BATCH = 3
#: Relative tolerance of the permutation-equivariance probe of a Theorem 2 target.
EQUIVARIANCE_RTOL = 1e-9
#: Probe points for the equivariance check.
EQUIVARIANCE_PROBES = 8
#: Relative difference (to max(1, max |f|)) up to which a batch and single points agree:
#: float rounding of a per-point function evaluated by other kernels; a function of the
#: batch (a mean over it, say) differs by far more.
BATCH_RTOL = 1e-12


@dataclasses.dataclass(frozen=True)
class Target:
  """A target f: [batch, n, d] -> [batch, n, d] (float64 NumPy in and out)."""

  name: str
  fn: Callable[[np.ndarray], np.ndarray]
  permutation_equivariant: bool
  description: str = ''

  def __call__(self, x: np.ndarray) -> np.ndarray:
    return self.fn(np.asarray(x, dtype=np.float64))


def _token_times_mean(x):
  return x * x.mean(axis=-2, keepdims=True)


def attention_map_weights(d: int):
  """The fixed (W_Q, W_K, W_V) [d, d] of the built-in attention_map target."""
  rng = np.random.default_rng(ATTENTION_MAP_SEED + d)
  return tuple(rng.normal(size=(d, d)) for _ in range(3))


def _attention_map(x):
  d = x.shape[-1]
  w_q, w_k, w_v = attention_map_weights(d)
  s = np.einsum('...jd,...kd->...jk', x @ w_q, x @ w_k) / np.sqrt(d)
  s = s - s.max(axis=-1, keepdims=True)
  a = np.exp(s)
  a = a / a.sum(axis=-1, keepdims=True)
  return a @ (x @ w_v)


def random_bumps_params():
  """The fixed (a, c, e) [64] float64 of the built-in random_bumps target (module doc),
  and s = 0.15 as a float (the nearest float to 3/20; exact forms use the rational
  ``RANDOM_BUMPS_WIDTH``)."""
  rng = np.random.default_rng(RANDOM_BUMPS_SEED)
  a = rng.normal(size=RANDOM_BUMPS_COUNT) / 8
  c = rng.random(RANDOM_BUMPS_COUNT)
  e = rng.random(RANDOM_BUMPS_COUNT)
  return a, c, e, RANDOM_BUMPS_WIDTH[0] / RANDOM_BUMPS_WIDTH[1]


def _random_bumps(x):
  a, c, e, s = random_bumps_params()
  m = x.mean(axis=-2, keepdims=True)
  r2 = (x[..., None] - c) ** 2 + (m[..., None] - e) ** 2        # [.., n, d, 64]
  return np.exp(-r2 / (2 * s * s)) @ a


def _prefix_mean(x):
  n = x.shape[-2]
  return np.cumsum(x, axis=-2) / np.arange(1, n + 1)[:, None]


def _reversal(x):
  return x[..., ::-1, :].copy()


BUILTIN_TARGETS = {
    'token_times_mean': Target('token_times_mean', _token_times_mean, True,
                               'f(X)_j = X_j * mean_k X_k'),
    'attention_map': Target('attention_map', _attention_map, True,
                            'softmax self-attention with fixed random W_Q, W_K, W_V'),
    'random_bumps': Target('random_bumps', _random_bumps, True,
                           'f(X)_j = sum of 64 random Gaussian bumps of (x_j, mean X)'),
    'prefix_mean': Target('prefix_mean', _prefix_mean, False, 'f(X)_j = mean_{k<=j} X_k'),
    'reversal': Target('reversal', _reversal, False, 'f(X)_j = X_{n-1-j}'),
}


def get_target(target, *, d: int, n: int) -> Target:
  """Resolves a built-in name or wraps a user callable, and validates it on a probe.

  Args:
    target: a name in ``BUILTIN_TARGETS``, a ``Target``, or any callable mapping a
      float array [batch, n, d] to [batch, n, d].
    d, n: embedding dimension and sequence length.
  Raises:
    ValueError: unknown name, or the callable's output has the wrong shape or is not
      finite on a probe batch.
  """
  if isinstance(target, str):
    if target not in BUILTIN_TARGETS:
      raise ValueError(f'unknown target {target!r}; built-ins: {sorted(BUILTIN_TARGETS)}, '
                       'or pass a callable [batch, n, d] -> [batch, n, d].')
    resolved = BUILTIN_TARGETS[target]
  elif isinstance(target, Target):
    resolved = target
  elif callable(target):
    resolved = Target(getattr(target, '__name__', 'user_target'), target, False,
                      'user callable')
  else:
    raise ValueError(f'target must be a name, a Target or a callable, got {type(target)}.')
  if BUILTIN_TARGETS.get(resolved.name) is resolved:
    probe = np.random.default_rng(0).random((PROBE_BATCH, n, d))
    check_output(resolved.name, resolved(probe), (PROBE_BATCH, n, d))
  else:
    check_callable(resolved, d, n)
  return resolved


def evaluate(target: Target, x: np.ndarray) -> np.ndarray:
  """f(X) [batch, n, d] float64 on a copy of X, checked (``check_output``; an input
  changed in place is refused in one line)."""
  x = np.array(x, np.float64)
  keep = x.copy()
  out = check_output(target.name, target(x), x.shape)
  if not np.array_equal(x, keep, equal_nan=True):
    raise ValueError(f'target {target.name!r} changed its input array in place; a target '
                     'must not mutate X (copy it first, e.g. x = x.copy()).')
  return out


def check_callable(target: Target, d: int, n: int) -> None:
  """A user callable on ``PROBE_BATCH`` probe points (module doc): input unchanged,
  real, of shape [batch, n, d], finite, and a function of one point (the batch, the
  batch reversed and each point alone agree to ``BATCH_RTOL``). One ValueError line
  naming the failure."""
  x = np.random.default_rng(0).random((PROBE_BATCH, n, d))
  batch = evaluate(target, x)
  scale = max(1.0, float(np.max(np.abs(batch))))
  rev = evaluate(target, x[::-1])[::-1]
  single = np.concatenate([evaluate(target, x[b:b + 1]) for b in range(len(x))])
  for other, how in ((single, 'one point at a time'), (rev, 'in reversed batch order')):
    err = float(np.max(np.abs(other - batch)))
    if err > BATCH_RTOL * scale:
      raise ValueError(f'target {target.name!r} is not a function of one point: on '
                       f'{PROBE_BATCH} probes its values {how} differ from the batch\'s by '
                       f'{err:.3g}; f(X) may depend only on X (e.g. a mean over axis=-2, '
                       'the tokens, never over the batch axis 0).')


def check_output(name: str, out, shape) -> np.ndarray:
  """``out`` as float64, or ValueError unless it is a real, finite array of ``shape``
  with a real numeric dtype (bool, int, float, or objects that convert, e.g. Fractions)."""
  raw = np.asarray(out) if not isinstance(out, np.ndarray) else out
  if np.iscomplexobj(raw):
    raise ValueError(f'target {name!r} returned complex values (dtype {raw.dtype}); a '
                     'target must be real-valued (return e.g. the real part or the '
                     'modulus explicitly).')
  if raw.dtype.kind not in 'biufO':     # (objects: converted below, or refused there)
    raise ValueError(f'target {name!r} returned something that is not a numeric array '
                     f'(dtype {raw.dtype}); a target must return real numbers (bool, int or '
                     'float).')
  try:
    out = np.asarray(raw, dtype=np.float64)
  except (TypeError, ValueError) as e:
    raise ValueError(f'target {name!r} returned something that is not a numeric array: '
                     f'{e}') from None
  if out.shape != tuple(shape):
    raise ValueError(f'target {name!r} returned shape {out.shape} for input shape '
                     f'{tuple(shape)}; a target must map [batch, n, d] to [batch, n, d].')
  if not np.all(np.isfinite(out)):
    raise ValueError(f'target {name!r} returned {np.sum(~np.isfinite(out))} non-finite '
                     'values (NaN or inf); targets must be finite on [0, 1]^{d x n}.')
  return out


def check_equivariant(target: Target, d: int, n: int) -> None:
  """Refuses a Theorem 2 target that is not permutation equivariant on probes (a quick
  check at build time; ``certificate.certify_lp`` decides f_bar's equivariance on every
  cube, ``callable_checks.equivariance_failures``)."""
  if BUILTIN_TARGETS.get(target.name) is target and not target.permutation_equivariant:
    raise ValueError(f'target {target.name!r} is not permutation equivariant; Theorem 2 '
                     '(positional=False) needs f(XP) = f(X)P. Use positional=True '
                     '(Theorem 3, Appendix G).')
  err = equivariance_error(target, d, n)
  if err is not None:
    raise ValueError(f'target {target.name!r} is not permutation equivariant (|f(XP) - '
                     f'f(X)P| = {err:.3g} on probes); Theorem 2 (positional=False) needs '
                     'it. Use positional=True (Theorem 3).')


def equivariance_error(target: Target, d: int, n: int) -> float | None:
  """max |f(XP) - f(X)P| on ``EQUIVARIANCE_PROBES`` probes and one permutation P (not
  the identity) when it exceeds ``EQUIVARIANCE_RTOL`` max(1, max |f|), else None: the
  function's behaviour decides, whatever its name."""
  rng = np.random.default_rng(1)
  x = rng.random((EQUIVARIANCE_PROBES, n, d))
  perm = rng.permutation(n)
  if np.all(perm == np.arange(n)):
    perm = np.roll(perm, 1)
  fx = evaluate(target, x)
  fxp = evaluate(target, x[:, perm])
  err = float(np.max(np.abs(fxp - fx[:, perm])))
  return err if err > EQUIVARIANCE_RTOL * max(1.0, float(np.max(np.abs(fx)))) else None


# ---------------------------------------------------------------------------
# Lemma 4: the piecewise-constant approximation on the grid.
# ---------------------------------------------------------------------------


def cell_index(x: np.ndarray, resolution: int) -> np.ndarray:
  """Grid index ``K = floor(X N)`` of the cube containing X (X in [0, 1))."""
  return np.floor(np.asarray(x, np.float64) * resolution).astype(np.int64)


def cell_centers(k: np.ndarray, resolution: int) -> np.ndarray:
  """Centres ``C_L = (K + 1/2) / N`` of the cubes with grid indices K."""
  return (np.asarray(k, np.float64) + 0.5) / resolution


def in_unit_cube(x: np.ndarray) -> np.ndarray:
  """[batch] mask: every entry of X in [0, 1) (the support of f_bar)."""
  x = np.asarray(x)
  return np.all((x >= 0) & (x < 1), axis=(-2, -1))


def piecewise_constant(target: Target, resolution: int) -> Target:
  """Lemma 4: ``f_bar(X) = f(C_L)`` for X in the cube S_L, 0 outside [0,1)^{d x n}."""
  if not isinstance(resolution, (int, np.integer)) or resolution < 1:
    raise ValueError(f'resolution must be a positive integer, got {resolution!r}.')
  return Target(f'{target.name}_bar_N{resolution}', PiecewiseConstant(target, int(resolution)),
                target.permutation_equivariant,
                f'Lemma 4 piecewise-constant approximation of {target.name}, N={resolution}')


@dataclasses.dataclass(frozen=True)
class PiecewiseConstant:
  """f_bar as a module-level callable (it pickles when its target does):
  X -> f(C_L) for X in S_L, 0 outside [0, 1)^{d x n}."""

  target: Target
  resolution: int

  def __call__(self, x):
    x = np.asarray(x, np.float64)
    inside = in_unit_cube(x)
    n = self.resolution
    centers = cell_centers(np.clip(cell_index(x, n), 0, n - 1), n)
    return np.where(inside[:, None, None], self.target(centers), 0.0)


def grid_values(target: Target, k: np.ndarray, resolution: int) -> np.ndarray:
  """``A_L = f(C_L)`` for grid indices ``K [batch, n, d]`` (the value-mapping table)."""
  k = np.asarray(k)
  if np.any(k < 0) or np.any(k >= resolution):
    raise ValueError(f'grid indices must lie in [0, {resolution - 1}].')
  return evaluate(target, cell_centers(k, resolution))
