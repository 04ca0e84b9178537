r"""Lemma 6's exact quantities: g_c simulated on column ids, every grid class, exactly.

Yun et al. 2020, Appendix E.3 (g_c, Lemma 8) and Appendix F (Lemma 6, which needs the
score gaps and sizes below); ``ties='complete'``: ``yun.stages.contextual_ties``. Every layer
of g_c reads Z through u^T (u = (1, N, ..., N^(d-1))) and writes along e_1 (u_1 = 1),
so it acts on the column ids id_j = u^T Z_j alone (``id_layers``, read from the exact
params; one code path for Lemma 8 and the tie-complete map):

    attention, heads (a, b, k, v, o):   id_j += sum_h o_h v_h sel_h(j)
        sel_h(j) = hardmax_k of s_jk = (a id_j + b) k id_k   (a = b = 0: the mean)
    feed-forward, units (a, b, Phi, o): id_j += sum_r o_r Phi_r(a_r id_j + b_r) + u^T b_2

``simulate`` runs every grid class (``grid_classes``: Theorem 2 one multiset
representative per class, Theorem 3 every cube) through these maps in exact rationals
and records, per class (shapes: K [C, n, d], ids [C][n] Fractions):

    gap        = min over layers, heads, queries j of s_top - s_next
    max_score  = max |query| max |key|;   max_id = max |id| anywhere in g_c
    shifts     = selective shifts of the class
    K_class    = prod over attention layers (1 + R sum_h |o_h|)^e
                 x prod over feed-forward layers (1 + R sum_r |o_r a_r| max|slope_r|)
    clearances of g_c's Phi pre-activations to their breakpoints

and checks the final ids against g_c's exact evaluation (``gc_kernels.evaluate``).
``yun.realization.plan`` turns these into lam, epsilon and the working precision.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import activations
from transformer_ua.yun.stages import gc_kernels
from transformer_ua.yun.realization import rational



def grid_classes(net) -> np.ndarray:
  """Grid indices K [C, n, d] of every cube up to what the theorem needs.

  Theorem 2: one representative per multiset of n cells (columns sorted by cell),
  repeated cells included (g and g_bar are permutation equivariant). Theorem 3: every
  one of the N^(dn) cubes (the variant's ``grid_classes``, ``yun.variants``).
  """
  return net.variant.grid_classes()


def _select(ids, c):
  """Hardmax of s_k = c ids_k (one query, c = query * key weight): selected id, and the
  top - next id gap (None when every key ties with the top)."""
  if c > 0:
    top = max(ids)
    rest = [v for v in ids if v != top]
    return top, (top - max(rest)) if rest else None
  if c < 0:
    top = min(ids)
    rest = [v for v in ids if v != top]
    return top, (min(rest) - top) if rest else None
  return Fraction(sum(ids), len(ids)), None


def _multiple_of(row, u, what: str) -> Fraction:
  """a with row = a u (exactly), or ValueError: every g_c projection reads u^T Z."""
  a = Fraction(row[0]) / u[0]
  if any(Fraction(r) != a * ui for r, ui in zip(row, u)):
    raise ValueError(f'{what} is not a multiple of u^T; the id simulation models g_c layers '
                     'that read u^T Z only.')
  return a


def id_layers(net) -> list[tuple]:
  """g_c's layers as maps on the column ids id_j = u^T Z_j, from the exact params.

  Every g_c layer reads Z through u^T and writes along e_1 (u_1 = 1), so it acts on the
  ids alone:

    ('attention', heads):  id_j += sum_h o_h v_h sel_h(j),  heads (a, b, k, v, o):
        query a id_j + b, key k id_k, value v id_k, o = u^T W_O; sel_h(j) = hardmax of
        s_jk = (a id_j + b) k id_k (a = 0, b = 0: every score ties, the mean)
    ('feedforward', units): id_j += sum_r o_r phi_r(a_r id_j + b_r) + u^T b_2,
        units (a, b, Phi, o, max |slope|), o = u^T W_2[:, r]

  Returns one entry per layer, in order: (segment name, kind, heads or units).
  """
  cm = net.g_bar.contextual
  u = [Fraction(v) for v in cm.u]
  out = []
  for seg, p in zip(cm.segments, rational.contextual_exact(net.g_bar)):
    for layer in range(seg.depth):
      if seg.kind == 'attention':
        att = {k: np.asarray(v)[layer] for k, v in p['attention'].items()}
        heads = []
        for h in range(att['W_Q'].shape[0]):
          heads.append((_multiple_of(att['W_Q'][h, 0], u, 'W_Q'), Fraction(att['b_Q'][h, 0]),
                        _multiple_of(att['W_K'][h, 0], u, 'W_K'),
                        _multiple_of(att['W_V'][h, 0], u, 'W_V'),
                        sum(Fraction(w) * ui for w, ui in zip(att['W_O'][h, :, 0], u))))
        out.append((seg.name, 'attention', heads))
      else:
        ff = {k: v for k, v in p['feedforward'].items() if k != 'phi'}
        ff = {k: np.asarray(v)[layer] for k, v in ff.items()}
        phi = {k: np.asarray(v)[layer] for k, v in p['feedforward']['phi'].items()}
        units = []
        for r in range(ff['W_1'].shape[0]):
          f = activations.Phi(tuple(phi['breaks'][r]),
                              tuple(zip(phi['slopes'][r], phi['intercepts'][r])),
                              tuple(bool(c) for c in phi['left_closed'][r]))
          units.append((_multiple_of(ff['W_1'][r], u, 'W_1'), Fraction(ff['b_1'][r]), f,
                        sum(Fraction(w) * ui for w, ui in zip(ff['W_2'][:, r], u)),
                        max(abs(Fraction(a)) for a, _ in f.pieces)))
        const = sum(Fraction(b) * ui for b, ui in zip(ff['b_2'], u))
        out.append((seg.name, 'feedforward', (units, const)))
  return out


@functools.lru_cache(maxsize=16)
def simulate(net) -> dict:
  """Ids of every grid class through every layer of g_c (``id_layers``), exactly.

  Per class: the hardmax score gaps, |scores|, largest |id|, the pre-activation
  clearances of g_c's Phi units, and the error amplification of the layers,

    K_class = prod over attention layers of (1 + R sum_h |o_h|)^e,
              e = number of tokens shifted when the heads' o_h sum to 0 (a selective
              shift: where both heads select the same id the layer is the identity),
              e = 1 otherwise (a global layer);
    times prod over feed-forward layers of (1 + R sum_r |o_r a_r| max|slope_r|).

  Heads whose scores tie exactly on every class (a = b = 0: the counting head) are
  exact in softmax too (weights 1/n whatever lam): they contribute no score gap and
  are reported as ``tied_heads``.

  Returns (Fractions, real units): 'gap' (smallest top-vs-next score gap), 'max_score',
  'max_id' (largest |id| anywhere in g_c), 'shifts' (largest number of selective
  shifts of one class), 'amplification' (max_class K_class), 'max_weight' (largest
  |o_h| of a head with score gaps), 'attention_layers', 'heads', 'tied_heads',
  'clearance' ({segment name: smallest distance of a g_c Phi pre-activation to a
  breakpoint}), 'ids' [C][n] (final ids q), 'classes' K [C, n, d].
  Raises RuntimeError if the final ids differ from g_c's exact evaluation (the
  registry's default kernel, ``gc_kernels.evaluate``).
  """
  cm = net.g_bar.contextual
  n = cm.n
  R = sum(cm.u)
  k = grid_classes(net)
  with jax.enable_x64(True):   # the input ids u^T Z_j of the encoded grid points
    ids_all = cm.to_fractions(cm.ops.dot_const(cm.encode(jnp.asarray(k)), cm.u))  # [C, n]
  layers = id_layers(net)
  att = [heads for _, kind, heads in layers if kind == 'attention']
  tied_heads = sum(1 for heads in att for a, b, *_ in heads if a == 0 and b == 0)
  max_weight = max((abs(o) for heads in att for a, b, _, _, o in heads
                    if not (a == 0 and b == 0)), default=Fraction(0))
  gap, max_score, max_id, max_shifts, amp = None, Fraction(0), Fraction(0), 0, Fraction(1)
  clearance = {}
  finals = []
  for row in ids_all:
    ids = [Fraction(v) for v in row]
    shifts, k_class = 0, Fraction(1)
    for name, kind, spec in layers:
      if kind == 'feedforward':
        units, const = spec
        upd = [const] * n
        for a, b, f, o, slope in units:
          ts = [a * v + b for v in ids]
          for t in ts:
            dist = min(abs(t - br) for br in f.breaks) if f.breaks else None
            if dist is not None:
              clearance[name] = min(clearance.get(name, dist), dist)
          upd = [x + o * Fraction(f(t)) for x, t in zip(upd, ts)]
          k_class *= 1 + R * abs(o * a) * slope
        ids = [v + x for v, x in zip(ids, upd)]
      else:
        upd = [Fraction(0)] * n
        for a, b, kw, v, o in spec:
          for j in range(n):
            q = a * ids[j] + b
            sel, g = _select(ids, q * kw)
            upd[j] += o * v * sel
            max_score = max(max_score, abs(q * kw) * max(abs(x) for x in ids))
            if g is not None:
              gap = abs(q * kw) * g if gap is None else min(gap, abs(q * kw) * g)
        gain = 1 + R * sum(abs(o) for *_, o in spec)
        if sum(o for *_, o in spec) == 0:       # selective shift
          fired = sum(1 for x in upd if x != 0)
          shifts += fired
          k_class *= gain ** fired
        else:
          k_class *= gain
        ids = [x + y for x, y in zip(ids, upd)]
      max_id = max(max_id, max(abs(x) for x in ids))
    max_shifts = max(max_shifts, shifts)
    amp = max(amp, k_class)
    finals.append(ids)
  out = gc_kernels.evaluate(cm, k)
  if int(out.inexact):
    raise RuntimeError('an inexact hardmax tie average in the exact evaluation of g_c.')
  exact = cm.ops.to_python(np.asarray(out.ids))
  if any(Fraction(int(a), cm.scale) != b for ra, rb in zip(exact, finals)
         for a, b in zip(ra, rb)):
    raise RuntimeError('the id simulation disagrees with the exact evaluation of g_c.')
  return {'gap': gap, 'max_score': max_score, 'max_id': max_id, 'shifts': max_shifts,
          'amplification': amp, 'max_weight': max_weight, 'attention_layers': len(att),
          'heads': max((len(h) for h in att), default=0), 'tied_heads': tied_heads,
          'clearance': clearance, 'ids': finals, 'classes': k}
