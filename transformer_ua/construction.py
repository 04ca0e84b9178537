r"""The one contract every construction object answers (Yun et al., Fang et al., one-layer).

A *construction* is a network built from a theorem's proof (no training): the Yun et
al. stages g_q, g_c, g_v and their composition g_bar = g_v o g_c o g_q, the Lemma 6
realization g, the one-softmax-layer g_bar, Fang et al.'s C^q. Each answers:

    apply(x)          -> np.ndarray float64      the function the theorem is about,
                                                 computed the reliable way (exact where
                                                 the object has an exact path)
    apply_exact(x)    -> np.ndarray of Fraction  the same function in exact rationals,
                                                 shaped like apply(x)
    network()         -> flax.linen.Module       the literal network (layer by layer)
    float_params()    -> pytree                  its float64 params: the literal float
                                                 network is always
                                                 network().apply({'params': float_params()}, x)
    depth()           -> int                     layers (blocks) of network()
    layer_counts()    -> {stage: {kind: int}}    the same layers by stage and kind;
                                                 sum of every entry == depth()
    num_params()      -> int                     weight entries of float_params()
                                                 (``layers.count_params``: Phi activation
                                                 descriptors are not weights)

Why ``float_params`` and not ``params``: on several objects ``params`` is (and stays) a
data attribute holding the pytree, read by the verifiers, the realizer and the
certifier; the method has its own name so that both exist.

``apply_exact`` on a function that is not rational-valued (a softmax realization g:
exp is transcendental) returns the rational centre of a certified enclosure and the
object says so in its docstring; everywhere else it is the exact value.

Shapes are the object's own (Yun: X [batch, n, d] token-major; Fang: x [..., d] ->
[...]). Kinds are ``layers.Segment`` kinds: 'attention', 'feedforward', 'block'.

This module imports nothing from the constructions (they import it, or nothing: the
contract is structural, ``typing.Protocol``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

import numpy as np

from transformer_ua import layers

#: The methods of the contract, in the order of the module docstring.
METHODS = ('apply', 'apply_exact', 'network', 'float_params', 'depth', 'layer_counts',
           'num_params')


@runtime_checkable
class Construction(Protocol):
  """Structural type of a construction object (see the module docstring)."""

  def apply(self, x) -> np.ndarray:
    """The function the theorem is about, float64, shaped as the object documents."""

  def apply_exact(self, x) -> np.ndarray:
    """``apply`` in exact rationals: an object array of ``fractions.Fraction``."""

  def network(self) -> Any:
    """The literal network, a ``flax.linen.Module``."""

  def float_params(self) -> Any:
    """The literal network's float64 params pytree."""

  def depth(self) -> int:
    """Layers (blocks) of ``network()``."""

  def layer_counts(self) -> dict:
    """{stage: {kind: layers}}; the entries sum to ``depth()``."""

  def num_params(self) -> int:
    """Weight entries of ``float_params()`` (``layers.count_params``)."""


def stage_counts(layer_counts: dict) -> dict:
  """{stage: {kind: k}} -> {stage: sum_k k} (layers per stage, every kind)."""
  return {stage: sum(kinds.values()) for stage, kinds in layer_counts.items()}


def kind_counts(layer_counts: dict) -> dict:
  """{stage: {kind: k}} -> {kind: sum over stages} (layers per kind)."""
  out = {}
  for kinds in layer_counts.values():
    for kind, k in kinds.items():
      out[kind] = out.get(kind, 0) + k
  return out


def total(layer_counts: dict) -> int:
  """Sum of every entry of a ``layer_counts()`` dict."""
  return sum(stage_counts(layer_counts).values())


def segment_counts(segments, stage: str) -> dict:
  """{stage: {kind: layers}} of ``layers.Segment`` s (kinds with no layer omitted)."""
  kinds = {}
  for seg in segments:
    if seg.depth:
      kinds[seg.kind] = kinds.get(seg.kind, 0) + seg.depth
  return {stage: kinds}


def merge_counts(*parts: dict) -> dict:
  """Several ``layer_counts`` dicts as one (stages in order; equal stages added)."""
  out = {}
  for part in parts:
    for stage, kinds in part.items():
      into = out.setdefault(stage, {})
      for kind, k in kinds.items():
        into[kind] = into.get(kind, 0) + k
  return out


def network_depth(network) -> int:
  """Layers of a network with ``segments`` (``modules.Network`` or a module exposing
  its ``layers.Segment`` s the same way)."""
  return sum(int(s.depth) for s in network.segments)


def to_fractions(a) -> np.ndarray:
  """An array of floats / ints / Fractions as an object array of Fractions (floats taken
  exactly; NaN and inf refused by ``Fraction``)."""
  return np.vectorize(Fraction, otypes=[object])(np.asarray(a, dtype=object)) \
      if np.size(a) else np.asarray(a, dtype=object)


def check(obj, x, *, atol: float = 0.0, rtol: float = 0.0) -> dict:
  """Runs ``obj`` through the contract on input ``x``; returns what it measured.

  Checks: every method exists; depth() and num_params() are ints; layer_counts() is
  {str: {str: int}} with entries summing to depth(); depth() is the number of layers of
  network(); num_params() == layers.count_params(float_params()); apply(x) is float64
  and apply_exact(x) an object array of Fractions of the same shape, equal within
  ``atol + rtol |exact|`` (0: equal after rounding the exact value to float64).

  Raises:
    AssertionError: saying which part of the contract fails.
  """
  missing = [m for m in METHODS if not callable(getattr(obj, m, None))]
  assert not missing, f'{type(obj).__name__} lacks {missing}'
  depth = obj.depth()
  assert isinstance(depth, int) and not isinstance(depth, bool), \
      f'depth() must be an int, got {depth!r}'
  counts = obj.layer_counts()
  assert isinstance(counts, dict) and all(
      isinstance(s, str) and isinstance(k, dict)
      and all(isinstance(kk, str) and isinstance(v, int) for kk, v in k.items())
      for s, k in counts.items()), f'layer_counts() must be {{stage: {{kind: int}}}}: {counts}'
  assert total(counts) == depth, f'layer_counts() sums to {total(counts)}, depth() {depth}'
  assert network_depth(obj.network()) == depth, \
      f'network() has {network_depth(obj.network())} layers, depth() {depth}'
  n_params = obj.num_params()
  assert isinstance(n_params, int) and not isinstance(n_params, bool)
  counted = layers.count_params(obj.float_params())
  assert n_params == counted, f'num_params() {n_params} != count of float_params() {counted}'
  y = obj.apply(x)
  assert isinstance(y, np.ndarray) and y.dtype == np.float64, \
      f'apply() must return float64 numpy, got {type(y).__name__} {getattr(y, "dtype", "")}'
  e = obj.apply_exact(x)
  assert isinstance(e, np.ndarray) and e.dtype == object and e.shape == y.shape, \
      f'apply_exact() must be an object array shaped {y.shape}'
  assert all(isinstance(v, Fraction) for v in e.flat), 'apply_exact() entries must be Fractions'
  ef = np.asarray([float(v) for v in e.flat], np.float64).reshape(e.shape)
  err = np.abs(y - ef)
  assert np.all(err <= atol + rtol * np.abs(ef)), \
      f'apply and apply_exact differ by up to {float(np.max(err)) if err.size else 0:g}'
  return {'depth': depth, 'layer_counts': counts, 'num_params': n_params,
          'max_abs_difference': float(np.max(err)) if err.size else 0.0}
