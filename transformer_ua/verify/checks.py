r"""Per-point properties of the contextual mapping g_c, as pure functions of its outputs.

Yun et al. 2020, Appendix E.3 (Lemma 8, Lemma 10, Lemma 9 end to end) and the
tie-complete map (``yun.stages.contextual_ties``, T1-T3). Every function here is pure jnp
(jit / vmap / shard-able) and returns violation *counts* over a batch of B points; the
grid-pass drivers (``grid_pass``) sum them. A new per-point property is a new entry
here: its name in ``LEMMA8`` (or ``TIES``) and its count in ``lemma8`` (``ties``).

    8.1  L in G~:          q(L)_i != q(L)_j for i != j
    8.3  L in G~:          t_l <= q(L)_j <= t_r for every j
    8.4  L in G+ \ G~:     q(L)_j outside [t_l, t_r] for every j
    lemma10_bounds         L in G~: lower <= l~_n <= upper  (l~_n = max_j l~_j)
    T1_ties_within_point   L in G: q(L)_i = q(L)_j  iff  column i = column j
    T2_inside_interval     L in G: every q(L)_j in [t_l, t_r]
    T3_outside_interval    L in G+ \ G (Category 3): no q(L)_j in [t_l, t_r]
    permutation_equivariance   q(L)_j = q(C)_{pos_j}, C the sorted representative,
                           pos_j = #{i: c_i < c_j} + #{i < j: c_i = c_j}
    lemma9_value_mapping   g_v(g_c(L)) = A_L on G~, 0 elsewhere (compact g_v)

Shapes and values. ``q`` is a list of n per-token values, each [B] in one exact
representation ``cmp`` with ``eq(a, b)`` and ``lt(a, b)`` (elementwise over B):
``exact.ops.ExactOps`` values ([B] int64 or [B, K] limbs) or ``WORDS`` (a list of
int64 arrays [B], most significant first: ``sweep_kernel.words_fn``). Constants
(t_l, t_r, Lemma 10's bounds) are given in the same representation. ``cat`` [B] int32
in {1, 2, 3} (``yun.enumeration``), ``valid`` [B] bool (padding rows are False).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

#: Per-point properties of Lemma 8 / Lemma 10 (``lemma8``).
LEMMA8 = ('8.1_distinct_entries', '8.3_inside_interval', '8.4_outside_interval',
          'lemma10_bounds')
#: Per-point properties of the tie-complete map (``ties``).
TIES = ('T1_ties_within_point', 'T2_inside_interval', 'T3_outside_interval')
#: Per-batch point counts (``categories``), checked against the closed forms.
CATEGORIES = ('category_1', 'category_2', 'category_3', 'points')


class _Words:
  """Comparisons on values given as lists of int64 words, most significant first."""

  @staticmethod
  def eq(a, b):
    return functools.reduce(jnp.logical_and, [x == y for x, y in zip(a, b)])

  @staticmethod
  def lt(a, b):
    """a < b, lexicographic over the words (broadcast)."""
    less, tied = False, True
    for x, y in zip(a, b):
      less = less | (tied & (x < y))
      tied = tied & (x == y)
    return less


WORDS = _Words()


def scaled_constants(cm) -> dict:
  """S t_l, S t_r, S id_lower, S id_upper as Python ints (Lemma 8's interval and the
  bounds on l~_n, ``cm`` scaled by S)."""
  s = cm.scale
  return {'t_l': int(cm.t_l * s), 't_r': int(cm.t_r * s),
          'id_lower': int(cm.id_lower * s), 'id_upper': int(cm.id_upper * s)}


def _inside(cmp, x, lo, hi):
  return ~cmp.lt(x, lo) & ~cmp.lt(hi, x)


def _all_distinct(cmp, q):
  out = True
  for i in range(len(q)):
    for j in range(i + 1, len(q)):
      out = out & ~cmp.eq(q[i], q[j])
  return out


def categories(cat, valid) -> dict:
  """Points per category (1: G~, 2: repeated column, 3: out of range) and in all."""
  out = {f'category_{c}': jnp.sum(valid & (cat == c)) for c in (1, 2, 3)}
  out['points'] = jnp.sum(valid)
  return out


def lemma8(q, cat, valid, *, cmp, t_l, t_r, ltn, l10_cmp, lo, hi,
           category_1_possible: bool = True) -> dict:
  """Violations of 8.1, 8.3, 8.4 and Lemma 10's bounds (``LEMMA8``).

  Args:
    q: n values [B] of q(L) in ``cmp``; t_l, t_r: the interval in ``cmp``.
    ltn: l~_n [B] in ``l10_cmp``; lo, hi: Lemma 10's bounds in ``l10_cmp``.
    category_1_possible: False when G~ is empty (n > N^d): 8.1, 8.3 and Lemma 10 are
      vacuous and not computed.
  """
  inside = [_inside(cmp, x, t_l, t_r) for x in q]
  inside_all = functools.reduce(jnp.logical_and, inside)
  outside_all = functools.reduce(jnp.logical_and, [~x for x in inside])
  cat1 = valid & (cat == 1)
  distinct = _all_distinct(cmp, q) if category_1_possible else True
  l10 = _inside(l10_cmp, ltn, lo, hi) if category_1_possible else True
  return {
      '8.1_distinct_entries': jnp.sum(cat1 & ~distinct),
      '8.3_inside_interval': jnp.sum(cat1 & ~inside_all),
      '8.4_outside_interval': jnp.sum(valid & (cat != 1) & ~outside_all),
      'lemma10_bounds': jnp.sum(cat1 & ~l10),
  }


def ties(q, col, cat, valid, *, cmp, t_l, t_r) -> dict:
  """Violations of T1 (within a point), T2 and T3 (``TIES``); ``col`` [B, n] column
  indices."""
  n = len(q)
  inside = [_inside(cmp, x, t_l, t_r) for x in q]
  in_g = valid & (cat != 3)
  ties_ok = True
  for i in range(n):
    for j in range(i + 1, n):
      ties_ok = ties_ok & (cmp.eq(q[i], q[j]) == (col[:, i] == col[:, j]))
  return {
      'T1_ties_within_point': jnp.sum(in_g & ~ties_ok),
      'T2_inside_interval': jnp.sum(in_g & ~functools.reduce(jnp.logical_and, inside)),
      'T3_outside_interval': jnp.sum(valid & (cat == 3)
                                     & functools.reduce(jnp.logical_or, inside)),
  }


def equivariance(q, pos, ref, valid, *, cmp):
  """Points where q(L)_j != q(C)_{pos_j} for some j: ``ref`` the n values of q(C),
  ``pos`` [n][B] positions. An [n, n] network of compares (no per-token gathers)."""
  n = len(q)
  same = True
  for j in range(n):
    for p in range(n):
      same = same & ((pos[j] != p) | cmp.eq(q[j], ref[p]))
  return jnp.sum(valid & ~same)


def equivariance_aligned(q, ref, valid, *, cmp):
  """Points where q(L)_j != r_j for some j: ``ref`` [n] the values r_j = q(C)_{pos_j}
  already read at each token's sorted position (a class table gathered per token)."""
  same = True
  for q_j, r_j in zip(q, ref, strict=True):
    same = same & cmp.eq(q_j, r_j)
  return jnp.sum(valid & ~same)


def lemma9(vm, ops, codec, class_codec, k, z, cat, valid):
  """Lemma 9 end to end: g_v(g_c(L)) = A_L on G~, 0 elsewhere (compact g_v, exact).

  k [B, n, d] grid indices, z [B, n, d(, K)] = g_c(L) in ``ops``; ``codec`` /
  ``class_codec``: ``yun.enumeration.make_codec`` / ``make_class_codec``."""
  out = vm.compact_fn()(z)
  if vm.num_classes == 0:  # G~ empty: g_v must be 0 everywhere
    same = jnp.all(ops.eq(out, jnp.zeros_like(out)), axis=(-2, -1))
    return jnp.sum(valid & ~same)
  perm = codec['canonical_order'](k)
  k_sorted = jnp.take_along_axis(k, perm[..., None], axis=1)
  rank = jnp.where(cat == 1, class_codec['rank'](k_sorted), 0)
  a = vm.targets_scaled[rank]                      # [B, n, d(, K)], sorted columns
  inv = jnp.argsort(perm, axis=-1)
  idx = inv[:, :, None, None] if ops.limbs else inv[:, :, None]
  a = jnp.take_along_axis(a, idx, axis=1)          # output column j <- sorted inv[j]
  expected = ops.where((cat == 1)[:, None, None], a, jnp.zeros_like(a))
  same = jnp.all(ops.eq(out, expected), axis=(-2, -1))
  return jnp.sum(valid & ~same)


def count_duplicates(ops, values: np.ndarray, owners: np.ndarray) -> int:
  """Host check of 8.2 / Lemma 10 one-to-one / T1: adjacent equal values (after
  sorting) that belong to different owners. values [M(, K)], owners [M]."""
  if len(values) < 2:
    return 0
  order = ops.sort_keys(values)
  same = ops.host_equal_adjacent(values[order])
  diff_owner = owners[order][1:] != owners[order][:-1]
  return int(np.sum(same & diff_owner))
