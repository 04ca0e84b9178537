r"""The cost model of branch and bound: how many boxes (and minutes) a total of epsilon needs.

Each round of ``certify_network`` records (boxes N_i, seconds t_i, total T_i, floor F_i),
F_i the same sum as T_i with each box's bound E_B replaced by its value at the box's centre
(|f - g| + D there): a midpoint rule for the integral the total converges to, not zero. So
the model is, in the p-th powers that the boxes add (p = inf: the values themselves),

    T^p - F^p ~ C N^a          (least squares of log(T_i^p - F^p) on log N_i over the
                                last k rounds, F = the last round's floor, a < 0)

and the boxes needed for T = epsilon are

    N(eps) = exp((log(eps^p - F^p) - log C) / a)       (none when eps <= F: the network's
                                                        own error is above epsilon),

the seconds the last rounds' rate of seconds per box carried on linearly,

    t(eps) = t_last + (N(eps) - N_last) * (t_last - t_first) / (N_last - N_first)

(a round evaluates its new boxes: time grows with the boxes). A projection, not a bound:
its text names the exponent a, the floor and the points it comes from. Without the floor
(F = 0: the plain log T vs log N fit) the projection undershoots where T levels off at the
network's own error (the benchmark benchmarks/certify_projection.py measures both).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

#: Rounds the fit uses (the last ones: the early rounds are before the asymptotic decay).
FIT_ROUNDS = 6
#: The fewest rounds (distinct box counts) a fit needs.
MIN_POINTS = 3


@dataclasses.dataclass(frozen=True)
class Projection:
  """T^p - F^p ~ C N^exponent over ``points`` rounds, projected to epsilon."""

  epsilon: float
  p: float
  floor: float
  exponent: float
  log_c: float
  points: int
  first_boxes: int
  last_boxes: int
  boxes: float          # projected boxes for total = epsilon (inf: not in sight)
  minutes: float        # projected minutes from the start of the run

  def text(self) -> str:
    pw = '' if math.isinf(self.p) or self.p == 1 else f'^{self.p:g}'
    fit = (f'fit total{pw} - floor{pw} ~ boxes^{self.exponent:.3g}, floor {self.floor:.4g} '
           f'from the box centres, over the last {self.points} rounds, '
           f'{self.first_boxes:,}-{self.last_boxes:,} boxes')
    if self.floor >= self.epsilon:
      return (f'projection: epsilon {self.epsilon:g} out of reach, below the floor the total '
              f'tends to ({fit})')
    if not math.isfinite(self.boxes):
      return f'projection: epsilon {self.epsilon:g} not in sight (the total does not decay: {fit})'
    return (f'projection: about {self.boxes:.3g} boxes and {_minutes(self.minutes)} to reach '
            f'epsilon {self.epsilon:g} ({fit})')


def _minutes(m: float) -> str:
  if m < 100:
    return f'{m:.3g} min'
  if m < 60 * 48:
    return f'{m / 60:.3g} h'
  return f'{m / 60 / 24:.3g} days'


def project(history, epsilon: float, p: float, *, rounds: int = FIT_ROUNDS,
            use_floor: bool = True) -> Projection | None:
  """The projection to ``epsilon`` from ``history`` ((boxes, seconds, total, floor) per
  round), or None when there are too few rounds with distinct box counts above the floor.
  ``use_floor=False``: the plain fit of log total on log boxes (F = 0), for comparison."""
  pts = []
  for boxes, seconds, total, floor in history:
    if pts and pts[-1][0] == boxes:
      pts.pop()
    pts.append((boxes, seconds, total, floor))
  if not pts:
    return None
  power = 1.0 if math.isinf(p) else float(p)
  f_last = pts[-1][3] if use_floor else 0.0
  fp = f_last ** power
  common = dict(epsilon=float(epsilon), p=float(p), floor=float(f_last))
  pts = [q for q in pts if math.isfinite(q[2]) and q[2] ** power > fp][-rounds:]
  if len(pts) < MIN_POINTS:
    return None
  n = np.array([q[0] for q in pts], np.float64)
  t = np.array([q[1] for q in pts], np.float64)
  excess = np.array([q[2] ** power for q in pts], np.float64) - fp
  a, log_c = np.polyfit(np.log(n), np.log(excess), 1)
  common.update(exponent=float(a), log_c=float(log_c), points=len(pts),
                first_boxes=int(n[0]), last_boxes=int(n[-1]))
  goal = float(epsilon) ** power - fp
  if a >= 0 or goal <= 0:
    return Projection(boxes=math.inf, minutes=math.inf, **common)
  boxes = math.exp(min((math.log(goal) - log_c) / a, 700.0))
  rate = max(0.0, (t[-1] - t[0]) / (n[-1] - n[0]))
  seconds = t[-1] + max(0.0, boxes - n[-1]) * rate
  return Projection(boxes=boxes, minutes=seconds / 60, **common)
