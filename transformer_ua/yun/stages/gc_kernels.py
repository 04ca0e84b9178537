r"""Lemma 8's g_c evaluated exactly: one registry of kernels, one result type.

Yun et al. 2020, Appendix E.3 (Lemma 8; ``ties='complete'``: ``yun.stages.contextual_ties``).
A *kernel* evaluates the built g_c (a ``ContextualMapping``) on grid indices in its
exact integer arithmetic (scaled by S, int64 or limbs as planned) and returns

    GcResult(sweep_ids, ids, z, inexact)
      sweep_ids [B, n(, K)]   l~ = u^T of the sweep segment's output
      ids       [B, n(, K)]   q(L) = u^T g_c(L)             (u = (1, N, ..., N^(d-1)))
      z         [B, n, d(, K)] g_c(L), scaled
      inexact   int scalar    inexact hardmax tie averages (0 for the constructions)

for grid indices K [B, n, d] in {-1, 0, ..., N-1}. Every kernel computes the same
integers (tested on whole grids); they differ in how:

    'core'   the core's layers (``layers.apply_segment``, exact int64 mode, rank-one
             fast path) or, beyond int64, the generic limb layers;
    'fast'   the shared-projection identity (W_Q = W_K = W_V in every head, checked on
             the params): one projection, no tie division
             (``int64.int64_apply_segment`` / ``limb_layers`` with ``shared_qkv``);
    'sweep'  column ids alone (``yun.stages.sweep``: a max, a min, two compares and a select
             per layer; registered there, Theorem 2 / 3 maps only).

A kernel is ``builder(cm) -> f(params, k) -> GcResult``, pure (jit / vmap-able, call
under ``jax.enable_x64``); ``register`` adds one under a name. ``kernel_fn(cm, name)``
looks one up, ``evaluate(cm, k, name)`` validates K and runs it jitted (cached per map
and kernel).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Callable

import jax
import jax.numpy as jnp

from transformer_ua import layers
from transformer_ua.exact import int64, limb_layers, limbs

#: name -> builder(cm) -> f(params, k) -> GcResult, in registration order.
KERNELS: dict[str, Callable] = {}
#: The default kernel: the literal layers, as the paper writes them.
DEFAULT = 'core'


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GcResult:
  """g_c on a batch of grid points, in the mapping's arithmetic (module docstring).

  Attributes:
    sweep_ids: [B, n] int or [B, n, K] limbs: l~, u^T of the sweep's output.
    ids: [B, n(, K)]: q(L) = u^T g_c(L).
    z: [B, n, d(, K)]: g_c(L).
    inexact: int scalar: inexact hardmax tie averages (must be 0).
  """

  sweep_ids: Any
  ids: Any
  z: Any
  inexact: Any

  def as_dict(self) -> dict:
    return {'sweep_ids': self.sweep_ids, 'ids': self.ids, 'z': self.z,
            'inexact': self.inexact}

  def __getitem__(self, key: str):
    """``result['ids']``: the dict access of ``ContextualMapping.forward``'s output."""
    return getattr(self, key)


def register(name: str):
  """Decorator: ``@register('name')`` on ``builder(cm) -> f(params, k) -> GcResult``."""
  def add(builder):
    if name in KERNELS:
      raise ValueError(f'g_c kernel {name!r} is registered twice.')
    KERNELS[name] = builder
    return builder
  return add


def kernel_fn(cm, kernel: str = DEFAULT) -> Callable:
  """``f(params, k [B, n, d]) -> GcResult`` of g_c by ``kernel`` (call under x64)."""
  if kernel not in KERNELS:
    raise ValueError(f'kernel={kernel!r}; allowed: {tuple(KERNELS)}.')
  return KERNELS[kernel](cm)


_JITTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def evaluate(cm, k, kernel: str = DEFAULT) -> GcResult:
  """Runs g_c exactly on grid indices K [B, n, d] (validated by ``cm.check_indices``)."""
  k = cm.check_indices(k)
  cache = _JITTED.setdefault(cm, {})
  if kernel not in cache:
    cache[kernel] = jax.jit(kernel_fn(cm, kernel))
  with jax.enable_x64(True):
    return cache[kernel](cm.exact_params, jnp.asarray(k))


# ---------------------------------------------------------------------------
# The literal kernels: g_c's layers, segment by segment.
# ---------------------------------------------------------------------------


def _literal(cm, shared_projection: bool):
  """The layers of ``cm.segments`` on ``cm.encode(k)``; with ``shared_projection``
  the attention segments whose params have W_Q = W_K = W_V run the shared-projection
  update."""
  segs = cm.segments
  shared = [shared_projection and seg.kind == 'attention' and
            limbs.shared_projections(cm.exact_params[f'segment_{i}']['attention'])
            for i, seg in enumerate(segs)]

  def run(seg, params, x, shared_qkv):
    if cm.limbs:
      return limb_layers.limb_apply_segment(seg, params, x, cm.arithmetic.spec,
                                            shared_qkv=shared_qkv)
    if shared_qkv:
      return int64.int64_apply_segment(seg, params, x)
    return layers.apply_segment(seg, params, x)

  def f(params, k) -> GcResult:
    y = cm.encode(k)
    inexact, swept = 0, None
    for i, seg in enumerate(segs):
      y, _, ie = run(seg, params[f'segment_{i}'], y, shared[i])
      inexact = inexact + jnp.sum(ie)
      if i == cm.sweep_index:
        swept = cm.ops.dot_const(y, cm.u)  # u^T Z per token: [.., n] or [.., n, K]
    return GcResult(sweep_ids=swept, ids=cm.ops.dot_const(y, cm.u), z=y, inexact=inexact)

  return f


@register('core')
def core(cm):
  """The core's layers (exact int64 mode) or the generic limb layers."""
  return _literal(cm, shared_projection=False)


@register('fast')
def fast(cm):
  """The literal layers with the shared-projection identity where the params allow it."""
  return _literal(cm, shared_projection=True)
