r"""Lemma 6 demo: the error of the 4-ReLU and softmax realizations, measured.

    python experiments/lemma6_demo.py

Prints, for one Phi unit per placement of the constant piece, the L1 error of the
four-ReLU realization on [-5, 5] against epsilon, and the gap between softmax(lam s)
and hardmax(s) on random scores against lambda (``studies.lemma6``).
"""

from transformer_ua import cli  # first: Ctrl-C while the rest loads exits cleanly

from absl import app

from transformer_ua.studies import lemma6


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  lemma6.demo()


if __name__ == '__main__':
  cli.run(main)
