"""The grid G_delta of Yun et al. (Appendix E): Grid(d, n, N), its checks and constants.

Notation (Yun et al. 2020, Appendix E):

    delta = 1/N                       N = ``resolution``, an integer >= 2
    G_delta  = {0, delta, ..., 1 - delta}^{d x n}
    G+_delta = {-delta^(-nd), 0, delta, ..., 1 - delta}^{d x n}
    u = (1, delta^-1, ..., delta^(-d+1)) = (1, N, ..., N^(d-1))

Grid indices: an integer array ``K [n, d]`` (row j = token j, the paper's column j)
with entries in {-1, 0, ..., N-1}; ``k >= 0`` stands for the value ``k/N`` and ``-1``
for the out-of-range value ``-delta^(-nd) = -N^(nd)``.

Scaled integers: every grid-side value is multiplied by ``S`` (``scale``; a multiple
of 2N, default 2N), which makes every quantity of the construction an integer.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

#: Index standing for the out-of-range value -delta^(-nd) in grid-index arrays.
OUT_OF_RANGE = -1


def _is_int(v) -> bool:
  return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def check_config(d, n, resolution) -> tuple[int, int, int]:
  """Validates (d, n, N); returns them as Python ints.

  Raises:
    ValueError: naming the allowed values (d >= 1, n >= 2, N >= 2, all integers).
  """
  for name, value, low in (('d', d, 1), ('n', n, 2), ('resolution', resolution, 2)):
    if not _is_int(value) or value < low:
      raise ValueError(f'{name}={value!r} is not allowed; {name} must be an integer >= {low} '
                       '(Yun et al. Lemma 8 assumes n >= 2 and 1/delta >= 2; d >= 1).')
  return int(d), int(n), int(resolution)


def check_scale(scale, resolution: int, base: tuple[int, str] | None = None,
                reason: str = 'a multiple of N so that the grid points scale to integers, '
                              'and of 2N so that delta/2 does') -> int:
  """The scale S: default ``base`` = (value, its name), (2N, '2N') unless given;
  otherwise a positive multiple of it."""
  value, name = (2 * resolution, '2N') if base is None else base
  if scale is None:
    return value
  if not _is_int(scale) or scale <= 0 or scale % value:
    raise ValueError(f'scale={scale!r} is not allowed; it must be a positive integer '
                     f'multiple of {name} = {value} ({reason}).')
  return int(scale)


def u_vector(d: int, resolution: int) -> tuple[int, ...]:
  """u = (1, N, ..., N^(d-1)) as Python ints."""
  return tuple(resolution ** i for i in range(d))


def out_of_range_value(grid: Grid) -> int:
  """delta^(-nd) = N^(nd): the out-of-range grid value is minus this."""
  return grid.N ** (grid.n * grid.d)


def decode_grid(rank, grid: Grid):
  """Grid indices K [.., n, d] in {0, ..., N-1} of lexicographic ranks [..] (the first
  entry most significant); NumPy or jnp ranks (int64) give NumPy or jnp K."""
  d, n, N = grid.d, grid.n, grid.N
  radix = N ** np.arange(d * n - 1, -1, -1, dtype=np.int64)
  digits = (rank[..., None] // radix) % N
  return digits.reshape(rank.shape + (n, d))


def check_input(x, n: int, d: int) -> np.ndarray:
  """X as float64 [batch, n, d], or ValueError saying what is wrong (one line)."""
  try:
    x = np.asarray(x, np.float64)
  except (TypeError, ValueError) as e:
    raise ValueError(f'input must be a numeric array [batch, {n}, {d}]: {e}') from None
  if x.ndim != 3 or x.shape[1:] != (n, d):
    raise ValueError(f'input must have shape [batch, n={n}, d={d}], got {x.shape}.')
  if not np.all(np.isfinite(x)):
    raise ValueError('input contains NaN or inf.')
  return x


def check_domain(x: np.ndarray) -> np.ndarray:
  """The one input domain of the approximators' ``apply``: [0, 1)^{n x d}.

  Both theorems approximate f on the unit cube. Outside it the paper's Theorem 2 g_bar
  happens to be 0 (Lemma 7 maps X out of range, no bump fires) while Appendix G's
  Theorem 3 construction is undefined; rather than return a number that means nothing
  about f, both refuse. The network itself (``pipeline.GBar.apply_exact``) keeps the
  paper's behaviour for whoever studies it.
  """
  if x.size and not np.all((x >= 0) & (x < 1)):
    bad = np.asarray(x)[~((x >= 0) & (x < 1))]
    raise ValueError(f'X must lie in [0, 1)^(n x d) (Theorems 2 and 3 approximate f on the '
                     f'half-open unit cube); {bad.size} entries lie outside, e.g. '
                     f'{float(bad.flat[0]) + 0.0!r}.')
  return x


@dataclasses.dataclass(frozen=True)
class Grid:
  """(d, n, N): embedding size d >= 1, tokens n >= 2, N = 1/delta >= 2 (``grid.check_config``)."""

  d: int
  n: int
  N: int

  def __post_init__(self):
    d, n, N = check_config(self.d, self.n, self.N)
    object.__setattr__(self, 'd', d)
    object.__setattr__(self, 'n', n)
    object.__setattr__(self, 'N', N)

  @property
  def resolution(self) -> int:
    return self.N

  @property
  def cells(self) -> int:
    """N^d in-range columns."""
    return self.N ** self.d


class OnVariant:
  """d, n, resolution and positional of an approximator, read from the ``yun.variants``
  object it was built for (``self.variant``: its Grid and theorem). The one home of these
  four for every approximator that holds its variant."""

  @property
  def d(self) -> int:
    return self.variant.d

  @property
  def n(self) -> int:
    return self.variant.n

  @property
  def resolution(self) -> int:
    return self.variant.N

  @property
  def positional(self) -> bool:
    return self.variant.positional


class OfSource:
  """d, n, positional and the softmax scale lam of a realized g, read from the
  approximator it was realized from (``self.source``). The one home of these four for
  every realized network that holds its source."""

  @property
  def d(self) -> int:
    return self.source.d

  @property
  def n(self) -> int:
    return self.source.n

  @property
  def positional(self) -> bool:
    return self.source.positional

  @property
  def lam(self):
    return self.source.lam
