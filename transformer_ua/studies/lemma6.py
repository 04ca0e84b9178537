r"""Lemma 6 measured: the error of the 4-ReLU and softmax realizations.

Yun et al. (2020), Lemma 6: a modified Transformer (activations in the class Phi,
hardmax attention) is approximated by a standard one (ReLU, softmax):

  * each phi in Phi equals, outside ramp windows of width epsilon at its breakpoints,
    a sum of four ReLUs (``activations.relu_expansion(phi, epsilon)``); on [-5, 5]

        L1(epsilon) = int_{-5}^{5} |relu_expansion(phi, epsilon)(t) - phi(t)| dt -> 0
                      (~ linearly in epsilon, the windows' total width);

  * softmax(lam s) -> hardmax(s) as lam -> inf, row by row (ties split evenly):

        gap(lam) = max_rows max_k |softmax(lam s)_k - hardmax(s)_k|.

``relu_l1_errors`` and ``softmax_gaps`` compute the two tables (one Phi unit per
placement of the constant piece: ``UNITS``; 256 standard normal score rows of 8 keys,
seed 0); ``demo`` prints them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import activations, layers

#: One Phi unit per placement of the constant piece (first, middle, last).
UNITS = {
    'constant first': activations.Phi((0.0, 1.0), ((0.0, 2.0), (1.0, -1.0), (-3.0, 4.0))),
    'constant middle': activations.Phi((0.0, 1.0), ((-1.0, -5.0), (0.0, 0.0), (-1.0, -5.0))),
    'constant last': activations.Phi((-1.0, 0.5), ((2.0, 1.0), (-1.0, 3.0), (0.0, 7.0))),
}
EPSILONS = (1e-1, 1e-2, 1e-3)
LAMS = (1.0, 10.0, 100.0, 1e3, 1e4)


def relu_l1_errors(epsilons=EPSILONS) -> list[list[float]]:
  """[len(epsilons), len(UNITS)]: L1 error on [-5, 5] (Riemann sum, 10^6 + 1 points)."""
  t = np.linspace(-5, 5, 1_000_001)
  return [[np.abs(activations.relu_expansion(p, eps)(t) - p(t)).mean() * 10
           for p in UNITS.values()] for eps in epsilons]


def softmax_gaps(lams=LAMS) -> list[float]:
  """[len(lams)]: max |softmax(lam s) - hardmax(s)| on 256 random rows of 8 scores."""
  with jax.enable_x64(True):
    scores = jnp.asarray(np.random.default_rng(0).normal(size=(256, 8)))
    hard, _ = layers.hardmax_mix(scores, jnp.eye(8))
    return [float(jnp.max(jnp.abs(layers.softmax_mix(scores, jnp.eye(8), lam) - hard)))
            for lam in lams]


def demo(log=print) -> None:
  """Prints both tables."""
  log('L1 error of the 4-ReLU realization on [-5, 5]')
  log(f"{'epsilon':>10} " + ' '.join(f'{k:>16}' for k in UNITS))
  for eps, errs in zip(EPSILONS, relu_l1_errors(EPSILONS)):
    log(f'{eps:>10.0e} ' + ' '.join(f'{e:>16.3e}' for e in errs))
  log('\nmax |softmax(lam s) - hardmax(s)| on 256 random score rows')
  for lam, gap in zip(LAMS, softmax_gaps(LAMS)):
    log(f'  lambda={lam:>8.0e}  gap={gap:.3e}')
