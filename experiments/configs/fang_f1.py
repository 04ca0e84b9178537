r"""Fang et al. 2022, Section 5, target f1(x) = x1^2 + x2^2 (d = 2, q = 2).

Command (3 seeds x 4 runs: ATTENTION with the paper's n = 10 tokens and the theory's
n_q = 3, NN_width (10 hidden units), NN_depth (3 hidden layers of 4)):

    python experiments/fang_regression.py --config=experiments/configs/fang_f1.py \
        --workdir=/tmp/fang_runs

Result it gave (3 seeds, mean +- std; 2-core shared CPU, ~10-50 s per run; full table
in results/fang/fang_regression.md):

    model               params  MSE_Tr          MSE_Te          MSE_Te vs noiseless f
    attention (n = 10)  41      1.012 +- 0.008  0.993 +- 0.008  0.0056 +- 0.0063
    attention (n = 3)   13      1.028 +- 0.027  1.009 +- 0.026  0.019  +- 0.023
    nn_width (10)       41      4.03e4          3.78e4          3.78e4
    nn_depth (3 x 4)    57      1.63e4          1.42e4          1.42e4

The paper's Figure 2 quotes MSE 0.02 (ATTENTION), 134.23 (NN_depth), 10237.27
(NN_width); our MLPs, trained with the same optimizer budget, stay far worse.
"""

from transformer_ua.fang import regression_config


def get_config():
  return regression_config.base_config()
