r"""g_bar's parameters as exact rationals (the input of an exact Lemma 6 realization).

Yun et al. 2020, Appendices E and G. Every parameter of g_bar = g_v o g_c o g_q is a
rational number: grid values k/N, thresholds l -+ delta/2, the out-of-range value
-N^(nd), the sweep and global-shift weights (or, for ``ties='complete'``, the offset
delta e_1, the sweep with shift V + 2n and the min / max+count heads' C3, C1, n C2 and
query biases -1, +1, 0: ``yun.stages.contextual_ties``), Lemma 8's t_l, t_r, the kill constant M,
the bump centres q_cj and the bump weights A_cj - g_c(L_c)_j with A = f(C_L) (a float64
target value, itself an exact dyadic rational). ``GBar.float_params`` rounds them to
float64; ``exact_params`` below returns the same pytree with NumPy object arrays of
Python ints and ``fractions.Fraction``s, built from the exact (scaled-integer) forms
the builders already have:

    scaled form (scale S):  every value v is carried as the integer S v.
    g_q, g_c:  weights (W_1, W_2, slopes; W_Q, W_K, W_V, W_O) are not scaled,
               biases, breakpoints and intercepts are:  b -> b_S / S.
               Exception: the tie-complete offset unit outputs the unscaled constant
               phi_1(0) = 1 and carries S in W_2 = S delta e_1 (``OFFSET_SCALED_LEAVES``).
    g_v:       from the construction's exact quantities (t_l, t_r, M, the exact
               g_c outputs of the class representatives, the sorted centres).

Shapes are those of ``GBar.float_params`` ([L, ...] stacked per segment, ``E [n, d]``).
"""

from __future__ import annotations

from fractions import Fraction

import jax
import numpy as np

from transformer_ua.yun.stages import quantize, value

#: Leaves of a scaled-integer layer that carry the scale S (divided out here).
SCALED_LEAVES = ('b_1', 'b_2', 'b_Q', 'breaks', 'intercepts')
#: The same for the tie-complete offset layer Z <- Z + delta e_1 phi_1(0 . Z): its Phi
#: outputs the constant 1 unscaled, so S sits in W_2 (= S/N e_1), not in the intercepts.
OFFSET_SCALED_LEAVES = ('b_1', 'b_2', 'breaks', 'W_2')


def _obj(a) -> np.ndarray:
  """Array of ints (any integer dtype or object) -> object array of Python ints."""
  a = np.asarray(a)
  if a.dtype == bool:
    return a
  return np.vectorize(int, otypes=[object])(a) if a.size else a.astype(object)


def _unscale(tree, scale: int, scaled_leaves=SCALED_LEAVES):
  """Scaled-integer params -> exact rationals: ``scaled_leaves`` / S, the rest as ints."""
  def fix(path, leaf):
    leaf = _obj(leaf)
    if leaf.dtype == bool:
      return leaf
    name = getattr(path[-1], 'key', None)
    if name in scaled_leaves:
      return np.vectorize(lambda v: _canon(Fraction(int(v), scale)), otypes=[object])(leaf)
    return leaf
  return jax.tree_util.tree_map_with_path(fix, tree)


def _canon(v):
  """A Fraction with denominator 1 becomes an int (keeps exact arrays light)."""
  v = Fraction(v)
  return int(v) if v.denominator == 1 else v


def quantization_exact(gb) -> dict:
  """g_q's segment params, exact (the variant's scaled integers at S = 2N, unscaled)."""
  S = 2 * gb.quantization.resolution
  return _unscale(gb.variant.quantization_int_params(S), S)


def contextual_exact(gb) -> list[dict]:
  """g_c's segment params, exact, one per ``gb.contextual.segments``: (sweep, global
  shift) for Lemma 8; (offset, sweep, global min, global max+count) for
  ``ties='complete'``."""
  cm = gb.contextual
  scaled = jax.tree_util.tree_map(np.asarray, gb.variant.contextual_object_params(cm))
  return [_unscale(scaled[f'segment_{i}'], cm.scale,
                   OFFSET_SCALED_LEAVES if seg.name == 'offset' else SCALED_LEAVES)
          for i, seg in enumerate(cm.segments)]


def value_exact(gb, values) -> list[dict]:
  """g_v's segment params (kill and clean-up, bumps), exact, with A = ``values``."""
  vm, cm = gb.value, gb.contextual
  d, N, S = cm.d, cm.resolution, cm.scale
  kc = value.kill_clean_params(d, cm.t_l, cm.t_r, vm.kill_bound + 1, list(cm.u), Fraction(1))
  out = [{'feedforward': kc}]
  owner = np.asarray(vm.center_owner)
  p = owner.shape[0]
  if not p:
    return out
  to_q = np.vectorize(lambda v: _canon(Fraction(int(v), S)), otypes=[object])
  centers = to_q(cm.ops.to_python(np.asarray(vm.centers)))              # [P]
  rep_z = to_q(cm.ops.to_python(np.asarray(vm.rep_z)))                  # [C, n, d]
  a = np.vectorize(lambda v: _canon(Fraction(float(v))), otypes=[object])(
      np.asarray(values, np.float64))                               # [C, n, d]
  if a.shape != rep_z.shape:
    raise ValueError(f'values must have shape {rep_z.shape}, got {a.shape}.')
  w2 = (a - rep_z).reshape(-1, d)[owner]                            # [P, d]
  half = Fraction(1, 2 * N)
  full = lambda shape, v: np.full(shape, v, object)  # noqa: E731
  w1 = np.empty((p, 1, d), object)
  w1[...] = np.asarray(cm.u, object)
  out.append({'feedforward': {
      'W_1': w1, 'b_1': (-centers)[:, None], 'W_2': w2[:, :, None], 'b_2': full((p, d), 0),
      'phi': {'breaks': np.tile(np.asarray([-half, half], object), (p, 1, 1)),
              'slopes': full((p, 1, 3), 0),
              'intercepts': np.tile(np.asarray([0, 1, 0], object), (p, 1, 1)),
              'left_closed': np.zeros((p, 1, 2), bool)}}})
  return out


def exact_params(gb, values) -> dict:
  """The params pytree of ``gb.float_params(values)`` with exact rational leaves.

  Args:
    gb: a ``pipeline.GBar``.
    values: real target values A [C, n, d] (float64; taken exactly).
  """
  parts = [quantization_exact(gb), *contextual_exact(gb), *value_exact(gb, values)]
  out = {f'segment_{i}': p for i, p in enumerate(parts)}
  if 'E' in gb.quantization.params:   # Theorem 3's positional encoding (integers)
    out['E'] = _obj(quantize.positional_encoding(gb.quantization.d, gb.quantization.n,
                                                 np.int64))
  return out
