r"""The variants whose g_bar is Lemma 7's g_q, a Lemma 8 / 10 g_c and Lemma 9's g_v.

    g_bar = g_v o g_c o g_q,   g_q: d(N + 1) (Theorem 3: d n N) feed-forward layers
                              g_c: hardmax attention layers with ids in [t_l, t_r]
                              g_v: one bump per distinct id + d + 1 kill / clean-up

realized deep by Lemma 6 (``approximator.Approximator.realize``). A variant here says
its id interval, its g_c builder and counts; g_q and g_v follow from the grid.
"""

from __future__ import annotations

import abc
import dataclasses
from fractions import Fraction

import jax
import numpy as np

from transformer_ua.yun import approximator
from transformer_ua.yun.stages import contextual_params, quantize
from transformer_ua.yun.variants.base import DeepVariant, ff_weights


@dataclasses.dataclass(frozen=True, repr=False)
class StagedVariant(DeepVariant):
  """A Lemma 7-9 variant (module docstring)."""

  # -- g_q ------------------------------------------------------------------

  def quantization_layers(self) -> int:
    return quantize.layer_count(self.grid, self.positional)

  def quantization_parameters(self) -> int:
    return quantize.parameter_count(self.grid, self.positional)

  def quantization_int_params(self, scale: int) -> dict:
    """g_q's segment params ({'feedforward': ...}, one segment) as scaled int64 NumPy
    arrays at ``scale``."""
    _, scaled = quantize.quantization_params(self.grid,
                                             scale=scale, dtype='int64')
    return jax.tree_util.tree_map(np.asarray, scaled['segment_0'])

  def build_quantization(self) -> quantize.Quantization:
    """Lemma 7's g_q (d/delta + d feed-forward layers)."""
    return quantize.Quantization.build(self.grid)

  # -- g_c ------------------------------------------------------------------

  @abc.abstractmethod
  def interval(self) -> tuple[Fraction, Fraction]:
    """[t_l, t_r]: every id q(L) of a point with a value lies in it."""

  @abc.abstractmethod
  def contextual_layers(self) -> int:
    """Layers of g_c."""

  @abc.abstractmethod
  def contextual_parameters(self) -> int:
    """Weights of g_c."""

  def scale(self, denominator) -> int | None:
    """The exact scale S for targets numerators / ``denominator``: lcm(2N, denominator)
    (None for a non-integer denominator: the builder's default)."""
    if isinstance(denominator, (int, np.integer)):
      return int(np.lcm(2 * self.N, int(denominator)))
    return None

  @abc.abstractmethod
  def build_contextual(self, *, scale: int | None, arithmetic: str):
    """g_c with exact scale S = ``scale`` in the planned ``arithmetic``."""

  def contextual_object_params(self, cm) -> dict:
    """The built g_c ``cm``'s params as scaled Python ints (object arrays), one entry
    ``segment_<i>`` per segment."""
    _, scaled = contextual_params.contextual_mapping_params(
        cm.grid, sweep_ids=cm.sweep_ids,
        final_scale=cm.final_scale, scale=cm.scale, dtype='object')
    return scaled

  # -- g_v ------------------------------------------------------------------

  def num_bump_layers(self) -> int:
    """One bump per distinct id: n per class (Paper, Positional)."""
    return self.n * self.num_classes()

  def value_layers(self) -> int:
    """Bumps + d clean-ups + 1 kill (Lemma 9)."""
    return self.num_bump_layers() + self.d + 1

  def value_parameters(self) -> int:
    return ff_weights(self.value_layers(), self.d)

  def layer_counts(self) -> dict:
    return {'quantization': self.quantization_layers(),
            'contextual': self.contextual_layers(), 'value': self.value_layers()}

  def parameter_counts(self) -> dict:
    return {'quantization': self.quantization_parameters(),
            'contextual': self.contextual_parameters(), 'value': self.value_parameters()}

  def build(self, target, *, arithmetic: str = 'auto'):
    """Theorems 2 / 3 as published: ``approximator.build`` (f -> f_bar -> g_bar)."""
    return approximator.build(self, target, arithmetic=arithmetic)
