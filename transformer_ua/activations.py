"""Activations of the modified Transformer: Yun et al.'s class Phi, and Lemma 6.

Yun et al. (2020), Section C, Step 2: the modified Transformer replaces ReLU by an
activation ``phi`` in the class

    Phi = { piecewise linear phi : R -> R  with at most three pieces,
            at least one piece constant, discontinuities allowed }.

The paper writes pieces on half-open intervals ``(-inf, c1), [c1, c2), [c2, inf)``
(the breakpoint belongs to the piece on its right). Lemma 9's kill layer needs a
closed interval ``[t_l, t_r]``, so each breakpoint here carries a flag saying which
side owns it:

    phi(t) = a_1 t + b_1   if t <  c_1          (t <= c_1 when left_closed[0])
             a_2 t + b_2   if c_1 <= t < c_2    (sides set by the same flags)
             a_3 t + b_3   if c_2 <= t          (t >  c_2 when left_closed[1])

Lemma 6 (Appendix F) replaces one Phi hidden unit by four ReLU units whose sum
equals ``phi`` except on windows of width ``epsilon`` next to each breakpoint:

    phi~(t) = alpha + sum_{u=1..4} kappa_u ReLU(s_u (t - tau_u)),   s_u in {+1, -1}.

The paper writes the case of a constant *first* piece; the function below derives
all three placements. The ramp for breakpoint ``c`` occupies ``[c - eps, c]`` when
``c`` belongs to the right piece (so phi~(c) = phi(c)) and ``[c, c + eps]`` when it
belongs to the left piece. With kinks ``k_1 < k_2 < k_3 < k_4`` at the window ends
and slopes ``sigma_0..sigma_4`` of the resulting continuous function:

* constant first piece  (sigma_0 = 0): right-facing units at all four kinks,
  ``kappa_u = sigma_u - sigma_{u-1}``;  alpha = b_1.
* constant last piece   (sigma_4 = 0): left-facing units ``ReLU(k_u - t)``,
  ``kappa_u = sigma_u - sigma_{u-1}`` with the sign of a left-facing ramp.
* constant middle piece (sigma_2 = 0): left-facing units at k_1, k_2 and
  right-facing units at k_3, k_4; alpha = b_2.

A ReLU is the member ``Phi(breaks=(0,), pieces=((0, 0), (1, 0)))``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from fractions import Fraction
from typing import Sequence

import jax.numpy as jnp
import numpy as np

#: Every Phi is stored padded to this many pieces (two breakpoints) so that layers of
#: one segment share array shapes and can be stacked for ``lax.scan``.
MAX_PIECES = 3
#: ReLU units that Lemma 6 spends on one Phi unit.
RELUS_PER_PHI = 4


@dataclasses.dataclass(frozen=True)
class Phi:
  """A member of Yun et al.'s activation class Phi, described by data.

  Attributes:
    breaks: strictly increasing breakpoints, 0 to 2 of them.
    pieces: ``len(breaks) + 1`` pairs ``(slope, intercept)``, left to right.
    left_closed: per breakpoint, True when the breakpoint belongs to the piece on
      its left. Default: every breakpoint belongs to the piece on its right, the
      paper's half-open ``[c, ...)`` convention.
  """

  breaks: tuple[float, ...]
  pieces: tuple[tuple[float, float], ...]
  left_closed: tuple[bool, ...] | None = None

  def __post_init__(self):
    breaks = tuple(self.breaks)
    pieces = tuple(tuple(p) for p in self.pieces)
    left_closed = (tuple(bool(b) for b in self.left_closed)
                   if self.left_closed is not None else (False,) * len(breaks))
    object.__setattr__(self, 'breaks', breaks)
    object.__setattr__(self, 'pieces', pieces)
    object.__setattr__(self, 'left_closed', left_closed)
    validate_phi(self)

  @property
  def num_pieces(self) -> int:
    return len(self.pieces)

  def constant_piece(self) -> int:
    """Index of the first constant piece (there is at least one)."""
    return next(i for i, (a, _) in enumerate(self.pieces) if a == 0)

  def anchor_piece(self) -> int:
    """The constant piece the 4-ReLU expansion is built around (all units off there).

    A zero piece if there is one (the middle first), else the first constant piece.
    In the constructions a unit's zero piece is where most inputs lie (the layer
    leaves those tokens unchanged), and with every ReLU off there the realized layer
    is *exactly* the identity in floating point; on the other pieces the ReLU terms
    cancel, with rounding error ~ |t| ulp / epsilon (measured in
    results/yun/approximation/ladder/approximate.md).
    """
    zero = [i for i, piece in enumerate(self.pieces) if piece == (0.0, 0.0)]
    if zero:
      return 1 if 1 in zero else zero[0]
    return self.constant_piece()

  def padded(self) -> tuple[tuple, tuple, tuple]:
    """(breaks[2], pieces[3], left_closed[2]) padded to three pieces.

    A missing breakpoint repeats the last one with the same side flag, and a missing
    piece repeats the last piece; the padded function equals the original everywhere.
    """
    breaks = list(self.breaks)
    pieces = list(self.pieces)
    closed = list(self.left_closed)
    if not breaks:
      breaks, closed = [0.0], [False]
      pieces = [pieces[0], pieces[0]]
    while len(breaks) < MAX_PIECES - 1:
      breaks.append(breaks[-1])
      closed.append(closed[-1])
      pieces.append(pieces[-1])
    return tuple(breaks), tuple(pieces), tuple(closed)

  def __call__(self, t):
    """Evaluates phi elementwise (NumPy semantics; exact on Python ints/Fractions)."""
    breaks, pieces, closed = self.padded()
    t = np.asarray(t)
    idx = np.zeros(t.shape, dtype=np.int64)
    for c, lc in zip(breaks, closed):
      idx = idx + ((t > c) if lc else (t >= c)).astype(np.int64)
    slopes = np.asarray([p[0] for p in pieces], dtype=object if t.dtype == object else None)
    inter = np.asarray([p[1] for p in pieces], dtype=object if t.dtype == object else None)
    return slopes[idx] * t + inter[idx]


def validate_phi(phi: Phi) -> None:
  """Raises ValueError naming the rule of the class Phi that ``phi`` breaks."""
  breaks, pieces, closed = phi.breaks, phi.pieces, phi.left_closed
  if len(pieces) < 1 or len(pieces) > MAX_PIECES:
    raise ValueError(
        f'Phi has {len(pieces)} pieces; the class Phi allows 1 to {MAX_PIECES} '
        'pieces (Yun et al., Section C).')
  if len(breaks) != len(pieces) - 1:
    raise ValueError(
        f'Phi has {len(pieces)} pieces but {len(breaks)} breakpoints; '
        f'a function of k pieces needs exactly k - 1 breakpoints.')
  if len(closed) != len(breaks):
    raise ValueError(
        f'left_closed has {len(closed)} flags for {len(breaks)} breakpoints; '
        'give one flag per breakpoint.')
  for i, p in enumerate(pieces):
    if len(p) != 2:
      raise ValueError(f'piece {i} is {p!r}; each piece must be a pair (slope, intercept).')
  values = [float(v) for v in breaks] + [float(v) for p in pieces for v in p]
  if not all(math.isfinite(v) for v in values):
    raise ValueError(f'Phi has a non-finite breakpoint or coefficient: {phi!r}; '
                     'all breakpoints, slopes and intercepts must be finite.')
  if any(not breaks[i] < breaks[i + 1] for i in range(len(breaks) - 1)):
    raise ValueError(f'breakpoints {breaks} are not strictly increasing.')
  if not any(a == 0 for a, _ in pieces):
    raise ValueError(
        f'no piece of Phi is constant (slopes {[a for a, _ in pieces]}); the class '
        'Phi requires at least one constant piece (slope 0).')


RELU = Phi(breaks=(0.0,), pieces=((0.0, 0.0), (1.0, 0.0)))


# ---------------------------------------------------------------------------
# Array form (stacked per hidden unit) and evaluation inside layers.
# ---------------------------------------------------------------------------


def phi_arrays(phis: Sequence[Phi], dtype=jnp.float32) -> dict:
  """Array description of ``r`` Phi units, the ``phi`` entry of a FeedForward's params.

  Returns dict with ``breaks [r, 2]``, ``slopes [r, 3]``, ``intercepts [r, 3]``
  (in ``dtype``) and ``left_closed [r, 2]`` (bool).
  """
  padded = [p.padded() for p in phis]
  return {
      'breaks': jnp.asarray([p[0] for p in padded], dtype=dtype),
      'slopes': jnp.asarray([[s for s, _ in p[1]] for p in padded], dtype=dtype),
      'intercepts': jnp.asarray([[b for _, b in p[1]] for p in padded], dtype=dtype),
      'left_closed': jnp.asarray([p[2] for p in padded], dtype=bool),
  }


def apply_phi_arrays(arrays: dict, t):
  """Evaluates stacked Phi units on pre-activations ``t [..., r]``; exact on integers."""
  idx = jnp.zeros(t.shape, dtype=jnp.int32)
  for i in range(MAX_PIECES - 1):
    c = arrays['breaks'][..., i]
    lc = arrays['left_closed'][..., i]
    idx = idx + jnp.where(lc, t > c, t >= c).astype(jnp.int32)
  slope = jnp.take_along_axis(
      jnp.broadcast_to(arrays['slopes'], t.shape + (MAX_PIECES,)), idx[..., None], -1)[..., 0]
  inter = jnp.take_along_axis(
      jnp.broadcast_to(arrays['intercepts'], t.shape + (MAX_PIECES,)), idx[..., None], -1)[..., 0]
  return slope * t + inter


# ---------------------------------------------------------------------------
# Lemma 6: one Phi unit -> four ReLU units.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ReluExpansion:
  """phi~(t) = alpha + sum_u kappa[u] * ReLU(sign[u] * (t - tau[u])), four units."""

  alpha: float
  kappa: tuple[float, float, float, float]
  sign: tuple[float, float, float, float]
  tau: tuple[float, float, float, float]

  def __call__(self, t):
    t = np.asarray(t, dtype=np.float64)
    out = np.full(t.shape, self.alpha, dtype=np.float64)
    for k, s, c in zip(self.kappa, self.sign, self.tau):
      out = out + k * np.maximum(s * (t - c), 0.0)
    return out


def ramp_windows(phi: Phi, epsilon: float) -> list[tuple[float, float]]:
  """The closed windows ``[lo, hi]`` of width epsilon where phi~ may differ from phi."""
  return [((c - epsilon, c) if not lc else (c, c + epsilon))
          for c, lc in zip(phi.breaks, phi.left_closed)]


def relu_expansion(phi: Phi, epsilon: float) -> ReluExpansion:
  """Lemma 6: four ReLUs equal to ``phi`` outside ``ramp_windows(phi, epsilon)``.

  Exact when ``epsilon`` is a ``fractions.Fraction`` and phi's numbers are rationals
  (ints / Fractions): every returned number is then a Fraction; otherwise floats.
  Raises ValueError if epsilon is not positive or the windows would overlap.
  """
  if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) \
      or not math.isfinite(float(epsilon)) or epsilon <= 0:
    raise ValueError(f'epsilon must be a positive finite number, got {epsilon!r}.')
  num = Fraction if isinstance(epsilon, Fraction) else float  # the number type
  breaks = phi.breaks
  if len(breaks) == 2:
    gap = breaks[1] - breaks[0]
    # Windows [c1 -/+ eps] and [c2 -/+ eps] must not overlap or touch.
    lo1, hi1 = ramp_windows(phi, epsilon)[0]
    lo2, hi2 = ramp_windows(phi, epsilon)[1]
    if not hi1 < lo2:
      raise ValueError(
          f'epsilon={float(epsilon):g} is too large for breakpoints {float(breaks[0]):g} and '
          f'{float(breaks[1]):g}: the ramp windows [{float(lo1):g}, {float(hi1):g}] and '
          f'[{float(lo2):g}, {float(hi2):g}] overlap; need epsilon < {float(gap):g} '
          '(or < half of it when the breakpoints face each other).')
  pieces = phi.pieces
  if num is Fraction:  # exact: every slope and kink difference a Fraction
    pieces = tuple((Fraction(a), Fraction(b)) for a, b in pieces)

  def value(i, t):  # value of piece i at t
    return pieces[i][0] * t + pieces[i][1]

  # Kinks and the values of the continuous approximation at each kink.
  kinks, vals = [], []
  for i, ((lo, hi), c) in enumerate(zip(ramp_windows(phi, epsilon), breaks)):
    kinks += [lo, hi]
    # Left end keeps piece i, right end takes piece i + 1 (limits at the window ends).
    vals += [value(i, lo), value(i + 1, hi)]
  if any(not a < b for a, b in zip(kinks, kinks[1:])):
    raise ValueError(
        f'epsilon={epsilon} is below the float resolution at breakpoints {breaks}: the '
        f'ramp windows {ramp_windows(phi, epsilon)} have zero width (c + epsilon == c); '
        f'need epsilon of at least a few ulps of max |c| '
        f'({4 * math.ulp(max(abs(c) for c in breaks)):.3g}).')
  # Slopes on the len(kinks)+1 intervals.
  slopes = [pieces[0][0]]
  for j in range(len(kinks) - 1):
    slopes.append((vals[j + 1] - vals[j]) / (kinks[j + 1] - kinks[j]))
  slopes.append(pieces[-1][0])

  const = phi.anchor_piece()
  alpha = pieces[const][1]
  kappa, sign, tau = [], [], []
  # Interval 2*const (between kinks 2*const-1 and 2*const) is the constant piece.
  # Kinks to its left get left-facing units kappa*ReLU(k - t), whose slope is -kappa
  # left of k; kinks to its right get right-facing units kappa*ReLU(t - k). Either
  # way kappa_j = sigma_{j+1} - sigma_j makes the slopes come out as sigma.
  for j, k in enumerate(kinks):
    kappa.append(num(slopes[j + 1] - slopes[j]))
    sign.append(num(-1 if j < 2 * const else 1))
    tau.append(num(k))
  while len(kappa) < RELUS_PER_PHI:  # pad unused units with zero weight
    kappa.append(num(0))
    sign.append(num(1))
    tau.append(num(0))
  return ReluExpansion(alpha=num(alpha), kappa=tuple(kappa), sign=tuple(sign), tau=tuple(tau))
