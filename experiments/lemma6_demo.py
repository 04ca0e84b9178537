r"""Lemma 6 demo: the error of the 4-ReLU and softmax realizations, measured.

    python experiments/lemma6_demo.py

Prints, for one Phi unit per placement of the constant piece, the L1 error of the
four-ReLU realization on [-5, 5] against epsilon, and the gap between softmax(lam s)
and hardmax(s) on random scores against lambda.
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

from absl import app
import jax
import jax.numpy as jnp
import numpy as np

from transformer_ua import activations, layers

UNITS = {
    'constant first': activations.Phi((0.0, 1.0), ((0.0, 2.0), (1.0, -1.0), (-3.0, 4.0))),
    'constant middle': activations.Phi((0.0, 1.0), ((-1.0, -5.0), (0.0, 0.0), (-1.0, -5.0))),
    'constant last': activations.Phi((-1.0, 0.5), ((2.0, 1.0), (-1.0, 3.0), (0.0, 7.0))),
}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  t = np.linspace(-5, 5, 1_000_001)
  print('L1 error of the 4-ReLU realization on [-5, 5]')
  print(f"{'epsilon':>10} " + ' '.join(f'{k:>16}' for k in UNITS))
  for eps in [1e-1, 1e-2, 1e-3]:
    errs = [np.abs(activations.relu_expansion(p, eps)(t) - p(t)).mean() * 10 for p in UNITS.values()]
    print(f'{eps:>10.0e} ' + ' '.join(f'{e:>16.3e}' for e in errs))
  with jax.enable_x64(True):
    scores = jnp.asarray(np.random.default_rng(0).normal(size=(256, 8)))
    hard, _ = layers.hardmax_mix(scores, jnp.eye(8))
    print('\nmax |softmax(lam s) - hardmax(s)| on 256 random score rows')
    for lam in [1.0, 10.0, 100.0, 1e3, 1e4]:
      gap = float(jnp.max(jnp.abs(layers.softmax_mix(scores, jnp.eye(8), lam) - hard)))
      print(f'  lambda={lam:>8.0e}  gap={gap:.3e}')


if __name__ == '__main__':
  cli.run(main)
