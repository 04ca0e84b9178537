"""Yun et al. (2020), Theorems 2 and 3 as code: f -> f_bar -> g_bar -> g, certified.

The pipeline of the proof, one sub-package per role:

    grid.py        Grid(d, n, N): delta = 1/N, G_delta = {0, delta, .., 1 - delta}^{d x n}
    stages/        g_bar = g_v o g_c o g_q: Lemma 4 (targets), 7 (quantize), 8 / 10
                   (contextual, contextual_params, contextual_positional, contextual_ties,
                   gc_kernels, sweep), 9 (value); pipeline composes them
    variants/      one object per construction on a Grid, decided once (registry.choose /
                   VARIANTS): what differs between them, its size before building, build
    single_attention/  one softmax attention layer as g_c: ids, deep and wide g
    realization/   Lemma 6 at scale: exact rationals, the plan (lam, epsilon, bits), ids
                   through g, certified evaluation in arb balls
    bounds/        the certificate d_p(f, g) <= d_p(f, f_bar) + bad set + interiors +
                   windows, each term proved
    approximator.py  the Lemma 7-9 approximator (g_bar of a staged variant) and its g
    search.py      ``approximate(f, epsilon)``: N and the variant with the fewest
                   parameters whose certificate holds, sizes and times before building

The public face, all a caller needs for the theorem as a call:

    approximate(f, epsilon, d=, n=)      -> Approximation (g, its certificate)
    build_approximator(f, d=, n=, resolution=, positional=, ties=, contextual=)
                                         -> the approximator of one variant (flags decided
                                            here, once)
    VARIANTS[name](Grid(d, n, N)).build(f) -> the same, by name
    plan_realization(net, tolerance)     -> lam, epsilon, bits for net.realize
    certify_lp(net, g, p)                -> Certificate: d_p(f, g) <= total, proved
    error_decomposition(net, g, p)       -> the terms, sampled

What ``approximate`` returns is saved, loaded and re-checked by the certifier's calls
(``transformer_ua.certify``: save, load, recheck), as any certified network is.
"""

import importlib

#: Where each public name lives, imported on first use: ``yun.grid`` and the stages load
#: without the certificate stack.
_HOMES = {'Certificate': 'yun.bounds.certificate', 'certify_lp': 'yun.bounds.certificate',
          'error_decomposition': 'yun.bounds.decomposition', 'Grid': 'yun.grid',
          'plan_realization': 'yun.realization.plan', 'Approximation': 'yun.search',
          'approximate': 'yun.search', 'VARIANTS': 'yun.variants.registry',
          'build_approximator': 'yun.variants.registry'}

__all__ = [
    'Grid', 'VARIANTS', 'approximate', 'Approximation', 'build_approximator',
    'plan_realization', 'certify_lp', 'Certificate', 'error_decomposition',
]


def __getattr__(name: str):
  if name not in _HOMES:
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  return getattr(importlib.import_module(f'transformer_ua.{_HOMES[name]}'), name)
