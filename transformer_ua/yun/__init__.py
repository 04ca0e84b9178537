"""Yun et al. (2020): the Theorem 2 construction g_bar = g_v o g_c o g_q, compiled.

* ``quantize``   -- Lemma 7: d/delta + d feed-forward layers quantizing to G+_delta.
* ``contextual`` -- Lemma 8 / 10: delta^-d + 1 selective-shift attention layers.
* ``contextual_ties`` -- ``ties='complete'``: a contextual mapping that also counts
  multiplicities (delta^-d + 3 layers), so Theorem 2 needs no bad set.
* ``value``      -- Lemma 9: n C(delta^-d, n) + d + 1 feed-forward layers.
* ``grid``       -- Grid(d, n, N) and the variants (Paper, Positional, TiesComplete,
  OneLayer): counts, classes, intervals, builders; chosen once by the builders below.
* ``gc_kernels`` -- the one registry of g_c evaluators ('core', 'fast', 'sweep' from
  ``sweep``), each returning a ``GcResult``; ``ids``: the id simulation through them.
* ``pipeline``   -- the composed g_bar and its exact evaluation.
* ``approximator`` -- Theorems 2 and 3 end to end: target -> f_bar -> g_bar -> g
  (Lemma 6 realization); ``decomposition``: the error decomposition.
* ``one_layer`` (``one_layer_ids``, ``one_layer_realized``) -- one softmax attention layer
  as g_c: its plan and certified ids, its realization.
* ``rational``   -- g_bar's params as exact rationals (input of dtype='exact').
* ``plan``       -- Lemma 6 at scale: lam, epsilon, bits from exact bounds.
* ``certify``    -- certified evaluation of a realized g (arb balls, ``exact.ball``): points,
  every cube interior, the whole unit cube.
* ``certificate`` -- Theorems 2 and 3 as a certificate: ``certify_lp`` bounds d_p(f, g)
  over the whole domain (``target_bounds``: the built-ins' moduli of continuity).
* ``search``     -- the theorem as a call: ``approximate(f, epsilon)`` picks the
  construction (``CONSTRUCTIONS``) and N, estimates size and time before building, and
  returns g with a proof of d_p(f, g) <= epsilon.

Every construction answers ``transformer_ua.construction``'s contract. Builders are pure
keyword-argument functions returning ``(segments, params)`` for
``layers.Network`` (or objects holding them with exact evaluation methods).
"""

from transformer_ua.yun.bounds.certificate import Certificate, certify_lp
from transformer_ua.yun.bounds.decomposition import error_decomposition
from transformer_ua.yun.grid import Grid
from transformer_ua.yun.realization.plan import plan_realization
from transformer_ua.yun.search import Approximation, approximate
from transformer_ua.yun.variants.registry import VARIANTS, build_approximator

__all__ = [
    'Grid', 'VARIANTS', 'approximate', 'Approximation', 'build_approximator',
    'plan_realization', 'certify_lp', 'Certificate', 'error_decomposition',
]
