r"""Theorem 2 / Proposition 5: the modified Transformer g_bar = g_v o g_c o g_q.

Yun et al. 2020, Appendix E.1.4. With g_q (Lemma 7), g_c (Lemma 8), g_v (Lemma 9):

    g_bar(X) = A_L   for X in S_L, L in G~_delta     (the target's value on the cube)
               0     elsewhere (repeated columns, or X outside [0, 1)^{d x n})

A network of  d/delta + d  +  delta^-d + 1  +  n C(delta^-d, n) + d + 1  layers in
T-bar^{2,1,1} (two hardmax heads of size 1, one Phi hidden unit), as the segments

    segment_0                     g_q   feed-forward, d(N+1) layers
    segment_1, segment_2          g_c   attention: N^d selective shifts, 1 global shift
    segment_3, segment_4          g_v   feed-forward: kill + d clean-ups, bumps

``GBar.network()`` / ``GBar.float_params()`` give the literal paper-valued float64
network (``modules.Network``); floating point breaks it as soon as the values outgrow
float64 (see ``apply``). ``GBar.apply_exact`` evaluates the same construction
exactly: g_q's float network quantizes the real input (exact up to the tolerance of
``verify.quantization`` at bin edges), the grid indices go through g_c in exact
integer arithmetic and through the compact g_v, and the outputs come back as Fractions.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import construction
from transformer_ua.yun.stages import contextual, quantize, value


@dataclasses.dataclass(frozen=True, eq=False)
class GBar:
  """The composed Theorem 2 network for one target."""

  quantization: quantize.Quantization
  contextual: contextual.ContextualMapping
  value: value.ValueMapping

  @property
  def variant(self):
    """The construction's variant (``yun.variants``), the value map's."""
    return self.value.variant

  @property
  def positional(self) -> bool:
    return self.variant.positional

  @property
  def segments(self) -> tuple:
    return (self.quantization.segments + tuple(self.contextual.segments)
            + tuple(self.value.segments))

  def __repr__(self) -> str:
    q, c, v = self.quantization, self.contextual, self.value
    return (f'GBar(g_v o g_c o g_q: d={c.d}, n={c.n}, N={c.resolution}, {self.depth()} '
            f'layers = {q.depth()} + {c.depth()} + {v.depth()})')

  def depth(self) -> int:
    return sum(s.depth for s in self.segments)

  def stage_names(self) -> tuple:
    """The stage ('quantization', 'contextual', 'value') of each of ``segments``."""
    return (('quantization',) * len(self.quantization.segments)
            + ('contextual',) * len(self.contextual.segments)
            + ('value',) * len(self.value.segments))

  def num_params(self) -> int:
    return self.quantization.num_params() + self.contextual.num_params() + self.value.num_params()

  def float_params(self, values=None) -> dict:
    """The literal paper-valued float64 params of all five segments (``values``:
    real target values for the bump weights, see ``ValueMapping.params``)."""
    _, vparams = self.value.params('float64', values=values)
    cm = self.contextual
    parts = ([self.quantization.params['segment_0']]
             + [cm.params[f'segment_{i}'] for i in range(len(cm.segments))]
             + [vparams[f'segment_{i}'] for i in range(len(vparams))])
    out = {f'segment_{i}': p for i, p in enumerate(parts)}
    if 'E' in self.quantization.params:   # Theorem 3's positional encoding
      out['E'] = self.quantization.params['E']
    return out

  def network(self):
    from transformer_ua import modules  # lazy: Flax  # pylint: disable=import-outside-toplevel
    return modules.Network(self.segments, param_dtype=jnp.float64,
                          positional=self.positional, num_tokens=self.contextual.n)

  def layer_counts(self) -> dict:
    """{'quantization': {'feedforward': ..}, 'contextual': {'attention': ..(,
    'feedforward': 1 with ties='complete')}, 'value': {'feedforward': ..}}."""
    return construction.merge_counts(self.quantization.layer_counts(),
                                     self.contextual.layer_counts(),
                                     self.value.layer_counts())

  def apply(self, x) -> np.ndarray:
    """g_bar(X) [B, n, d] as float64: ``apply_exact`` rounded (the reliable path)."""
    return np.asarray(self.apply_exact(x), np.float64)

  def apply_literal(self, x):
    """The literal network in float64 (breaks down once values outgrow float64):
    ``network().apply({'params': float_params()}, x)``."""
    with jax.enable_x64(True):
      return np.asarray(self.network().apply({'params': self.float_params()},
                                             jnp.asarray(np.asarray(x, np.float64))))

  def select(self, x):
    """The evaluation chain on real inputs X [B, n, d]: grid indices K = g_q(X) (float),
    z = g_c(K) (exact), then the compact g_v.

    Returns (out, bump): the scaled g_v output in the arithmetic of g_c, and the index
    of the bump that fired per token (-1: none) [B, n].
    """
    k = self.quantization.to_indices(self.quantization.apply(x))
    z = self.contextual.forward(k)['z']
    out, bump, _ = self.value.select(z)
    return out, bump

  def apply_exact(self, x) -> np.ndarray:
    """g_bar(X) for real inputs X [B, n, d] as an object array of Fractions."""
    out, _ = self.select(x)
    return self.contextual.to_fractions(out)


def build_g_bar(variant, targets, *, denominator: int = 1, arithmetic: str = 'auto') -> GBar:
  """Builds g_bar = g_v o g_c o g_q of a Lemma 7-9 ``variant`` for a target on its
  value-map classes.

  Args:
    variant: the ``yun.variants.staged`` object on its grid (Lemma 8, Theorem 3's
      Appendix G, or ``ties='complete'``'s g_c).
    targets: integer numerators [C, n, d] in ``variant.representatives()`` order
      (Theorem 2: C(N^d, n); ties='complete': C(N^d + n - 1, n); Theorem 3: N^(dn)).
    denominator: A = targets / denominator; the exact scale is ``variant.scale``.
    arithmetic: for g_c ('auto', 'int64', 'limbs').
  """
  g_q = variant.build_quantization()
  g_c = variant.build_contextual(scale=variant.scale(denominator), arithmetic=arithmetic)
  g_v = value.build_value_mapping(g_c, targets, denominator=denominator, variant=variant)
  return GBar(quantization=g_q, contextual=g_c, value=g_v)
